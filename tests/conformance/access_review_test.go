package conformance

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const agentInstance = "i-0123456789abcdef0"

// reviewHarness is an ACTIVE cluster with a member whose agent asks for
// reviews, a role "team" with an entry (username team:{{SessionName}},
// group team-devs, Edit on namespaces dev and team-*), and a session key
// of that role.
type reviewHarness struct {
	*accessHarness
	uid     string
	review  deliveryv1.AccessReviewServiceClient
	dev     servertest.Creds
	session servertest.Creds
}

func newReviewHarness(t *testing.T, opts ...servertest.Option) *reviewHarness {
	t.Helper()
	h := &reviewHarness{accessHarness: newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, opts...)}
	h.uid = h.addMember(t, h.cluster, agentInstance)
	h.review = deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, h.uid, agentInstance))
	h.dev = h.srv.Dev(t)
	ctx := ctxT(t)
	if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN),
		Username: aws.String("team:{{SessionName}}"), KubernetesGroups: []string{"team-devs"},
	}); err != nil {
		t.Fatalf("team entry: %v", err)
	}
	if _, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN), PolicyArn: aws.String(editPolicy),
		AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev", "team-*"}},
	}); err != nil {
		t.Fatalf("team association: %v", err)
	}
	h.session = h.srv.NewKey(t, "arn:aws:sts::000000000000:assumed-role/team/alice@example.com")
	return h
}

// addMember adds an instance to a cluster and returns the cluster's uid.
func (h *accessHarness) addMember(t *testing.T, cluster, instance string) string {
	t.Helper()
	out, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).AddMember(ctxT(t), &controlv1.AddMemberRequest{
		Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: cluster}, InstanceId: instance,
	})
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	return out.GetCluster().GetUid()
}

func (h *reviewHarness) name() *deliveryv1.ClusterName {
	return &deliveryv1.ClusterName{AccountId: h.account, Name: h.cluster}
}

func (h *reviewHarness) token(t *testing.T, c servertest.Creds, o servertest.TokenOptions) *deliveryv1.ReviewTokenResponse {
	t.Helper()
	return h.reviewRaw(t, servertest.Token(t, c, h.cluster, o))
}

func (h *reviewHarness) reviewRaw(t *testing.T, tok string) *deliveryv1.ReviewTokenResponse {
	t.Helper()
	out, err := h.review.ReviewToken(ctxT(t), &deliveryv1.ReviewTokenRequest{Cluster: h.name(), Token: tok})
	if err != nil {
		t.Fatalf("ReviewToken: %v", err)
	}
	return out
}

func extra(u *deliveryv1.UserInfo, key string) string {
	if v := u.GetExtra()[key].GetValues(); len(v) == 1 {
		return v[0]
	}
	return "<" + strings.Join(u.GetExtra()[key].GetValues(), ",") + ">"
}

