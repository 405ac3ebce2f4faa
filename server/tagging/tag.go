package tagging

import (
	"context"
	"sort"

	"github.com/saltbush/saltbush/errdefs"
)

// Apply returns cur with set added and remove removed, checked against
// AWS's limits (BadRequestException, as the tag operations model).
func Apply(cur, set map[string]string, remove []string) (map[string]string, error) {
	out := make(map[string]string, len(cur)+len(set))
	for k, v := range cur {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	for _, k := range remove {
		delete(out, k)
	}
	if err := Validate(out); err != nil {
		return nil, errdefs.BadRequest("%v.", err)
	}
	return out, nil
}

// Tag adds or overwrites tags.
func (s *Service) Tag(ctx context.Context, raw string, tags map[string]string) error {
	arn, r, err := s.resolve(ctx, raw)
	if err != nil {
		return err
	}
	if len(tags) == 0 {
		return errdefs.BadRequest("tags must contain at least one tag.")
	}
	if err := Validate(tags); err != nil {
		return errdefs.BadRequest("%v.", err)
	}
	return r.UpdateTags(ctx, arn, tags, nil)
}

// Untag removes tag keys; absent keys are ignored.
func (s *Service) Untag(ctx context.Context, raw string, keys []string) error {
	arn, r, err := s.resolve(ctx, raw)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return errdefs.BadRequest("tagKeys must contain at least one key.")
	}
	if len(keys) > MaxTags {
		return errdefs.BadRequest("tagKeys may name at most %d keys, got %d.", MaxTags, len(keys))
	}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	for _, k := range sorted {
		if err := ValidateKey(k); err != nil {
			return errdefs.BadRequest("%v.", err)
		}
	}
	return r.UpdateTags(ctx, arn, nil, keys)
}
