package podwebhook

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
	"log/slog"
	"math/big"
	"net"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cluster's webhook CA: one Secret, made once by an executor and read
// by every agent, so that the one MutatingWebhookConfiguration's caBundle
// verifies the loopback certificate of the agent on whichever server VM
// the apiserver calls. kube-system is readable by cluster admins only.
const (
	CASecretNamespace = "kube-system"
	CASecretName      = "saltbush-pod-identity-webhook-ca" //nolint:gosec // G101: a Secret's name, not a credential
	caCertKey         = "ca.crt"
	caKeyKey          = "ca.key"

	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
)

// EnsureCA returns the cluster's webhook CA certificate (PEM), creating
// its Secret when there is none. c is the executor's grant-guarded
// client; creating (not applying) means that of two executors racing the
// first wins and the second reads it.
func EnsureCA(ctx context.Context, c client.Client) ([]byte, error) {
	sec := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: CASecretNamespace, Name: CASecretName}, sec)
	switch {
	case err == nil:
		if _, _, err := parseCA(sec); err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", CASecretNamespace, CASecretName, err)
		}
		return sec.Data[caCertKey], nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("secret %s/%s: %w", CASecretNamespace, CASecretName, err)
	}
	certPEM, keyPEM, err := newCA(time.Now())
	if err != nil {
		return nil, err
	}
	sec = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: CASecretNamespace, Name: CASecretName,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "saltbush-agent"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{caCertKey: certPEM, caKeyKey: keyPEM},
	}
	if err := c.Create(ctx, sec); apierrors.IsAlreadyExists(err) {
		return EnsureCA(ctx, c)
	} else if err != nil {
		return nil, fmt.Errorf("create secret %s/%s: %w", CASecretNamespace, CASecretName, err)
	}
	return certPEM, nil
}

func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "saltbush pod identity webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook CA: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func parseCA(sec *corev1.Secret) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(sec.Data[caCertKey])
	kb, _ := pem.Decode(sec.Data[caKeyKey])
	if cb == nil || kb == nil {
		return nil, nil, errors.New("no CA certificate and key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("the CA key is not an ECDSA key")
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// certs keeps the agent's serving certificate: issued from the CA Secret
// for the loopback addresses whenever the Secret appears or changes.
type certs struct {
	kube    kubernetes.Interface
	current atomic.Pointer[tls.Certificate]
	log     *slog.Logger
}

func newCerts(kube kubernetes.Interface, log *slog.Logger) *certs {
	return &certs{kube: kube, log: log}
}

// run follows the CA Secret until ctx ends.
func (c *certs) run(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(c.kube, 10*time.Minute, informers.WithNamespace(CASecretNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", CASecretName).String()
		}))
	inf := f.Core().V1().Secrets().Informer()
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.issue(o) },
		UpdateFunc: func(_, o any) { c.issue(o) },
	})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

func (c *certs) issue(o any) {
	sec, ok := o.(*corev1.Secret)
	if !ok {
		return
	}
	ca, key, err := parseCA(sec)
	if err != nil {
		c.log.Error("the pod identity webhook's CA secret", "err", err)
		return
	}
	cert, err := issueServing(ca, key, time.Now())
	if err != nil {
		c.log.Error("issuing the pod identity webhook's certificate", "err", err)
		return
	}
	c.current.Store(cert)
}

func issueServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(servingLifetime)
	if ca.NotAfter.Before(notAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "saltbush pod identity webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// TLSConfig serves with the current certificate; before the CA Secret
// exists every handshake fails (the apiserver then admits the pod
// unmutated: the configuration's failure policy is Ignore, as EKS's).
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := s.certs.current.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate yet: the webhook CA secret is not there")
		},
	}
}
