package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// echoHost answers every review from the review itself, so that an
// answer shows which review it was given for: a token authenticates when
// it starts with "ok", a request is allowed when the digest of what was
// asked is odd, and a token or user holding "fail" cannot be asked.
type echoHost struct{}

func (echoHost) ReviewToken(_ context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	if strings.Contains(req.GetToken(), "fail") {
		return nil, errors.New("host failure")
	}
	asked, _ := prototext.Marshal(req)
	if !strings.HasPrefix(req.GetToken(), "ok") {
		return &deliveryv1.ReviewTokenResponse{Error: "refused: " + string(asked)}, nil
	}
	return &deliveryv1.ReviewTokenResponse{Authenticated: true, Audiences: req.GetAudiences(),
		User: &deliveryv1.UserInfo{Username: string(asked), Groups: []string{"g"}}}, nil
}

func (echoHost) ReviewAccess(_ context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	if strings.Contains(req.GetUser(), "fail") {
		return nil, ErrUnreachable
	}
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	sum := sha256.Sum256(raw)
	asked, _ := prototext.Marshal(req)
	return &deliveryv1.ReviewAccessResponse{Allowed: sum[0]%2 == 1, Reason: string(asked)}, nil
}

// FuzzReviews sends two arbitrary review bodies, one after the other, to
// the webhooks (authentication or authorization, by the low bits of
// paths), as the apiserver posts them. Nothing panics; a body is refused
// with a 4xx or answered with a review of its apiVersion; a review saltbush
// could not be asked is not authenticated and gets no opinion; and the
// second answer is the one a webhook that never saw the first gives: an
// answer cached for one review is never given for another.
func FuzzReviews(f *testing.F) {
	tr := func(token string, aud ...string) string {
		b, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
			"spec": map[string]any{"token": token, "audiences": aud}})
		return string(b)
	}
	sar := func(version string, spec string) string {
		return `{"apiVersion":"authorization.k8s.io/` + version + `","kind":"SubjectAccessReview","spec":` + spec + `}`
	}
	for _, s := range []struct {
		paths uint8
		a, b  string
	}{
		{0, tr("ok-1"), tr("ok-1")},
		{0, tr("ok-1", "a", "b"), tr("ok-1", "a|b")},
		{0, tr("ok-1", "a|b"), tr("ok-1", "a", "b")},
		{0, tr("ok-1", "a"), tr("ok-1")},
		{0, tr("no"), tr("ok")},
		{0, tr("fail"), tr("fail")},
		{0, `{"apiVersion":"authentication.k8s.io/v1beta1","kind":"TokenReview","spec":{"token":"ok"}}`, tr("ok")},
		{0, `{"apiVersion":"v1","spec":{"token":"ok"}}`, `{`},
		{0, `{"apiVersion":"authentication.k8s.io/v1","spec":{"token":1}}`, `null`},
		{3, sar("v1", `{"user":"u","resourceAttributes":{"verb":"get","resource":"pods"}}`),
			sar("v1", `{"user":"u","resourceAttributes":{"verb":"get","resource":"pods","namespace":"a"}}`)},
		{3, sar("v1", `{"user":"u","groups":["a","b"],"resourceAttributes":{"verb":"get"}}`),
			sar("v1beta1", `{"user":"u","group":["a","b"],"resourceAttributes":{"verb":"get"}}`)},
		{3, sar("v1", `{"user":"u","extra":{"k":["a","b"]},"nonResourceAttributes":{"path":"/x","verb":"get"}}`),
			sar("v1", `{"user":"u","extra":{"k":["a"],"k2":["b"]},"nonResourceAttributes":{"path":"/x","verb":"get"}}`)},
		{3, sar("v1", `{"user":"u"}`), sar("v1", `{"user":"u","resourceAttributes":{},"nonResourceAttributes":{}}`)},
		{3, sar("v1", `{"user":"fail","resourceAttributes":{"verb":"get"}}`), sar("v2", `{}`)},
		{3, sar("v1", `{"user":"u","resourceAttributes":{"verb":"get","fieldSelector":{"rawSelector":"a=b"}}}`), sar("v1", `[]`)},
		{1, tr("ok-1"), sar("v1", `{"user":"u","resourceAttributes":{"verb":"get"}}`)},
		{2, sar("v1", `{"user":"u","resourceAttributes":{"verb":"get"}}`), tr("ok-1")},
	} {
		f.Add(s.paths, s.a, s.b)
	}
	newServer := func(t *testing.T) http.Handler {
		s, err := New(Config{Cluster: &deliveryv1.ClusterName{AccountId: "000000000000", Name: "c"}, Host: echoHost{},
			AwsAuth: func() *deliveryv1.AwsAuthConfigMap {
				return &deliveryv1.AwsAuthConfigMap{MapRoles: "- rolearn: x", Uid: "cm-1", ResourceVersion: "7"}
			},
			CacheTTL: time.Hour, NegativeCacheTTL: time.Hour, Timeout: 5 * time.Second, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s.Handler()
	}
	f.Fuzz(func(t *testing.T, paths uint8, first, second string) {
		path := func(bit uint8) string {
			if paths&bit != 0 {
				return AuthorizePath
			}
			return AuthenticatePath
		}
		shared := newServer(t)
		a := post(t, shared, path(1), first)
		checkReview(t, path(1), first, a)
		b := post(t, shared, path(2), second)
		checkReview(t, path(2), second, b)
		fresh := post(t, newServer(t), path(2), second)
		if b.Code != fresh.Code || !bytes.Equal(b.Body.Bytes(), fresh.Body.Bytes()) {
			t.Fatalf("after %s %q, %s %q is answered\n%d %s\nbut on its own\n%d %s", path(1), first, path(2), second,
				b.Code, b.Body, fresh.Code, fresh.Body)
		}
	})
}

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

// checkReview checks one answer: a 4xx, or a review of the body's
// apiVersion that fails closed when saltbush could not be asked.
func checkReview(t *testing.T, path, body string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 400 && rec.Code < 500 {
		return
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %q: status %d %s", path, body, rec.Code, rec.Body)
	}
	var sent struct{ APIVersion string }
	_ = json.Unmarshal([]byte(body), &sent)
	var got struct {
		APIVersion, Kind string
		Status           struct {
			Authenticated, Allowed, Denied bool
			Error, EvaluationError         string
			User                           struct{ Username string }
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.APIVersion != sent.APIVersion {
		t.Fatalf("%s %q: answered %s (%v)", path, body, rec.Body, err)
	}
	failed := strings.Contains(got.Status.Error, "could not review") || strings.Contains(got.Status.EvaluationError, "could not review")
	if path == AuthenticatePath && (got.Kind != "TokenReview" || failed && got.Status.Authenticated) {
		t.Fatalf("%s %q: answered %s", path, body, rec.Body)
	}
	if path == AuthorizePath && (got.Kind != "SubjectAccessReview" || failed && (got.Status.Allowed || got.Status.Denied)) {
		t.Fatalf("%s %q: answered %s", path, body, rec.Body)
	}
}
