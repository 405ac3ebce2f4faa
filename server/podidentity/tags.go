package podidentity

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

// ARNType is the resource type of an association's ARN.
const ARNType = "podidentityassociation"

// TagResource is the association as a taggable resource (ARN type
// "podidentityassociation", path cluster/id). Ids are never reused, so
// the ARN names one association; owned ones are tagged like any other.
type TagResource struct{ svc *Service }

var _ tagging.Resource = TagResource{}

// Tagging returns the association's tagging.Resource.
func (s *Service) Tagging() TagResource { return TagResource{svc: s} }

func missing(arn tagging.ARN) *errdefs.Error {
	return errdefs.MissingResource("No Pod Identity Association found for arn: %s.", arn.Raw)
}

// locate returns the key of the association an ARN names.
func (t TagResource) locate(ctx context.Context, arn tagging.ARN) (string, error) {
	if len(arn.Path) != 2 || !idPattern.MatchString(arn.Path[1]) {
		return "", missing(arn)
	}
	c, _, err := t.svc.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: arn.Account, Name: arn.Path[0]})
	if err != nil {
		var apiErr *errdefs.Error
		if errors.As(err, &apiErr) {
			return "", missing(arn).WithCause(err)
		}
		return "", err
	}
	return store.PodIdentityAssociationKey(c.GetUid(), arn.Path[1]), nil
}

func (t TagResource) stored() tagging.Stored[*storagev1.PodIdentityAssociationRecord] {
	return tagging.Stored[*storagev1.PodIdentityAssociationRecord]{
		Store: t.svc.store,
		New:   func() *storagev1.PodIdentityAssociationRecord { return &storagev1.PodIdentityAssociationRecord{} },
		SetTags: func(r *storagev1.PodIdentityAssociationRecord, tags map[string]string) {
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
	return t.stored().Tags(ctx, key, arn, missing(arn), arn.Raw)
}

// UpdateTags implements tagging.Resource; tags are AWS metadata of the
// association, so modifiedAt moves when they change.
func (t TagResource) UpdateTags(ctx context.Context, arn tagging.ARN, set map[string]string, remove []string) error {
	key, err := t.locate(ctx, arn)
	if err != nil {
		return err
	}
	return t.stored().Update(ctx, key, arn, missing(arn), arn.Raw, set, remove)
}
