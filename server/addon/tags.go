package addon

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

// TagResource is the add-on as a taggable resource (ARN type "addon",
// path cluster/addon/uuid). The uuid must be the current incarnation's: an
// ARN of a deleted add-on does not tag its successor.
type TagResource struct{ svc *Service }

var _ tagging.Resource = TagResource{}

// Tagging returns the add-on's tagging.Resource.
func (s *Service) Tagging() TagResource { return TagResource{svc: s} }

func (t TagResource) locate(ctx context.Context, arn tagging.ARN) (string, error) {
	missing := errdefs.MissingResource("No addon found for arn: %s.", arn.Raw)
	if len(arn.Path) != 3 || !namePattern.MatchString(arn.Path[1]) {
		return "", missing
	}
	c, _, err := t.svc.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: arn.Account, Name: arn.Path[0]})
	if err != nil {
		var apiErr *errdefs.Error
		if errors.As(err, &apiErr) {
			return "", missing.WithCause(err)
		}
		return "", err
	}
	return store.AddonKey(c.GetUid(), arn.Path[1]), nil
}

// stored is the add-on record's side of tagging: the ARN's uuid must be
// the record's.
func (t TagResource) stored() tagging.Stored[*storagev1.AddonRecord] {
	return tagging.Stored[*storagev1.AddonRecord]{
		Store:   t.svc.store,
		New:     func() *storagev1.AddonRecord { return &storagev1.AddonRecord{} },
		Current: func(r *storagev1.AddonRecord, arn tagging.ARN) bool { return r.GetUid() == arn.Path[2] },
		SetTags: func(r *storagev1.AddonRecord, tags map[string]string) {
			r.Tags = tags
			r.ModifiedAt = timestamppb.New(t.svc.cfg.Now())
		},
	}
}

// Tags implements tagging.Resource.
func (t TagResource) Tags(ctx context.Context, arn tagging.ARN) (map[string]string, error) {
	key, err := t.locate(ctx, arn)
	if err != nil {
		return nil, err
	}
	return t.stored().Tags(ctx, key, arn, errdefs.MissingResource("No addon found for arn: %s.", arn.Raw), arn.Raw)
}

// UpdateTags implements tagging.Resource. Tags are AWS metadata, not part
// of what the guest renders, so they do not bump the generation.
func (t TagResource) UpdateTags(ctx context.Context, arn tagging.ARN, set map[string]string, remove []string) error {
	key, err := t.locate(ctx, arn)
	if err != nil {
		return err
	}
	return t.stored().Update(ctx, key, arn, errdefs.MissingResource("No addon found for arn: %s.", arn.Raw), arn.Raw, set, remove)
}
