// Package tlsclient builds the TLS config of a client of saltbush's gRPC
// port (admin CLI, services, agents, tests): TLS 1.3, the server verified
// against a CA bundle, and a client certificate presented. It is a leaf
// (standard library only), so the guest agent may import it without
// linking the server or the store.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Config is the TLS config of a client of the gRPC port: it trusts the CAs
// of caBundlePEM for the server's certificate and presents certPEM/keyPEM.
// With both empty no client certificate is presented (the server will
// refuse the handshake).
func Config(caBundlePEM, certPEM, keyPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundlePEM) {
		return nil, errors.New("tlsclient: the CA bundle holds no PEM certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName}
	if len(certPEM) == 0 && len(keyPEM) == 0 {
		return cfg, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tlsclient: client certificate: %w", err)
	}
	// Always present the certificate. With Certificates, Go's client
	// withholds one whose issuer is not among the CAs the server lists, and
	// the client of a removed CA would see only "certificate required"
	// instead of the server refusing its certificate.
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg, nil
}

// Load is Config from PEM files (what `saltbush serve` writes to
// DATA_DIR/pki and `saltbush admin cert issue` writes).
func Load(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	var pems [3][]byte
	for i, path := range []string{caFile, certFile, keyFile} {
		b, err := os.ReadFile(path) //nolint:gosec // G304: the CA, certificate and key files the caller configures
		if err != nil {
			return nil, fmt.Errorf("tlsclient: %w", err)
		}
		pems[i] = b
	}
	return Config(pems[0], pems[1], pems[2], serverName)
}
