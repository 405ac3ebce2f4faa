// Package pki is saltbush's certificate authority for the public gRPC
// port's mutual TLS. The CAs live in etcd (pki/authorities), their private
// keys sealed with the master key; every certificate issued to a service or
// an agent is recorded (pki/issued/{serial}) so that it can be revoked
// (pki/revoked/{serial}). Each replica keeps the trust bundle and the
// revocation list in memory from a watch, and the gRPC server's TLS config
// and interceptors here turn a verified client certificate into the caller's
// identity (identity). Nothing is taken from request metadata.
//
// Rotation adds a CA and makes it the issuer in one compare-and-swap; the
// old CAs stay in the bundle, so certificates they issued keep working until
// an operator removes them.
package pki

import (
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// MasterKeySize is the size of the key that seals CA private keys.
const MasterKeySize = 32

// Defaults for Config's zero values.
const (
	DefaultLeafTTL    = 90 * 24 * time.Hour
	DefaultMaxLeafTTL = 365 * 24 * time.Hour
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
)

// clockSkew is how far before "now" a certificate's NotBefore is put, so a
// peer whose clock is slightly behind does not refuse a fresh certificate.
const clockSkew = time.Minute

// Keys (relative to the store root).
const (
	pkiPrefix      = "pki/"
	authoritiesKey = pkiPrefix + "authorities"
	issuedPrefix   = pkiPrefix + "issued/"
	revokedPrefix  = pkiPrefix + "revoked/"
)

func issuedKey(serial string) string  { return issuedPrefix + serial }
func revokedKey(serial string) string { return revokedPrefix + serial }

// serialPattern is a certificate serial as saltbush writes it: lower-case
// hex without leading zeros (big.Int.Text(16)); at most 20 octets (RFC 5280).
var serialPattern = regexp.MustCompile(`^[1-9a-f][0-9a-f]{0,39}$`)

// Config configures an Authority.
type Config struct {
	// MasterKey (MasterKeySize bytes) seals the CAs' private keys with
	// AES-256-GCM; the additional data binds each sealed key to its CA's
	// serial, so a sealed key moved to another CA record does not open.
	MasterKey []byte
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// DefaultTTL is the validity of an issued certificate when the request
	// names none (DefaultLeafTTL when zero); MaxTTL caps what a request may
	// ask for (DefaultMaxLeafTTL when zero).
	DefaultTTL, MaxTTL time.Duration
	// CAValidity is the validity of a new CA (DefaultCAValidity when zero).
	CAValidity time.Duration
	// Logger receives CA lifecycle events and refused connections; nothing
	// is logged when nil.
	Logger *slog.Logger
}

// Authority is saltbush's certificate authority. It is safe for concurrent
// use. Issue, Revoke, Rotate, Remove and BundleFromStore work on the store
// directly; Bundle, Revoked, the TLS config and the interceptors read the
// in-memory view that Start keeps current.
type Authority struct {
	store      *store.Store
	aead       cipher.AEAD
	now        func() time.Time
	defaultTTL time.Duration
	maxTTL     time.Duration
	caValidity time.Duration
	log        *slog.Logger

	// keys caches unsealed CA keys by serial: unsealing is cheap, but the
	// serving certificate is issued from a TLS callback.
	keysMu sync.Mutex
	keys   map[string]*caKey

	mu      sync.RWMutex
	trust   *trust              // nil until Start has loaded the first snapshot
	revoked map[string]struct{} // serials of revoked certificates
	// streams are the open streams by their certificate's serial, ended
	// when it is revoked.
	streams map[string]map[*openStream]struct{}
	started bool
}

// New returns an Authority on st. It does not touch the store; call Init
// and then Start.
func New(st *store.Store, cfg Config) (*Authority, error) {
	if st == nil {
		return nil, errors.New("pki: a store is required")
	}
	if len(cfg.MasterKey) != MasterKeySize {
		return nil, fmt.Errorf("pki: master key must be %d bytes, got %d", MasterKeySize, len(cfg.MasterKey))
	}
	block, err := aes.NewCipher(cfg.MasterKey)
	if err != nil {
		return nil, fmt.Errorf("pki: master key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("pki: master key: %w", err)
	}
	a := &Authority{
		store: st, aead: aead, now: cfg.Now, log: cfg.Logger,
		defaultTTL: cfg.DefaultTTL, maxTTL: cfg.MaxTTL, caValidity: cfg.CAValidity,
		keys: map[string]*caKey{}, revoked: map[string]struct{}{}, streams: map[string]map[*openStream]struct{}{},
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.defaultTTL == 0 {
		a.defaultTTL = DefaultLeafTTL
	}
	if a.maxTTL == 0 {
		a.maxTTL = DefaultMaxLeafTTL
	}
	if a.caValidity == 0 {
		a.caValidity = DefaultCAValidity
	}
	switch {
	case a.defaultTTL < 0 || a.maxTTL < 0 || a.caValidity < 0:
		return nil, errors.New("pki: validities must not be negative")
	case a.defaultTTL > a.maxTTL:
		return nil, fmt.Errorf("pki: default TTL %v exceeds the maximum %v", a.defaultTTL, a.maxTTL)
	}
	return a, nil
}

// Init creates the first CA unless pki/authorities exists. The create is
// exclusive, so when replicas start together exactly one CA is made and
// the others find it; created reports whether this call made it.
func (a *Authority) Init(ctx context.Context) (created bool, err error) {
	if _, err := a.store.Get(ctx, authoritiesKey, &storagev1.CertificateAuthorityState{}); err == nil {
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("pki: load the certificate authorities: %w", err)
	}
	ca, err := a.newCA()
	if err != nil {
		return false, err
	}
	state := &storagev1.CertificateAuthorityState{
		Authorities:   []*storagev1.CertificateAuthority{ca},
		IssuingSerial: ca.GetSerial(),
	}
	if _, err := a.store.Create(ctx, authoritiesKey, state); err != nil {
		if errors.Is(err, store.ErrExists) {
			// Another replica won: its CA is the one.
			return false, nil
		}
		return false, fmt.Errorf("pki: create certificate authority %s: %w", ca.GetSerial(), err)
	}
	a.log.InfoContext(ctx, "created the certificate authority", "serial", ca.GetSerial())
	return true, nil
}

// Rotate adds a new CA and makes it the issuer in one compare-and-swap.
// The CAs that issued before stay in the bundle, so their certificates keep
// working until they are removed.
func (a *Authority) Rotate(ctx context.Context) (issuingSerial string, err error) {
	// The key is made once, outside the update function, which may run
	// again after a lost race.
	ca, err := a.newCA()
	if err != nil {
		return "", err
	}
	_, err = store.Update(ctx, a.store, authoritiesKey, &storagev1.CertificateAuthorityState{},
		func(st *storagev1.CertificateAuthorityState, _ *store.Txn) error {
			st.Authorities = append(st.Authorities, ca)
			st.IssuingSerial = ca.GetSerial()
			return nil
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", errNoAuthority()
	case err != nil:
		return "", fmt.Errorf("pki: rotate to certificate authority %s: %w", ca.GetSerial(), err)
	}
	a.log.InfoContext(ctx, "rotated the certificate authority", "issuing_serial", ca.GetSerial())
	return ca.GetSerial(), nil
}

// Remove drops a CA that no longer issues from the bundle: certificates it
// issued are refused from then on. The issuing CA cannot be removed;
// rotate first.
func (a *Authority) Remove(ctx context.Context, serial string) error {
	serial = strings.ToLower(serial)
	if !serialPattern.MatchString(serial) {
		return errdefs.InvalidParameter("Certificate authority serial %q is not lower-case hex.", serial)
	}
	_, err := store.Update(ctx, a.store, authoritiesKey, &storagev1.CertificateAuthorityState{},
		func(st *storagev1.CertificateAuthorityState, _ *store.Txn) error {
			if st.GetIssuingSerial() == serial {
				return errdefs.InvalidRequest("Certificate authority %s is the issuing authority; rotate before removing it.", serial)
			}
			for i, ca := range st.GetAuthorities() {
				if ca.GetSerial() == serial {
					st.Authorities = append(st.Authorities[:i:i], st.Authorities[i+1:]...)
					return nil
				}
			}
			return errdefs.NotFound("Certificate authority %s does not exist.", serial)
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoAuthority()
	case err != nil:
		var apiErr *errdefs.Error
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("pki: remove certificate authority %s: %w", serial, err)
	}
	a.forgetKey(serial)
	a.log.InfoContext(ctx, "removed a certificate authority from the bundle", "serial", serial)
	return nil
}

// Revoke refuses a certificate from the moment the replicas' watches see
// the record: new connections fail their handshake, and every call on an
// existing connection is refused. serial is the lower-case hex serial of a
// certificate Issue recorded. Revoking twice is not an error.
func (a *Authority) Revoke(ctx context.Context, serial, reason string) error {
	serial = strings.ToLower(serial)
	if !serialPattern.MatchString(serial) {
		return errdefs.InvalidParameter("Certificate serial %q is not lower-case hex.", serial)
	}
	issued := &storagev1.IssuedCertificateRecord{}
	if _, err := a.store.Get(ctx, issuedKey(serial), issued); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errdefs.NotFound("Certificate %s does not exist.", serial)
		}
		return fmt.Errorf("pki: revoke certificate %s: %w", serial, err)
	}
	rec := &storagev1.RevokedCertificateRecord{
		Serial: serial, Reason: reason, RevokedAt: timestamppb.New(a.now()), NotAfter: issued.GetNotAfter(),
	}
	_, err := a.store.Commit(ctx, store.NewTxn().Create(revokedKey(serial), rec))
	switch {
	case errors.Is(err, store.ErrExists):
		return nil
	case err != nil:
		return fmt.Errorf("pki: revoke certificate %s: %w", serial, err)
	}
	a.log.InfoContext(ctx, "revoked a certificate", "serial", serial, "spiffe_id", issued.GetSpiffeId(), "reason", reason)
	return nil
}

// BundleFromStore returns the PEM bundle of trusted CAs and the issuing
// serial as etcd has them now (for callers that have not started a view).
func (a *Authority) BundleFromStore(ctx context.Context) ([]byte, string, error) {
	state := &storagev1.CertificateAuthorityState{}
	if _, err := a.store.Get(ctx, authoritiesKey, state); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, "", errNoAuthority()
		}
		return nil, "", fmt.Errorf("pki: load the certificate authorities: %w", err)
	}
	t, err := newTrust(state)
	if err != nil {
		return nil, "", err
	}
	return t.bundlePEM, t.issuing, nil
}

func errNoAuthority() error {
	return errdefs.InvalidRequest("No certificate authority exists; it is created when saltbush starts.")
}

// caKey is an unsealed CA.
type caKey struct {
	serial string
	der    []byte
	cert   *x509.Certificate
	signer crypto.Signer
}

// newSerial returns a random 128-bit serial with the top bit set, so every
// serial is 32 hex digits (and 17 DER octets, within RFC 5280's 20).
func newSerial() (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	b[0] |= 0x80
	return new(big.Int).SetBytes(b), nil
}

// serialOf is how saltbush names a certificate: its serial in lower-case hex.
func serialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// newCA makes a self-signed ECDSA P-256 CA and seals its key.
func (a *Authority) newCA() (*storagev1.CertificateAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate a CA key: %w", err)
	}
	sn, err := newSerial()
	if err != nil {
		return nil, err
	}
	serial := sn.Text(16)
	now := a.now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "saltbush CA " + serial[:8]},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(a.caValidity),
		IsCA:         true, BasicConstraintsValid: true,
		// The CA signs leaves only, never another CA.
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign CA %s: %w", serial, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode CA %s key: %w", serial, err)
	}
	sealed, err := a.seal(serial, pkcs8)
	if err != nil {
		return nil, fmt.Errorf("pki: seal CA %s key: %w", serial, err)
	}
	return &storagev1.CertificateAuthority{
		Serial: serial, CertificateDer: der, SealedPrivateKey: sealed, CreatedAt: timestamppb.New(now),
	}, nil
}