// TestReviewTokenRealTokens feeds ReviewToken tokens made as `aws eks
// get-token` makes them, valid and broken in every way the issue lists.
func TestReviewTokenRealTokens(t *testing.T) {
	h := newReviewHarness(t)

	t.Run("dev user", func(t *testing.T) {
		got := h.token(t, h.dev, servertest.TokenOptions{})
		u := got.GetUser()
		if !got.GetAuthenticated() || u.GetUsername() != devUserARN || len(u.GetGroups()) != 0 {
			t.Fatalf("review = %v", got)
		}
		if !strings.HasPrefix(u.GetUid(), "aws-iam-authenticator:000000000000:AIDA") || len(u.GetUid()) != len("aws-iam-authenticator:000000000000:AIDA")+17 {
			t.Errorf("uid = %s", u.GetUid())
		}
		if extra(u, "arn") != devUserARN || extra(u, "canonicalArn") != devUserARN || extra(u, "accessKeyId") != h.dev.AccessKeyID || extra(u, "sessionName") != "" {
			t.Errorf("extra = %v", u.GetExtra())
		}
	})
	t.Run("role session maps to the role's entry", func(t *testing.T) {
		got := h.token(t, h.session, servertest.TokenOptions{Region: "eu-west-1"})
		u := got.GetUser()
		// {{SessionName}} has '@' replaced, as aws-iam-authenticator does.
		if !got.GetAuthenticated() || u.GetUsername() != "team:alice-example.com" || strings.Join(u.GetGroups(), ",") != "team-devs" {
			t.Fatalf("review = %v", got)
		}
		if extra(u, "arn") != h.session.PrincipalARN || extra(u, "canonicalArn") != teamRoleARN || extra(u, "sessionName") != "alice@example.com" {
			t.Errorf("extra = %v", u.GetExtra())
		}
		if !strings.HasPrefix(u.GetUid(), "aws-iam-authenticator:000000000000:AROA") {
			t.Errorf("uid = %s", u.GetUid())
		}
	})
	t.Run("valid ten minutes after signing (X-Amz-Expires=60 is ignored, as STS does)", func(t *testing.T) {
		if got := h.token(t, h.dev, servertest.TokenOptions{At: time.Now().Add(-10 * time.Minute)}); !got.GetAuthenticated() {
			t.Errorf("review = %v", got)
		}
	})

	refused := []struct {
		name string
		tok  func(t *testing.T) string
		why  string
	}{
		{"expired", func(t *testing.T) string {
			return servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{At: time.Now().Add(-16 * time.Minute)})
		}, "expired"},
		{"wrong cluster", func(t *testing.T) string {
			return servertest.Token(t, h.dev, "another-cluster", servertest.TokenOptions{})
		}, "signature"},
		{"tampered signature", func(t *testing.T) string {
			return retoken(t, servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{}), func(u string) string {
				i := strings.Index(u, "X-Amz-Signature=") + len("X-Amz-Signature=")
				c := byte('0')
				if u[i] == '0' {
					c = '1'
				}
				return u[:i] + string(c) + u[i+1:]
			})
		}, "signature"},
		{"tampered action", func(t *testing.T) string {
			return retoken(t, servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{}), func(u string) string {
				return strings.Replace(u, "Action=GetCallerIdentity", "Action=AssumeRole", 1)
			})
		}, "action"},
		{"unknown key", func(t *testing.T) string {
			return servertest.Token(t, servertest.Creds{AccessKeyID: "AKIAAAAAAAAAAAAAAAAA", SecretAccessKey: "x"}, h.cluster, servertest.TokenOptions{})
		}, ""},
		{"oversize", func(t *testing.T) string { return "k8s-aws-v1." + strings.Repeat("A", 5000) }, "large"},
		{"wrong host", func(t *testing.T) string {
			return servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{Endpoint: "https://sts.attacker.example"})
		}, "hostname"},
		{"not a token", func(t *testing.T) string { return "eyJhbGciOiJSUzI1NiJ9.e30.sig" }, "prefix"},
		{"principal without an entry", func(t *testing.T) string {
			return servertest.Token(t, h.srv.NewKey(t, readerUserARN), h.cluster, servertest.TokenOptions{})
		}, "no access entry"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			got := h.reviewRaw(t, tc.tok(t))
			if got.GetAuthenticated() || got.GetUser() != nil {
				t.Fatalf("review = %v, want unauthenticated", got)
			}
			if !strings.Contains(strings.ToLower(got.GetError()), tc.why) {
				t.Errorf("error %q does not say %q", got.GetError(), tc.why)
			}
		})
	}

	t.Run("deactivated key", func(t *testing.T) {
		c := h.srv.NewKey(t, "arn:aws:sts::000000000000:assumed-role/team/bob")
		if got := h.token(t, c, servertest.TokenOptions{}); !got.GetAuthenticated() {
			t.Fatalf("before deactivation: %v", got)
		}
		if err := h.srv.IAM().SetAccessKeyStatus(ctxT(t), c.AccessKeyID, iam.KeyInactive); err != nil {
			t.Fatal(err)
		}
		// The key store's mirror follows etcd's watch within milliseconds.
		deadline := time.Now().Add(10 * time.Second)
		for h.token(t, c, servertest.TokenOptions{}).GetAuthenticated() {
			if time.Now().After(deadline) {
				t.Fatal("a deactivated key still authenticates after 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("deleted entry", func(t *testing.T) {
		tok := servertest.Token(t, h.session, h.cluster, servertest.TokenOptions{})
		if !h.reviewRaw(t, tok).GetAuthenticated() {
			t.Fatal("before delete: unauthenticated")
		}
		if _, err := h.eks.DeleteAccessEntry(ctxT(t), &eks.DeleteAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)}); err != nil {
			t.Fatal(err)
		}
		// The same token, once the review view has the deletion (one
		// watch delivery).
		var got *deliveryv1.ReviewTokenResponse
		eventually(t, "a deleted entry stops authenticating", func() bool {
			got = h.reviewRaw(t, tok)
			return !got.GetAuthenticated()
		})
		if !strings.Contains(got.GetError(), "no access entry") {
			t.Errorf("after delete: %v", got)
		}
	})
	t.Run("cluster not ACTIVE", func(t *testing.T) {
		if _, err := h.eks.DeleteCluster(ctxT(t), &eks.DeleteClusterInput{Name: aws.String(h.cluster)}); err != nil {
			t.Fatal(err)
		}
		var got *deliveryv1.ReviewTokenResponse
		eventually(t, "a DELETING cluster stops authenticating", func() bool {
			got = h.token(t, h.dev, servertest.TokenOptions{})
			return !got.GetAuthenticated()
		})
		if !strings.Contains(got.GetError(), "DELETING") {
			t.Errorf("DELETING cluster: %v", got)
		}
	})
}

