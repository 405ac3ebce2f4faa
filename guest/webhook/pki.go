package webhook

import (
	"bytes"
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
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The webhooks' TLS material lives in the webhook directory, beside the two
// kubeconfig files the apiserver reads. The apiserver reads those files
// once, at its start, so the material is made once and kept: a restarted
// agent serves with the same certificate, and a new one (after the
// directory was wiped or the address changed) needs an apiserver restart.
const (
	caFile         = "ca.crt"
	serverCertFile = "server.crt"
	serverKeyFile  = "server.key"
	clientCertFile = "client.crt"
	clientKeyFile  = "client.key"

	// AuthenticationKubeconfig and AuthorizationKubeconfig are the files
	// K3s's kube-apiserver-arg authentication-token-webhook-config-file
	// and authorization-webhook-config-file name (images/k3s).
	AuthenticationKubeconfig = "authentication.kubeconfig"
	AuthorizationKubeconfig  = "authorization.kubeconfig"

	// ClientName is the common name of the certificate the apiserver
	// presents to the webhooks.
	ClientName = "kube-apiserver"

	certLifetime = 10 * 365 * 24 * time.Hour
	// renewBefore: material closer than this to its end is made anew (the
	// apiserver must then be restarted to read the new kubeconfigs).
	renewBefore = 30 * 24 * time.Hour
)

// Paths used by the webhooks.
const (
	AuthenticatePath = "/authenticate"
	AuthorizePath    = "/authorize"
)

// PKI is the webhooks' TLS material: a CA of their own, the serving
// certificate for the webhook address and the client certificate the
// apiserver presents, so that only the apiserver holding the kubeconfig
// files can ask (the address is loopback, but other local processes are
// not the apiserver).
type PKI struct {
	CAPEM                   []byte
	ServerCert, ServerKey   []byte
	ClientCert, ClientKey   []byte
	serving                 tls.Certificate
	clientPool, servingPool *x509.CertPool
}

// ServerTLS is the serving configuration: TLS 1.2 or later and a client
// certificate from the webhooks' CA required.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.clientPool,
	}
}

// ClientTLS is what the apiserver's side uses (for tests and probes).
func (p *PKI) ClientTLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: p.servingPool}, nil
}

// EnsurePKI loads the material in dir, or makes and stores new material
// when there is none, it does not cover host, or it is about to expire.
// created reports that new material was made.
func EnsurePKI(dir, host string, now time.Time) (p *PKI, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("webhook directory %s: %w", dir, err)
	}
	if p, err := loadPKI(dir, host, now); err == nil {
		return p, false, nil
	}
	p, err = newPKI(host, now)
	if err != nil {
		return nil, false, fmt.Errorf("webhook certificates: %w", err)
	}
	for name, data := range map[string][]byte{
		caFile: p.CAPEM, serverCertFile: p.ServerCert, serverKeyFile: p.ServerKey,
		clientCertFile: p.ClientCert, clientKeyFile: p.ClientKey,
	} {
		if err := writeFileAtomic(filepath.Join(dir, name), data); err != nil {
			return nil, false, err
		}
	}
	return p, true, nil
}

func loadPKI(dir, host string, now time.Time) (*PKI, error) {
	p := &PKI{}
	for name, dst := range map[string]*[]byte{
		caFile: &p.CAPEM, serverCertFile: &p.ServerCert, serverKeyFile: &p.ServerKey,
		clientCertFile: &p.ClientCert, clientKeyFile: &p.ClientKey,
	} {
		b, err := os.ReadFile(filepath.Join(dir, name)) //nolint:gosec // G304: the webhook PKI directory from the agent's config
		if err != nil {
			return nil, err
		}
		*dst = b
	}
	if err := p.complete(); err != nil {
		return nil, err
	}
	leaf := p.serving.Leaf
	if now.Add(renewBefore).After(leaf.NotAfter) {
		return nil, errors.New("serving certificate about to expire")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.servingPool, DNSName: host, CurrentTime: now}); err != nil {
		return nil, err
	}
	client, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, err
	}
	if _, err := client.Leaf.Verify(x509.VerifyOptions{Roots: p.clientPool, CurrentTime: now.Add(renewBefore),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, err
	}
	return p, nil
}

// complete parses the PEM fields into the TLS values.
func (p *PKI) complete() error {
	serving, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.CAPEM) {
		return errors.New("no CA certificate")
	}
	p.serving, p.clientPool, p.servingPool = serving, pool, pool
	return nil
}

func newPKI(host string, now time.Time) (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "saltbush-agent webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	serverTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "saltbush-agent webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(host); ip != nil {
		serverTmpl.IPAddresses = []net.IP{ip}
	} else {
		serverTmpl.DNSNames = []string{host}
	}
	clientTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: ClientName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	if p.ServerCert, p.ServerKey, err = issue(serverTmpl, ca, caKey); err != nil {
		return nil, err
	}
	if p.ClientCert, p.ClientKey, err = issue(clientTmpl, ca, caKey); err != nil {
		return nil, err
	}
	return p, p.complete()
}

func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// Kubeconfig is the webhook configuration file the apiserver reads for the
// webhook at path of address addr: the server with the webhooks' CA, and
// the apiserver's client certificate.
func (p *PKI) Kubeconfig(addr, path string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["saltbush-agent"] = &clientcmdapi.Cluster{Server: "https://" + addr + path, CertificateAuthorityData: p.CAPEM}
	cfg.AuthInfos[ClientName] = &clientcmdapi.AuthInfo{ClientCertificateData: p.ClientCert, ClientKeyData: p.ClientKey}
	cfg.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "saltbush-agent", AuthInfo: ClientName}
	cfg.CurrentContext = "webhook"
	return clientcmd.Write(*cfg)
}

// WriteKubeconfigs writes the authentication and authorization webhook
// kubeconfigs into dir (unchanged files are left alone, so the apiserver
// never sees a file change under it). It returns their paths.
func (p *PKI) WriteKubeconfigs(dir, addr string) (authn, authz string, err error) {
	authn, authz = filepath.Join(dir, AuthenticationKubeconfig), filepath.Join(dir, AuthorizationKubeconfig)
	for file, path := range map[string]string{authn: AuthenticatePath, authz: AuthorizePath} {
		data, err := p.Kubeconfig(addr, path)
		if err != nil {
			return "", "", err
		}
		if old, err := os.ReadFile(file); err == nil && bytes.Equal(old, data) { //nolint:gosec // G304: a file in the kubeconfig directory from the agent's config
			continue
		}
		if err := writeFileAtomic(file, data); err != nil {
			return "", "", err
		}
	}
	return authn, authz, nil
}

// writeFileAtomic replaces file with data (mode 0600: the files hold
// private keys), so a reader never sees half a file.
func writeFileAtomic(file string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
