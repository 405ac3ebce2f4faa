package pki

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
	"github.com/saltbush/saltbush/tlsclient"
)

func TestNewConfig(t *testing.T) {
	st := storetest.New(t)
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{MasterKey: testMasterKey}, ""},
		{"short master key", Config{MasterKey: []byte("short")}, "master key must be 32 bytes"},
		{"default above max", Config{MasterKey: testMasterKey, DefaultTTL: 2 * time.Hour, MaxTTL: time.Hour}, "exceeds the maximum"},
		{"negative validity", Config{MasterKey: testMasterKey, CAValidity: -time.Hour}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(st, tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if a.defaultTTL != DefaultLeafTTL || a.maxTTL != DefaultMaxLeafTTL || a.caValidity != DefaultCAValidity {
					t.Fatalf("defaults: %v %v %v", a.defaultTTL, a.maxTTL, a.caValidity)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// Replicas that start together make exactly one CA and agree on it.
func TestConcurrentInit(t *testing.T) {
	st := storetest.New(t)
	ctx := ctxT(t)
	as := []*Authority{newAuthority(t, st, Config{}), newAuthority(t, st, Config{})}
	created := make([]bool, len(as))
	errs := make([]error, len(as))
	var start, done sync.WaitGroup
	start.Add(1)
	for i, a := range as {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			created[i], errs[i] = a.Init(ctx)
		}()
	}
	start.Done()
	done.Wait()
	n := 0
	for i := range as {
		if errs[i] != nil {
			t.Fatalf("Init %d: %v", i, errs[i])
		}
		if created[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("created = %v, want exactly one true", created)
	}
	b0, s0, err := as[0].BundleFromStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range as {
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		b, s := a.Bundle()
		if !bytes.Equal(b, b0) || s != s0 {
			t.Fatalf("authority %d bundle (issuer %s) differs from the store's (issuer %s)", i, s, s0)
		}
		if again, err := a.Init(ctx); err != nil || again {
			t.Fatalf("a later Init: created=%v err=%v", again, err)
		}
	}
	if certs := pemCerts(t, b0); len(certs) != 1 || serialOf(certs[0]) != s0 {
		t.Fatalf("bundle holds %d certificates, want the one issuer %s", len(certs), s0)
	}
	ca := pemCerts(t, b0)[0]
	if !ca.IsCA || ca.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign || ca.Subject.CommonName != "saltbush CA "+s0[:8] {
		t.Fatalf("CA certificate: IsCA=%v usage=%v CN=%q", ca.IsCA, ca.KeyUsage, ca.Subject.CommonName)
	}
	if len(s0) != 32 {
		t.Fatalf("CA serial %q is not 128-bit hex", s0)
	}
	if err := as[0].Start(ctx); err == nil {
		t.Fatal("a second Start succeeded")
	}
}

func pemCerts(t *testing.T, b []byte) []*x509.Certificate {
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

func TestStartWithoutInit(t *testing.T) {
	st := storetest.New(t)
	a := newAuthority(t, st, Config{})
	if err := a.Start(ctxT(t)); !errdefs.IsException(err, errdefs.InvalidRequestException) {
		t.Fatalf("Start before Init: %v, want InvalidRequestException", err)
	}
	if _, _, _, err := a.IssueLocal(ctxT(t), identity.ServiceID("x"), 0); !errdefs.IsException(err, errdefs.InvalidRequestException) {
		t.Fatalf("Issue before Init: %v, want InvalidRequestException", err)
	}
}

// The CA key is stored sealed: not in clear, not openable with another
// master key, and bound to its CA's serial.
func TestSealedKey(t *testing.T) {
	st := storetest.New(t)
	ctx := ctxT(t)
	a := newAuthority(t, st, Config{})
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := st.Client().Get(ctx, st.Key(authoritiesKey))
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("read %s: %v", authoritiesKey, err)
	}
	state := &storagev1.CertificateAuthorityState{}
	if err := store.Decode(raw.Kvs[0].Value, state); err != nil {
		t.Fatal(err)
	}
	other := newAuthority(t, st, Config{MasterKey: bytes.Repeat([]byte{8}, MasterKeySize)})
	for _, ca := range state.GetAuthorities() {
		pkcs8, err := a.open(ca.GetSerial(), ca.GetSealedPrivateKey())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x509.ParsePKCS8PrivateKey(pkcs8); err != nil {
			t.Fatalf("unsealed key of %s: %v", ca.GetSerial(), err)
		}
		if bytes.Contains(raw.Kvs[0].Value, pkcs8) {
			t.Fatalf("the stored record holds CA %s's PKCS#8 key in clear", ca.GetSerial())
		}
		if _, err := other.open(ca.GetSerial(), ca.GetSealedPrivateKey()); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("open with another master key: %v, want ErrCorrupt", err)
		}
		if _, err := a.open(ca.GetSerial()+"0", ca.GetSealedPrivateKey()); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("open under another serial: %v, want ErrCorrupt", err)
		}
	}
	if _, _, _, err := other.IssueLocal(ctx, identity.ServiceID("x"), 0); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("issue with the wrong master key: %v, want ErrCorrupt", err)
	}
}

