package pki

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// trust is one immutable version of the trust bundle; a change to
// pki/authorities replaces it whole, so a handshake sees one consistent
// bundle.
type trust struct {
	issuing   string
	pool      *x509.CertPool
	bundlePEM []byte
	// ders holds each trusted CA certificate (DER) by serial.
	ders map[string][]byte
}

func newTrust(state *storagev1.CertificateAuthorityState) (*trust, error) {
	t := &trust{issuing: state.GetIssuingSerial(), pool: x509.NewCertPool(), ders: map[string][]byte{}}
	var buf bytes.Buffer
	for _, ca := range state.GetAuthorities() {
		cert, err := x509.ParseCertificate(ca.GetCertificateDer())
		if err != nil {
			return nil, fmt.Errorf("pki: CA %s: certificate: %w: %v", ca.GetSerial(), store.ErrCorrupt, err)
		}
		t.pool.AddCert(cert)
		t.ders[ca.GetSerial()] = ca.GetCertificateDer()
		buf.Write(pemCert(ca.GetCertificateDer()))
	}
	if _, ok := t.ders[t.issuing]; !ok {
		return nil, fmt.Errorf("pki: issuing CA %s is not in the bundle: %w", t.issuing, store.ErrCorrupt)
	}
	t.bundlePEM = buf.Bytes()
	return t, nil
}

// trusts reports whether root is one of the CAs in the bundle.
func (t *trust) trusts(root *x509.Certificate) bool {
	der, ok := t.ders[serialOf(root)]
	return ok && bytes.Equal(der, root.Raw)
}

// Start loads the trust bundle and the revocation list, and keeps them
// current from a watch over pki/ until ctx ends. It returns once the first
// snapshot is loaded, so the TLS config and interceptors are usable when it
// returns; it fails if pki/authorities does not exist yet (call Init first).
func (a *Authority) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("pki: already started")
	}
	a.started = true
	a.mu.Unlock()

	events := a.store.Watch(ctx, pkiPrefix, 0)
	// From revision 0 the first event is the snapshot.
	select {
	case ev, ok := <-events:
		if !ok {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("pki: load the trust bundle: %w", err)
			}
			return errors.New("pki: load the trust bundle: the watch ended")
		}
		if err := a.apply(ctx, ev); err != nil {
			return err
		}
		a.mu.RLock()
		loaded := a.trust != nil
		a.mu.RUnlock()
		if !loaded {
			return errNoAuthority()
		}
	case <-ctx.Done():
		return fmt.Errorf("pki: load the trust bundle: %w", ctx.Err())
	}
	go func() {
		for ev := range events {
			if err := a.apply(ctx, ev); err != nil {
				// Keep serving from the last good view: a bad record must
				// not empty the bundle (and refuse every caller).
				a.log.ErrorContext(ctx, "pki: ignoring a record the watch delivered", "key", ev.Key, "revision", ev.Revision, "error", err)
			}
		}
		if ctx.Err() == nil {
			a.log.ErrorContext(ctx, "pki: the watch over pki/ ended; the trust bundle and revocation list are no longer updated")
		}
	}()
	return nil
}

// apply folds one watch event into the view.
func (a *Authority) apply(ctx context.Context, ev store.Event) error {
	switch ev.Type {
	case store.EventSnapshot:
		var t *trust
		revoked := map[string]struct{}{}
		for _, kv := range ev.Snapshot {
			switch {
			case kv.Key == authoritiesKey:
				state := &storagev1.CertificateAuthorityState{}
				if err := store.Decode(kv.Value, state); err != nil {
					return fmt.Errorf("pki: %s: %w", kv.Key, err)
				}
				var err error
				if t, err = newTrust(state); err != nil {
					return err
				}
			case strings.HasPrefix(kv.Key, revokedPrefix):
				revoked[strings.TrimPrefix(kv.Key, revokedPrefix)] = struct{}{}
			}
		}
		a.mu.Lock()
		if t != nil {
			a.trust = t
		}
		a.revoked = revoked
		for serial := range revoked {
			a.endRevokedStreams(serial)
		}
		a.mu.Unlock()
		a.log.DebugContext(ctx, "pki: loaded the trust bundle", "revision", ev.Revision, "revoked", len(revoked))
	case store.EventPut:
		switch {
		case ev.Key == authoritiesKey:
			state := &storagev1.CertificateAuthorityState{}
			if err := store.Decode(ev.Value, state); err != nil {
				return fmt.Errorf("pki: %s: %w", ev.Key, err)
			}
			t, err := newTrust(state)
			if err != nil {
				return err
			}
			a.mu.Lock()
			a.trust = t
			a.mu.Unlock()
			a.log.InfoContext(ctx, "pki: trust bundle changed", "issuing_serial", t.issuing, "authorities", len(t.ders))
		case strings.HasPrefix(ev.Key, revokedPrefix):
			a.mu.Lock()
			serial := strings.TrimPrefix(ev.Key, revokedPrefix)
			a.revoked[serial] = struct{}{}
			a.endRevokedStreams(serial)
			a.mu.Unlock()
		}
	case store.EventDelete:
		// A revocation record is dropped only after the certificate's
		// NotAfter, when Go's verification refuses it anyway. The
		// authorities record is never deleted; if it were, the last bundle
		// is kept rather than refusing everyone.
		if strings.HasPrefix(ev.Key, revokedPrefix) {
			a.mu.Lock()
			delete(a.revoked, strings.TrimPrefix(ev.Key, revokedPrefix))
			a.mu.Unlock()
		}
	}
	return nil
}

// current returns the in-memory trust bundle, nil before Start.
func (a *Authority) current() *trust {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.trust
}

// Bundle returns the PEM bundle of trusted CAs and the issuing serial from
// the in-memory view; empty before Start has returned.
func (a *Authority) Bundle() (pemBundle []byte, issuingSerial string) {
	t := a.current()
	if t == nil {
		return nil, ""
	}
	return bytes.Clone(t.bundlePEM), t.issuing
}

// Revoked reports whether the watch has seen serial revoked.
func (a *Authority) Revoked(serial string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	_, ok := a.revoked[serial]
	return ok
}
