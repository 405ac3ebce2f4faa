package conformance

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func errorReason(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason()
		}
	}
	return st.Code(), ""
}

func TestClusterAPIOverGRPC(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	conn := srv.GRPC(t)
	clusters := eksv1.NewClusterServiceClient(conn)

	// Metadata cannot choose the account: the caller is set by the server.
	mdCtx := metadata.AppendToOutgoingContext(ctx, "x-saltbush-account", "999999999999",
		"x-amz-account-id", "999999999999", "authorization", "anything")
	created, err := clusters.CreateCluster(mdCtx, &eksv1.CreateClusterRequest{
		Name:               "over-grpc",
		RoleArn:            roleARN,
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	})
	if err != nil {
		t.Fatalf("CreateCluster over gRPC: %v", err)
	}
	if got, want := created.GetCluster().GetArn(), "arn:aws:eks:us-east-1:000000000000:cluster/over-grpc"; got != want {
		t.Errorf("arn = %q, want %q (metadata must not select the account)", got, want)
	}

	// The façade sees the same cluster.
	desc, err := srv.EKS(t).DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("over-grpc")})
	if err != nil || aws.ToString(desc.Cluster.Arn) != created.GetCluster().GetArn() || desc.Cluster.Id != nil {
		t.Fatalf("DescribeCluster via SDK = %v, %v", desc, err)
	}

	list, err := clusters.ListClusters(ctx, &eksv1.ListClustersRequest{})
	if err != nil || len(list.GetClusters()) != 1 {
		t.Fatalf("ListClusters over gRPC = %v, %v", list, err)
	}

	// Errors carry the AWS exception as ErrorInfo.
	_, err = clusters.DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: "nope"})
	if code, reason := errorReason(err); code != codes.NotFound || reason != "ResourceNotFoundException" {
		t.Errorf("DescribeCluster(nope) = %v/%q, want NotFound/ResourceNotFoundException", code, reason)
	}
	_, err = clusters.CreateCluster(ctx, &eksv1.CreateClusterRequest{Name: "over-grpc", RoleArn: roleARN, ResourcesVpcConfig: &eksv1.VpcConfigRequest{}})
	if code, reason := errorReason(err); code != codes.AlreadyExists || reason != "ResourceInUseException" {
		t.Errorf("duplicate CreateCluster = %v/%q, want AlreadyExists/ResourceInUseException", code, reason)
	}

	// Health and reflection are served.
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v", hc, err)
	}
}

func TestClusterControl(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	client := srv.EKS(t)
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))

	first, err := client.CreateCluster(ctx, createInput("ctl"))
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	ref := &controlv1.ClusterRef{AccountId: "000000000000", Name: "ctl"}
	if first.Cluster.Id != nil {
		t.Errorf("CreateCluster returned id %q; AWS sends one only for an Outposts cluster", aws.ToString(first.Cluster.Id))
	}
	uid := clusterUID(t, srv, "000000000000", "ctl")

	for _, inst := range []string{"i-1", "i-2", "i-1"} {
		if _, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: inst}); err != nil {
			t.Fatalf("AddMember %s: %v", inst, err)
		}
	}
	got, err := control.RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: ref, InstanceId: "i-1"})
	if err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	if m := got.GetCluster().GetMembers(); len(m) != 1 || m[0] != "i-2" {
		t.Errorf("members = %v, want [i-2]", m)
	}

	tests := []struct {
		name     string
		call     func() error
		wantCode codes.Code
	}{
		{"unknown cluster", func() error {
			_, err := control.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "nope"}})
			return err
		}, codes.NotFound},
		{"wrong incarnation", func() error {
			_, err := control.AddMember(ctx, &controlv1.AddMemberRequest{
				Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "ctl", Uid: "not-this-one"}, InstanceId: "i-9"})
			return err
		}, codes.NotFound},
		{"bad account id", func() error {
			_, err := control.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: "12", Name: "ctl"}})
			return err
		}, codes.InvalidArgument},
		{"bad instance id", func() error {
			_, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: "../etc"})
			return err
		}, codes.InvalidArgument},
		{"status other than ACTIVE or FAILED", func() error {
			_, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_DELETING})
			return err
		}, codes.InvalidArgument},
		{"endpoint over http", func() error {
			_, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: "http://10.0.0.1:6443"})
			return err
		}, codes.InvalidArgument},
		{"CA data that is not a certificate", func() error {
			_, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, CertificateAuthorityData: "bm90IGEgY2VydA=="})
			return err
		}, codes.InvalidArgument},
		{"finalize a cluster that is not DELETING", func() error {
			_, err := control.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: ref})
			return err
		}, codes.FailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code := status.Code(tc.call()); code != tc.wantCode {
				t.Errorf("code = %v, want %v", code, tc.wantCode)
			}
		})
	}

	// FAILED shows in the façade with its reason.
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "VM boot failed"}); err != nil {
		t.Fatal(err)
	}
	desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("ctl")})
	if err != nil || desc.Cluster.Status != types.ClusterStatusFailed || desc.Cluster.Health == nil ||
		aws.ToString(desc.Cluster.Health.Issues[0].Message) != "VM boot failed" {
		t.Errorf("FAILED cluster = %+v, %v", desc, err)
	}

	// Children live under the uid; the purge removes them in the same txn.
	child := store.ClusterChildrenPrefix(uid) + "addons/placeholder"
	if _, err := srv.Store(t).Create(ctx, child, &storagev1.StoreMeta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("ctl")}); err != nil {
		t.Fatal(err)
	}
	// A DELETING cluster takes no new members and no status.
	_, err = control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: "i-3"})
	if code, reason := errorReason(err); code != codes.FailedPrecondition || reason != "InvalidRequestException" {
		t.Errorf("AddMember on DELETING = %v/%q", code, reason)
	}
	_, err = control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("SetStatus on DELETING = %v", err)
	}
	fin, err := control.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "ctl", Uid: uid}})
	if err != nil {
		t.Fatalf("FinalizeDeletion: %v", err)
	}
	if fin.GetDeletedKeys() != 3 {
		t.Errorf("deleted keys = %d, want 3 (record, the creator's access entry and the placeholder child)", fin.GetDeletedKeys())
	}
	if _, err := srv.Store(t).Get(ctx, child, &storagev1.StoreMeta{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("child after purge: %v, want ErrNotFound", err)
	}

	// Recreated with the same name: a new incarnation, nothing inherited.
	second, err := client.CreateCluster(ctx, createInput("ctl"))
	if err != nil {
		t.Fatal(err)
	}
	if second.Cluster == nil || clusterUID(t, srv, "000000000000", "ctl") == uid {
		t.Error("recreated cluster reuses the old uid")
	}
	info, err := control.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
	if err != nil || len(info.GetCluster().GetMembers()) != 0 || info.GetCluster().GetStatus() != controlv1.ClusterStatus_CLUSTER_STATUS_CREATING {
		t.Errorf("recreated cluster = %v, %v", info, err)
	}
	// The old incarnation's provisioner cannot touch the new one.
	_, err = control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "ctl", Uid: uid}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE})
	if status.Code(err) != codes.NotFound {
		t.Errorf("SetStatus with the old uid = %v, want NotFound", err)
	}
}