func TestIssue(t *testing.T) {
	st := storetest.New(t)
	ctx := ctxT(t)
	now := time.Now().Truncate(time.Second)
	a := newAuthority(t, st, Config{Now: func() time.Time { return now }, DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour})
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	_, issuer, err := a.BundleFromStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ecKey := newKey(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // G403: the weak key the test expects to be refused
	if err != nil {
		t.Fatal(err)
	}
	badSig := func() []byte {
		block, _ := pem.Decode(csrPEM(t, ecKey))
		block.Bytes[len(block.Bytes)-1] ^= 0xff
		return pem.EncodeToMemory(block)
	}()
	svc, agent := identity.ServiceID("billing"), identity.AgentID("6f1c2a4e-8d2b-4c51-9a3e-0b7d5e9f1a22", "i-0abc")

	tests := []struct {
		name      string
		csr       []byte
		spiffeID  string
		ttl       time.Duration
		key       crypto.Signer
		wantTTL   time.Duration
		exception string
		msg       string
	}{
		{name: "ecdsa service, default ttl", csr: csrPEM(t, ecKey), spiffeID: svc, key: ecKey, wantTTL: time.Hour},
		{name: "rsa agent", csr: csrPEM(t, rsaKey), spiffeID: agent, ttl: 30 * time.Minute, key: rsaKey, wantTTL: 30 * time.Minute},
		{name: "ed25519, ttl capped at the maximum", csr: csrPEM(t, edKey), spiffeID: svc, ttl: 10 * time.Hour, key: edKey, wantTTL: 2 * time.Hour},
		{name: "bad CSR signature", csr: badSig, spiffeID: svc, exception: errdefs.InvalidParameterException, msg: "not signed by its key"},
		{name: "not PEM", csr: []byte("hello"), spiffeID: svc, exception: errdefs.InvalidParameterException, msg: "not a PEM CERTIFICATE REQUEST"},
		{name: "PEM of the wrong type", csr: keyPEM(t, ecKey), spiffeID: svc, exception: errdefs.InvalidParameterException, msg: "not a PEM CERTIFICATE REQUEST"},
		{name: "small RSA key", csr: csrPEM(t, smallRSA), spiffeID: svc, exception: errdefs.InvalidParameterException, msg: "at least 2048"},
		{name: "foreign SPIFFE id", csr: csrPEM(t, ecKey), spiffeID: "spiffe://example.org/service/x", exception: errdefs.InvalidParameterException, msg: "spiffe://example.org/service/x"},
		{name: "agent id without instance", csr: csrPEM(t, ecKey), spiffeID: "spiffe://saltbush/agent/uid", exception: errdefs.InvalidParameterException, msg: "spiffe://saltbush/agent/uid"},
		{name: "service id with a bad name", csr: csrPEM(t, ecKey), spiffeID: "spiffe://saltbush/service/a b", exception: errdefs.InvalidParameterException, msg: "service name"},
		{name: "negative ttl", csr: csrPEM(t, ecKey), spiffeID: svc, ttl: -time.Second, exception: errdefs.InvalidParameterException, msg: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, serial, notAfter, err := a.Issue(ctx, tc.csr, tc.spiffeID, tc.ttl)
			if tc.exception != "" {
				if !errdefs.IsException(err, tc.exception) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("Issue: %v, want %s mentioning %q", err, tc.exception, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cert := parsePEMCert(t, certPEM)
			switch {
			case serialOf(cert) != serial || len(serial) != 32:
				t.Errorf("serial %q, certificate's %q; want 128-bit lower-case hex", serial, serialOf(cert))
			case len(cert.URIs) != 1 || cert.URIs[0].String() != tc.spiffeID:
				t.Errorf("URI SANs %v, want [%s]", cert.URIs, tc.spiffeID)
			case len(cert.DNSNames) != 0 || cert.Subject.CommonName != "":
				t.Errorf("the CSR's subject or SANs leaked in: %v %q", cert.DNSNames, cert.Subject.CommonName)
			case len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || cert.KeyUsage != x509.KeyUsageDigitalSignature:
				t.Errorf("usage %v / %v, want ClientAuth / DigitalSignature", cert.ExtKeyUsage, cert.KeyUsage)
			case cert.IsCA:
				t.Error("the leaf is a CA")
			case !cert.NotBefore.Equal(now.Add(-time.Minute)) || !cert.NotAfter.Equal(now.Add(tc.wantTTL)) || !notAfter.Equal(cert.NotAfter):
				t.Errorf("validity %v – %v (returned %v), want %v – %v", cert.NotBefore, cert.NotAfter, notAfter, now.Add(-time.Minute), now.Add(tc.wantTTL))
			}
			if pub, ok := tc.key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
				t.Error("the certificate is not for the CSR's key")
			}
			bundle, _, err := a.BundleFromStore(ctx)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(bundle)
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("the certificate does not verify against the bundle: %v", err)
			}
			rec := &storagev1.IssuedCertificateRecord{}
			if _, err := st.Get(ctx, issuedKey(serial), rec); err != nil {
				t.Fatalf("issued record: %v", err)
			}
			if rec.GetSpiffeId() != tc.spiffeID || rec.GetIssuerSerial() != issuer || !rec.GetNotAfter().AsTime().Equal(cert.NotAfter) ||
				!rec.GetNotBefore().AsTime().Equal(cert.NotBefore) || !rec.GetIssuedAt().AsTime().Equal(now) {
				t.Errorf("issued record %v", rec)
			}
		})
	}

	t.Run("IssueLocal", func(t *testing.T) {
		certPEM, kPEM, serial, err := a.IssueLocal(ctx, svc, 0)
		if err != nil {
			t.Fatal(err)
		}
		cert := parsePEMCert(t, certPEM)
		if serialOf(cert) != serial || cert.URIs[0].String() != svc {
			t.Fatalf("IssueLocal: serial %s/%s, URIs %v", serial, serialOf(cert), cert.URIs)
		}
		if _, err := tlsclient.Config(pemCert(pemCerts(t, mustBundle(t, a))[0].Raw), certPEM, kPEM, "localhost"); err != nil {
			t.Fatalf("the key does not go with the certificate: %v", err)
		}
		if _, err := st.Get(ctx, issuedKey(serial), &storagev1.IssuedCertificateRecord{}); err != nil {
			t.Fatalf("issued record: %v", err)
		}
	})
}

