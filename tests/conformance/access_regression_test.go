package conformance

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/servertest"
)

// lowerExtra is what an aggregated API server (metrics-server, any
// APIService) receives as the user's extra attributes: kube-apiserver
// forwards them as X-Remote-Extra-<key> headers and the aggregated
// server's request-header authenticator lowercases the key
// (k8s.io/apiserver/pkg/authentication/request/headerrequest, newExtra).
// Its delegated SubjectAccessReview then carries these lowercased keys.
func lowerExtra(in map[string]*deliveryv1.ExtraValue) map[string]*deliveryv1.ExtraValue {
	out := make(map[string]*deliveryv1.ExtraValue, len(in))
	for k, v := range in {
		out[strings.ToLower(k)] = v
	}
	return out
}

// TestReviewAccessExtrasAnyCase: the cluster creator
// (AmazonEKSClusterAdminPolicy on cluster scope, no Kubernetes groups)
// runs `kubectl top nodes`. metrics-server authorizes the request with a
// delegated SubjectAccessReview whose extra keys are lowercased; the
// access policies must decide it as they decide the direct request.
func TestReviewAccessExtrasAnyCase(t *testing.T) {
	h := newReviewHarness(t)
	ctx := ctxT(t)
	for _, who := range []struct {
		name  string
		creds servertest.Creds
		res   *deliveryv1.ResourceAttributes
	}{
		{"creator (cluster admin)", h.dev, &deliveryv1.ResourceAttributes{Verb: "list", Group: "metrics.k8s.io", Version: "v1beta1", Resource: "nodes"}},
		{"role session (edit in dev)", h.session, &deliveryv1.ResourceAttributes{Verb: "get", Group: "", Version: "v1", Resource: "pods", Namespace: "dev"}},
	} {
		t.Run(who.name, func(t *testing.T) {
			u := h.token(t, who.creds, servertest.TokenOptions{}).GetUser()
			if u == nil {
				t.Fatal("token review did not authenticate")
			}
			direct, err := h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: u.GetUsername(), Uid: u.GetUid(),
				Groups: u.GetGroups(), Extra: u.GetExtra(), ResourceAttributes: who.res})
			if err != nil || !direct.GetAllowed() {
				t.Fatalf("direct review: %v %v", direct, err)
			}
			delegated, err := h.review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{Cluster: h.name(), User: u.GetUsername(),
				Groups: u.GetGroups(), Extra: lowerExtra(u.GetExtra()), ResourceAttributes: who.res})
			if err != nil {
				t.Fatal(err)
			}
			if !delegated.GetAllowed() {
				t.Errorf("delegated review from an aggregated API server (extra keys lowercased): allowed=false (%s), want allowed as for the direct review", delegated.GetReason())
			}
		})
	}
}

// TestAccessEntryUpdateEmptyUsername: UpdateAccessEntry with username ""
// must not leave an entry whose users have no Kubernetes name (it is
// refused), and token review never authenticates a nameless user.
func TestAccessEntryUpdateEmptyUsername(t *testing.T) {
	h := newReviewHarness(t)
	ctx := ctxT(t)
	out, err := h.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(h.cluster),
		PrincipalArn: aws.String(teamRoleARN), Username: aws.String("")})
	if err == nil && aws.ToString(out.AccessEntry.Username) == "" {
		t.Errorf("UpdateAccessEntry(username \"\") stored an empty username")
	}
	got := h.token(t, h.session, servertest.TokenOptions{})
	if got.GetAuthenticated() && got.GetUser().GetUsername() == "" {
		t.Errorf("token review authenticated %s as a user with an empty username: %v", h.session.PrincipalARN, got)
	}
}

// TestReviewTokenNamesNoAudiences: an `aws eks get-token` token is bound
// to a cluster, not to an audience, and aws-iam-authenticator returns no
// status.audiences. kube-apiserver's webhook token authenticator
// (k8s.io/apiserver/plugin/pkg/authenticator/token/webhook) then checks
// the requested audiences against its own implicit ones; but when the
// webhook's status lists audiences it trusts them instead. Echoing
// spec.audiences would tell a TokenReview asking "is this token valid for
// audience vault?" yes, and a user's EKS token handed to one service that
// authenticates through the TokenReview API could be replayed to every
// other; ReviewToken names none.
func TestReviewTokenNamesNoAudiences(t *testing.T) {
	h := newReviewHarness(t)
	tok := servertest.Token(t, h.dev, h.cluster, servertest.TokenOptions{})
	got, err := h.review.ReviewToken(ctxT(t), &deliveryv1.ReviewTokenRequest{Cluster: h.name(), Token: tok, Audiences: []string{"vault", "https://other-service.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetAuthenticated() {
		t.Fatalf("review = %v", got)
	}
	if len(got.GetAudiences()) != 0 {
		t.Errorf("audiences = %v: the token is vouched for audiences nothing bound it to (want none, so the apiserver applies its own)", got.GetAudiences())
	}
}
