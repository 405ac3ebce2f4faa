package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

// activeCluster creates an ACTIVE cluster (in mode, or CreateCluster's
// default when mode is empty) with agentInstance as its member, and
// returns a review client of that member's agent.
func (h *accessHarness) activeCluster(t *testing.T, name string, mode types.AuthenticationMode) deliveryv1.AccessReviewServiceClient {
	t.Helper()
	ctx := ctxT(t)
	in := createInput(name)
	if mode != "" {
		in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: mode}
	}
	if _, err := h.eks.CreateCluster(ctx, in); err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	uid := h.addMember(t, name, agentInstance)
	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.9:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus %s: %v", name, err)
	}
	return deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, uid, agentInstance))
}

// TestReviewAWSAuthModes: ReviewToken maps a signer through the aws-auth
// ConfigMap the agent sends, as the cluster's authentication mode says:
// CONFIG_MAP (CreateCluster's default) uses it, API ignores it, and in
// API_AND_CONFIG_MAP an access entry wins over it.
func TestReviewAWSAuthModes(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE) // access-1, API
	ctx := ctxT(t)
	session := h.srv.NewKey(t, "arn:aws:sts::000000000000:assumed-role/team/alice@example.com")
	reader := h.srv.NewKey(t, readerUserARN)
	dev := h.srv.Dev(t)
	awsAuth := &deliveryv1.AwsAuthConfigMap{
		Uid: "0b6f4c1e-6d0a-4d8e-9a59-3c1f1f4b7a10", ResourceVersion: "4711",
		MapRoles: `
- rolearn: arn:aws:iam::000000000000:role/team
  username: cm:{{SessionName}}
  groups:
    - system:masters
    - team-{{AccountID}}
`,
		MapUsers: `
- userarn: arn:aws:iam::000000000000:user/reader
  username: reader
  groups: [readers]
`,
	}
	review := func(t *testing.T, client deliveryv1.AccessReviewServiceClient, cluster string, c servertest.Creds, cm *deliveryv1.AwsAuthConfigMap) *deliveryv1.ReviewTokenResponse {
		t.Helper()
		out, err := client.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{
			Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: cluster},
			Token:   servertest.Token(t, c, cluster, servertest.TokenOptions{}), AwsAuth: cm,
		})
		if err != nil {
			t.Fatalf("ReviewToken: %v", err)
		}
		return out
	}
	want := func(t *testing.T, got *deliveryv1.ReviewTokenResponse, username string, groups ...string) {
		t.Helper()
		if !got.GetAuthenticated() || got.GetUser().GetUsername() != username || !slices.Equal(got.GetUser().GetGroups(), groups) {
			t.Fatalf("review = %v, want %s %v", got, username, groups)
		}
	}

	configMap := h.activeCluster(t, "config-map", "")
	api := deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, h.addMember(t, h.cluster, agentInstance), agentInstance))
	both := h.activeCluster(t, "both", types.AuthenticationModeApiAndConfigMap)

	t.Run("CONFIG_MAP is the default mode", func(t *testing.T) {
		out, err := h.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("config-map")})
		if err != nil {
			t.Fatal(err)
		}
		if m := out.Cluster.AccessConfig.AuthenticationMode; m != types.AuthenticationModeConfigMap {
			t.Fatalf("mode = %s", m)
		}
	})
	t.Run("CONFIG_MAP: mapRoles maps a role session", func(t *testing.T) {
		got := review(t, configMap, "config-map", session, awsAuth)
		want(t, got, "cm:alice-example.com", "system:masters", "team-000000000000")
		u := got.GetUser()
		if !strings.HasPrefix(u.GetUid(), "aws-iam-authenticator:000000000000:AROA") {
			t.Errorf("uid = %s", u.GetUid())
		}
		if extra(u, "arn") != session.PrincipalARN || extra(u, "canonicalArn") != teamRoleARN || extra(u, "sessionName") != "alice@example.com" ||
			extra(u, "accessKeyId") != session.AccessKeyID || !strings.HasPrefix(extra(u, "principalId"), "AROA") {
			t.Errorf("extra = %v", u.GetExtra())
		}
		// No entry: SubjectAccessReview has no opinion, so RBAC decides
		// with the groups (system:masters).
		sar, err := configMap.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{
			Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: "config-map"},
			User:    u.GetUsername(), Uid: u.GetUid(), Groups: u.GetGroups(), Extra: u.GetExtra(),
			ResourceAttributes: &deliveryv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "default"},
		})
		if err != nil || sar.GetAllowed() || sar.GetDenied() || !strings.Contains(sar.GetReason(), "no opinion") {
			t.Errorf("access review = %v %v, want no opinion", sar, err)
		}
	})
	t.Run("CONFIG_MAP: mapUsers maps a user", func(t *testing.T) {
		want(t, review(t, configMap, "config-map", reader, awsAuth), "reader", "readers")
	})
	t.Run("CONFIG_MAP: no aws-auth maps nobody", func(t *testing.T) {
		got := review(t, configMap, "config-map", session, nil)
		if got.GetAuthenticated() || !strings.Contains(got.GetError(), "aws-auth") {
			t.Errorf("review = %v", got)
		}
	})
	t.Run("CONFIG_MAP: the creator keeps its bootstrap entry", func(t *testing.T) {
		want(t, review(t, configMap, "config-map", dev, nil), devUserARN)
	})
	t.Run("API: aws-auth is ignored", func(t *testing.T) {
		got := review(t, api, h.cluster, session, awsAuth)
		if got.GetAuthenticated() || !strings.Contains(got.GetError(), "no access entry") || strings.Contains(got.GetError(), "aws-auth") {
			t.Errorf("review = %v", got)
		}
	})
	t.Run("API_AND_CONFIG_MAP: the entry wins, aws-auth maps the rest", func(t *testing.T) {
		if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
			ClusterName: aws.String("both"), PrincipalArn: aws.String(teamRoleARN),
			Username: aws.String("entry:{{SessionName}}"), KubernetesGroups: []string{"entry-devs"},
		}); err != nil {
			t.Fatal(err)
		}
		var got *deliveryv1.ReviewTokenResponse
		eventually(t, "a new entry reaches the review", func() bool {
			got = review(t, both, "both", session, awsAuth)
			return got.GetUser().GetUsername() == "entry:alice-example.com"
		})
		want(t, got, "entry:alice-example.com", "entry-devs")
		want(t, review(t, both, "both", reader, awsAuth), "reader", "readers")
		if _, err := h.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String("both"), PrincipalArn: aws.String(teamRoleARN)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "with the entry deleted, aws-auth maps the role", func() bool {
			got = review(t, both, "both", session, awsAuth)
			return got.GetUser().GetUsername() == "cm:alice-example.com"
		})
		want(t, got, "cm:alice-example.com", "system:masters", "team-000000000000")
	})
}
