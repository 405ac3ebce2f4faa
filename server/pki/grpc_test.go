package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store/storetest"
	"github.com/saltbush/saltbush/tlsclient"
)

// TestMTLS runs a real gRPC server over real mTLS and checks who gets in
// and as whom.
func TestMTLS(t *testing.T) {
	a, st := startedAuthority(t)
	ctx := ctxT(t)
	addr, rec := serve(t, a)

	const uid, instance = "6f1c2a4e-8d2b-4c51-9a3e-0b7d5e9f1a22", "i-0abc"
	issue := func(id string) ([]byte, []byte, string) {
		certPEM, kPEM, serial, err := a.IssueLocal(ctx, id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return certPEM, kPEM, serial
	}
	svcCert, svcKey, _ := issue(identity.ServiceID("billing"))
	agentCert, agentKey, _ := issue(identity.AgentID(uid, instance))

	// A CSR-based issue: the key never leaves the client.
	csrKey := newKey(t)
	csrCert, _, _, err := a.Issue(ctx, csrPEM(t, csrKey), identity.ServiceID("csr"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// Expired: issued by the real CA by an authority whose clock is two
	// days behind.
	past := newAuthority(t, st, Config{Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }})
	expiredCert, expiredKey, _, err := past.IssueLocal(ctx, identity.ServiceID("old"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	revokedCert, revokedKey, revokedSerial := issue(identity.ServiceID("revoked"))
	if err := a.Revoke(ctx, revokedSerial, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view sees the revocation", func() bool { return a.Revoked(revokedSerial) })

	foreignCert, foreignKey := foreignCA(t)
	noURICert, noURIKey := signWithIssuer(t, a, &x509.Certificate{DNSNames: []string{"billing"}})
	otherTrust, _ := url.Parse("spiffe://example.org/service/billing")
	otherCert, otherKey := signWithIssuer(t, a, &x509.Certificate{URIs: []*url.URL{otherTrust}})
	svcURI, _ := url.Parse(identity.ServiceID("a"))
	svcURI2, _ := url.Parse(identity.ServiceID("b"))
	twoCert, twoKey := signWithIssuer(t, a, &x509.Certificate{URIs: []*url.URL{svcURI, svcURI2}})

	tests := []struct {
		name       string
		cert, key  []byte
		md         metadata.MD
		wantCaller *identity.Caller // nil: refused at the handshake
		// alert is the TLS alert a refused client gets; reason, when set,
		// is what verifyConnection says (after Go's verification passed).
		alert, reason string
	}{
		{name: "service", cert: svcCert, key: svcKey,
			wantCaller: &identity.Caller{PrincipalARN: identity.ServiceID("billing"), Service: "billing"}},
		{name: "agent", cert: agentCert, key: agentKey,
			wantCaller: &identity.Caller{PrincipalARN: identity.AgentID(uid, instance), Agent: &identity.Agent{ClusterUID: uid, Instance: instance}}},
		{name: "metadata claiming another identity is ignored", cert: agentCert, key: agentKey,
			md:         metadata.Pairs("x-saltbush-caller", identity.ServiceID("admin"), "x-spiffe-id", identity.ServiceID("admin")),
			wantCaller: &identity.Caller{PrincipalARN: identity.AgentID(uid, instance), Agent: &identity.Agent{ClusterUID: uid, Instance: instance}}},
		{name: "from a CSR", cert: csrCert, key: keyPEM(t, csrKey),
			wantCaller: &identity.Caller{PrincipalARN: identity.ServiceID("csr"), Service: "csr"}},
		{name: "no client certificate", alert: "certificate required"},
		{name: "unknown CA", cert: foreignCert, key: foreignKey, alert: "unknown certificate authority"},
		{name: "expired", cert: expiredCert, key: expiredKey, alert: "expired certificate"},
		{name: "revoked", cert: revokedCert, key: revokedKey, alert: "bad certificate", reason: "revoked"},
		{name: "no URI SAN", cert: noURICert, key: noURIKey, alert: "bad certificate", reason: "has 0 URI SANs"},
		{name: "foreign SPIFFE trust domain", cert: otherCert, key: otherKey, alert: "bad certificate", reason: "not a saltbush service or agent id"},
		{name: "two SPIFFE ids", cert: twoCert, key: twoKey, alert: "bad certificate", reason: "has 2 URI SANs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig(t, a, tc.cert, tc.key)
			hsErr := handshake(t, addr, cfg)
			callCtx := ctx
			if tc.md != nil {
				callCtx = metadata.NewOutgoingContext(ctx, tc.md)
			}
			conn := dial(t, addr, cfg)
			cctx, cancel := context.WithTimeout(callCtx, 5*time.Second)
			defer cancel()
			_, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
			got, _ := rec.lastUnary()
			if tc.wantCaller == nil {
				if !isRemoteAlert(hsErr) || !strings.Contains(hsErr.Error(), tc.alert) {
					t.Errorf("raw handshake: %v, want the server's %q alert", hsErr, tc.alert)
				}
				if tc.reason != "" {
					leaf := parsePEMCert(t, tc.cert)
					if err := a.verifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); err == nil ||
						!strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), serialOf(leaf)) {
						t.Errorf("verifyConnection: %v, want it to name %s and say %q", err, serialOf(leaf), tc.reason)
					}
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("call: %v, want Unavailable (no connection)", err)
				}
				if got != nil {
					t.Errorf("a refused client reached the handler as %+v", got)
				}
				t.Logf("refused: handshake %v; call %v", hsErr, err)
				return
			}
			if hsErr != nil {
				t.Fatalf("raw handshake: %v", hsErr)
			}
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got == nil {
				t.Fatal("the handler saw no caller")
			}
			if got.PrincipalARN != tc.wantCaller.PrincipalARN || got.Service != tc.wantCaller.Service ||
				(got.Agent == nil) != (tc.wantCaller.Agent == nil) || (got.Agent != nil && *got.Agent != *tc.wantCaller.Agent) ||
				got.AccountID != "" || got.Delegated {
				t.Errorf("caller %+v (agent %+v), want %+v (agent %+v)", got, got.Agent, tc.wantCaller, tc.wantCaller.Agent)
			}
		})
	}
}

// A call that did not come over a verified TLS connection is refused.
func TestInterceptorsWithoutCertificate(t *testing.T) {
	a, _ := startedAuthority(t)
	ctx := ctxT(t)
	handler := func(context.Context, any) (any, error) { t.Fatal("the handler ran"); return nil, nil }
	tests := []struct {
		name string
		ctx  context.Context
	}{
		{"no peer", ctx},
		{"peer without TLS", peer.NewContext(ctx, &peer.Peer{})},
		{"metadata only", metadata.NewIncomingContext(ctx, metadata.Pairs("x-spiffe-id", identity.ServiceID("admin")))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.UnaryInterceptor()(tc.ctx, nil, &grpc.UnaryServerInfo{}, handler)
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("unary: %v, want Unauthenticated", err)
			}
			err = a.StreamInterceptor()(nil, &fakeStream{ctx: tc.ctx}, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error {
				t.Fatal("the stream handler ran")
				return nil
			})
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("stream: %v, want Unauthenticated", err)
			}
		})
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context { return s.ctx }

