package conformance

// Who may call what on the public gRPC port, against a real saltbush over
// real mTLS: the handshake refuses callers without a certificate of a
// trusted CA, the access layer refuses identities their policy does not
// allow, and nothing a client sends besides its certificate (metadata, HTTP
// headers on the façade) changes who it is. Every refusal is checked for
// its exact code and for having changed nothing.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
	"github.com/saltbush/saltbush/tlsclient"
)

// gidMasterKey is servertest's master key (not a secret): a second
// Authority over a test server's store opens its CA with it.
var gidMasterKey = sha256.Sum256([]byte("saltbush test master key"))

// gidTLS is a client config trusting bundle and presenting cert/key (none
// when both are nil).
func gidTLS(t *testing.T, bundle, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	cfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gidBundle is the trust bundle the server's view holds now.
func gidBundle(t *testing.T, srv *servertest.Server) []byte {
	t.Helper()
	b, _ := srv.Authority().Bundle()
	if len(b) == 0 {
		t.Fatal("the server has no trust bundle")
	}
	return b
}

// gidIssue issues a certificate for a SPIFFE id from the server's CA.
func gidIssue(t *testing.T, srv *servertest.Server, spiffeID string) (certPEM, keyPEM []byte, serial string) {
	t.Helper()
	certPEM, keyPEM, serial, err := srv.Authority().IssueLocal(ctxT(t), spiffeID, time.Hour)
	if err != nil {
		t.Fatalf("issue %s: %v", spiffeID, err)
	}
	return certPEM, keyPEM, serial
}

// gidConn dials the gRPC port with cfg; no act-for metadata is added (each
// call sets its own).
func gidConn(t *testing.T, srv *servertest.Server, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	return srv.GRPCWith(t, cfg, "")
}

// gidCall is a context for one call (5s) carrying md.
func gidCall(t *testing.T, md metadata.MD) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	t.Cleanup(cancel)
	if md != nil {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return ctx
}

// gidActFor is the act-for metadata naming each of accounts (repeated
// when more than one).
func gidActFor(accounts ...string) metadata.MD {
	md := metadata.MD{}
	for _, a := range accounts {
		md.Append(server.ActForAccountHeader, a)
	}
	return md
}

// gidHealth calls grpc.health.v1.Health/Check.
func gidHealth(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	resp, err := healthpb.NewHealthClient(conn).Check(gidCall(t, nil), &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, want SERVING", resp.GetStatus())
	}
	return err
}

// gidHandshake makes a raw TLS connection and reads the server's first
// bytes: an accepted client gets HTTP/2's SETTINGS frame, a refused one the
// server's alert (a TLS 1.3 client learns of the refusal on its first read).
func gidHandshake(addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

func gidRemoteAlert(err error) bool {
	return err != nil && strings.Contains(err.Error(), "remote error: tls:")
}

// gidEventually polls cond until it holds, for at most 10s.
func gidEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gidKey is a fresh ECDSA P-256 key.
func gidKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func gidKeyPEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// gidCSR is a CSR for k whose subject asks to be the admin service: the
// CA must ignore it.
func gidCSR(t *testing.T, k *ecdsa.PrivateKey) string {
	t.Helper()
	admin, _ := url.Parse(identity.ServiceID(server.AdminService))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "admin"}, URIs: []*url.URL{admin},
	}, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// gidForeign makes a CA saltbush does not know and a client certificate it
// signed naming the admin service.
func gidForeign(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	caKey := gidKey(t)
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
	admin, _ := url.Parse(identity.ServiceID(server.AdminService))
	key := gidKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		URIs: []*url.URL{admin}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), gidKeyPEM(t, key)
}

// gidPEMCerts parses every certificate of a PEM bundle.
func gidPEMCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// gidAccountFree asserts a refused CreateAccount made nothing: the same id
// can be created now. (The probe creates it.)
func gidAccountFree(t *testing.T, srv *servertest.Server, account string) {
	t.Helper()
	if _, err := srv.IAM().CreateAccount(ctxT(t), account, "probe"); err != nil {
		t.Errorf("account %s after a refused CreateAccount: %v (the refused call created it?)", account, err)
	}
}

// gidClusters lists an account's clusters as its root, over the façade.
func gidClusters(t *testing.T, srv *servertest.Server, root servertest.Creds) []string {
	t.Helper()
	out, err := srv.EKSAs(t, root).ListClusters(ctxT(t), &eks.ListClustersInput{})
	if err != nil {
		t.Fatalf("ListClusters as %s: %v", root.PrincipalARN, err)
	}
	slices.Sort(out.Clusters)
	return out.Clusters
}

