// Package oidc owns the OIDC issuers saltbush hosts for its clusters: the
// public keys that verify a cluster's service-account tokens (reported by
// the cluster's executor from its apiserver), the discovery document and
// JWKS served at the issuer URL, and the verification of a token against
// them (docs/architecture.md, "Pod credentials"). STS's
// AssumeRoleWithWebIdentity and EKS Auth's AssumeRoleForPodIdentity verify
// tokens here; nothing here decides what a verified token may do.
package oidc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// Bounds of a key set: a Kubernetes apiserver publishes one key per
// --service-account-key-file (a handful during a rotation).
const (
	MaxKeySetBytes = 64 << 10
	MaxKeys        = 32
	minRSABits     = 2048
)

// KeySet is a validated JSON Web Key Set of public signing keys.
type KeySet struct {
	keys []jose.JSONWebKey
	raw  []byte
}

// ParseKeySet reads a JWKS strictly: public RSA (2048 bits or more) or
// ECDSA (P-256, P-384, P-521) signing keys, each with a kid of its own.
// Private keys, symmetric keys, encryption keys and duplicate kids are
// refused rather than skipped, so a key set never holds more than it
// says. The set is kept canonical (sorted by kid) so that two readings of
// the same keys compare equal.
func ParseKeySet(raw []byte) (*KeySet, error) {
	if len(raw) > MaxKeySetBytes {
		return nil, fmt.Errorf("the key set of %d bytes exceeds %d", len(raw), MaxKeySetBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("the key set is not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("the key set has no keys")
	}
	if len(set.Keys) > MaxKeys {
		return nil, fmt.Errorf("the key set has %d keys, more than %d", len(set.Keys), MaxKeys)
	}
	seen := map[string]bool{}
	for i, k := range set.Keys {
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, clip(k.KeyID), err)
		}
		if seen[k.KeyID] {
			return nil, fmt.Errorf("key %d: kid %q appears twice", i, clip(k.KeyID))
		}
		seen[k.KeyID] = true
	}
	slices.SortFunc(set.Keys, func(a, b jose.JSONWebKey) int { return strings.Compare(a.KeyID, b.KeyID) })
	canonical, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("the key set: %w", err)
	}
	return &KeySet{keys: set.Keys, raw: canonical}, nil
}

func checkKey(k jose.JSONWebKey) error {
	if k.KeyID == "" {
		return errors.New("no kid")
	}
	if k.Use != "" && k.Use != "sig" {
		return fmt.Errorf("use %q is not sig", k.Use)
	}
	if !k.Valid() || !k.IsPublic() {
		return errors.New("not a valid public key")
	}
	switch pub := k.Key.(type) {
	case *rsa.PublicKey:
		if pub.N.BitLen() < minRSABits {
			return fmt.Errorf("an RSA key of %d bits, fewer than %d", pub.N.BitLen(), minRSABits)
		}
		if k.Algorithm != "" && !slices.Contains([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, k.Algorithm) {
			return fmt.Errorf("alg %q is not an RSA signature algorithm", k.Algorithm)
		}
	case *ecdsa.PublicKey:
		switch pub.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return errors.New("an ECDSA key on an unsupported curve")
		}
		if k.Algorithm != "" && !slices.Contains([]string{"ES256", "ES384", "ES512"}, k.Algorithm) {
			return fmt.Errorf("alg %q is not an ECDSA signature algorithm", k.Algorithm)
		}
	default:
		return errors.New("neither an RSA nor an ECDSA public key")
	}
	return nil
}

// JSON is the canonical key set.
func (s *KeySet) JSON() []byte { return s.raw }

// Digest is the hex SHA-256 of the canonical key set.
func (s *KeySet) Digest() string {
	sum := sha256.Sum256(s.raw)
	return hex.EncodeToString(sum[:])
}

// KeyIDs lists the kids, sorted.
func (s *KeySet) KeyIDs() []string {
	ids := make([]string, 0, len(s.keys))
	for _, k := range s.keys {
		ids = append(ids, k.KeyID)
	}
	return ids
}

func (s *KeySet) key(kid string) (jose.JSONWebKey, bool) {
	for _, k := range s.keys {
		if k.KeyID == kid {
			return k, true
		}
	}
	return jose.JSONWebKey{}, false
}

// clip bounds text taken from input in messages.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}
