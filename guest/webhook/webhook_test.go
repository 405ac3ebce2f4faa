package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	"k8s.io/client-go/tools/clientcmd"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

func TestEnsurePKI(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	first, created, err := EnsurePKI(dir, "127.0.0.1", now)
	if err != nil || !created {
		t.Fatalf("first EnsurePKI: created %v, %v", created, err)
	}
	tests := []struct {
		name    string
		host    string
		at      time.Time
		prepare func(t *testing.T)
		created bool
	}{
		{name: "kept across restarts", host: "127.0.0.1", at: now},
		{name: "another address", host: "::1", at: now, created: true},
		{name: "about to expire", host: "::1", at: now.Add(certLifetime - renewBefore/2), created: true},
		{name: "a file gone", host: "::1", at: now, created: true, prepare: func(t *testing.T) {
			if err := os.Remove(filepath.Join(dir, clientKeyFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a file corrupt", host: "::1", at: now, created: true, prepare: func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, serverCertFile), []byte("not PEM"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	prev := first
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.prepare != nil {
				tt.prepare(t)
			}
			p, created, err := EnsurePKI(dir, tt.host, tt.at)
			if err != nil {
				t.Fatal(err)
			}
			if created != tt.created {
				t.Fatalf("created %v, want %v", created, tt.created)
			}
			if same := bytes.Equal(p.ServerCert, prev.ServerCert); same == tt.created {
				t.Fatalf("serving certificate reused %v, want %v", same, !tt.created)
			}
			prev = p
		})
	}
	for _, name := range []string{caFile, serverKeyFile, clientKeyFile} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", name, info.Mode(), err)
		}
	}
}

// unreachable is the Host of an agent with no open stream to saltbush.
type unreachable struct{}

func (unreachable) ReviewToken(context.Context, *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	return nil, ErrUnreachable
}

func (unreachable) ReviewAccess(context.Context, *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	return nil, ErrUnreachable
}

// TestServeTLS: the apiserver's side of the kubeconfig files reaches the
// webhooks; a client without the apiserver's certificate does not; with
// saltbush unreachable the answers refuse.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := EnsurePKI(dir, "127.0.0.1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	authn, authz, err := p.WriteKubeconfigs(dir, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Cluster: &deliveryv1.ClusterName{AccountId: "000000000000", Name: "c"}, Host: unreachable{},
		CacheTTL: time.Minute, NegativeCacheTTL: time.Minute, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, p) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	for _, tt := range []struct {
		file, body, want string
	}{
		{file: authn, body: `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"k8s-aws-v1.x"}}`,
			want: `"error":"saltbush could not review the token: saltbush is not reachable"`},
		{file: authz, body: `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u","resourceAttributes":{"verb":"get","resource":"pods"}}}`,
			want: `"allowed":false`},
	} {
		cfg, err := clientcmd.BuildConfigFromFlags("", tt.file)
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		rt, err := restTransport(cfg.CAData, cfg.CertData, cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Transport: rt}).Post(cfg.Host, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatalf("POST %s: %v", cfg.Host, err)
		}
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(out.String(), tt.want) {
			t.Errorf("POST %s: %d %s, want 200 with %s", cfg.Host, resp.StatusCode, out.String(), tt.want)
		}
	}

	// No client certificate: the handshake fails.
	pool, _ := p.ClientTLS()
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool.RootCAs}}}
	if resp, err := noCert.Post("https://"+ln.Addr().String()+AuthenticatePath, "application/json", strings.NewReader("{}")); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a client without the apiserver's certificate got HTTP %d", resp.StatusCode)
	}
}

func restTransport(ca, cert, key []byte) (http.RoundTripper, error) {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("the kubeconfig holds no CA certificate")
	}
	return &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}}, nil
}

func TestBadReviews(t *testing.T) {
	s, err := New(Config{Cluster: &deliveryv1.ClusterName{AccountId: "000000000000", Name: "c"}, Host: unreachable{},
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{name: "not JSON", path: AuthenticatePath, body: "{", code: http.StatusBadRequest},
		{name: "unknown token review version", path: AuthenticatePath, body: `{"apiVersion":"authentication.k8s.io/v2"}`, code: http.StatusBadRequest},
		{name: "unknown access review version", path: AuthorizePath, body: `{"apiVersion":"authorization.k8s.io/v9"}`, code: http.StatusBadRequest},
		{name: "too large", path: AuthenticatePath, body: `{"apiVersion":"authentication.k8s.io/v1","spec":{"token":"` + strings.Repeat("x", maxBody) + `"}}`, code: http.StatusRequestEntityTooLarge},
		{name: "neither attributes", path: AuthorizePath, body: `{"apiVersion":"authorization.k8s.io/v1","spec":{"user":"u"}}`, code: http.StatusOK,
			want: "neither or both"},
		{name: "GET", path: AuthenticatePath, code: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodPost
			if tt.name == "GET" {
				method = http.MethodGet
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.code {
				t.Fatalf("HTTP %d %s, want %d", rec.Code, rec.Body, tt.code)
			}
			if tt.want != "" && !strings.Contains(rec.Body.String(), tt.want) {
				t.Fatalf("body %s, want %q", rec.Body, tt.want)
			}
		})
	}
}

// TestV1beta1AccessReview: a v1beta1 SubjectAccessReview names its groups
// "group"; they reach saltbush as groups.
func TestV1beta1AccessReview(t *testing.T) {
	var old authorizationv1beta1.SubjectAccessReview
	body := `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"user":"u","group":["g1","g2"],"uid":"x",
		"extra":{"canonicalArn":["arn"]},"nonResourceAttributes":{"path":"/healthz","verb":"get"}}}`
	if err := json.Unmarshal([]byte(body), &old); err != nil {
		t.Fatal(err)
	}
	spec := fromV1beta1(old.Spec)
	if spec.User != "u" || len(spec.Groups) != 2 || spec.Groups[1] != "g2" || spec.UID != "x" ||
		spec.Extra["canonicalArn"][0] != "arn" || spec.NonResourceAttributes == nil || spec.NonResourceAttributes.Path != "/healthz" {
		t.Fatalf("converted spec %+v", spec)
	}
}
