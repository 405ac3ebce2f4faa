package tagging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/identity"
)

// ARN is a parsed EKS resource ARN:
// arn:aws:eks:{region}:{account}:{type}/{path...}.
type ARN struct {
	Raw     string
	Region  string
	Account string
	// Type is the resource type: cluster, addon, access-entry.
	Type string
	// Path is the rest, split on "/": [name] for a cluster,
	// [cluster, addon, uuid] for an add-on.
	Path []string
}

// ParseARN parses an EKS resource ARN. Path labels arrive percent-encoded
// from the façade (its unescaping mode keeps reserved characters escaped so
// that "/" in an ARN cannot split a route), so they are decoded here; a real
// ARN never contains "%".
func ParseARN(raw string) (ARN, error) {
	s := raw
	if strings.Contains(s, "%") {
		dec, err := url.PathUnescape(s)
		if err != nil {
			return ARN{}, fmt.Errorf("resource ARN %q is not validly percent-encoded", raw)
		}
		s = dec
	}
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != "aws" || parts[2] != "eks" {
		return ARN{}, fmt.Errorf("resource ARN %q is not an EKS ARN (arn:aws:eks:region:account:type/name)", s)
	}
	if err := identity.ValidateAccountID(parts[4]); err != nil {
		return ARN{}, fmt.Errorf("resource ARN %q: %w", s, err)
	}
	typ, rest, ok := strings.Cut(parts[5], "/")
	if !ok || typ == "" || rest == "" {
		return ARN{}, fmt.Errorf("resource ARN %q names no resource", s)
	}
	path := strings.Split(rest, "/")
	for _, p := range path {
		if p == "" {
			return ARN{}, fmt.Errorf("resource ARN %q has an empty path segment", s)
		}
	}
	return ARN{Raw: s, Region: parts[3], Account: parts[4], Type: typ, Path: path}, nil
}

// Resource is one taggable resource type. Implementations return
// errdefs.MissingResource (NotFoundException) for an ARN that names nothing,
// and apply tag changes with Apply inside their own read-modify-write so the
// tag limit is checked against the stored set.
type Resource interface {
	Tags(ctx context.Context, arn ARN) (map[string]string, error)
	UpdateTags(ctx context.Context, arn ARN, set map[string]string, remove []string) error
}

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

// Service is TagResource, UntagResource and ListTagsForResource over the
// resource types registered with it.
type Service struct {
	region    string
	resources map[string]Resource
	log       *slog.Logger
}

// NewService returns the tag service for region with resources by ARN type.
func NewService(region string, resources map[string]Resource, log *slog.Logger) *Service {
	return &Service{region: region, resources: resources, log: log}
}

// resolve parses arn and finds its resource type. An ARN of another account
// or region names nothing the caller can see: NotFoundException, the same
// answer as for an absent resource, so accounts stay walls.
func (s *Service) resolve(ctx context.Context, raw string) (ARN, Resource, error) {
	who, ok := identity.FromContext(ctx)
	if !ok {
		return ARN{}, nil, errors.New("request has no authenticated caller")
	}
	arn, err := ParseARN(raw)
	if err != nil {
		return ARN{}, nil, errdefs.BadRequest("%v.", err)
	}
	r, ok := s.resources[arn.Type]
	if !ok {
		return ARN{}, nil, errdefs.BadRequest("Resource type %s of %s cannot be tagged.", arn.Type, arn.Raw)
	}
	if arn.Account != who.AccountID || arn.Region != s.region {
		return ARN{}, nil, errdefs.MissingResource("Resource %s not found.", arn.Raw)
	}
	return arn, r, nil
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

// List returns the resource's tags.
func (s *Service) List(ctx context.Context, raw string) (map[string]string, error) {
	arn, r, err := s.resolve(ctx, raw)
	if err != nil {
		return nil, err
	}
	tags, err := r.Tags(ctx, arn)
	if err != nil {
		return nil, err
	}
	if tags == nil {
		tags = map[string]string{}
	}
	return tags, nil
}
