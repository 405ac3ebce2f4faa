// Package tagging owns AWS resource tags: TagResource, UntagResource and
// ListTagsForResource over every taggable resource (cluster, add-on, access
// entry), and the limits each enforces.
package tagging

import (
	"context"
	"errors"
	"log/slog"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
)

// Resource is one taggable resource type. Implementations return
// errdefs.MissingResource (NotFoundException) for an ARN that names nothing,
// and apply tag changes with Apply inside their own read-modify-write so the
// tag limit is checked against the stored set.
type Resource interface {
	Tags(ctx context.Context, arn ARN) (map[string]string, error)
	UpdateTags(ctx context.Context, arn ARN, set map[string]string, remove []string) error
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