// A certificate revoked while its connection is open is refused on the
// connection's next call, and at the handshake of any new connection.
func TestRevokeExistingConnection(t *testing.T) {
	a, _ := startedAuthority(t)
	ctx := ctxT(t)
	addr, _ := serve(t, a)
	certPEM, kPEM, serial, err := a.IssueLocal(ctx, identity.ServiceID("billing"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientConfig(t, a, certPEM, kPEM)
	conn := dial(t, addr, cfg)
	if err := check(t, conn); err != nil {
		t.Fatal(err)
	}
	if err := a.Revoke(ctx, serial, "left the company"); err != nil {
		t.Fatal(err)
	}
	var last error
	eventually(t, "the open connection's calls are refused", func() bool {
		last = check(t, conn)
		return status.Code(last) == codes.Unauthenticated
	})
	if !strings.Contains(status.Convert(last).Message(), "revoked") || !strings.Contains(status.Convert(last).Message(), serial) {
		t.Fatalf("refusal %v, want it to say %s is revoked", last, serial)
	}
	if err := handshake(t, addr, cfg); !isRemoteAlert(err) {
		t.Fatalf("new connection: %v, want the server's TLS alert", err)
	}
	if err := check(t, dial(t, addr, cfg)); status.Code(err) != codes.Unavailable {
		t.Fatalf("call on a new connection: %v, want Unavailable", err)
	}
}

// Rotation applies to the running server: certificates of the old and the
// new CA are both accepted; once the old CA is removed its certificates are
// refused, on new connections and on open ones.
func TestRotation(t *testing.T) {
	a, _ := startedAuthority(t)
	ctx := ctxT(t)
	addr, rec := serve(t, a)
	_, oldIssuer := a.Bundle()
	oldCert, oldKey, _, err := a.IssueLocal(ctx, identity.ServiceID("old"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	openOld := dial(t, addr, clientConfig(t, a, oldCert, oldKey))
	if err := check(t, openOld); err != nil {
		t.Fatal(err)
	}

	newIssuer, err := a.Rotate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newIssuer == oldIssuer {
		t.Fatal("Rotate kept the issuer")
	}
	eventually(t, "the view sees the rotation", func() bool { _, s := a.Bundle(); return s == newIssuer })
	newCert, newKey, _, err := a.IssueLocal(ctx, identity.ServiceID("new"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c := parsePEMCert(t, newCert); c.AuthorityKeyId == nil || serialOf(c) == "" {
		t.Fatal("certificate without an authority key id")
	}

	calls := []struct {
		name    string
		conn    func() *grpc.ClientConn
		wantSvc string
		refused codes.Code
	}{
		{"open connection of the old CA", func() *grpc.ClientConn { return openOld }, "old", codes.OK},
		{"new connection, old CA", func() *grpc.ClientConn { return dial(t, addr, clientConfig(t, a, oldCert, oldKey)) }, "old", codes.OK},
		{"new connection, new CA", func() *grpc.ClientConn { return dial(t, addr, clientConfig(t, a, newCert, newKey)) }, "new", codes.OK},
	}
	run := func(t *testing.T, conn *grpc.ClientConn, wantSvc string, want codes.Code) {
		t.Helper()
		err := check(t, conn)
		if status.Code(err) != want {
			t.Fatalf("call: %v, want %v", err, want)
		}
		if want == codes.OK {
			if c, _ := rec.lastUnary(); c == nil || c.Service != wantSvc {
				t.Fatalf("caller %+v, want service %s", c, wantSvc)
			}
		}
	}
	for _, c := range calls {
		t.Run("after rotate: "+c.name, func(t *testing.T) { run(t, c.conn(), c.wantSvc, c.refused) })
	}
	// The server now shows a certificate of the new CA: a client that
	// trusts only the old one cannot verify it.
	onlyOld, err := tlsclient.Config(pemCert(pemCerts(t, mustBundle(t, a))[0].Raw), newCert, newKey, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if serialOf(pemCerts(t, mustBundle(t, a))[0]) != oldIssuer {
		t.Fatal("the bundle does not list the old CA first")
	}
	if err := handshake(t, addr, onlyOld); err == nil || isRemoteAlert(err) {
		t.Fatalf("client trusting only the old CA: %v, want its own verification failure", err)
	}

	if err := a.Remove(ctx, oldIssuer); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view sees the removal", func() bool { b, _ := a.Bundle(); return len(pemCerts(t, b)) == 1 })
	if err := handshake(t, addr, clientConfig(t, a, oldCert, oldKey)); !isRemoteAlert(err) {
		t.Fatalf("new connection with the removed CA's certificate: %v, want the server's TLS alert", err)
	}
	after := []struct {
		name    string
		conn    func() *grpc.ClientConn
		wantSvc string
		want    codes.Code
	}{
		{"open connection of the removed CA", func() *grpc.ClientConn { return openOld }, "", codes.Unauthenticated},
		{"new connection, removed CA", func() *grpc.ClientConn { return dial(t, addr, clientConfig(t, a, oldCert, oldKey)) }, "", codes.Unavailable},
		{"new connection, new CA", func() *grpc.ClientConn { return dial(t, addr, clientConfig(t, a, newCert, newKey)) }, "new", codes.OK},
	}
	for _, c := range after {
		t.Run("after remove: "+c.name, func(t *testing.T) { run(t, c.conn(), c.wantSvc, c.want) })
	}
}

// No call or stream outlives the certificate it came in on.
func TestDeadlineBoundedByCertificate(t *testing.T) {
	a, _ := startedAuthority(t)
	ctx := ctxT(t)
	addr, rec := serve(t, a)
	certPEM, kPEM, _, err := a.IssueLocal(ctx, identity.AgentID("uid", "i-1"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := parsePEMCert(t, certPEM).NotAfter
	conn := dial(t, addr, clientConfig(t, a, certPEM, kPEM))

	t.Run("unary", func(t *testing.T) {
		if err := check(t, conn); err != nil {
			t.Fatal(err)
		}
		_, dl := rec.lastUnary()
		// The client's own 5s deadline is earlier; the handler sees the
		// earlier of the two.
		if dl.IsZero() || dl.After(notAfter) {
			t.Fatalf("handler deadline %v, want one no later than NotAfter %v", dl, notAfter)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// No client deadline: the one the handler sees is the certificate's.
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := healthpb.NewHealthClient(conn).Watch(sctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		c, dl := rec.lastStream()
		if c == nil || c.Agent == nil || c.Agent.Instance != "i-1" {
			t.Fatalf("stream caller %+v", c)
		}
		if !dl.Equal(notAfter) {
			t.Fatalf("stream deadline %v, want the certificate's NotAfter %v", dl, notAfter)
		}
	})
}

// ServerTLSConfig refuses handshakes until the view is loaded, instead of
// trusting nothing silently or everything.
func TestServerTLSConfigBeforeStart(t *testing.T) {
	st := storetest.New(t)
	a := newAuthority(t, st, Config{})
	if _, err := a.Init(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	cfg := a.ServerTLSConfig(nil)
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("MinVersion %x ClientAuth %v", cfg.MinVersion, cfg.ClientAuth)
	}
	if _, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{}); err == nil {
		t.Fatal("a handshake before Start was given a config")
	}
	if b, s := a.Bundle(); b != nil || s != "" {
		t.Fatal("Bundle before Start is not empty")
	}
}