// gidCreateIn creates a cluster as an account's root.
func gidCreateIn(t *testing.T, srv *servertest.Server, root servertest.Creds, name string) {
	t.Helper()
	_, err := srv.EKSAs(t, root).CreateCluster(ctxT(t), &eks.CreateClusterInput{
		Name:               aws.String(name),
		RoleArn:            aws.String("arn:aws:iam::" + root.AccountID + ":role/eks-cluster"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	})
	if err != nil {
		t.Fatalf("CreateCluster %s in %s: %v", name, root.AccountID, err)
	}
}

func gidCreateReq(account, name string) *eksv1.CreateClusterRequest {
	return &eksv1.CreateClusterRequest{
		Name: name, RoleArn: "arn:aws:iam::" + account + ":role/eks-cluster",
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	}
}

// TestGRPCIdentityHandshakeRefused: a client without a certificate, with a
// certificate of a CA saltbush does not know, or with an expired one of
// saltbush's own CA, is refused at the TLS handshake (the server's alert),
// so every RPC fails Unavailable and changes nothing. The refused
// certificates all name the admin service, whose policy allows everything:
// the name counts only once the certificate is verified.
func TestGRPCIdentityHandshakeRefused(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	bundle := gidBundle(t, srv)
	adminID := identity.ServiceID(server.AdminService)

	// Expired: signed by the server's real CA (same store, same master
	// key) by an authority whose clock is two days behind.
	past, err := pki.New(srv.Store(t), pki.Config{MasterKey: gidMasterKey[:], Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, _, err := past.IssueLocal(ctx, adminID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c := gidPEMCerts(t, expiredCert)[0]; !c.NotAfter.Before(time.Now()) || c.URIs[0].String() != adminID {
		t.Fatalf("expired certificate: NotAfter %v, URI %v", c.NotAfter, c.URIs)
	}
	foreignCert, foreignKey := gidForeign(t)
	adminCfg := srv.ClientTLS(t)

	tests := []struct {
		name    string
		cfg     *tls.Config
		alert   string // "": admitted
		account string // CreateAccount argument
	}{
		{name: "admin certificate (admitted: the harness works)", cfg: adminCfg, account: "300000000001"},
		{name: "no client certificate", cfg: gidTLS(t, bundle, nil, nil), alert: "certificate required", account: "300000000002"},
		{name: "certificate of an unknown CA", cfg: gidTLS(t, bundle, foreignCert, foreignKey), alert: "unknown certificate authority", account: "300000000003"},
		{name: "expired certificate of saltbush's CA", cfg: gidTLS(t, bundle, expiredCert, expiredKey), alert: "expired certificate", account: "300000000004"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hsErr := gidHandshake(srv.GRPCAddr(), tc.cfg)
			conn := srv.GRPCWith(t, tc.cfg, srv.Config.DevAccount)
			_, createErr := controlv1.NewIdentityControlServiceClient(conn).CreateAccount(gidCall(t, nil),
				&controlv1.CreateAccountRequest{AccountId: tc.account})
			_, eksErr := eksv1.NewClusterServiceClient(conn).CreateCluster(gidCall(t, nil), gidCreateReq(srv.Config.DevAccount, "hs-"+tc.account))
			healthErr := gidHealth(t, conn)
			if tc.alert == "" {
				if hsErr != nil || createErr != nil || eksErr != nil || healthErr != nil {
					t.Fatalf("admitted client: handshake %v, CreateAccount %v, CreateCluster %v, health %v", hsErr, createErr, eksErr, healthErr)
				}
				return
			}
			if !gidRemoteAlert(hsErr) || !strings.Contains(hsErr.Error(), tc.alert) {
				t.Errorf("raw handshake: %v, want the server's %q alert", hsErr, tc.alert)
			}
			for what, err := range map[string]error{"CreateAccount": createErr, "CreateCluster": eksErr, "health": healthErr} {
				if status.Code(err) != codes.Unavailable {
					t.Errorf("%s: %v, want Unavailable (no connection)", what, err)
				}
			}
			gidAccountFree(t, srv, tc.account)
			if got := gidClusters(t, srv, srv.Dev(t)); slices.Contains(got, "hs-"+tc.account) {
				t.Errorf("a refused client created cluster refused-%s: %v", tc.account, got)
			}
		})
	}
}

// TestGRPCIdentityRevoked: a certificate revoked while its connection is
// open is refused on that connection's next call (Unauthenticated, naming
// the serial), health included, and at the handshake of any new
// connection.
func TestGRPCIdentityRevoked(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	if _, err := srv.IAM().PutServicePolicy(ctx, "revokee",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"saltbush:CreateAccount","Resource":"*"}]}`); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, serial := gidIssue(t, srv, identity.ServiceID("revokee"))
	cfg := gidTLS(t, gidBundle(t, srv), certPEM, keyPEM)
	conn := gidConn(t, srv, cfg)
	idc := controlv1.NewIdentityControlServiceClient(conn)
	if _, err := idc.CreateAccount(gidCall(t, nil), &controlv1.CreateAccountRequest{AccountId: "310000000001"}); err != nil {
		t.Fatalf("CreateAccount before the revocation: %v", err)
	}

	if err := srv.Authority().Revoke(ctx, serial, "test"); err != nil {
		t.Fatal(err)
	}
	var last error
	gidEventually(t, "the open connection's calls are refused", func() bool {
		last = gidHealth(t, conn)
		return status.Code(last) == codes.Unauthenticated
	})
	if msg := status.Convert(last).Message(); !strings.Contains(msg, "revoked") || !strings.Contains(msg, serial) {
		t.Errorf("refusal %q, want it to say %s is revoked", msg, serial)
	}
	_, err := idc.CreateAccount(gidCall(t, nil), &controlv1.CreateAccountRequest{AccountId: "310000000002"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("CreateAccount on the open connection after the revocation: %v, want Unauthenticated", err)
	}
	gidAccountFree(t, srv, "310000000002")

	if err := gidHandshake(srv.GRPCAddr(), cfg); !gidRemoteAlert(err) || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("new connection: %v, want the server's bad certificate alert", err)
	}
	fresh := gidConn(t, srv, cfg)
	if err := gidHealth(t, fresh); status.Code(err) != codes.Unavailable {
		t.Errorf("health on a new connection: %v, want Unavailable", err)
	}
	_, err = controlv1.NewIdentityControlServiceClient(fresh).CreateAccount(gidCall(t, nil), &controlv1.CreateAccountRequest{AccountId: "310000000003"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("CreateAccount on a new connection: %v, want Unavailable", err)
	}
	gidAccountFree(t, srv, "310000000003")
}

// TestGRPCIdentityAgentCertificate: a guest agent's certificate may call
// health and nothing else yet: every control, identity, EKS and reflection
// method is PermissionDenied (AccessDeniedException), even with act-for
// metadata, and changes nothing.
func TestGRPCIdentityAgentCertificate(t *testing.T) {
	h := newAddonHarness(t)
	srv := h.srv
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	before := h.get(t, "coredns")
	uid := before.GetClusterUid()
	certPEM, keyPEM, _ := gidIssue(t, srv, identity.AgentID(uid, "i-0123456789abcdef0"))
	// The act-for metadata names the development account on EKS calls.
	conn := srv.GRPCWith(t, gidTLS(t, gidBundle(t, srv), certPEM, keyPEM), srv.Config.DevAccount)
	ref := h.ref()
	cc := controlv1.NewClusterControlServiceClient(conn)
	ac := controlv1.NewAddonControlServiceClient(conn)
	idc := controlv1.NewIdentityControlServiceClient(conn)
	clusters := eksv1.NewClusterServiceClient(conn)
	addons := eksv1.NewAddonServiceClient(conn)

	t.Run("health", func(t *testing.T) {
		if err := gidHealth(t, conn); err != nil {
			t.Fatalf("Check: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
		defer cancel()
		w, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch: %v, %v", resp, err)
		}
	})

	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"ClusterControlService.GetCluster", func(ctx context.Context) error {
			_, err := cc.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
			return err
		}},
		{"ClusterControlService.SetStatus", func(ctx context.Context) error {
			_, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "agent"})
			return err
		}},
		{"AddonControlService.ApplyAddonReport", func(ctx context.Context) error {
			_, err := ac.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
				ClusterUid: uid, AddonName: "coredns", AddonUid: before.GetUid(), Generation: before.GetGeneration(),
				Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "i-0123456789abcdef0",
			})
			return err
		}},
		{"IdentityControlService.CreateAccount", func(ctx context.Context) error {
			_, err := idc.CreateAccount(ctx, &controlv1.CreateAccountRequest{AccountId: "320000000001"})
			return err
		}},
		{"IdentityControlService.IssueCertificate", func(ctx context.Context) error {
			_, err := idc.IssueCertificate(ctx, &controlv1.IssueCertificateRequest{
				CsrPem: gidCSR(t, gidKey(t)), Subject: &controlv1.IssueCertificateRequest_Service{Service: server.AdminService}})
			return err
		}},
		{"ClusterService.ListClusters", func(ctx context.Context) error {
			_, err := clusters.ListClusters(ctx, &eksv1.ListClustersRequest{})
			return err
		}},
		{"ClusterService.DeleteCluster", func(ctx context.Context) error {
			_, err := clusters.DeleteCluster(ctx, &eksv1.DeleteClusterRequest{Name: h.cluster})
			return err
		}},
		{"AddonService.DeleteAddon", func(ctx context.Context) error {
			_, err := addons.DeleteAddon(ctx, &eksv1.DeleteAddonRequest{ClusterName: h.cluster, AddonName: "coredns"})
			return err
		}},
		{"ServerReflection.ServerReflectionInfo", func(ctx context.Context) error {
			s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&reflectionpb.ServerReflectionRequest{
				MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
				return err
			}
			_, err = s.Recv()
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(gidCall(t, nil))
			wanterr.Status(t, err, codes.PermissionDenied, errdefs.AccessDeniedException)
		})
	}

	// Nothing changed.
	if got := h.get(t, "coredns"); got.GetStatus() != before.GetStatus() || got.GetGeneration() != before.GetGeneration() {
		t.Errorf("coredns after the agent's refused calls: %s gen %d, want %s gen %d", got.GetStatus(), got.GetGeneration(), before.GetStatus(), before.GetGeneration())
	}
	got, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).GetCluster(ctxT(t), &controlv1.GetClusterRequest{Cluster: ref})
	if err != nil || got.GetCluster().GetStatus() != controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE {
		t.Errorf("cluster after the agent's refused calls: %v, %v", got, err)
	}
	gidAccountFree(t, srv, "320000000001")
}

// gidDelegation is a server with two accounts, one cluster each, and
// service identities with different policies.
type gidDelegation struct {
	srv          *servertest.Server
	a, b         string
	rootA, rootB servertest.Creds
	// conns by service name: "nopolicy", "delegate-a" (acts for A with
	// eks:* and iam:PassRole), "reader-a" (acts for A with eks:Describe*
	// only), and "admin".
	conns map[string]*grpc.ClientConn
}

func newGIDDelegation(t *testing.T) *gidDelegation {
	t.Helper()
	srv := servertest.Start(t)
	ctx := ctxT(t)
	d := &gidDelegation{srv: srv, a: "111111111111", b: "222222222222", conns: map[string]*grpc.ClientConn{}}
	d.rootA, d.rootB = srv.NewAccount(t, d.a), srv.NewAccount(t, d.b)
	gidCreateIn(t, srv, d.rootA, "a-one")
	gidCreateIn(t, srv, d.rootB, "b-one")
	// The delegation (ActForAccount on A's root) is the wall between
	// accounts: the EKS statement itself allows any resource.
	policies := map[string]string{
		"delegate-a": `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"saltbush:ActForAccount","Resource":"arn:aws:iam::` + d.a + `:root"},
			{"Effect":"Allow","Action":["eks:*","iam:PassRole"],"Resource":"*"}]}`,
		"reader-a": `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"saltbush:ActForAccount","Resource":"arn:aws:iam::` + d.a + `:root"},
			{"Effect":"Allow","Action":["eks:Describe*","iam:PassRole"],"Resource":"*"}]}`,
	}
	for name, doc := range policies {
		if _, err := srv.IAM().PutServicePolicy(ctx, name, doc); err != nil {
			t.Fatalf("policy of %s: %v", name, err)
		}
	}
	bundle := gidBundle(t, srv)
	for _, name := range []string{"nopolicy", "delegate-a", "reader-a"} {
		c, k, _ := gidIssue(t, srv, identity.ServiceID(name))
		d.conns[name] = gidConn(t, srv, gidTLS(t, bundle, c, k))
	}
	d.conns["admin"] = gidConn(t, srv, srv.ClientTLS(t))
	return d
}

// TestGRPCIdentityServiceDelegation: a service acts for an account only
// when its own policy delegates that account, must name it in exactly one
// act-for value, and then may do only what the same policy allows; control
// methods need saltbush:{Method}.
func TestGRPCIdentityServiceDelegation(t *testing.T) {
	d := newGIDDelegation(t)
	srv := d.srv
	clustersOf := func(svc string) eksv1.ClusterServiceClient { return eksv1.NewClusterServiceClient(d.conns[svc]) }
	onlyAs := func(t *testing.T, root servertest.Creds, want ...string) {
		t.Helper()
		if got := gidClusters(t, srv, root); !slices.Equal(got, want) {
			t.Errorf("clusters of %s = %v, want %v", root.AccountID, got, want)
		}
	}

	tests := []struct {
		name   string
		svc    string
		md     metadata.MD
		call   func(ctx context.Context, svc string) (any, error)
		code   codes.Code
		reason string
		check  func(t *testing.T, resp any)
	}{
		{name: "no policy: EKS call acting for A", svc: "nopolicy", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "no policy: EKS create acting for A", svc: "nopolicy", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).CreateCluster(ctx, gidCreateReq(d.a, "by-nopolicy"))
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { onlyAs(t, d.rootA, "a-one") }},
		{name: "no policy: control call", svc: "nopolicy",
			call: func(ctx context.Context, svc string) (any, error) {
				return controlv1.NewClusterControlServiceClient(d.conns[svc]).GetCluster(ctx,
					&controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: d.a, Name: "a-one"}})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "no policy: identity call", svc: "nopolicy",
			call: func(ctx context.Context, svc string) (any, error) {
				return controlv1.NewIdentityControlServiceClient(d.conns[svc]).CreateAccount(ctx, &controlv1.CreateAccountRequest{AccountId: "330000000001"})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { gidAccountFree(t, srv, "330000000001") }},
		{name: "delegated: acting for A lists A's clusters only", svc: "delegate-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			},
			check: func(t *testing.T, resp any) {
				if got := resp.(*eksv1.ListClustersResponse).GetClusters(); !slices.Equal(got, []string{"a-one"}) {
					t.Errorf("clusters = %v, want [a-one]", got)
				}
			}},
		{name: "delegated: B's cluster is not found while acting for A", svc: "delegate-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: "b-one"})
			}, code: codes.NotFound, reason: errdefs.ResourceNotFoundException},
		{name: "delegated: acting for B", svc: "delegate-a", md: gidActFor(d.b),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: create acting for B", svc: "delegate-a", md: gidActFor(d.b),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).CreateCluster(ctx, gidCreateReq(d.b, "into-b"))
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { onlyAs(t, d.rootB, "b-one") }},
		{name: "delegated: delete acting for B", svc: "delegate-a", md: gidActFor(d.b),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).DeleteCluster(ctx, &eksv1.DeleteClusterRequest{Name: "b-one"})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { onlyAs(t, d.rootB, "b-one") }},
		{name: "delegated: acting for an account that does not exist", svc: "delegate-a", md: gidActFor("999999999999"),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: no act-for metadata", svc: "delegate-a",
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: empty act-for value", svc: "delegate-a", md: gidActFor(""),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: act-for repeated with the same account", svc: "delegate-a", md: gidActFor(d.a, d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: act-for repeated with A and B", svc: "delegate-a", md: gidActFor(d.a, d.b),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).CreateCluster(ctx, gidCreateReq(d.a, "two-accounts"))
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { onlyAs(t, d.rootA, "a-one"); onlyAs(t, d.rootB, "b-one") }},
		{name: "delegated: one act-for value listing A and B", svc: "delegate-a", md: gidActFor(d.a + "," + d.b),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.InvalidArgument, reason: errdefs.InvalidParameterException},
		{name: "delegated: act-for that is not an account id", svc: "delegate-a", md: gidActFor("12"),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.InvalidArgument, reason: errdefs.InvalidParameterException},
		{name: "delegated: control call its policy does not allow", svc: "delegate-a",
			call: func(ctx context.Context, svc string) (any, error) {
				return controlv1.NewClusterControlServiceClient(d.conns[svc]).GetCluster(ctx,
					&controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: d.a, Name: "a-one"}})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "delegated: act-for metadata does not open control calls", svc: "delegate-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return controlv1.NewIdentityControlServiceClient(d.conns[svc]).PutServicePolicy(ctx, &controlv1.PutServicePolicyRequest{
					Service: "delegate-a", Document: `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		{name: "read-only delegate: describe acting for A", svc: "reader-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: "a-one"})
			},
			check: func(t *testing.T, resp any) {
				if arn := resp.(*eksv1.DescribeClusterResponse).GetCluster().GetArn(); !strings.Contains(arn, ":"+d.a+":cluster/a-one") {
					t.Errorf("arn = %s, want A's a-one", arn)
				}
			}},
		{name: "read-only delegate: create acting for A", svc: "reader-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).CreateCluster(ctx, gidCreateReq(d.a, "by-reader"))
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException,
			check: func(t *testing.T, _ any) { onlyAs(t, d.rootA, "a-one") }},
		{name: "read-only delegate: list acting for A", svc: "reader-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).ListClusters(ctx, &eksv1.ListClustersRequest{})
			}, code: codes.PermissionDenied, reason: errdefs.AccessDeniedException},
		// Last: it changes A.
		{name: "delegated: create acting for A", svc: "delegate-a", md: gidActFor(d.a),
			call: func(ctx context.Context, svc string) (any, error) {
				return clustersOf(svc).CreateCluster(ctx, gidCreateReq(d.a, "by-delegate"))
			},
			check: func(t *testing.T, resp any) {
				if arn := resp.(*eksv1.CreateClusterResponse).GetCluster().GetArn(); arn != "arn:aws:eks:us-east-1:"+d.a+":cluster/by-delegate" {
					t.Errorf("arn = %s, want one in account A", arn)
				}
				onlyAs(t, d.rootA, "a-one", "by-delegate")
				onlyAs(t, d.rootB, "b-one")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.call(gidCall(t, tc.md), tc.svc)
			if tc.code == codes.OK {
				if err != nil {
					t.Fatalf("call: %v", err)
				}
			} else {
				wanterr.Status(t, err, tc.code, tc.reason)
			}
			if tc.check != nil {
				tc.check(t, resp)
			}
		})
	}
}

