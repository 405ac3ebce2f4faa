package conformance

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// viewReads scrapes saltbush_review_view_reads_total{record, source}.
func viewReads(t *testing.T, srv *servertest.Server, record, source string) float64 {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	prefix := `saltbush_review_view_reads_total{record="` + record + `",source="` + source + `"} `
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// TestReviewRevocationAcrossReplicas: two replicas on one etcd answer
// reviews from their watch-fed views; every revocation made through
// either replica (an entry's username and groups changed, a policy
// disassociated, a key deactivated, a member removed, the entry deleted,
// the cluster DELETING) stops working on both within one watch delivery.
// The times are logged, not asserted.
func TestReviewRevocationAcrossReplicas(t *testing.T) {
	ctx := ctxT(t)
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	replica := func(name string) *servertest.Server {
		return servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()),
			servertest.WithConfig(func(c *server.Config) { c.ReplicaName = name }))
	}
	a, b := replica("replica-a"), replica("replica-b")
	sdkA, sdkB := a.EKS(t), b.EKS(t)
	account := a.Config.DevAccount
	const cluster = "revoke"
	name := &deliveryv1.ClusterName{AccountId: account, Name: cluster}
	ref := &controlv1.ClusterRef{AccountId: account, Name: cluster}

	in := createInput(cluster)
	in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
	if _, err := sdkA.CreateCluster(ctx, in); err != nil {
		t.Fatal(err)
	}
	control := controlv1.NewClusterControlServiceClient(a.GRPC(t))
	var uid string
	for _, inst := range []string{agentInstance, "i-second"} {
		out, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: inst})
		if err != nil {
			t.Fatal(err)
		}
		uid = out.GetCluster().GetUid()
	}
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.IAM().CreatePrincipal(ctx, teamRoleARN); err != nil {
		t.Fatal(err)
	}
	if _, err := sdkA.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(teamRoleARN),
		Username: aws.String("team:{{SessionName}}"), KubernetesGroups: []string{"team-devs"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sdkA.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(teamRoleARN),
		PolicyArn: aws.String(editPolicy), AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev"}}}); err != nil {
		t.Fatal(err)
	}
	alice := a.NewKey(t, "arn:aws:sts::"+account+":assumed-role/team/alice")
	bob := a.NewKey(t, "arn:aws:sts::"+account+":assumed-role/team/bob")
	dev := a.Dev(t)

	type agent struct {
		name          string
		srv           *servertest.Server
		member, other deliveryv1.AccessReviewServiceClient
	}
	agents := []agent{
		{"replica-a", a, deliveryv1.NewAccessReviewServiceClient(a.AgentConn(t, uid, agentInstance)), deliveryv1.NewAccessReviewServiceClient(a.AgentConn(t, uid, "i-second"))},
		{"replica-b", b, deliveryv1.NewAccessReviewServiceClient(b.AgentConn(t, uid, agentInstance)), deliveryv1.NewAccessReviewServiceClient(b.AgentConn(t, uid, "i-second"))},
	}
	token := func(t *testing.T, client deliveryv1.AccessReviewServiceClient, c servertest.Creds) *deliveryv1.ReviewTokenResponse {
		t.Helper()
		out, err := client.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: servertest.Token(t, c, cluster, servertest.TokenOptions{})})
		if err != nil {
			t.Fatalf("ReviewToken: %v", err)
		}
		return out
	}
	allowed := func(t *testing.T, client deliveryv1.AccessReviewServiceClient, u *deliveryv1.UserInfo) bool {
		t.Helper()
		out, err := client.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: name, User: u.GetUsername(), Uid: u.GetUid(),
			Groups: u.GetGroups(), Extra: u.GetExtra(), ResourceAttributes: &deliveryv1.ResourceAttributes{
				Verb: "create", Group: "apps", Version: "v1", Resource: "deployments", Namespace: "dev"}})
		if err != nil {
			t.Fatalf("ReviewAccess: %v", err)
		}
		return out.GetAllowed()
	}
	// everywhere waits until cond holds on both replicas, logging each
	// replica's delay after the change.
	everywhere := func(t *testing.T, what string, cond func(t *testing.T, ag agent) bool) {
		t.Helper()
		for _, ag := range agents {
			eventually(t, what+" on "+ag.name, func() bool { return cond(t, ag) })
		}
	}

	// Both replicas authenticate, and answer from their views once loaded.
	everywhere(t, "reviews are answered from the view", func(t *testing.T, ag agent) bool {
		ok := token(t, ag.member, alice).GetAuthenticated() && token(t, ag.member, bob).GetAuthenticated() &&
			token(t, ag.other, alice).GetAuthenticated()
		return ok && viewReads(t, ag.srv, "entry", "view") > 0 && viewReads(t, ag.srv, "cluster", "view") > 0
	})
	team := token(t, agents[0].member, alice).GetUser()
	for _, ag := range agents {
		if !allowed(t, ag.member, team) {
			t.Fatalf("%s: edit is not allowed before the disassociation", ag.name)
		}
	}

	t.Run("username and groups changed", func(t *testing.T) {
		if _, err := sdkB.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(teamRoleARN),
			Username: aws.String("renamed:{{SessionName}}"), KubernetesGroups: []string{"renamed-devs"}}); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "the new username and groups", func(t *testing.T, ag agent) bool {
			u := token(t, ag.member, alice).GetUser()
			return u.GetUsername() == "renamed:alice" && strings.Join(u.GetGroups(), ",") == "renamed-devs"
		})
		// The old username no longer gets the entry's policies.
		everywhere(t, "the old username gets no opinion", func(t *testing.T, ag agent) bool { return !allowed(t, ag.member, team) })
		team = token(t, agents[0].member, alice).GetUser()
	})
	t.Run("policy disassociated", func(t *testing.T) {
		everywhere(t, "the new username is allowed", func(t *testing.T, ag agent) bool { return allowed(t, ag.member, team) })
		if _, err := sdkA.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(cluster),
			PrincipalArn: aws.String(teamRoleARN), PolicyArn: aws.String(editPolicy)}); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "a disassociated policy stops allowing", func(t *testing.T, ag agent) bool { return !allowed(t, ag.member, team) })
	})
	t.Run("key deactivated", func(t *testing.T) {
		if err := b.IAM().SetAccessKeyStatus(ctx, bob.AccessKeyID, iam.KeyInactive); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "a deactivated key stops authenticating", func(t *testing.T, ag agent) bool {
			return !token(t, ag.member, bob).GetAuthenticated()
		})
	})
	t.Run("member removed", func(t *testing.T) {
		if _, err := controlv1.NewClusterControlServiceClient(b.GRPC(t)).RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: ref, InstanceId: "i-second"}); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "a removed member is refused", func(t *testing.T, ag agent) bool {
			_, err := ag.other.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: servertest.Token(t, alice, cluster, servertest.TokenOptions{})})
			if err == nil {
				return false
			}
			wanterr.Status(t, err, codes.PermissionDenied, errdefs.AccessDeniedException)
			return true
		})
		for _, ag := range agents {
			if !token(t, ag.member, alice).GetAuthenticated() {
				t.Errorf("%s: the remaining member's review fails", ag.name)
			}
		}
	})
	t.Run("entry deleted", func(t *testing.T) {
		if _, err := sdkB.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(teamRoleARN)}); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "a deleted entry stops authenticating", func(t *testing.T, ag agent) bool {
			got := token(t, ag.member, alice)
			return !got.GetAuthenticated() && strings.Contains(got.GetError(), "no access entry")
		})
	})
	t.Run("cluster DELETING", func(t *testing.T) {
		for _, ag := range agents {
			if !token(t, ag.member, dev).GetAuthenticated() {
				t.Fatalf("%s: the creator does not authenticate before the deletion", ag.name)
			}
		}
		if _, err := sdkA.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(cluster)}); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "a DELETING cluster stops authenticating", func(t *testing.T, ag agent) bool {
			got := token(t, ag.member, dev)
			return !got.GetAuthenticated() && strings.Contains(got.GetError(), "DELETING")
		})
	})
	for _, ag := range agents {
		t.Logf("%s: cluster reads view=%v etcd=%v, entry reads view=%v etcd=%v", ag.name,
			viewReads(t, ag.srv, "cluster", "view"), viewReads(t, ag.srv, "cluster", "etcd"),
			viewReads(t, ag.srv, "entry", "view"), viewReads(t, ag.srv, "entry", "etcd"))
	}
}
