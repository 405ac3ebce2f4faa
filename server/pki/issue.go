package pki

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// minRSABits is the smallest RSA key a certificate is issued for.
const minRSABits = 2048

// issueAttempts bounds how often Issue starts over when the authorities
// changed between its read and its commit (a rotation in between).
const issueAttempts = 5

// Issue signs a client certificate for spiffeID (a saltbush service or
// agent id) with the issuing CA. Only the CSR's public key is used, and its
// signature checked (proof that the caller holds the key); its subject and
// SANs are ignored, so a CSR cannot ask for more than spiffeID. ttl is the
// validity (the default when zero, capped by the maximum, and never past
// the CA's own NotAfter).
func (a *Authority) Issue(ctx context.Context, csrPEM []byte, spiffeID string, ttl time.Duration) (certPEM []byte, serial string, notAfter time.Time, err error) {
	if _, err := spiffeURI(spiffeID); err != nil {
		return nil, "", time.Time{}, err
	}
	pub, err := parseCSR(csrPEM, spiffeID)
	if err != nil {
		return nil, "", time.Time{}, err
	}
	der, serial, notAfter, err := a.issue(ctx, pub, spiffeID, ttl)
	if err != nil {
		return nil, "", time.Time{}, err
	}
	return pemCert(der), serial, notAfter, nil
}

// IssueLocal is Issue for a key it makes itself (ECDSA P-256), for
// certificates saltbush hands out whole, such as the bootstrap admin's.
func (a *Authority) IssueLocal(ctx context.Context, spiffeID string, ttl time.Duration) (certPEM, keyPEM []byte, serial string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, "", fmt.Errorf("pki: generate a key for %s: %w", spiffeID, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, "", fmt.Errorf("pki: encode the key for %s: %w", spiffeID, err)
	}
	der, serial, _, err := a.issue(ctx, key.Public(), spiffeID, ttl)
	if err != nil {
		return nil, nil, "", err
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), serial, nil
}

// parseCSR returns the public key of a PEM CSR whose signature verifies.
func parseCSR(csrPEM []byte, spiffeID string) (crypto.PublicKey, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || (block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST") {
		return nil, errdefs.InvalidParameter("The CSR for %s is not a PEM CERTIFICATE REQUEST.", spiffeID)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, errdefs.InvalidParameter("The CSR for %s does not parse: %v.", spiffeID, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, errdefs.InvalidParameter("The CSR for %s is not signed by its key: %v.", spiffeID, err)
	}
	return csr.PublicKey, nil
}

// checkKey refuses key types and sizes a certificate is not issued for.
func checkKey(pub crypto.PublicKey, spiffeID string) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return errdefs.InvalidParameter("The key for %s is on an unsupported curve.", spiffeID)
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return errdefs.InvalidParameter("The RSA key for %s has %d bits; at least %d are required.", spiffeID, k.N.BitLen(), minRSABits)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return errdefs.InvalidParameter("The key for %s is a %T; ECDSA, RSA or Ed25519 is required.", spiffeID, pub)
	}
}

// spiffeURI validates a SPIFFE id saltbush issues for and returns it as
// the certificate's URI SAN.
func spiffeURI(spiffeID string) (*url.URL, error) {
	if _, err := identity.FromSPIFFE(spiffeID); err != nil {
		return nil, errdefs.InvalidParameter("%v.", err)
	}
	u, err := url.Parse(spiffeID)
	if err != nil || u.String() != spiffeID {
		return nil, errdefs.InvalidParameter("SPIFFE id %q is not a canonical URI.", spiffeID)
	}
	return u, nil
}

