package access_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/webhook"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
)

// tokenClient is client-go presenting token to the cluster's apiserver.
func (tm *team) tokenClient(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: tm.Kube.Host(), BearerToken: token, Timeout: 30 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: tm.Kube.CACert()}, QPS: -1}
	return kubernetes.NewForConfigOrDie(cfg)
}

// outcome is "ok", "forbidden", "unauthorized" or the error.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	}
	return err.Error()
}

func listPods(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	return err
}

// TestRevocation revokes access four ways and measures how long the
// apiserver, configured as images/k3s ships it, still lets the revoked
// caller in (docs/agent.md, "Cluster access"): an authorization change (a
// disassociated policy, a deleted entry, a cluster being deleted) within
// the apiserver's 5 s authorization cache plus the agent's positive TTL
// plus one watch delivery on the host; an authentication change (a
// deactivated key) within the kube-apiserver's fixed 10 s token cache plus
// the agent's TTL. The figures are logged; the test asserts that access
// ends the documented way and stays ended.
func TestRevocation(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	const ttl = 2 * time.Second
	tm := newTeam(ctx, t, accesstest.Options{CacheTTL: ttl, NegativeCacheTTL: 500 * time.Millisecond})

	tests := []struct {
		name   string
		revoke func(t *testing.T, principal string, c servertest.Creds)
		// refused is how the revoked request fails.
		refused string
	}{
		// The apiserver still holds the token's authentication; the
		// access review is what ends it first.
		{name: "DeleteAccessEntry", refused: "forbidden", revoke: func(t *testing.T, principal string, _ servertest.Creds) {
			if _, err := tm.EKS.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(tm.Cluster), PrincipalArn: aws.String(principal)}); err != nil {
				t.Fatalf("DeleteAccessEntry: %v", err)
			}
		}},
		{name: "DisassociateAccessPolicy", refused: "forbidden", revoke: func(t *testing.T, principal string, _ servertest.Creds) {
			if _, err := tm.EKS.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(tm.Cluster),
				PrincipalArn: aws.String(principal), PolicyArn: aws.String(editPolicy)}); err != nil {
				t.Fatalf("DisassociateAccessPolicy: %v", err)
			}
		}},
		{name: "deactivated access key", refused: "unauthorized", revoke: func(t *testing.T, _ string, c servertest.Creds) {
			if err := tm.Server.IAM().SetAccessKeyStatus(ctx, c.AccessKeyID, "Inactive"); err != nil {
				t.Fatalf("SetAccessKeyStatus: %v", err)
			}
		}},
		// Last: it ends the cluster. A DELETING cluster authenticates and
		// authorizes no one, whatever its entries say.
		{name: "DeleteCluster", refused: "forbidden", revoke: func(t *testing.T, _ string, _ servertest.Creds) {
			if _, err := tm.EKS.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(tm.Cluster)}); err != nil {
				t.Fatalf("DeleteCluster: %v", err)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			principal := "arn:aws:iam::" + tm.Account + ":user/revoked-" + strconv.Itoa(i)
			if _, err := tm.Server.IAM().CreatePrincipal(ctx, principal); err != nil {
				t.Fatal(err)
			}
			tm.entry(ctx, t, principal, "", nil, editPolicy, "dev")
			creds := tm.Server.NewKey(t, principal)
			c := tm.tokenClient(t, servertest.Token(t, creds, tm.Cluster, servertest.TokenOptions{Region: tm.Region}))
			if err := listPods(ctx, c, "dev"); err != nil {
				t.Fatalf("before revocation: %v", err)
			}
			tt.revoke(t, principal, creds)
			revoked := time.Now()
			var last string
			for last = outcome(listPods(ctx, c, "dev")); last == "ok"; last = outcome(listPods(ctx, c, "dev")) {
				if ctx.Err() != nil {
					t.Fatalf("still allowed %v after the revocation", time.Since(revoked))
				}
				time.Sleep(20 * time.Millisecond) // pacing the probe, not a wait for state
			}
			took := time.Since(revoked)
			if last != tt.refused {
				t.Fatalf("after the revocation: %s, want %s", last, tt.refused)
			}
			for range 3 {
				if got := outcome(listPods(ctx, c, "dev")); got != tt.refused {
					t.Fatalf("a later request: %s, want %s (access came back)", got, tt.refused)
				}
			}
			t.Logf("%s: access ended %v after the revocation (agent cache TTL %v)", tt.name, took.Round(time.Millisecond), ttl)
		})
	}
}

