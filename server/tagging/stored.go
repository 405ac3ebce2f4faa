package tagging

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/protobuf/proto"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Tagged is a stored record that carries AWS tags.
type Tagged interface {
	proto.Message
	GetTags() map[string]string
}

// Stored is what every Resource does with the record an ARN names, once:
// a record that is absent, or of another incarnation than the ARN's, is
// NotFoundException; a tag change is applied with Apply inside the record's
// store.Update, so the limits are checked against the stored set, and
// writes nothing when the tags do not change.
type Stored[T Tagged] struct {
	Store *store.Store
	// New returns an empty record to read into.
	New func() T
	// Current says whether rec is the incarnation arn names; nil when any
	// record at the key is (a cluster's ARN names no incarnation).
	Current func(rec T, arn ARN) bool
	// SetTags stores changed tags in rec, with whatever else a tag change
	// moves (its modifiedAt).
	SetTags func(rec T, tags map[string]string)
}

// Tags returns the tags of the record at key. missing is the
// NotFoundException for arn; what names the resource in other errors.
func (s Stored[T]) Tags(ctx context.Context, key string, arn ARN, missing *errdefs.Error, what string) (map[string]string, error) {
	rec := s.New()
	if _, err := s.Store.Get(ctx, key, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, missing.WithCause(err)
		}
		return nil, fmt.Errorf("tags of %s: %w", what, err)
	}
	if s.Current != nil && !s.Current(rec, arn) {
		return nil, missing
	}
	return rec.GetTags(), nil
}

// Update adds set to and removes remove from the tags of the record at
// key. missing and what are as for Tags.
func (s Stored[T]) Update(ctx context.Context, key string, arn ARN, missing *errdefs.Error, what string, set map[string]string, remove []string) error {
	_, err := store.Update(ctx, s.Store, key, s.New(), func(rec T, _ *store.Txn) error {
		if s.Current != nil && !s.Current(rec, arn) {
			return missing
		}
		tags, err := Apply(rec.GetTags(), set, remove)
		if err != nil {
			return err
		}
		if !maps.Equal(tags, rec.GetTags()) {
			s.SetTags(rec, tags)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return missing.WithCause(err)
	}
	var apiErr *errdefs.Error
	if err == nil || errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("tag %s: %w", what, err)
}
