// Package credentials is the agent's mTLS identity: a certificate, its key
// and the CA bundle saltbush is verified against, read from files and read
// again whenever one of them changes, so that a rotated certificate or CA
// bundle is used by the next connection without a restart.
package credentials

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the three PEM files.
type Files struct {
	Cert, Key, CA string
}

// Source hands out the current identity. It is safe for concurrent use.
type Source struct {
	files Files
	log   *slog.Logger

	mu     sync.Mutex
	stamps [3]stamp
	cert   *tls.Certificate
	pool   *x509.CertPool
}

// stamp is what tells a file changed without reading it.
type stamp struct {
	size int64
	mod  time.Time
}

// New reads the files once; they must be valid now.
func New(files Files, log *slog.Logger) (*Source, error) {
	s := &Source{files: files, log: log}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// TLSConfig is a client configuration presenting the current certificate
// and verifying the server against the current bundle, both looked up at
// every handshake. The server name is the one the connection dials.
func (s *Source) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			return cert, nil
		},
		// Go verifies against a fixed RootCAs; the bundle changes on
		// rotation, so verification happens in VerifyConnection against
		// the bundle read now. InsecureSkipVerify only hands it over.
		InsecureSkipVerify: true, //nolint:gosec // G402: VerifyConnection verifies, as the comment above says
		VerifyConnection:   s.verify,
	}
}

func (s *Source) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("credentials: the server sent no certificate")
	}
	_, pool := s.current()
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("credentials: saltbush's certificate for %q: %w", cs.ServerName, err)
	}
	return nil
}

// Leaf is the current certificate, parsed.
func (s *Source) Leaf() *x509.Certificate {
	cert, _ := s.current()
	return cert.Leaf
}

// current returns the identity, reading the files again first if any of
// them changed. A file caught half-written keeps the previous identity
// (the next handshake tries again).
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, err := s.stat(); err == nil && st != s.stamps {
		if err := s.reloadLocked(); err != nil {
			s.log.Warn("credentials changed but cannot be loaded; keeping the previous ones", "err", err)
		} else {
			s.log.Info("credentials reloaded", "not_after", s.cert.Leaf.NotAfter)
		}
	}
	return s.cert, s.pool
}

func (s *Source) stat() ([3]stamp, error) {
	var st [3]stamp
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		fi, err := os.Stat(p)
		if err != nil {
			return st, err
		}
		st[i] = stamp{size: fi.Size(), mod: fi.ModTime()}
	}
	return st, nil
}

func (s *Source) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked()
}

func (s *Source) reloadLocked() error {
	st, err := s.stat()
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("credentials: certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("credentials: certificate %s: %w", s.files.Cert, err)
		}
	}
	caPEM, err := os.ReadFile(s.files.CA)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("credentials: CA bundle %s holds no certificate", s.files.CA)
	}
	s.cert, s.pool, s.stamps = &cert, pool, st
	return nil
}