// TestSaltbushUnreachable cuts the agent off from saltbush: tokens it has
// not cached are refused (after the review deadline), cached answers
// expire after their TTL, and nothing is allowed until saltbush answers
// again.
func TestSaltbushUnreachable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	const ttl = time.Second
	tm := newTeam(ctx, t, accesstest.Options{CacheTTL: ttl, NegativeCacheTTL: ttl, ReviewTimeout: time.Second})
	// SigV4 signs to the second: two tokens signed in the same second are
	// the same token, and the apiserver's own token cache would answer
	// the second one. The fresh token is signed a whole second earlier.
	signed := time.Now().Truncate(time.Second)
	cached := tm.tokenClient(t, servertest.Token(t, tm.alice, tm.Cluster, servertest.TokenOptions{Region: tm.Region, At: signed}))
	if err := listPods(ctx, cached, "dev"); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	tm.Proxy.Partition()
	cut := time.Now()
	fresh := tm.tokenClient(t, servertest.Token(t, tm.alice, tm.Cluster, servertest.TokenOptions{Region: tm.Region, At: signed.Add(-time.Second)}))
	if got := outcome(listPods(ctx, fresh, "dev")); got != "unauthorized" {
		t.Fatalf("a token the agent has not cached, saltbush unreachable: %s, want unauthorized", got)
	}
	// The cached token works at most until the agent's answers expire:
	// its access review then fails closed (no opinion: forbidden, while
	// the apiserver still holds the authentication), later its token
	// review too (unauthorized). It is never allowed again meanwhile.
	got := outcome(listPods(ctx, cached, "dev"))
	for ; got == "ok"; got = outcome(listPods(ctx, cached, "dev")) {
		if ctx.Err() != nil {
			t.Fatalf("cached token still allowed %v after the partition", time.Since(cut))
		}
		time.Sleep(50 * time.Millisecond) // pacing the probe
	}
	t.Logf("the cached token was refused (%s) %v after the partition (agent TTL %v)", got, time.Since(cut).Round(time.Millisecond), ttl)
	for ; got != "unauthorized"; got = outcome(listPods(ctx, cached, "dev")) {
		if got != "forbidden" {
			t.Fatalf("cached token %v after the partition: %s, want forbidden, then unauthorized", time.Since(cut), got)
		}
		time.Sleep(50 * time.Millisecond) // pacing the probe
	}
	t.Logf("the cached token was unauthenticated %v after the partition", time.Since(cut).Round(time.Millisecond))
	if got := outcome(listPods(ctx, tm.tokenClient(t, accesstest.StaticToken), "kube-system")); got != "forbidden" {
		// The static-token user has no RBAC binding: the webhook is asked
		// for authorization and, unreachable, has no opinion.
		t.Fatalf("static-token user without a binding, saltbush unreachable: %s, want forbidden", got)
	}
	tm.Proxy.Heal()
	tm.WaitConnected(ctx, t)
	for got := outcome(listPods(ctx, fresh, "dev")); got != "ok"; got = outcome(listPods(ctx, fresh, "dev")) {
		if ctx.Err() != nil {
			t.Fatalf("after healing: %s", got)
		}
		time.Sleep(50 * time.Millisecond) // pacing the probe (negative answers expire after their TTL)
	}
}

