package tlsclient_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tlsclient"
)

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func TestConfig(t *testing.T) {
	certPEM, keyPEM := selfSigned(t)
	cfg, err := tlsclient.Config(certPEM, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ServerName != "127.0.0.1" || cfg.RootCAs == nil {
		t.Errorf("config = min %x, name %q, roots %v", cfg.MinVersion, cfg.ServerName, cfg.RootCAs)
	}
	if c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil || len(c.Certificate) != 1 {
		t.Errorf("client certificate = %v, %v", c, err)
	}
	anon, err := tlsclient.Config(certPEM, nil, nil, "x")
	if err != nil || anon.GetClientCertificate != nil {
		t.Errorf("without a certificate: %v, %v", anon, err)
	}
	if _, err := tlsclient.Config([]byte("junk"), nil, nil, "x"); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("junk bundle: %v", err)
	}
	if _, err := tlsclient.Config(certPEM, certPEM, []byte("junk"), "x"); err == nil {
		t.Error("a bad key was accepted")
	}
}

func TestLoad(t *testing.T) {
	certPEM, keyPEM := selfSigned(t)
	dir := t.TempDir()
	for name, b := range map[string][]byte{"ca.crt": certPEM, "admin.crt": certPEM, "admin.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tlsclient.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsclient.Load(filepath.Join(dir, "missing"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"), "x"); err == nil {
		t.Error("a missing file was accepted")
	}
}
