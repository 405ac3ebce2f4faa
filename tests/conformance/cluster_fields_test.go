package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const fieldsIssuer = "https://oidc.saltbush.example/id/0123456789ABCDEF"

// TestSetStatusControlPlaneFields: what a provisioner reports through
// SetStatus reaches the real Go SDK in AWS's shapes (identity.oidc.issuer,
// health.issues, resourcesVpcConfig.vpcId and clusterSecurityGroupId), on
// DescribeCluster and DeleteCluster; empty members keep what is recorded and
// clearHealthIssues records none.
func TestSetStatusControlPlaneFields(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	client := srv.EKS(t)
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	if _, err := client.CreateCluster(ctx, createInput("fields")); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	ref := &controlv1.ClusterRef{AccountId: "000000000000", Name: "fields"}
	ca := clustertest.CertificateAuthorityData(t)
	issue := &controlv1.ClusterIssue{Code: "Ec2SubnetNotFound", Message: "Subnet subnet-0b1 was deleted.",
		ResourceIds: []string{"subnet-0b1"}}
	got, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.7:6443", CertificateAuthorityData: ca, PlatformVersion: "eks.3",
		OidcIssuer: fieldsIssuer, VpcId: "vpc-0a1b2c3d4e5f60718", ClusterSecurityGroupId: "sg-0123456789abcdef0",
		SubnetIds: []string{"subnet-0a1", "subnet-0b1"}, SecurityGroupIds: []string{"sg-0aaa"},
		HealthIssues: []*controlv1.ClusterIssue{issue},
	})
	if err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	if info := got.GetCluster(); info.GetOidcIssuer() != fieldsIssuer || info.GetVpcId() != "vpc-0a1b2c3d4e5f60718" ||
		!info.GetHasCertificateAuthority() || len(info.GetHealthIssues()) != 1 {
		t.Errorf("SetStatus answer = %v", info)
	}

	check := func(t *testing.T, c *types.Cluster, wantIssues []types.ClusterIssue) {
		t.Helper()
		if c.Identity == nil || c.Identity.Oidc == nil || aws.ToString(c.Identity.Oidc.Issuer) != fieldsIssuer {
			t.Errorf("identity = %+v, want oidc.issuer %s", c.Identity, fieldsIssuer)
		}
		v := c.ResourcesVpcConfig
		if aws.ToString(v.VpcId) != "vpc-0a1b2c3d4e5f60718" || aws.ToString(v.ClusterSecurityGroupId) != "sg-0123456789abcdef0" ||
			!slices.Equal(v.SubnetIds, []string{"subnet-0a1", "subnet-0b1"}) || !slices.Equal(v.SecurityGroupIds, []string{"sg-0aaa"}) {
			t.Errorf("resourcesVpcConfig = vpcId %q clusterSecurityGroupId %q subnets %v groups %v",
				aws.ToString(v.VpcId), aws.ToString(v.ClusterSecurityGroupId), v.SubnetIds, v.SecurityGroupIds)
		}
		if c.CertificateAuthority == nil || aws.ToString(c.CertificateAuthority.Data) != ca ||
			aws.ToString(c.Endpoint) != "https://10.0.0.7:6443" || aws.ToString(c.PlatformVersion) != "eks.3" {
			t.Errorf("endpoint %q platform %q CA %+v", aws.ToString(c.Endpoint), aws.ToString(c.PlatformVersion), c.CertificateAuthority)
		}
		var issues []types.ClusterIssue
		if c.Health != nil {
			issues = c.Health.Issues
		}
		if len(issues) != len(wantIssues) {
			t.Fatalf("health issues = %+v, want %+v", issues, wantIssues)
		}
		for i, w := range wantIssues {
			g := issues[i]
			if g.Code != w.Code || aws.ToString(g.Message) != aws.ToString(w.Message) || !slices.Equal(g.ResourceIds, w.ResourceIds) {
				t.Errorf("issue %d = %s %q %v, want %s %q %v", i, g.Code, aws.ToString(g.Message), g.ResourceIds,
					w.Code, aws.ToString(w.Message), w.ResourceIds)
			}
		}
	}
	describe := func(t *testing.T) *types.Cluster {
		t.Helper()
		out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("fields")})
		if err != nil {
			t.Fatalf("DescribeCluster: %v", err)
		}
		return out.Cluster
	}
	wantIssue := types.ClusterIssue{Code: types.ClusterIssueCodeEc2SubnetNotFound,
		Message: aws.String("Subnet subnet-0b1 was deleted."), ResourceIds: []string{"subnet-0b1"}}

	t.Run("every field shows", func(t *testing.T) {
		c := describe(t)
		if c.Status != types.ClusterStatusActive {
			t.Errorf("status = %s, want ACTIVE", c.Status)
		}
		check(t, c, []types.ClusterIssue{wantIssue})
	})
	t.Run("empty members keep what is recorded", func(t *testing.T) {
		if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE}); err != nil {
			t.Fatalf("SetStatus ACTIVE again: %v", err)
		}
		check(t, describe(t), []types.ClusterIssue{wantIssue})
	})
	t.Run("issues replace issues", func(t *testing.T) {
		if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			HealthIssues: []*controlv1.ClusterIssue{{Code: "KmsKeyDisabled", Message: "The key is disabled."}}}); err != nil {
			t.Fatalf("SetStatus: %v", err)
		}
		check(t, describe(t), []types.ClusterIssue{{Code: types.ClusterIssueCodeKmsKeyDisabled, Message: aws.String("The key is disabled.")}})
	})
	t.Run("clearHealthIssues records none", func(t *testing.T) {
		if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			ClearHealthIssues: true}); err != nil {
			t.Fatalf("SetStatus: %v", err)
		}
		c := describe(t)
		check(t, c, nil)
		if c.Health != nil {
			t.Errorf("health = %+v, want none", c.Health)
		}
	})
	t.Run("FAILED adds its reason to the recorded issues", func(t *testing.T) {
		if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED,
			Reason: "etcd lost quorum", HealthIssues: []*controlv1.ClusterIssue{issue}}); err != nil {
			t.Fatalf("SetStatus FAILED: %v", err)
		}
		check(t, describe(t), []types.ClusterIssue{wantIssue, {Code: types.ClusterIssueCodeOther, Message: aws.String("etcd lost quorum")}})
	})
	t.Run("ListClusters and DeleteCluster", func(t *testing.T) {
		list, err := client.ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil || !slices.Contains(list.Clusters, "fields") {
			t.Fatalf("ListClusters = %v, %v", list, err)
		}
		out, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("fields")})
		if err != nil {
			t.Fatalf("DeleteCluster: %v", err)
		}
		// DELETING: the recorded issues, no longer the FAILED reason.
		check(t, out.Cluster, []types.ClusterIssue{wantIssue})
	})
}

