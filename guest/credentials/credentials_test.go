package credentials

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf's PEM certificate and key.
func (c *ca) issue(t *testing.T, serial int64, server bool) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// server is a TLS server that requires a client certificate of clientCA
// and reports each client's serial.
func server(t *testing.T, c *ca, clientCA *ca) (addr string, serials chan int64) {
	certPEM, keyPEM := c.issue(t, 1000, true)
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	serials = make(chan int64, 10)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tc := conn.(*tls.Conn)
			if tc.Handshake() == nil {
				serials <- tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
			}
			_ = tc.Close()
		}
	}()
	return ln.Addr().String(), serials
}

func TestRotationWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	files := Files{Cert: filepath.Join(dir, "agent.crt"), Key: filepath.Join(dir, "agent.key"), CA: filepath.Join(dir, "ca.crt")}
	write := func(c, k, bundle []byte) {
		for p, b := range map[string][]byte{files.Cert: c, files.Key: k, files.CA: bundle} {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	clients, servers1, servers2 := newCA(t, "clients"), newCA(t, "servers-1"), newCA(t, "servers-2")
	c1, k1 := clients.issue(t, 1, false)
	write(c1, k1, servers1.pem)
	src, err := New(files, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) error {
		conn, err := tls.Dial("tcp", addr, src.TLSConfig())
		if err == nil {
			_, err = conn.Read(make([]byte, 1)) // completes the handshake both ways
			if err == io.EOF {
				err = nil
			}
			_ = conn.Close()
		}
		return err
	}

	addr1, got1 := server(t, servers1, clients)
	if err := dial(addr1); err != nil {
		t.Fatal(err)
	}
	if s := <-got1; s != 1 {
		t.Fatalf("presented serial %d, want 1", s)
	}
	addr2, _ := server(t, servers2, clients)
	if err := dial(addr2); err == nil {
		t.Fatal("a server of a CA not in the bundle was trusted")
	}

	// Rotate: new certificate, bundle with both server CAs.
	time.Sleep(10 * time.Millisecond) // a later modification time
	c2, k2 := clients.issue(t, 2, false)
	write(c2, k2, append(append([]byte{}, servers1.pem...), servers2.pem...))
	if err := dial(addr1); err != nil {
		t.Fatal(err)
	}
	if s := <-got1; s != 2 {
		t.Fatalf("after rotation presented serial %d, want 2", s)
	}
	if err := dial(addr2); err != nil {
		t.Fatalf("the rotated bundle's new CA is not trusted: %v", err)
	}
	if src.Leaf().SerialNumber.Int64() != 2 {
		t.Fatalf("leaf serial %v", src.Leaf().SerialNumber)
	}

	// A half-written rotation keeps the working identity.
	if err := os.WriteFile(files.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := dial(addr1); err != nil {
		t.Fatalf("a broken key file broke the working identity: %v", err)
	}
	if s := <-got1; s != 2 {
		t.Fatalf("presented serial %d, want the kept 2", s)
	}
}
