package iam

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// OpenID Connect providers made by IAM's CreateOpenIDConnectProvider
// (server/sts/oidc.go serves the API, and merges these records with the
// providers it derives from the account's clusters). A provider is keyed
// by its URL: an account has at most one per URL.

// Limits of one provider, as IAM's quotas name them.
const (
	// MaxOIDCClientIDs is ClientIdsPerOpenIdConnectProvider.
	MaxOIDCClientIDs = 100
	// MaxOIDCThumbprints is the most thumbprints a provider holds.
	MaxOIDCThumbprints = 5
	// MaxOIDCTags is the most tags an IAM resource holds.
	MaxOIDCTags = 50
)

func oidcProvidersPrefix(account string) string { return accountKey(account) + "/oidc-providers/" }

// oidcProviderKey is where the provider of url lives; the URL (up to 255
// characters, with "/") is hashed.
func oidcProviderKey(account, providerURL string) string {
	sum := sha256.Sum256([]byte(providerURL))
	return oidcProvidersPrefix(account) + hex.EncodeToString(sum[:])
}

// OIDCProviderARN is the ARN of an account's provider:
// arn:aws:iam::{account}:oidc-provider/{url without https://}.
func OIDCProviderARN(account, providerURL string) string {
	return "arn:aws:iam::" + account + ":oidc-provider/" + strings.TrimPrefix(providerURL, "https://")
}

// oidcThumbprint is a hex SHA-1, either case.
var oidcThumbprint = regexp.MustCompile(`^[0-9A-Fa-f]{40}$`)

// ValidOIDCThumbprint reports whether t is a thumbprint IAM keeps: the hex
// SHA-1 of a certificate, 40 hexadecimal digits.
func ValidOIDCThumbprint(t string) bool { return oidcThumbprint.MatchString(t) }

// NormalizeOIDCProviderURL checks a provider URL and returns it as the
// provider is keyed and named: https://{host}{path}, the scheme lowercased
// and a default port (:443) dropped, so that the URL eksctl sends
// (https://{host}:443/{path}) names the provider its later lookups (by
// host and path) find. Anything else is kept as given: host and path are
// compared exactly, as the issuer claim of a token is.
func NormalizeOIDCProviderURL(raw string) (string, error) {
	bad := errdefs.InvalidParameter("Invalid Open ID Connect Provider URL: %q is not https://{host}{path} without a query, a fragment or user information.", raw)
	if len(raw) < len("https://") || !strings.EqualFold(raw[:len("https://")], "https://") {
		return "", bad
	}
	rest := raw[len("https://"):]
	if strings.ContainsFunc(rest, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\\' || r == '?' || r == '#' }) {
		return "", bad
	}
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	if host == "" || strings.Contains(host, "@") {
		return "", bad
	}
	u, err := url.Parse("https://" + host + path)
	if err != nil || u.Hostname() == "" {
		return "", bad
	}
	if u.Port() == "443" {
		host = strings.TrimSuffix(host, ":443")
	}
	return "https://" + host + path, nil
}

// checkOIDCProvider holds a record to what a provider may be: IAM's
// limits, thumbprints of 40 hex digits, no client id twice and no tag key
// twice whatever its case.
func checkOIDCProvider(rec *storagev1.OpenIDConnectProviderRecord) error {
	switch {
	case len(rec.GetClientIds()) > MaxOIDCClientIDs:
		return errdefs.ResourceLimitExceeded("Cannot exceed quota for ClientIdsPerOpenIdConnectProvider: %d", MaxOIDCClientIDs)
	case len(rec.GetThumbprints()) > MaxOIDCThumbprints:
		return errdefs.InvalidParameter("Thumbprint list must contain fewer than %d entries.", MaxOIDCThumbprints)
	case len(rec.GetTags()) > MaxOIDCTags:
		return errdefs.ResourceLimitExceeded("Cannot exceed quota for TagsPerOpenIdConnectProvider: %d", MaxOIDCTags)
	}
	for _, t := range rec.GetThumbprints() {
		if !ValidOIDCThumbprint(t) {
			return errdefs.InvalidParameter("Thumbprint %q is not valid: a thumbprint is 40 hexadecimal digits.", t)
		}
	}
	ids := map[string]bool{}
	for _, id := range rec.GetClientIds() {
		if ids[id] {
			return fmt.Errorf("client id %q twice in the provider %s", id, rec.GetUrl())
		}
		ids[id] = true
	}
	keys := map[string]bool{}
	for _, t := range rec.GetTags() {
		k := strings.ToLower(t.GetKey())
		if keys[k] {
			return errdefs.InvalidParameter("Duplicate tag keys found. Please note that Tag keys are case insensitive.")
		}
		keys[k] = true
	}
	return nil
}

// CreateOIDCProvider records a provider of an existing account,
// exclusively: ResourceInUse when the account has one for the URL already.
// rec.Url must be normalized (NormalizeOIDCProviderURL); CreatedAt is set
// here. The account's existence is checked in the same transaction.
func (s *Service) CreateOIDCProvider(ctx context.Context, rec *storagev1.OpenIDConnectProviderRecord) (*storagev1.OpenIDConnectProviderRecord, error) {
	rec = proto.CloneOf(rec)
	account, providerURL := rec.GetAccountId(), rec.GetUrl()
	if norm, err := NormalizeOIDCProviderURL(providerURL); err != nil {
		return nil, err
	} else if norm != providerURL {
		return nil, fmt.Errorf("create OIDC provider %q: the URL is not normalized (%q)", providerURL, norm)
	}
	if err := checkOIDCProvider(rec); err != nil {
		return nil, err
	}
	rec.CreatedAt = timestamppb.New(s.now())
	_, err := s.store.Commit(ctx, store.NewTxn().
		Create(oidcProviderKey(account, providerURL), rec).
		RequireExists(accountKey(account)))
	switch {
	case errors.Is(err, store.ErrExists):
		return nil, errdefs.ResourceInUse("Provider with url %s already exists.", providerURL)
	case errors.Is(err, store.ErrConflict):
		return nil, errdefs.NotFound("Account %s does not exist.", account)
	case err != nil:
		return nil, fmt.Errorf("create OIDC provider %s of %s: %w", providerURL, account, err)
	}
	return rec, nil
}

