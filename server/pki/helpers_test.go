package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
	"github.com/saltbush/saltbush/tlsclient"
)

var testMasterKey = bytes.Repeat([]byte{7}, MasterKeySize)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newAuthority(t *testing.T, st *store.Store, cfg Config) *Authority {
	t.Helper()
	if cfg.MasterKey == nil {
		cfg.MasterKey = testMasterKey
	}
	a, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startedAuthority is an initialised authority with its view running, on a
// fresh store.
func startedAuthority(t *testing.T) (*Authority, *store.Store) {
	t.Helper()
	st := storetest.New(t)
	a := newAuthority(t, st, Config{})
	ctx := ctxT(t)
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return a, st
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrPEM makes a CSR for key whose subject and SANs ask for far more than
// any SPIFFE id: Issue must ignore them.
func csrPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "admin"},
		DNSNames: []string{"evil.example"},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func keyPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func parsePEMCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("not PEM: %q", b)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// signWithIssuer is the test hook for certificates Issue refuses to make
// (no SPIFFE id, a foreign one, two of them): tmpl is signed by the real
// issuing CA's key.
func signWithIssuer(t *testing.T, a *Authority, tmpl *x509.Certificate) (certPEM, kPEM []byte) {
	t.Helper()
	ca, _, err := a.loadIssuer(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	sn, err := newSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = sn
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Minute)
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.signer)
	if err != nil {
		t.Fatal(err)
	}
	return pemCert(der), keyPEM(t, key)
}

// foreignCA makes a CA saltbush does not know and a client certificate it
// signed for a saltbush service id.
func foreignCA(t *testing.T) (certPEM, kPEM []byte) {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not saltbush"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	uri, err := spiffeURI(identity.ServiceID("intruder"))
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		URIs: []*url.URL{uri}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pemCert(der), keyPEM(t, key)
}

// recorder observes what the pki interceptors handed on: the caller and
// the deadline of the last call and the last stream.
type recorder struct {
	mu             sync.Mutex
	unaryCaller    *identity.Caller
	unaryDeadline  time.Time
	streamCaller   *identity.Caller
	streamDeadline time.Time
}

func (r *recorder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, ok := identity.FromContext(ctx)
	dl, _ := ctx.Deadline()
	r.mu.Lock()
	r.unaryCaller, r.unaryDeadline = nil, dl
	if ok {
		r.unaryCaller = &c
	}
	r.mu.Unlock()
	return handler(ctx, req)
}

func (r *recorder) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, ok := identity.FromContext(ss.Context())
	dl, _ := ss.Context().Deadline()
	r.mu.Lock()
	r.streamCaller, r.streamDeadline = nil, dl
	if ok {
		r.streamCaller = &c
	}
	r.mu.Unlock()
	return handler(srv, ss)
}

func (r *recorder) lastUnary() (*identity.Caller, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, dl := r.unaryCaller, r.unaryDeadline
	r.unaryCaller, r.unaryDeadline = nil, time.Time{}
	return c, dl
}

func (r *recorder) lastStream() (*identity.Caller, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streamCaller, r.streamDeadline
}

// serve runs a real gRPC server (the health service) on 127.0.0.1:0 behind
// the authority's TLS config and interceptors.
func serve(t *testing.T, a *Authority) (addr string, rec *recorder) {
	t.Helper()
	rec = &recorder{}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(a.ServerTLSConfig([]string{"localhost", "127.0.0.1"}))),
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor(), rec.unary),
		grpc.ChainStreamInterceptor(a.StreamInterceptor(), rec.stream),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), rec
}

// clientConfig trusts the authority's current bundle (from the store) and
// presents certPEM/kPEM.
func clientConfig(t *testing.T, a *Authority, certPEM, kPEM []byte) *tls.Config {
	t.Helper()
	bundle, _, err := a.BundleFromStore(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsclient.Config(bundle, certPEM, kPEM, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func dial(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func check(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// handshake makes a raw TLS connection and reads the server's first bytes:
// an accepted client gets HTTP/2's SETTINGS frame, a refused one the
// server's alert (TLS 1.3 clients learn of the refusal on their first read).
func handshake(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := conn.Read(buf); err != nil {
		return err
	}
	return nil
}

// eventually polls cond until it holds, for at most 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isRemoteAlert(err error) bool {
	return err != nil && strings.Contains(err.Error(), "remote error: tls:")
}
