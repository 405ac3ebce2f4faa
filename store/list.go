package store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxPageSize is the largest page any listing returns (AWS's maxResults).
const MaxPageSize = 100

// ListOptions select one page of a listing.
type ListOptions struct {
	// Prefix is the relative key prefix listed.
	Prefix string
	// Scope names the listing (operation and caller) and is bound into the
	// continuation token, so a token from one listing is refused by another
	// even when their prefixes are alike.
	Scope string
	// Limit is the page size, 1..MaxPageSize; MaxPageSize when zero.
	Limit int
	// Token is the continuation token from the previous page, or "".
	Token string
	// KeysOnly skips the values.
	KeysOnly bool
}

// KV is one listed record.
type KV struct {
	// Key is relative to the root prefix.
	Key string
	// Name is Key with the listing prefix removed.
	Name   string
	Value  []byte
	ModRev int64
}

// Page is one page of a listing.
type Page struct {
	Items []KV
	// NextToken continues the listing; empty on the last page.
	NextToken string
	// Revision is the etcd revision the page was read at.
	Revision int64
}

// List returns one page of the keys under opts.Prefix, in key order.
func (s *Store) List(ctx context.Context, opts ListOptions) (Page, error) {
	limit := opts.Limit
	if limit == 0 {
		limit = MaxPageSize
	}
	if limit < 0 || limit > MaxPageSize {
		return Page{}, fmt.Errorf("list %s: page size %d outside 1..%d", opts.Prefix, limit, MaxPageSize)
	}
	start := s.Key(opts.Prefix)
	if opts.Token != "" {
		after, err := s.tokens.open(opts.Token, opts.Scope, opts.Prefix)
		if err != nil {
			return Page{}, err
		}
		// Resume strictly after the last key returned.
		start = s.Key(opts.Prefix+after) + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(s.Key(opts.Prefix))

	if err := s.refuse(opts.Prefix); err != nil {
		return Page{}, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	getOpts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit + 1))}
	if opts.KeysOnly {
		getOpts = append(getOpts, clientv3.WithKeysOnly())
	}
	resp, err := s.client.Get(ctx, start, getOpts...)
	if err != nil {
		return Page{}, mapErr(err, opts.Prefix)
	}
	s.observe(resp.Header.Revision)
	page := Page{Revision: resp.Header.Revision}
	for i, kv := range resp.Kvs {
		if i == limit {
			last := page.Items[limit-1].Name
			page.NextToken = s.tokens.seal(opts.Scope, opts.Prefix, last)
			break
		}
		rel := s.rel(kv.Key)
		page.Items = append(page.Items, KV{
			Key:    rel,
			Name:   strings.TrimPrefix(rel, opts.Prefix),
			Value:  kv.Value,
			ModRev: kv.ModRevision,
		})
	}
	return page, nil
}

// tokenSigner seals and opens continuation tokens. A token is
// base64url(payload || HMAC-SHA256(key, payload)[:16]); the key is shared by
// all replicas through StoreMeta, so any replica can continue a listing.
type tokenSigner struct {
	key []byte
}

type tokenPayload struct {
	V int    `json:"v"`
	S string `json:"s"` // hash of scope and prefix
	A string `json:"a"` // resume after this name
}

const tokenMACLen = 16

func (t *tokenSigner) scopeHash(scope, prefix string) string {
	h := sha256.Sum256([]byte(scope + "\x00" + prefix))
	return base64.RawURLEncoding.EncodeToString(h[:9])
}

func (t *tokenSigner) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("saltbush-page-v1\x00"))
	m.Write(payload)
	return m.Sum(nil)[:tokenMACLen]
}

func (t *tokenSigner) seal(scope, prefix, after string) string {
	payload, _ := json.Marshal(tokenPayload{V: 1, S: t.scopeHash(scope, prefix), A: after})
	return base64.RawURLEncoding.EncodeToString(append(payload, t.mac(payload)...))
}

func (t *tokenSigner) open(token, scope, prefix string) (string, error) {
	// Tokens are small; refuse absurd ones before decoding.
	if len(token) > 4096 {
		return "", fmt.Errorf("token of %d bytes: %w", len(token), ErrInvalidToken)
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	// Only the canonical encoding is a token: Go's decoder skips CR and LF
	// and ignores the spare low bits of the last character, so without this
	// check many altered strings would open as the same token.
	if err != nil || len(raw) <= tokenMACLen || base64.RawURLEncoding.EncodeToString(raw) != token {
		return "", fmt.Errorf("malformed token: %w", ErrInvalidToken)
	}
	payload, sum := raw[:len(raw)-tokenMACLen], raw[len(raw)-tokenMACLen:]
	if !hmac.Equal(sum, t.mac(payload)) {
		return "", fmt.Errorf("token signature mismatch: %w", ErrInvalidToken)
	}
	var p tokenPayload
	if err := json.Unmarshal(payload, &p); err != nil || p.V != 1 {
		return "", fmt.Errorf("unreadable token: %w", ErrInvalidToken)
	}
	if p.S != t.scopeHash(scope, prefix) {
		return "", fmt.Errorf("token belongs to another listing: %w", ErrInvalidToken)
	}
	return p.A, nil
}

// SealPageToken makes a continuation token for a listing that is not read
// from etcd (the add-on catalogue): resume after the name after, within
// scope. It is signed with the same key as List's tokens, so every replica
// accepts it and a tampered or foreign token is refused.
func (s *Store) SealPageToken(scope, after string) string {
	return s.tokens.seal(scope, "", after)
}

// OpenPageToken returns the name a token from SealPageToken resumes after.
// It fails with ErrInvalidToken for a token of another scope or a forged one.
func (s *Store) OpenPageToken(token, scope string) (string, error) {
	return s.tokens.open(token, scope, "")
}
