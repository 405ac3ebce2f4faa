package apply

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/saltbush/saltbush/guest/inventory"
)

// Annotations a bundle uses for webhook serving certificates, which a
// static bundle cannot carry (catalog/addons/README.md): the agent makes
// them, as cert-manager's CA injector would.
const (
	// ServingCertificateAnnotation on a Secret of type kubernetes.io/tls
	// lists the DNS names (comma-separated) its certificate must serve; the
	// agent fills tls.crt, tls.key and ca.crt, keeping what the cluster
	// already holds while it is valid for those names.
	ServingCertificateAnnotation = "addons.saltbush.io/serving-certificate"
	// InjectCAAnnotation on a webhook configuration, an APIService or a
	// CRD names a serving-certificate Secret (namespace/name) whose CA the
	// agent writes into the object's caBundle fields.
	InjectCAAnnotation = "addons.saltbush.io/inject-ca-from"
)

// Lifetimes: a certificate is made anew when it has less than renewBefore
// left (the drift interval re-applies long before).
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// fillCertificates gives the bundle's serving-certificate Secrets their
// data and the objects that trust them their caBundle.
func (a *Applier) fillCertificates(ctx context.Context, objs []*unstructured.Unstructured) error {
	cas := map[string][]byte{} // namespace/name → CA PEM
	for _, o := range objs {
		names := o.GetAnnotations()[ServingCertificateAnnotation]
		if o.GetKind() != "Secret" || names == "" {
			continue
		}
		data, err := a.servingCertificate(ctx, o, strings.Split(names, ","))
		if err != nil {
			return err
		}
		enc := map[string]any{}
		for k, v := range data {
			enc[k] = base64.StdEncoding.EncodeToString(v)
		}
		o.Object["data"] = enc
		o.Object["type"] = string(corev1.SecretTypeTLS)
		cas[o.GetNamespace()+"/"+o.GetName()] = data["ca.crt"]
	}
	for _, o := range objs {
		from := o.GetAnnotations()[InjectCAAnnotation]
		if from == "" {
			continue
		}
		ca, ok := cas[from]
		if !ok {
			return fmt.Errorf("%s: %s names %s, which the bundle does not make", inventory.RefOf(o), InjectCAAnnotation, from)
		}
		bundle := base64.StdEncoding.EncodeToString(ca)
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				if m, ok := h.(map[string]any); ok {
					_ = unstructured.SetNestedField(m, bundle, "clientConfig", "caBundle")
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		case "APIService":
			_ = unstructured.SetNestedField(o.Object, bundle, "spec", "caBundle")
		case "CustomResourceDefinition":
			_ = unstructured.SetNestedField(o.Object, bundle, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		default:
			return fmt.Errorf("%s: %s on a kind that takes no CA bundle", inventory.RefOf(o), InjectCAAnnotation)
		}
	}
	return nil
}

// servingCertificate is the data of a serving-certificate Secret: the
// cluster's, if it holds one valid for names for a while yet, else new.
func (a *Applier) servingCertificate(ctx context.Context, o *unstructured.Unstructured, names []string) (map[string][]byte, error) {
	live := &corev1.Secret{}
	err := a.client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, live)
	switch {
	case err == nil:
		if validFor(live.Data, names) == nil {
			return map[string][]byte{"tls.crt": live.Data["tls.crt"], "tls.key": live.Data["tls.key"], "ca.crt": live.Data["ca.crt"]}, nil
		}
	case !apierrors.IsNotFound(err):
		return nil, errTransient{fmt.Errorf("%s: %w", inventory.RefOf(o), err)}
	}
	return newServingCertificate(names)
}

// validFor checks a Secret's certificate: signed by its ca.crt, for every
// name, with renewBefore left.
func validFor(data map[string][]byte, names []string) error {
	block, _ := pem.Decode(data["tls.crt"])
	if block == nil || len(data["tls.key"]) == 0 {
		return errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	if time.Until(leaf.NotAfter) < renewBefore {
		return errors.New("expires soon")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data["ca.crt"]) {
		return errors.New("no CA")
	}
	for _, n := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: strings.TrimSpace(n)}); err != nil {
			return err
		}
	}
	return nil
}

// newServingCertificate makes a CA and a serving certificate it signs.
func newServingCertificate(names []string) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	serial := func() *big.Int { n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)); return n }
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "saltbush add-on webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var dns []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			dns = append(dns, n)
		}
	}
	if len(dns) == 0 {
		return nil, errors.New(ServingCertificateAnnotation + " names no DNS name")
	}
	leafTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: dns[0]}, DNSNames: dns,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(leafLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}, nil
}