func (a *Authority) issue(ctx context.Context, pub crypto.PublicKey, spiffeID string, ttl time.Duration) (der []byte, serial string, notAfter time.Time, err error) {
	uri, err := spiffeURI(spiffeID)
	if err != nil {
		return nil, "", time.Time{}, err
	}
	if err := checkKey(pub, spiffeID); err != nil {
		return nil, "", time.Time{}, err
	}
	switch {
	case ttl < 0:
		return nil, "", time.Time{}, errdefs.InvalidParameter("The validity %v for %s is negative.", ttl, spiffeID)
	case ttl == 0:
		ttl = a.defaultTTL
	case ttl > a.maxTTL:
		ttl = a.maxTTL
	}
	for range issueAttempts {
		ca, rev, err := a.loadIssuer(ctx)
		if err != nil {
			return nil, "", time.Time{}, err
		}
		now := a.now()
		notAfter := now.Add(ttl)
		if ca.cert.NotAfter.Before(notAfter) {
			notAfter = ca.cert.NotAfter
		}
		if !notAfter.After(now) {
			return nil, "", time.Time{}, errdefs.InvalidRequest("The issuing certificate authority %s expired at %s; rotate it.", ca.serial, ca.cert.NotAfter.UTC().Format(time.RFC3339))
		}
		sn, err := newSerial()
		if err != nil {
			return nil, "", time.Time{}, err
		}
		serial := sn.Text(16)
		tmpl := &x509.Certificate{
			SerialNumber: sn,
			NotBefore:    now.Add(-clockSkew),
			NotAfter:     notAfter,
			// The identity is the URI SAN alone (an X.509-SVID): the
			// subject is empty, which makes Go mark the SAN critical.
			URIs:                  []*url.URL{uri},
			KeyUsage:              x509.KeyUsageDigitalSignature,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.signer)
		if err != nil {
			return nil, "", time.Time{}, fmt.Errorf("pki: sign the certificate for %s: %w", spiffeID, err)
		}
		rec := &storagev1.IssuedCertificateRecord{
			Serial: serial, SpiffeId: spiffeID, IssuerSerial: ca.serial,
			NotBefore: timestamppb.New(tmpl.NotBefore), NotAfter: timestamppb.New(notAfter), IssuedAt: timestamppb.New(now),
		}
		// The record commits only if the CA that signed is still the one
		// pki/authorities names (no rotation or removal in between), so
		// pki/issued never lists a certificate of a CA already dropped.
		txn := store.NewTxn().RequireModRevision(authoritiesKey, rev).Create(issuedKey(serial), rec)
		_, err = a.store.Commit(ctx, txn)
		switch {
		case err == nil:
			a.log.InfoContext(ctx, "issued a certificate", "serial", serial, "spiffe_id", spiffeID, "issuer", ca.serial, "not_after", notAfter)
			return der, serial, notAfter, nil
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrExists):
			// The authorities changed (or, astronomically unlikely, the
			// serial was taken): sign again with the current issuer.
			continue
		default:
			return nil, "", time.Time{}, fmt.Errorf("pki: record certificate %s for %s: %w", serial, spiffeID, err)
		}
	}
	return nil, "", time.Time{}, errdefs.Conflict("The certificate authorities changed while issuing for %s; retry.", spiffeID)
}

// ServingCertificate returns a tls.Config.GetCertificate for the gRPC
// port: a server certificate for hosts (DNS names or IP addresses;
// localhost and the loopback addresses when empty) signed by the issuing
// CA. It is made in memory, not recorded in pki/issued, and made again when
// two thirds of its life have passed or the issuing CA changed (so clients
// that trust only the new CA can connect once they have the new bundle).
// It uses the in-memory view after Start, the store before.
func (a *Authority) ServingCertificate(hosts []string) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	var dnsNames []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, h)
		}
	}
	var (
		mu      sync.Mutex
		cur     *tls.Certificate
		issuer  string
		renewAt time.Time
	)
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		ctx := context.Background()
		if hello != nil && hello.Context() != nil {
			ctx = hello.Context()
		}
		ca, err := a.currentIssuer(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		now := a.now()
		if cur != nil && issuer == ca.serial && now.Before(renewAt) {
			return cur, nil
		}
		cert, err := a.newServingCert(ca, dnsNames, ips, now)
		if err != nil {
			return nil, err
		}
		life := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
		cur, issuer, renewAt = cert, ca.serial, cert.Leaf.NotBefore.Add(life*2/3)
		return cur, nil
	}
}

// currentIssuer is the issuing CA from the in-memory view, or from the
// store before Start.
func (a *Authority) currentIssuer(ctx context.Context) (*caKey, error) {
	if t := a.current(); t != nil {
		a.keysMu.Lock()
		k, ok := a.keys[t.issuing]
		a.keysMu.Unlock()
		if ok && string(k.der) == string(t.ders[t.issuing]) {
			return k, nil
		}
	}
	// Unseal from the record (the view keeps no sealed keys); the cache
	// makes this once per CA.
	ca, _, err := a.loadIssuer(ctx)
	return ca, err
}

func (a *Authority) newServingCert(ca *caKey, dnsNames []string, ips []net.IP, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate the serving key: %w", err)
	}
	sn, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(a.defaultTTL)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("pki: the issuing certificate authority %s has expired", ca.serial)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.signer)
	if err != nil {
		return nil, fmt.Errorf("pki: sign the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse the serving certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
