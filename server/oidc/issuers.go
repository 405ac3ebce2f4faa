package oidc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// IssuerKey is where the keys of an issuer live: one record per issuer
// URL, so a token's iss finds its keys in one read.
func IssuerKey(issuer string) string {
	sum := sha256.Sum256([]byte(issuer))
	return "oidc/issuers/" + hex.EncodeToString(sum[:])
}

// Issuer is a hosted issuer: its record, the keys parsed, and the cluster
// that issues its tokens.
type Issuer struct {
	Record  *storagev1.ServiceAccountIssuerRecord
	Keys    *KeySet
	Cluster *storagev1.ClusterRecord
}

// ErrUnknownIssuer is returned for an issuer saltbush holds no keys for,
// or whose cluster no longer exists with that issuer.
var ErrUnknownIssuer = errors.New("no cluster's keys are known for this issuer")

// Issuers reads hosted issuers from the store.
type Issuers struct {
	store *store.Store
}

// NewIssuers returns the issuers of st.
func NewIssuers(st *store.Store) *Issuers { return &Issuers{store: st} }

// Get returns the issuer's keys and cluster. The record counts only while
// the cluster it names exists as the same incarnation, still has this
// issuer, and is neither DELETING nor FAILED: a deleted cluster's tokens
// stop verifying with it.
func (is *Issuers) Get(ctx context.Context, issuer string) (*Issuer, error) {
	rec := &storagev1.ServiceAccountIssuerRecord{}
	if _, err := is.store.Get(ctx, IssuerKey(issuer), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrUnknownIssuer
		}
		return nil, fmt.Errorf("issuer %s: %w", issuer, err)
	}
	cl := &storagev1.ClusterRecord{}
	if _, err := is.store.Get(ctx, store.ClusterKey(rec.GetAccountId(), rec.GetClusterName()), cl); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrUnknownIssuer
		}
		return nil, fmt.Errorf("cluster of issuer %s: %w", issuer, err)
	}
	if !Serves(cl, rec) {
		return nil, ErrUnknownIssuer
	}
	keys, err := ParseKeySet(rec.GetJwks())
	if err != nil {
		return nil, fmt.Errorf("stored keys of issuer %s: %w", issuer, err)
	}
	return &Issuer{Record: rec, Keys: keys, Cluster: cl}, nil
}

// ForCluster returns the keys of cl's issuer when they are cl's: what EKS
// Auth verifies a token of a cluster it has read already with, in one
// read.
func (is *Issuers) ForCluster(ctx context.Context, cl *storagev1.ClusterRecord) (*Issuer, error) {
	rec := &storagev1.ServiceAccountIssuerRecord{}
	if _, err := is.store.Get(ctx, IssuerKey(cl.GetOidcIssuer()), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrUnknownIssuer
		}
		return nil, fmt.Errorf("issuer %s: %w", cl.GetOidcIssuer(), err)
	}
	if !Serves(cl, rec) {
		return nil, ErrUnknownIssuer
	}
	keys, err := ParseKeySet(rec.GetJwks())
	if err != nil {
		return nil, fmt.Errorf("stored keys of issuer %s: %w", rec.GetIssuer(), err)
	}
	return &Issuer{Record: rec, Keys: keys, Cluster: cl}, nil
}

// Serves reports whether an issuer record still belongs to cluster: the
// same incarnation, with this issuer, neither DELETING nor FAILED.
func Serves(cl *storagev1.ClusterRecord, rec *storagev1.ServiceAccountIssuerRecord) bool {
	switch cl.GetStatus() {
	case storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, storagev1.ClusterStatus_CLUSTER_STATUS_FAILED:
		return false
	}
	return cl.GetUid() == rec.GetClusterUid() && cl.GetOidcIssuer() == rec.GetIssuer()
}

// CheckIssuerURL says whether s can be an issuer saltbush hosts: an https
// URL with a host, no query, fragment or user, and no trailing slash (the
// iss of a token must equal it exactly).
func CheckIssuerURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", clip(s))
	case u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q is not an https URL without query or fragment", clip(s))
	case strings.HasSuffix(s, "/"):
		return fmt.Errorf("%q ends with a slash", clip(s))
	}
	return nil
}
