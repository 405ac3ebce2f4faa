// Package etcdtls is a test CA for etcd over TLS as docs/operations.md
// ("Scale-out") lays it out: one CA, server certificates on the client
// port, peer certificates between members, client certificates for
// saltbush, all PEM files in one directory, for 127.0.0.1 and localhost.
package etcdtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA issues certificates into Dir; File is its own certificate's PEM file
// (etcd's --trusted-ca-file and --peer-trusted-ca-file).
type CA struct {
	Dir  string
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes dir and a CA in it, valid from an hour ago for a day.
func NewCA(t *testing.T, dir string) *CA {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c := &CA{Dir: dir, cert: cert, key: key}
	c.File = c.write(t, "ca.crt", "CERTIFICATE", der)
	return c
}

func (c *CA) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(c.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Issue writes NAME.crt and NAME.key: for 127.0.0.1 and localhost, with
// the given extended key usages (a peer certificate needs both: a member
// is its peers' server and their client).
func (c *CA) Issue(t *testing.T, name string, usages ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return c.write(t, name+".crt", "CERTIFICATE", der), c.write(t, name+".key", "EC PRIVATE KEY", kb)
}