func sealAAD(serial string) []byte { return []byte("saltbush/pki/ca\x00" + serial) }

// seal encrypts a CA's PKCS#8 key; the serial is the additional data.
func (a *Authority) seal(serial string, pkcs8 []byte) ([]byte, error) {
	nonce := make([]byte, a.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.aead.Seal(nonce, nonce, pkcs8, sealAAD(serial)), nil
}

func (a *Authority) open(serial string, sealed []byte) ([]byte, error) {
	n := a.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("pki: CA %s: sealed key too short: %w", serial, store.ErrCorrupt)
	}
	plain, err := a.aead.Open(nil, sealed[:n], sealed[n:], sealAAD(serial))
	if err != nil {
		// A wrong master key, or a record that was tampered with.
		return nil, fmt.Errorf("pki: CA %s: key does not open with the master key: %w", serial, store.ErrCorrupt)
	}
	return plain, nil
}

// unseal returns the CA of rec with its private key, from the cache when
// the same certificate was unsealed before.
func (a *Authority) unseal(rec *storagev1.CertificateAuthority) (*caKey, error) {
	serial := rec.GetSerial()
	a.keysMu.Lock()
	k, ok := a.keys[serial]
	a.keysMu.Unlock()
	if ok && string(k.der) == string(rec.GetCertificateDer()) {
		return k, nil
	}
	cert, err := x509.ParseCertificate(rec.GetCertificateDer())
	if err != nil {
		return nil, fmt.Errorf("pki: CA %s: certificate: %w: %v", serial, store.ErrCorrupt, err)
	}
	if serialOf(cert) != serial {
		return nil, fmt.Errorf("pki: CA %s: certificate has serial %s: %w", serial, serialOf(cert), store.ErrCorrupt)
	}
	pkcs8, err := a.open(serial, rec.GetSealedPrivateKey())
	if err != nil {
		return nil, err
	}
	priv, err := x509.ParsePKCS8PrivateKey(pkcs8)
	if err != nil {
		return nil, fmt.Errorf("pki: CA %s: key: %w: %v", serial, store.ErrCorrupt, err)
	}
	signer, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: CA %s: key of type %T cannot sign: %w", serial, priv, store.ErrCorrupt)
	}
	// A key that does not match its certificate would sign leaves nobody
	// can verify; refuse it here rather than hand them out.
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: CA %s: key does not match the certificate: %w", serial, store.ErrCorrupt)
	}
	k = &caKey{serial: serial, der: rec.GetCertificateDer(), cert: cert, signer: signer}
	a.keysMu.Lock()
	a.keys[serial] = k
	a.keysMu.Unlock()
	return k, nil
}

func (a *Authority) forgetKey(serial string) {
	a.keysMu.Lock()
	delete(a.keys, serial)
	a.keysMu.Unlock()
}

// issuerOf returns the issuing CA of state, unsealed.
func (a *Authority) issuerOf(state *storagev1.CertificateAuthorityState) (*caKey, error) {
	for _, ca := range state.GetAuthorities() {
		if ca.GetSerial() == state.GetIssuingSerial() {
			return a.unseal(ca)
		}
	}
	return nil, fmt.Errorf("pki: issuing CA %s is not in the bundle: %w", state.GetIssuingSerial(), store.ErrCorrupt)
}

// loadIssuer reads the authorities from the store and returns the issuing
// CA and the record's mod revision.
func (a *Authority) loadIssuer(ctx context.Context) (*caKey, int64, error) {
	state := &storagev1.CertificateAuthorityState{}
	rev, err := a.store.Get(ctx, authoritiesKey, state)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, 0, errNoAuthority()
		}
		return nil, 0, fmt.Errorf("pki: load the certificate authorities: %w", err)
	}
	ca, err := a.issuerOf(state)
	return ca, rev, err
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
