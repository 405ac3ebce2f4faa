package faults

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir, and returns their paths.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name string, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return write(cn+".crt", "CERTIFICATE", der), write(cn+".key", "EC PRIVATE KEY", kb)
	}
	p := pki{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, "etcd-server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = leaf(3, "saltbush", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// TestExternalEtcdWithTLS runs saltbush against an etcd that serves only
// TLS and requires client certificates.
func TestExternalEtcdWithTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	certs := newPKI(t, t.TempDir())
	clientURL, _ := embedetcd.FreeURL()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir: t.TempDir(), UnsafeNoFsync: true,
		ClientURL: strings.Replace(clientURL, "http://", "https://", 1),
		ClientTLS: &transport.TLSInfo{
			CertFile: certs.serverCert, KeyFile: certs.serverKey, TrustedCAFile: certs.ca, ClientCertAuth: true,
		},
	})
	if err != nil {
		t.Fatalf("start TLS etcd: %v", err)
	}
	defer etcd.Close()

	// Without a client certificate saltbush cannot start.
	cfg := server.DefaultConfig()
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints, cfg.EtcdCAFile = etcd.Endpoints(), certs.ca
	shortCtx, shortCancel := context.WithTimeout(ctx, 10*time.Second)
	defer shortCancel()
	if srv, err := server.New(shortCtx, cfg); err == nil {
		srv.Close()
		t.Fatal("saltbush started against a client-cert etcd without a certificate")
	}

	srv := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()), servertest.WithConfig(func(c *server.Config) {
		c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile = certs.ca, certs.clientCert, certs.clientKey
	}))
	client := srv.EKS(t)
	if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("over-tls"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{},
	}); err != nil {
		t.Fatalf("CreateCluster over TLS etcd: %v", err)
	}
	if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("over-tls")}); err != nil {
		t.Fatalf("DescribeCluster over TLS etcd: %v", err)
	}
}