// TestSetStatusRefusals: a provisioner's bad report is refused with a
// message naming the member, and nothing is written: ACTIVE without an
// endpoint or a CA (FailedPrecondition, as AWS never shows such a cluster)
// and malformed values (InvalidArgument).
func TestSetStatusRefusals(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	client := srv.EKS(t)
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	for _, name := range []string{"bare", "has-endpoint"} {
		if _, err := client.CreateCluster(ctx, createInput(name)); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
	}
	// has-endpoint was reported an endpoint while FAILED, but no CA.
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "has-endpoint"},
		Status:  controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "boot",
		Endpoint: "https://10.0.0.8:6443",
	}); err != nil {
		t.Fatalf("SetStatus FAILED: %v", err)
	}
	ca := clustertest.CertificateAuthorityData(t)
	active := controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE
	tests := []struct {
		name    string
		cluster string
		req     *controlv1.SetStatusRequest
		code    codes.Code
		reason  string
		member  string
	}{
		{"ACTIVE with neither endpoint nor CA", "bare", &controlv1.SetStatusRequest{Status: active},
			codes.FailedPrecondition, "InvalidRequestException", "endpoint"},
		{"ACTIVE with an endpoint but no CA", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443"},
			codes.FailedPrecondition, "InvalidRequestException", "certificateAuthorityData"},
		{"ACTIVE with a CA but no endpoint", "bare", &controlv1.SetStatusRequest{Status: active, CertificateAuthorityData: ca},
			codes.FailedPrecondition, "InvalidRequestException", "endpoint"},
		{"ACTIVE on a recorded endpoint without a CA", "has-endpoint", &controlv1.SetStatusRequest{Status: active},
			codes.FailedPrecondition, "InvalidRequestException", "certificateAuthorityData"},
		{"oidcIssuer over http", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, OidcIssuer: "http://oidc.example/id/1"}, codes.InvalidArgument, "InvalidParameterException", "oidcIssuer"},
		{"oidcIssuer with a query", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, OidcIssuer: "https://oidc.example/id/1?x=y"}, codes.InvalidArgument, "InvalidParameterException", "oidcIssuer"},
		{"vpcId of another shape", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, VpcId: "vpc_123"}, codes.InvalidArgument, "InvalidParameterException", "vpcId"},
		{"clusterSecurityGroupId of another shape", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, ClusterSecurityGroupId: "vpc-123"}, codes.InvalidArgument, "InvalidParameterException", "clusterSecurityGroupId"},
		{"a subnet id of another shape", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, SubnetIds: []string{"subnet-1", "sg-2"}}, codes.InvalidArgument, "InvalidParameterException", "subnetIds[1]"},
		{"a security group id of another shape", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, SecurityGroupIds: []string{"subnet-1"}}, codes.InvalidArgument, "InvalidParameterException", "securityGroupIds[0]"},
		{"an issue code outside ClusterIssueCode", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, HealthIssues: []*controlv1.ClusterIssue{{Code: "Broken", Message: "x"}}},
			codes.InvalidArgument, "InvalidParameterException", "healthIssues[0].code"},
		{"an issue without a message", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, HealthIssues: []*controlv1.ClusterIssue{{Code: "Other"}}},
			codes.InvalidArgument, "InvalidParameterException", "healthIssues[0].message"},
		{"issues and clearHealthIssues together", "bare", &controlv1.SetStatusRequest{Status: active, Endpoint: "https://10.0.0.1:6443",
			CertificateAuthorityData: ca, ClearHealthIssues: true, HealthIssues: []*controlv1.ClusterIssue{{Code: "Other", Message: "x"}}},
			codes.InvalidArgument, "InvalidParameterException", "clearHealthIssues"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := store.ClusterKey("000000000000", tc.cluster)
			before := &storagev1.ClusterRecord{}
			revBefore, err := srv.Store(t).Get(ctx, key, before)
			if err != nil {
				t.Fatal(err)
			}
			tc.req.Cluster = &controlv1.ClusterRef{AccountId: "000000000000", Name: tc.cluster}
			_, err = control.SetStatus(ctx, tc.req)
			st := wanterr.Status(t, err, tc.code, tc.reason)
			if !strings.Contains(st.Message(), tc.member) {
				t.Errorf("message %q does not name %s", st.Message(), tc.member)
			}
			after := &storagev1.ClusterRecord{}
			revAfter, err := srv.Store(t).Get(ctx, key, after)
			if err != nil {
				t.Fatal(err)
			}
			if revAfter != revBefore {
				t.Errorf("record rewritten: mod revision %d, was %d", revAfter, revBefore)
			}
		})
	}
	desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("bare")})
	if err != nil || desc.Cluster.Status != types.ClusterStatusCreating || desc.Cluster.CertificateAuthority != nil ||
		aws.ToString(desc.Cluster.Endpoint) != "" {
		t.Errorf("bare after refusals = %+v, %v", desc.Cluster, err)
	}
}