// eventually polls cond until it holds, failing the test after 10s, and
// logs how long it took: what a change takes to reach a review (one watch
// delivery) is measured here, never asserted.
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: still not so after 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%s: after %v", what, took)
	return took
}

// retoken decodes a token, edits its URL and encodes it again.
func retoken(t *testing.T, tok string, edit func(string) string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "k8s-aws-v1."))
	if err != nil {
		t.Fatal(err)
	}
	return "k8s-aws-v1." + base64.RawURLEncoding.EncodeToString([]byte(edit(string(b))))
}

// TestReviewBoundToAgentCluster: only an agent, and only about the cluster
// incarnation its certificate names, of which it is a member.
func TestReviewBoundToAgentCluster(t *testing.T) {
	h := newReviewHarness(t)
	ctx := ctxT(t)
	// A second cluster, ACTIVE, with its own agent.
	in := createInput("other")
	in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
	if _, err := h.eks.CreateCluster(ctx, in); err != nil {
		t.Fatal(err)
	}
	otherUID := h.addMember(t, "other", "i-other")
	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: "other"}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.2:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatal(err)
	}
	tok := servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{})
	otherAgent := deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, otherUID, "i-other"))
	if got, err := otherAgent.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: "other"}, Token: servertest.Token(t, h.dev, "other", servertest.TokenOptions{})}); err != nil || !got.GetAuthenticated() {
		t.Fatalf("agent of other about other: %v %v", got, err)
	}

	cases := []struct {
		name   string
		client deliveryv1.AccessReviewServiceClient
		code   codes.Code
	}{
		{"agent of another cluster", otherAgent, codes.PermissionDenied},
		{"agent of this cluster that is not a member", deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, h.uid, "i-stranger")), codes.PermissionDenied},
		{"agent of an earlier incarnation", deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, "6f1c2a4e-8d2b-4c51-9a3e-0b7d5e9f1a22", agentInstance)), codes.PermissionDenied},
		{"a service certificate", deliveryv1.NewAccessReviewServiceClient(h.srv.GRPC(t)), codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: h.name(), Token: tok})
			wanterr.Status(t, err, tc.code, errdefs.AccessDeniedException)
			_, err = tc.client.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: devUserARN,
				ResourceAttributes: &deliveryv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "dev"}})
			wanterr.Status(t, err, tc.code, errdefs.AccessDeniedException)
		})
	}
	// The agent certificate calls nothing else but health.
	if _, err := healthpb.NewHealthClient(h.srv.AgentConn(t, h.uid, agentInstance)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("agent health check: %v", err)
	}
	// A member removed is refused once the review view has the change
	// (one watch delivery).
	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: h.ref(), InstanceId: agentInstance}); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, "a removed member is refused", func() bool {
		_, err = h.review.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: h.name(), Token: tok})
		return err != nil
	})
	wanterr.Status(t, err, codes.PermissionDenied, errdefs.AccessDeniedException)
}