// OIDCProvider returns the provider of an account for a URL.
func (s *Service) OIDCProvider(ctx context.Context, account, providerURL string) (*storagev1.OpenIDConnectProviderRecord, error) {
	rec := &storagev1.OpenIDConnectProviderRecord{}
	if _, err := s.store.Get(ctx, oidcProviderKey(account, providerURL), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("OpenIDConnect Provider not found for arn %s", OIDCProviderARN(account, providerURL))
		}
		return nil, fmt.Errorf("OIDC provider %s of %s: %w", providerURL, account, err)
	}
	return rec, nil
}

// OIDCProviders lists the providers made in an account, by URL.
func (s *Service) OIDCProviders(ctx context.Context, account string) ([]*storagev1.OpenIDConnectProviderRecord, error) {
	var out []*storagev1.OpenIDConnectProviderRecord
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{
			Prefix: oidcProvidersPrefix(account), Scope: "OIDCProviders/" + account, Token: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list the OIDC providers of %s: %w", account, err)
		}
		for _, kv := range page.Items {
			rec := &storagev1.OpenIDConnectProviderRecord{}
			if err := store.Decode(kv.Value, rec); err != nil {
				return nil, fmt.Errorf("OIDC provider %s of %s: %w", kv.Name, account, err)
			}
			out = append(out, rec)
		}
		if page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	slices.SortFunc(out, func(a, b *storagev1.OpenIDConnectProviderRecord) int { return strings.Compare(a.GetUrl(), b.GetUrl()) })
	return out, nil
}

// UpdateOIDCProvider changes the provider of an account for a URL with
// change, which must be free of side effects (it runs again after a lost
// race), in one transaction (a read-modify-write that retries on
// conflict). The changed record must still be a valid provider
// (checkOIDCProvider), or nothing is written.
//
// When the account has no record for the URL and seed is not nil (the
// caller's view of a provider that exists without one: server/sts derives
// one from every cluster's OIDC issuer), the record is made from seed and
// changed, in one transaction that creates it; a change that leaves seed
// as it is writes nothing. A record created meanwhile is changed instead.
func (s *Service) UpdateOIDCProvider(ctx context.Context, account, providerURL string, seed *storagev1.OpenIDConnectProviderRecord,
	change func(*storagev1.OpenIDConnectProviderRecord) error,
) (*storagev1.OpenIDConnectProviderRecord, error) {
	key := oidcProviderKey(account, providerURL)
	for {
		out := &storagev1.OpenIDConnectProviderRecord{}
		_, err := store.Update(ctx, s.store, key, out, func(rec *storagev1.OpenIDConnectProviderRecord, _ *store.Txn) error {
			if err := change(rec); err != nil {
				return err
			}
			return checkOIDCProvider(rec)
		})
		var refused *errdefs.Error
		switch {
		case err == nil:
			return out, nil
		case errors.As(err, &refused):
			return nil, err
		case errors.Is(err, store.ErrNotFound) && seed != nil:
		case errors.Is(err, store.ErrNotFound):
			return nil, errdefs.NotFound("OpenIDConnect Provider not found for arn %s", OIDCProviderARN(account, providerURL))
		case errors.Is(err, store.ErrConflict):
			return nil, errdefs.Conflict("OpenIDConnect Provider %s was modified concurrently; retry the request.", OIDCProviderARN(account, providerURL))
		default:
			return nil, fmt.Errorf("update OIDC provider %s of %s: %w", providerURL, account, err)
		}

		rec := proto.CloneOf(seed)
		rec.Url, rec.AccountId = providerURL, account
		if err := change(rec); err != nil {
			return nil, err
		}
		if err := checkOIDCProvider(rec); err != nil {
			return nil, err
		}
		if proto.Equal(rec, seed) {
			return rec, nil
		}
		if rec.CreatedAt == nil {
			rec.CreatedAt = timestamppb.New(s.now())
		}
		_, err = s.store.Commit(ctx, store.NewTxn().Create(key, rec).RequireExists(accountKey(account)))
		switch {
		case err == nil:
			return rec, nil
		case errors.Is(err, store.ErrExists):
			// Made meanwhile (a create, or another change of the same
			// seed): change that record.
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		case errors.Is(err, store.ErrConflict):
			return nil, errdefs.NotFound("Account %s does not exist.", account)
		default:
			return nil, fmt.Errorf("update OIDC provider %s of %s: %w", providerURL, account, err)
		}
	}
}

// DeleteOIDCProvider removes the provider of an account for a URL, in one
// transaction that requires it to exist.
func (s *Service) DeleteOIDCProvider(ctx context.Context, account, providerURL string) error {
	key := oidcProviderKey(account, providerURL)
	_, err := s.store.Commit(ctx, store.NewTxn().RequireExists(key).Remove(key))
	switch {
	case errors.Is(err, store.ErrConflict):
		return errdefs.NotFound("OpenIDConnect Provider not found for arn %s", OIDCProviderARN(account, providerURL))
	case err != nil:
		return fmt.Errorf("delete OIDC provider %s of %s: %w", providerURL, account, err)
	}
	return nil
}