// TestAWSCLI drives the façade with a second real client, the AWS CLI.
func TestAWSCLI(t *testing.T) {
	awsPath, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("aws CLI not installed")
	}
	srv := servertest.Start(t)
	// Exactly what the README tells a newcomer: the profile the first start
	// wrote to the data directory (endpoint, region and the development
	// key), no flags.
	dir := filepath.Join(srv.Config.DataDir, "aws")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(awsPath, append([]string{"--output", "text"}, args...)...)
		env := []string{"AWS_CONFIG_FILE=" + filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials"),
			"AWS_PROFILE=saltbush", "AWS_PAGER=", "AWS_EC2_METADATA_DISABLED=true"}
		for _, kv := range cmd.Environ() {
			if !strings.HasPrefix(kv, "AWS_") {
				env = append(env, kv)
			}
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("eks", "create-cluster", "--name", "cli-1", "--role-arn", roleARN,
		"--resources-vpc-config", "subnetIds=subnet-a,subnet-b", "--query", "cluster.status"); err != nil || out != "CREATING\n" {
		t.Fatalf("create-cluster: %q %v", out, err)
	}
	if out, err := run("eks", "describe-cluster", "--name", "cli-1", "--query", "cluster.arn"); err != nil ||
		out != "arn:aws:eks:us-east-1:000000000000:cluster/cli-1\n" {
		t.Errorf("describe-cluster: %q %v", out, err)
	}
	if out, err := run("eks", "list-clusters", "--query", "clusters[0]"); err != nil || out != "cli-1\n" {
		t.Errorf("list-clusters: %q %v", out, err)
	}
	if out, err := run("eks", "delete-cluster", "--name", "cli-1", "--query", "cluster.status"); err != nil || out != "DELETING\n" {
		t.Errorf("delete-cluster: %q %v", out, err)
	}
	out, err := run("eks", "describe-cluster", "--name", "missing")
	if err == nil || !strings.Contains(out, "ResourceNotFoundException") || !strings.Contains(out, "No cluster found for name: missing.") {
		t.Errorf("describe-cluster missing: %q %v", out, err)
	}
}

// Many provisioner calls on one cluster at once all succeed: contention on
// the record is retried, not surfaced as a conflict.
func TestConcurrentControlCallsConverge(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	if _, err := srv.EKS(t).CreateCluster(ctx, createInput("hot")); err != nil {
		t.Fatal(err)
	}
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: "000000000000", Name: "hot"}
	const n = 60
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: fmt.Sprintf("i-%02d", i)})
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("AddMember: %v", err)
		}
	}
	info, err := control.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
	if err != nil || len(info.GetCluster().GetMembers()) != n {
		t.Errorf("members = %d (%v), want %d", len(info.GetCluster().GetMembers()), err, n)
	}
}

// clusterUID is the incarnation uid of account's cluster name, read from the
// control API: the EKS Cluster shape carries none (its id is an Outposts
// cluster's, which saltbush leaves empty).
func clusterUID(t *testing.T, srv *servertest.Server, account, name string) string {
	t.Helper()
	info, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).GetCluster(ctxT(t),
		&controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: account, Name: name}})
	if err != nil || info.GetCluster().GetUid() == "" {
		t.Fatalf("GetCluster %s/%s = %v, %v; want its uid", account, name, info, err)
	}
	return info.GetCluster().GetUid()
}
