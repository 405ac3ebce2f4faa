// Package idempotency owns clientRequestToken handling shared by every
// operation that takes one (CreateCluster, CreateAddon, UpdateAddon, and the
// access-entry operations later). A token is remembered in the same etcd
// transaction as the change it made, with a lease TTL; a retry with the same
// token and the same parameters gets the original result, and a retry with
// different parameters is refused (AWS EKS has no IdempotentParameterMismatch
// error, so the refusal is an InvalidParameterException).
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Token is one request's clientRequestToken, ready to be remembered with the
// change it makes. The zero Token (no token given) does nothing.
type Token struct {
	key         string
	operation   string
	fingerprint []byte
}

// tokenPattern is AWS's clientRequestToken: 1 to 64 printable ASCII
// characters.
var tokenPattern = regexp.MustCompile(`^[\x21-\x7e]{1,64}$`)

// New prepares the token of req (which must have a client_request_token
// field) for operation in account. An empty token yields the zero Token; a
// malformed one is an InvalidParameterException.
func New(account, operation string, req proto.Message) (Token, error) {
	r, ok := req.(interface{ GetClientRequestToken() string })
	if !ok || r.GetClientRequestToken() == "" {
		return Token{}, nil
	}
	if !tokenPattern.MatchString(r.GetClientRequestToken()) {
		return Token{}, errdefs.InvalidParameter("clientRequestToken must be 1 to 64 printable ASCII characters.")
	}
	fp, err := Fingerprint(req)
	if err != nil {
		return Token{}, fmt.Errorf("%s: fingerprint request: %w", operation, err)
	}
	return Token{
		key:         store.IdempotencyKey(account, operation, r.GetClientRequestToken()),
		operation:   operation,
		fingerprint: fp,
	}, nil
}

// Present reports whether the request carried a token.
func (t Token) Present() bool { return t.key != "" }

// Remember adds the token to txn: created exclusively (a concurrent request
// with the same token loses with store.ErrExists) and expiring after ttl.
// resourceKey and resourceUID name what the request created or changed.
func (t Token) Remember(txn *store.Txn, resourceKey, resourceUID string, ttl time.Duration, now time.Time) {
	if !t.Present() {
		return
	}
	txn.CreateWithTTL(t.key, &storagev1.IdempotencyRecord{
		Operation:          t.operation,
		RequestFingerprint: t.fingerprint,
		ResourceKey:        resourceKey,
		ResourceUid:        resourceUID,
		CreatedAt:          timestamppb.New(now),
	}, ttl)
}

// Lookup returns the record of an earlier request with this token, or nil
// when there is none (or no token was given). A record whose fingerprint
// differs from this request's is refused with an InvalidParameterException
// naming the operation.
func (t Token) Lookup(ctx context.Context, st *store.Store) (*storagev1.IdempotencyRecord, error) {
	if !t.Present() {
		return nil, nil
	}
	prior := &storagev1.IdempotencyRecord{}
	if _, err := st.Get(ctx, t.key, prior); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: read idempotency record: %w", t.operation, err)
	}
	if !bytes.Equal(prior.GetRequestFingerprint(), t.fingerprint) {
		return nil, errdefs.InvalidParameter(
			"The clientRequestToken was already used for a %s request with different parameters.", t.operation)
	}
	return prior, nil
}

// Fingerprint hashes the request without its token, so retries with the
// same parameters match and any changed parameter does not.
func Fingerprint(req proto.Message) ([]byte, error) {
	c := proto.Clone(req)
	m := c.ProtoReflect()
	if f := m.Descriptor().Fields().ByName("client_request_token"); f != nil {
		m.Clear(f)
	}
	b, err := store.Encode(c)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// Replay reads into rec what an earlier request with this token created or
// changed, so a retry is answered as the first request was. found is false
// when the token is unknown (or absent): the request is new. uid names the
// incarnation of rec (its uid, or an association's id); when the record is
// gone, or a new incarnation took its key, the earlier result no longer
// exists and the retry is refused with gone.
func Replay[T proto.Message](ctx context.Context, st *store.Store, t Token, rec T, uid func(T) string, gone *errdefs.Error) (found bool, err error) {
	prior, err := t.Lookup(ctx, st)
	if err != nil || prior == nil {
		return false, err
	}
	_, err = st.Get(ctx, prior.GetResourceKey(), rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("%s: read the resource of an earlier request: %w", t.operation, err)
	}
	if err != nil || uid(rec) != prior.GetResourceUid() {
		return false, gone
	}
	return true, nil
}