// TestReviewAccessDecisions: SubjectAccessReview answers from the entry's
// associated policies and scopes, for the user token review produced.
func TestReviewAccessDecisions(t *testing.T) {
	h := newReviewHarness(t)
	ctx := ctxT(t)
	team := h.token(t, h.session, servertest.TokenOptions{}).GetUser()
	dev := h.token(t, h.dev, servertest.TokenOptions{}).GetUser()
	if team == nil || dev == nil {
		t.Fatal("token review did not authenticate the harness's users")
	}
	res := func(verb, group, resource, ns string) *deliveryv1.ResourceAttributes {
		return &deliveryv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns, Version: "v1"}
	}
	forged := &deliveryv1.UserInfo{Username: team.GetUsername(), Uid: team.GetUid(), Extra: dev.GetExtra()}
	noExtra := &deliveryv1.UserInfo{Username: dev.GetUsername(), Uid: dev.GetUid()}
	cases := []struct {
		name    string
		user    *deliveryv1.UserInfo
		res     *deliveryv1.ResourceAttributes
		nonRes  *deliveryv1.NonResourceAttributes
		allowed bool
	}{
		{"edit creates deployments in dev", team, res("create", "apps", "deployments", "dev"), nil, true},
		{"edit creates deployments in team-a (wildcard)", team, res("create", "apps", "deployments", "team-a"), nil, true},
		{"edit in prod: no opinion", team, res("create", "apps", "deployments", "prod"), nil, false},
		{"edit in teamx (not the wildcard's prefix)", team, res("get", "", "pods", "teamx"), nil, false},
		{"edit cannot bind roles", team, res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), nil, false},
		{"namespace scope never covers nodes", team, res("list", "", "nodes", ""), nil, false},
		{"namespace scope never covers non-resource URLs", team, nil, &deliveryv1.NonResourceAttributes{Verb: "get", Path: "/healthz"}, false},
		{"cluster admin anywhere", dev, res("delete", "", "namespaces", ""), nil, true},
		{"cluster admin non-resource URLs", dev, nil, &deliveryv1.NonResourceAttributes{Verb: "get", Path: "/metrics"}, true},
		{"someone else's extra attributes", forged, res("delete", "", "namespaces", ""), nil, false},
		{"no extra attributes", noExtra, res("get", "", "pods", "dev"), nil, false},
		{"a service account", &deliveryv1.UserInfo{Username: "system:serviceaccount:dev:default", Groups: []string{"system:serviceaccounts"}}, res("get", "", "pods", "dev"), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{
				Cluster: h.name(), User: tc.user.GetUsername(), Uid: tc.user.GetUid(), Groups: tc.user.GetGroups(), Extra: tc.user.GetExtra(),
				ResourceAttributes: tc.res, NonResourceAttributes: tc.nonRes,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetAllowed() != tc.allowed || got.GetDenied() {
				t.Errorf("allowed=%v denied=%v (%s), want allowed=%v and never denied", got.GetAllowed(), got.GetDenied(), got.GetReason(), tc.allowed)
			}
			if got.GetReason() == "" {
				t.Error("no reason given")
			}
		})
	}
	t.Run("both or neither attributes", func(t *testing.T) {
		_, err := h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: dev.GetUsername(), Extra: dev.GetExtra()})
		wanterr.Status(t, err, codes.InvalidArgument, errdefs.InvalidParameterException)
		_, err = h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: dev.GetUsername(), Extra: dev.GetExtra(),
			ResourceAttributes: res("get", "", "pods", "dev"), NonResourceAttributes: &deliveryv1.NonResourceAttributes{Verb: "get", Path: "/"}})
		wanterr.Status(t, err, codes.InvalidArgument, errdefs.InvalidParameterException)
	})
	t.Run("disassociation takes effect", func(t *testing.T) {
		if _, err := h.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(h.cluster),
			PrincipalArn: aws.String(teamRoleARN), PolicyArn: aws.String(editPolicy)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a disassociated policy stops allowing", func() bool {
			got, err := h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: team.GetUsername(), Uid: team.GetUid(), Extra: team.GetExtra(),
				ResourceAttributes: res("create", "apps", "deployments", "dev")})
			if err != nil {
				t.Fatal(err)
			}
			return !got.GetAllowed()
		})
	})
}

// TestReviewTokenSTSHosts: tokens for saltbush's own region's STS host and
// for a configured private STS host are accepted; others are not.
func TestReviewTokenSTSHosts(t *testing.T) {
	h := newReviewHarness(t, servertest.WithConfig(func(c *server.Config) {
		c.Cluster.Region, c.Addon.Region = "onprem-1", "onprem-1"
		c.STSHosts = []string{"sts.cloud.internal"}
	}))
	cases := []struct {
		name string
		o    servertest.TokenOptions
		ok   bool
	}{
		{"the server's own region", servertest.TokenOptions{Region: "onprem-1"}, true},
		{"an AWS region", servertest.TokenOptions{Region: "eu-central-1"}, true},
		{"a configured host", servertest.TokenOptions{Region: "onprem-1", Endpoint: "https://sts.cloud.internal"}, true},
		{"another private region", servertest.TokenOptions{Region: "onprem-2"}, false},
		{"a host like the configured one", servertest.TokenOptions{Endpoint: "https://sts.cloud.internal.example"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := h.token(t, h.dev, tc.o)
			if got.GetAuthenticated() != tc.ok {
				t.Errorf("authenticated = %v (%s), want %v", got.GetAuthenticated(), got.GetError(), tc.ok)
			}
		})
	}
}
