package conformance

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// noRetry makes the SDK show the first answer instead of retrying it.
func noRetry(o *eks.Options) { o.Retryer = aws.NopRetryer{} }

func TestThrottlingPerAccount(t *testing.T) {
	srv := servertest.Start(t, servertest.WithConfig(func(c *server.Config) {
		// Three requests, then one every 100 s: the fourth is refused.
		c.ThrottleRate, c.ThrottleBurst = 0.01, 3
	}))
	ctx := ctxT(t)
	dev := srv.EKS(t, noRetry)
	for i := range 3 {
		if _, err := dev.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
			t.Fatalf("request %d within the burst: %v", i+1, err)
		}
	}
	_, err := dev.ListClusters(ctx, &eks.ListClustersInput{})
	wanterr.AWS(t, err, "ThrottlingException", http.StatusTooManyRequests)
	// A throttled write changes nothing.
	_, err = dev.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("throttled"), RoleArn: aws.String(roleARN), ResourcesVpcConfig: &types.VpcConfigRequest{},
	})
	wanterr.AWS(t, err, "ThrottlingException", http.StatusTooManyRequests)
	if _, err := srv.Store(t).Get(ctx, store.ClusterKey(srv.Config.DevAccount, "throttled"), &storagev1.ClusterRecord{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a throttled CreateCluster left a record: %v", err)
	}
	// Another account has its own bucket.
	other := srv.EKSAs(t, srv.NewAccount(t, "333333333333"), noRetry)
	if _, err := other.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("another account throttled by the first one's traffic: %v", err)
	}
	// Delegated gRPC calls count against the account they act for.
	_, err = eksv1.NewClusterServiceClient(srv.GRPC(t)).ListClusters(ctx, &eksv1.ListClustersRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("delegated gRPC call for a throttled account: %v, want ResourceExhausted", err)
	}
}

func TestAuditRecords(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.AuditLog = logPath }))
	ctx := ctxT(t)
	dev := srv.Dev(t)
	client := srv.EKS(t, noRetry)
	if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("audited"), RoleArn: aws.String(roleARN), ResourcesVpcConfig: &types.VpcConfigRequest{},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("audited")}); err != nil {
		t.Fatal(err) // a read: not audited
	}
	if _, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("missing")}); err == nil {
		t.Fatal("DeleteCluster of a missing cluster succeeded")
	}
	resp, err := http.Post(srv.URL+"/clusters", "application/json", nil) // unsigned
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: "audited"},
		Status:  controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "test",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := eksv1.NewClusterServiceClient(srv.GRPC(t)).DeleteCluster(ctx, &eksv1.DeleteClusterRequest{Name: "audited"}); err != nil {
		t.Fatal(err)
	}
	clusterARN := "arn:aws:eks:" + srv.Config.Cluster.Region + ":" + dev.AccountID + ":cluster/"
	admin := identity.ServiceID(server.AdminService)
	want := []audit.Record{
		{Source: "facade", Operation: "POST /clusters", Principal: dev.PrincipalARN, Account: dev.AccountID,
			Action: "eks:CreateCluster", Resource: clusterARN + "audited", Outcome: "Success"},
		{Source: "facade", Operation: "DELETE /clusters/missing", Principal: dev.PrincipalARN, Account: dev.AccountID,
			Action: "eks:DeleteCluster", Resource: clusterARN + "missing", Outcome: "ResourceNotFoundException"},
		{Source: "facade", Operation: "POST /clusters", Outcome: "MissingAuthenticationTokenException"},
		{Source: "grpc", Operation: "/saltbush.control.v1.ClusterControlService/SetStatus", Principal: admin,
			Action: "saltbush:SetStatus", Resource: "*", Outcome: "Success"},
		{Source: "grpc", Operation: "/saltbush.eks.v1.ClusterService/DeleteCluster", Principal: admin, Account: dev.AccountID,
			Delegated: true, Action: "eks:DeleteCluster", Resource: clusterARN + "audited", Outcome: "Success"},
	}
	got := readAudit(t, logPath)
	if len(got) != len(want) {
		t.Fatalf("%d audit records, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Time.IsZero() || g.RequestID == "" {
			t.Errorf("record %d has no time or request id: %+v", i, g)
		}
		g.Time, g.RequestID = w.Time, w.RequestID
		if g != w {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}