// reviewClient is the real AccessReviewService client on an agent's
// certificate, as the agent's webhooks use it.
type reviewClient struct {
	c deliveryv1.AccessReviewServiceClient
}

func (r reviewClient) ReviewToken(ctx context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	return r.c.ReviewToken(ctx, req)
}

func (r reviewClient) ReviewAccess(ctx context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	return r.c.ReviewAccess(ctx, req)
}

// TestAgentOfAnotherCluster: the webhooks of cluster A's agent, asked
// about cluster B (a token made for B, B's name in the review), get no
// decision: saltbush refuses to answer A's agent about B, and the webhook
// fails closed. The same webhook asking about A decides.
func TestAgentOfAnotherCluster(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	tm := newTeam(ctx, t, accesstest.Options{})
	// Cluster B, where alice's role is an admin.
	other := tm.Cluster + "-b"
	if _, err := tm.EKS.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(other), RoleArn: aws.String("arn:aws:iam::" + tm.Account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-b"}},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}}); err != nil {
		t.Fatalf("CreateCluster B: %v", err)
	}
	role := "arn:aws:iam::" + tm.Account + ":role/dev-team"
	if _, err := tm.EKS.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(other), PrincipalArn: aws.String(role)}); err != nil {
		t.Fatalf("CreateAccessEntry on B: %v", err)
	}
	if _, err := tm.EKS.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(other), PrincipalArn: aws.String(role),
		PolicyArn: aws.String(clusterAdminPolicy), AccessScope: &types.AccessScope{Type: types.AccessScopeTypeCluster}}); err != nil {
		t.Fatalf("AssociateAccessPolicy on B: %v", err)
	}
	conn := tm.Server.AgentConn(t, tm.UID, accesstest.Instance)
	serve := func(cluster string) http.Handler {
		s, err := webhook.New(webhook.Config{Cluster: &deliveryv1.ClusterName{AccountId: tm.Account, Name: cluster},
			Host: reviewClient{c: deliveryv1.NewAccessReviewServiceClient(conn)}, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s.Handler()
	}
	post := func(h http.Handler, path string, body any) map[string]any {
		b, _ := json.Marshal(body)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(b)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", path, rec.Code, rec.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		status, _ := out["status"].(map[string]any)
		return status
	}
	tokenReview := func(token string) any {
		return map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": token}}
	}
	access := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": map[string]any{
		"user": "dev:alice", "groups": []string{"dev-team"},
		"extra":              map[string][]string{"canonicalArn": {"arn:aws:iam::" + tm.Account + ":role/dev-team"}, "sessionName": {"alice"}},
		"resourceAttributes": map[string]any{"namespace": "dev", "verb": "list", "resource": "pods", "version": "v1"}}}

	ownToken := servertest.Token(t, tm.alice, tm.Cluster, servertest.TokenOptions{Region: tm.Region})
	if st := post(serve(tm.Cluster), webhook.AuthenticatePath, tokenReview(ownToken)); st["authenticated"] != true {
		t.Fatalf("own cluster: token review %v, want authenticated (the check below would prove nothing)", st)
	}
	if st := post(serve(tm.Cluster), webhook.AuthorizePath, access); st["allowed"] != true {
		t.Fatalf("own cluster: access review %v, want allowed", st)
	}
	otherToken := servertest.Token(t, tm.alice, other, servertest.TokenOptions{Region: tm.Region})
	st := post(serve(other), webhook.AuthenticatePath, tokenReview(otherToken))
	if st["authenticated"] == true || !strings.Contains(st["error"].(string), "own cluster") {
		t.Errorf("cluster B through A's agent: token review %v, want unauthenticated, refused as another cluster", st)
	}
	st = post(serve(other), webhook.AuthorizePath, access)
	if st["allowed"] == true || st["denied"] == true || !strings.Contains(st["evaluationError"].(string), "own cluster") {
		t.Errorf("cluster B through A's agent: access review %v, want no opinion with the refusal as evaluation error", st)
	}
}
