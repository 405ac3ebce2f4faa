package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// loadTLS reads the PEM files and builds the client's TLS configuration,
// as saltbush's own clients build theirs (tlsclient, in the server's
// module, which this module may not import): TLS 1.3, the only version
// saltbush's gRPC port accepts; the server verified against the CA
// bundle; the client certificate always presented.
func loadTLS(f files, serverName string) (*tls.Config, error) {
	var pems [3][]byte
	for i, path := range []string{f.ca, f.cert, f.key} {
		b, err := os.ReadFile(path) //nolint:gosec // G304: the CA, certificate and key files the caller configures
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		pems[i] = b
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pems[0]) {
		return nil, fmt.Errorf("client: %s holds no PEM certificate", f.ca)
	}
	cert, err := tls.X509KeyPair(pems[1], pems[2])
	if err != nil {
		return nil, fmt.Errorf("client: certificate %s and key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName}
	// Always present the certificate. With Certificates, Go's client
	// withholds one whose issuer is not among the CAs the server lists
	// (after saltbush removed a CA, say), and the caller would see only
	// "certificate required" instead of the server refusing its
	// certificate.
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg, nil
}
