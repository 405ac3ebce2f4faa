// Package clustertest gives tests what a provisioner reports for an
// ACTIVE cluster when no Kubernetes API is served: ClusterControlService's
// SetStatus refuses ACTIVE without an endpoint and a certificate authority.
package clustertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"testing"
	"time"
)

// Endpoint is a control-plane endpoint for tests that make a cluster ACTIVE
// without serving its Kubernetes API: SetStatus needs one for ACTIVE.
const Endpoint = "https://127.0.0.1:6443"

// CertificateAuthorityData is a freshly generated self-signed CA
// certificate, base64 PEM, as a provisioner reports it in SetStatus (which
// needs one for ACTIVE).
func CertificateAuthorityData(tb testing.TB) string {
	tb.Helper()
	ca, err := GenerateCertificateAuthorityData()
	if err != nil {
		tb.Fatal(err)
	}
	return ca
}

// GenerateCertificateAuthorityData is CertificateAuthorityData for callers
// without a testing.TB.
func GenerateCertificateAuthorityData() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate a cluster CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "saltbush-test-cluster-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", fmt.Errorf("generate a cluster CA certificate: %w", err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), nil
}