// TestGRPCIdentityNotFromMetadata: request metadata and façade headers
// that name callers, accounts or credentials change nothing: on gRPC the
// certificate decides, on the façade the SigV4 signature does.
func TestGRPCIdentityNotFromMetadata(t *testing.T) {
	d := newGIDDelegation(t)
	srv := d.srv
	ctx := ctxT(t)
	dev := srv.Dev(t)
	agentCert, agentKey, _ := gidIssue(t, srv, identity.AgentID("6f1c2a4e-8d2b-4c51-9a3e-0b7d5e9f1a22", "i-1"))
	agentConn := gidConn(t, srv, gidTLS(t, gidBundle(t, srv), agentCert, agentKey))
	adminID := identity.ServiceID(server.AdminService)
	claims := func(account string) metadata.MD {
		return metadata.Pairs(
			"x-saltbush-caller", adminID, "x-spiffe-id", adminID, "x-forwarded-client-cert", "URI="+adminID,
			"saltbush-account", account, "x-amz-account-id", account, "saltbush-principal", identity.RootARN(account),
			"authorization", "AWS4-HMAC-SHA256 Credential="+dev.AccessKeyID+"/20260101/us-east-1/eks/aws4_request, SignedHeaders=host, Signature=00",
			"x-amz-security-token", "anything",
		)
	}

	t.Run("grpc", func(t *testing.T) {
		create := func(conn *grpc.ClientConn, md metadata.MD, account string) error {
			_, err := controlv1.NewIdentityControlServiceClient(conn).CreateAccount(gidCall(t, md), &controlv1.CreateAccountRequest{AccountId: account})
			return err
		}
		// An agent claiming to be the admin service.
		wanterr.Status(t, create(agentConn, claims(srv.Config.DevAccount), "340000000001"), codes.PermissionDenied, errdefs.AccessDeniedException)
		gidAccountFree(t, srv, "340000000001")
		// A service without a policy claiming the same.
		wanterr.Status(t, create(d.conns["nopolicy"], claims(srv.Config.DevAccount), "340000000002"), codes.PermissionDenied, errdefs.AccessDeniedException)
		gidAccountFree(t, srv, "340000000002")
		// The admin claiming to be an agent is still the admin.
		agentClaims := metadata.Pairs("x-saltbush-caller", identity.AgentID("u", "i"), "x-spiffe-id", identity.AgentID("u", "i"))
		if err := create(d.conns["admin"], agentClaims, "340000000003"); err != nil {
			t.Errorf("admin with metadata claiming an agent: %v", err)
		}
		// An agent with the act-for metadata and claims on an EKS call.
		md := metadata.Join(gidActFor(d.a), claims(d.a))
		_, err := eksv1.NewClusterServiceClient(agentConn).ListClusters(gidCall(t, md), &eksv1.ListClustersRequest{})
		wanterr.Status(t, err, codes.PermissionDenied, errdefs.AccessDeniedException)
		// A delegate of A naming B in every other way acts for A.
		md = metadata.Join(gidActFor(d.a), claims(d.b))
		list, err := eksv1.NewClusterServiceClient(d.conns["delegate-a"]).ListClusters(gidCall(t, md), &eksv1.ListClustersRequest{})
		if err != nil || !slices.Equal(list.GetClusters(), []string{"a-one"}) {
			t.Errorf("delegate of A with metadata naming B: %v, %v; want [a-one]", list.GetClusters(), err)
		}
		created, err := eksv1.NewClusterServiceClient(d.conns["delegate-a"]).CreateCluster(gidCall(t, md), gidCreateReq(d.a, "md-named-b"))
		if err != nil || !strings.Contains(created.GetCluster().GetArn(), ":"+d.a+":cluster/md-named-b") {
			t.Errorf("create by a delegate of A with metadata naming B: %v, %v; want it in A", created.GetCluster().GetArn(), err)
		}
		if got := gidClusters(t, srv, d.rootB); !slices.Equal(got, []string{"b-one"}) {
			t.Errorf("clusters of B = %v, want [b-one]", got)
		}
	})

	t.Run("facade", func(t *testing.T) {
		headers := http.Header{}
		for k, v := range map[string]string{
			"Saltbush-Act-For-Account":               d.a,
			"Grpc-Metadata-Saltbush-Act-For-Account": d.a,
			"X-Saltbush-Caller":                      adminID,
			"Grpc-Metadata-X-Saltbush-Caller":        adminID,
			"Grpc-Metadata-Saltbush-Account":         d.a,
			"Grpc-Metadata-Authorization":            "anything",
			"X-Amz-Account-Id":                       d.a,
			"Grpc-Metadata-X-Spiffe-Id":              adminID,
			"X-Forwarded-Client-Cert":                "URI=" + adminID,
		} {
			headers.Set(k, v)
		}
		do := func(t *testing.T, method, path string, body []byte, signer *servertest.Creds) (int, http.Header, map[string]any) {
			t.Helper()
			var rd io.Reader
			if body != nil {
				rd = strings.NewReader(string(body))
			}
			req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range headers {
				req.Header[k] = v
			}
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			if signer != nil {
				srv.Sign(t, req, body, *signer)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			var parsed map[string]any
			if len(b) > 0 {
				if err := json.Unmarshal(b, &parsed); err != nil {
					t.Fatalf("%s %s: body is not JSON: %s", method, path, b)
				}
			}
			return resp.StatusCode, resp.Header, parsed
		}
		rootB := d.rootB
		code, _, body := do(t, http.MethodGet, "/clusters", nil, &rootB)
		if code != http.StatusOK {
			t.Fatalf("ListClusters as B with headers naming A: %d %v", code, body)
		}
		if got, _ := json.Marshal(body["clusters"]); string(got) != `["b-one"]` {
			t.Errorf("ListClusters as B with headers naming A = %s, want [\"b-one\"]", got)
		}
		code, hdr, body := do(t, http.MethodGet, "/clusters/a-one", nil, &rootB)
		if code != http.StatusNotFound || hdr.Get("X-Amzn-Errortype") != errdefs.ResourceNotFoundException {
			t.Errorf("DescribeCluster a-one as B with headers naming A: %d %s %v, want 404 ResourceNotFoundException", code, hdr.Get("X-Amzn-Errortype"), body)
		}
		code, _, body = do(t, http.MethodPost, "/clusters", []byte(`{"name":"hdr-named-a","roleArn":"arn:aws:iam::`+d.b+`:role/eks-cluster","resourcesVpcConfig":{"subnetIds":["subnet-a"]}}`), &rootB)
		if code != http.StatusOK {
			t.Fatalf("CreateCluster as B with headers naming A: %d %v", code, body)
		}
		if arn, _ := body["cluster"].(map[string]any)["arn"].(string); !strings.Contains(arn, ":"+d.b+":cluster/hdr-named-a") {
			t.Errorf("cluster made as B with headers naming A has arn %q, want one in B", arn)
		}
		// Unsigned, the headers are no credential at all.
		code, hdr, body = do(t, http.MethodGet, "/clusters", nil, nil)
		if code != http.StatusForbidden || hdr.Get("X-Amzn-Errortype") != "MissingAuthenticationTokenException" {
			t.Errorf("unsigned ListClusters with headers naming A: %d %s %v, want 403 MissingAuthenticationTokenException", code, hdr.Get("X-Amzn-Errortype"), body)
		}
		if got := gidClusters(t, srv, d.rootA); slices.Contains(got, "hdr-named-a") {
			t.Errorf("clusters of A = %v: a request signed by B made one there", got)
		}
	})
}

// TestGRPCIdentityCARotation: rotating the CA through the identity
// control API keeps the old CA's certificates working and issues new ones
// from the new CA (clients then need the new bundle: the server shows a
// certificate of the new CA); removing the old CA refuses its
// certificates, on open connections (Unauthenticated) and at new
// handshakes, while the new CA's keep working.
func TestGRPCIdentityCARotation(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	const bundlePolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"saltbush:GetCertificateAuthorityBundle","Resource":"*"}]}`
	for _, svc := range []string{"before", "after"} {
		if _, err := srv.IAM().PutServicePolicy(ctx, svc, bundlePolicy); err != nil {
			t.Fatal(err)
		}
	}
	// The admin connection is made (and its handshake done) before the
	// rotation, with the ca.crt the server wrote at start.
	admin := controlv1.NewIdentityControlServiceClient(srv.GRPC(t))
	first, err := admin.GetCertificateAuthorityBundle(gidCall(t, nil), &controlv1.GetCertificateAuthorityBundleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	oldSerial := first.GetIssuingSerial()
	oldCAs := gidPEMCerts(t, []byte(first.GetCaBundlePem()))
	if len(oldCAs) != 1 {
		t.Fatalf("bundle has %d CAs, want 1", len(oldCAs))
	}
	beforeCert, beforeKey, _ := gidIssue(t, srv, identity.ServiceID("before"))
	bundleOf := func(t *testing.T, conn *grpc.ClientConn) (*controlv1.GetCertificateAuthorityBundleResponse, error) {
		t.Helper()
		return controlv1.NewIdentityControlServiceClient(conn).GetCertificateAuthorityBundle(gidCall(t, nil), &controlv1.GetCertificateAuthorityBundleRequest{})
	}

	rot, err := admin.RotateCertificateAuthority(gidCall(t, nil), &controlv1.RotateCertificateAuthorityRequest{})
	if err != nil {
		t.Fatalf("RotateCertificateAuthority: %v", err)
	}
	newSerial := rot.GetIssuingSerial()
	rotated := []byte(rot.GetCaBundlePem())
	var serials []string
	for _, c := range gidPEMCerts(t, rotated) {
		serials = append(serials, c.SerialNumber.Text(16))
	}
	slices.Sort(serials)
	want := []string{oldSerial, newSerial}
	slices.Sort(want)
	if newSerial == oldSerial || !slices.Equal(serials, want) {
		t.Fatalf("rotated bundle holds %v, issuing %s; want the old %s and a new issuer", serials, newSerial, oldSerial)
	}

	// A certificate issued now, from a CSR, comes from the new CA; the
	// CSR's subject (asking to be the admin) is ignored.
	afterKey := gidKey(t)
	iss, err := admin.IssueCertificate(gidCall(t, nil), &controlv1.IssueCertificateRequest{
		CsrPem: gidCSR(t, afterKey), Subject: &controlv1.IssueCertificateRequest_Service{Service: "after"}, TtlSeconds: 3600})
	if err != nil {
		t.Fatalf("IssueCertificate: %v", err)
	}
	afterCert := []byte(iss.GetCertificatePem())
	leaf := gidPEMCerts(t, afterCert)[0]
	if iss.GetSpiffeId() != identity.ServiceID("after") || len(leaf.URIs) != 1 || leaf.URIs[0].String() != identity.ServiceID("after") {
		t.Errorf("issued for %s with URIs %v, want only %s", iss.GetSpiffeId(), leaf.URIs, identity.ServiceID("after"))
	}
	for _, ca := range gidPEMCerts(t, rotated) {
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		_, verr := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if isNew := ca.SerialNumber.Text(16) == newSerial; isNew != (verr == nil) {
			t.Errorf("certificate issued after the rotation, verified by CA %s (new: %v): %v", ca.SerialNumber.Text(16), isNew, verr)
		}
	}
	if string(iss.GetCaBundlePem()) != string(rotated) {
		t.Error("IssueCertificate's bundle differs from the rotated bundle")
	}
	gidEventually(t, "the server's view sees the rotation", func() bool { _, s := srv.Authority().Bundle(); return s == newSerial })

	beforeConn := gidConn(t, srv, gidTLS(t, rotated, beforeCert, beforeKey))
	afterCfg := gidTLS(t, rotated, afterCert, gidKeyPEM(t, afterKey))
	afterConn := gidConn(t, srv, afterCfg)
	t.Run("after rotation", func(t *testing.T) {
		for name, conn := range map[string]*grpc.ClientConn{"old CA's certificate, new connection": beforeConn, "new CA's certificate": afterConn} {
			got, err := bundleOf(t, conn)
			if err != nil || got.GetIssuingSerial() != newSerial {
				t.Errorf("%s: %v, %v; want the bundle issued by %s", name, got.GetIssuingSerial(), err, newSerial)
			}
		}
		if _, err := admin.GetCertificateAuthorityBundle(gidCall(t, nil), &controlv1.GetCertificateAuthorityBundleRequest{}); err != nil {
			t.Errorf("admin's open connection: %v", err)
		}
		// The server now shows a certificate of the new CA: a client
		// that trusts only the old one cannot verify it (its own
		// failure, not a refusal by the server).
		onlyOld := gidTLS(t, []byte(first.GetCaBundlePem()), afterCert, gidKeyPEM(t, afterKey))
		if err := gidHandshake(srv.GRPCAddr(), onlyOld); err == nil || gidRemoteAlert(err) {
			t.Errorf("client trusting only the old CA: %v, want its own verification failure", err)
		}
		// So is a new admin connection with the ca.crt written at start:
		// rotation does not rewrite it (the operator installs the new
		// bundle).
		if _, err := bundleOf(t, srv.GRPC(t)); status.Code(err) != codes.Unavailable {
			t.Errorf("new admin connection trusting the pre-rotation ca.crt: %v, want Unavailable", err)
		}
	})

	t.Run("removal refused", func(t *testing.T) {
		for _, tc := range []struct {
			serial string
			code   codes.Code
			reason string
		}{
			{newSerial, codes.FailedPrecondition, errdefs.InvalidRequestException},
			{"NOT-HEX", codes.InvalidArgument, errdefs.InvalidParameterException},
			{"8badf00d", codes.NotFound, errdefs.ResourceNotFoundException},
		} {
			_, err := admin.RemoveCertificateAuthority(gidCall(t, nil), &controlv1.RemoveCertificateAuthorityRequest{Serial: tc.serial})
			wanterr.Status(t, err, tc.code, tc.reason)
		}
		if b, s, err := srv.Authority().BundleFromStore(ctx); err != nil || s != newSerial || len(gidPEMCerts(t, b)) != 2 {
			t.Errorf("after refused removals: issuing %s, %d CAs; want %s and 2", s, len(gidPEMCerts(t, b)), newSerial)
		}
	})

	rem, err := admin.RemoveCertificateAuthority(gidCall(t, nil), &controlv1.RemoveCertificateAuthorityRequest{Serial: oldSerial})
	if err != nil {
		t.Fatalf("RemoveCertificateAuthority(%s): %v", oldSerial, err)
	}
	if cas := gidPEMCerts(t, []byte(rem.GetCaBundlePem())); len(cas) != 1 || cas[0].SerialNumber.Text(16) != newSerial {
		t.Fatalf("bundle after the removal holds %d CAs, want only %s", len(cas), newSerial)
	}
	gidEventually(t, "the server's view sees the removal", func() bool {
		b, _ := srv.Authority().Bundle()
		return len(gidPEMCerts(t, b)) == 1
	})

	t.Run("after removal", func(t *testing.T) {
		// Open connections with the removed CA's certificates.
		_, err := admin.GetCertificateAuthorityBundle(gidCall(t, nil), &controlv1.GetCertificateAuthorityBundleRequest{})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "no longer trusted") {
			t.Errorf("admin's open connection: %v, want Unauthenticated (no longer trusted)", err)
		}
		if _, err := bundleOf(t, beforeConn); status.Code(err) != codes.Unauthenticated {
			t.Errorf("open connection with the old CA's certificate: %v, want Unauthenticated", err)
		}
		if err := gidHealth(t, beforeConn); status.Code(err) != codes.Unauthenticated {
			t.Errorf("health on the open connection with the old CA's certificate: %v, want Unauthenticated", err)
		}
		// New connections with them.
		beforeCfg := gidTLS(t, []byte(rem.GetCaBundlePem()), beforeCert, beforeKey)
		if err := gidHandshake(srv.GRPCAddr(), beforeCfg); !gidRemoteAlert(err) {
			t.Errorf("new connection with the old CA's certificate: %v, want the server's TLS alert", err)
		}
		if _, err := bundleOf(t, gidConn(t, srv, beforeCfg)); status.Code(err) != codes.Unavailable {
			t.Errorf("call on a new connection with the old CA's certificate: %v, want Unavailable", err)
		}
		// The new CA's certificate, open and new connections.
		for name, conn := range map[string]*grpc.ClientConn{
			"open":  afterConn,
			"fresh": gidConn(t, srv, gidTLS(t, []byte(rem.GetCaBundlePem()), afterCert, gidKeyPEM(t, afterKey))),
		} {
			got, err := bundleOf(t, conn)
			if err != nil || got.GetIssuingSerial() != newSerial || len(gidPEMCerts(t, []byte(got.GetCaBundlePem()))) != 1 {
				t.Errorf("%s connection with the new CA's certificate: %v, %v", name, got, err)
			}
		}
	})
}
