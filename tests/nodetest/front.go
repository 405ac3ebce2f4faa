package nodetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// IssuerPath is the path of the hosted issuer behind the front: the
// control plane's service-account issuer is Front.URL() + IssuerPath.
const IssuerPath = "/id/node"

// Front is what a load balancer is to saltbush in an installation: the
// HTTPS address pods and the apiserver's token issuer name (on the host
// end of the node's link, so pods reach it), terminating TLS with a
// certificate of a CA of its own and passing requests on to a saltbush
// façade set later (SetBackend) — each test starts its own saltbush, the
// node and its issuer live for the whole test binary. Requests keep their
// Host, so SigV4 signatures and the issuer's URL hold behind it.
type Front struct {
	url     string
	caFile  string
	backend atomic.Pointer[url.URL]
	srv     *http.Server
}

// startFront listens on ip with a new CA's certificate for ip; dir holds
// the CA's certificate file.
func startFront(ip net.IP, dir string) (*Front, error) {
	caCert, caKey, err := newFrontCA()
	if err != nil {
		return nil, err
	}
	cert, err := frontCert(caCert, caKey, ip)
	if err != nil {
		return nil, err
	}
	f := &Front{caFile: filepath.Join(dir, "front-ca.crt")}
	if err := os.WriteFile(f.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("nodetest: front: %w", err)
	}
	f.url = "https://" + ln.Addr().String()
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		if b := f.backend.Load(); b != nil {
			r.SetURL(b)
		}
		r.Out.Host = r.In.Host // the name the client signed and the issuer's
	}}
	f.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f.backend.Load() == nil {
				http.Error(w, "no saltbush behind the front yet", http.StatusServiceUnavailable)
				return
			}
			proxy.ServeHTTP(w, r)
		}),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = f.srv.ServeTLS(ln, "", "") }()
	return f, nil
}

// URL is the front's https://host:port.
func (f *Front) URL() string { return f.url }

// Issuer is the control plane's service-account issuer.
func (f *Front) Issuer() string { return f.url + IssuerPath }

// CAFile is the PEM file of the CA the front's certificate is from.
func (f *Front) CAFile() string { return f.caFile }

// SetBackend puts the façade at u (http://…) behind the front.
func (f *Front) SetBackend(u string) error {
	parsed, err := url.Parse(u)
	if err != nil {
		return err
	}
	f.backend.Store(parsed)
	return nil
}

// close stops the front.
func (f *Front) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}

func newFrontCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "nodetest front CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func frontCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	sn, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if len(der) == 0 {
		return tls.Certificate{}, errors.New("nodetest: front certificate: empty")
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