func mustBundle(t *testing.T, a *Authority) []byte {
	t.Helper()
	b, _, err := a.BundleFromStore(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A certificate never outlives its CA, and an expired CA issues nothing.
func TestIssueBoundedByCA(t *testing.T) {
	st := storetest.New(t)
	ctx := ctxT(t)
	a := newAuthority(t, st, Config{CAValidity: 3 * time.Hour})
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	certPEM, _, notAfter, err := a.Issue(ctx, csrPEM(t, newKey(t)), identity.ServiceID("x"), 10*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca := pemCerts(t, mustBundle(t, a))[0]
	if cert := parsePEMCert(t, certPEM); !cert.NotAfter.Equal(ca.NotAfter) || !notAfter.Equal(ca.NotAfter) {
		t.Fatalf("NotAfter %v (returned %v), want the CA's %v", cert.NotAfter, notAfter, ca.NotAfter)
	}
	late := newAuthority(t, st, Config{Now: func() time.Time { return time.Now().Add(4 * time.Hour) }})
	if _, _, _, err := late.Issue(ctx, csrPEM(t, newKey(t)), identity.ServiceID("x"), 0); !errdefs.IsException(err, errdefs.InvalidRequestException) ||
		!strings.Contains(err.Error(), serialOf(ca)) {
		t.Fatalf("issue from an expired CA: %v, want InvalidRequestException naming %s", err, serialOf(ca))
	}
}

func TestRevokeRotateRemoveErrors(t *testing.T) {
	a, st := startedAuthority(t)
	ctx := ctxT(t)
	_, _, serial, err := a.IssueLocal(ctx, identity.ServiceID("x"), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, oldIssuer := a.Bundle()
	tests := []struct {
		name      string
		op        func() error
		exception string
		msg       string
	}{
		{"revoke an unknown serial", func() error { return a.Revoke(ctx, "abc123", "") }, errdefs.ResourceNotFoundException, "abc123"},
		{"revoke a bad serial", func() error { return a.Revoke(ctx, "xyz", "") }, errdefs.InvalidParameterException, "xyz"},
		{"revoke", func() error { return a.Revoke(ctx, serial, "key compromise") }, "", ""},
		{"revoke again", func() error { return a.Revoke(ctx, strings.ToUpper(serial), "again") }, "", ""},
		{"remove the issuer", func() error { return a.Remove(ctx, oldIssuer) }, errdefs.InvalidRequestException, oldIssuer},
		{"remove an unknown CA", func() error { return a.Remove(ctx, "abc123") }, errdefs.ResourceNotFoundException, "abc123"},
		{"remove a bad serial", func() error { return a.Remove(ctx, "-") }, errdefs.InvalidParameterException, "-"},
		{"rotate", func() error { _, err := a.Rotate(ctx); return err }, "", ""},
		{"remove the old CA", func() error { return a.Remove(ctx, oldIssuer) }, "", ""},
		{"remove it again", func() error { return a.Remove(ctx, oldIssuer) }, errdefs.ResourceNotFoundException, oldIssuer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if tc.exception == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errdefs.IsException(err, tc.exception) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%v, want %s mentioning %q", err, tc.exception, tc.msg)
			}
		})
	}
	rec := &storagev1.RevokedCertificateRecord{}
	if _, err := st.Get(ctx, revokedKey(serial), rec); err != nil {
		t.Fatal(err)
	}
	if rec.GetReason() != "key compromise" || rec.GetNotAfter() == nil || rec.GetRevokedAt() == nil {
		t.Fatalf("revoked record %v: the first revocation's reason and the certificate's NotAfter", rec)
	}
	eventually(t, "the view sees the revocation and the removal", func() bool {
		b, issuer := a.Bundle()
		return a.Revoked(serial) && issuer != oldIssuer && len(pemCerts(t, b)) == 1
	})
	if b, issuer := a.Bundle(); serialOf(pemCerts(t, b)[0]) != issuer {
		t.Fatalf("bundle after rotate and remove holds %s, want the issuer %s", serialOf(pemCerts(t, b)[0]), issuer)
	}
}

// The serving certificate is cached, and made again after two thirds of
// its life or when the issuer changes; it is never recorded in pki/issued.
func TestServingCertificate(t *testing.T) {
	st := storetest.New(t)
	ctx := ctxT(t)
	var offset atomic.Int64
	a := newAuthority(t, st, Config{DefaultTTL: 3 * time.Hour, Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	get := a.ServingCertificate([]string{"saltbush.internal", "127.0.0.1", "::1"})
	first, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Leaf
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "saltbush.internal" || len(leaf.IPAddresses) != 2 ||
		len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || len(leaf.URIs) != 0 {
		t.Fatalf("serving certificate: DNS %v IP %v usage %v URIs %v", leaf.DNSNames, leaf.IPAddresses, leaf.ExtKeyUsage, leaf.URIs)
	}
	steps := []struct {
		name    string
		do      func()
		reissue bool
	}{
		{"cached", func() {}, false},
		{"before two thirds of its life", func() { offset.Store(int64(time.Hour)) }, false},
		{"after two thirds of its life", func() { offset.Store(int64(2*time.Hour + time.Minute)) }, true},
		{"cached again", func() {}, false},
		{"issuer rotated", func() {
			if _, err := a.Rotate(ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	prev := first
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do()
			c, err := get(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if (c != prev) != s.reissue {
				t.Fatalf("re-issued = %v, want %v", c != prev, s.reissue)
			}
			prev = c
		})
	}
	_, issuer, err := a.BundleFromStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := a.loadIssuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Leaf.CheckSignatureFrom(ca.cert); err != nil || ca.serial != issuer {
		t.Fatalf("the last serving certificate is not signed by the new issuer %s: %v", issuer, err)
	}
	resp, err := st.Client().Get(ctx, st.Key(issuedPrefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("pki/issued holds %d records (%v), want none for serving certificates", resp.Count, err)
	}
}
