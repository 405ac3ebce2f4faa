package cluster

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

// TagResource is the cluster as a taggable resource (ARN type "cluster").
type TagResource struct{ svc *Service }

var _ tagging.Resource = TagResource{}

// Tagging returns the cluster's tagging.Resource.
func (s *Service) Tagging() TagResource { return TagResource{svc: s} }

func (t TagResource) key(arn tagging.ARN) (string, error) {
	if len(arn.Path) != 1 || validateName(arn.Path[0]) != nil {
		return "", errdefs.MissingResource("No cluster found for arn: %s.", arn.Raw)
	}
	return store.ClusterKey(arn.Account, arn.Path[0]), nil
}

// stored is the cluster record's side of tagging. A cluster's ARN names
// no incarnation: it tags whichever record has the name.
func (t TagResource) stored() tagging.Stored[*storagev1.ClusterRecord] {
	return tagging.Stored[*storagev1.ClusterRecord]{
		Store: t.svc.store,
		New:   func() *storagev1.ClusterRecord { return &storagev1.ClusterRecord{} },
		SetTags: func(c *storagev1.ClusterRecord, tags map[string]string) {
			c.Tags = tags
			c.ModifiedAt = timestamppb.New(t.svc.cfg.Now())
		},
	}
}

// Tags implements tagging.Resource.
func (t TagResource) Tags(ctx context.Context, arn tagging.ARN) (map[string]string, error) {
	key, err := t.key(arn)
	if err != nil {
		return nil, err
	}
	return t.stored().Tags(ctx, key, arn, errdefs.MissingResource("No cluster found for arn: %s.", arn.Raw), fmt.Sprintf("cluster %q", arn.Path[0]))
}

// UpdateTags implements tagging.Resource. Tags are metadata: changing them
// is not a lifecycle change, so status and the rest stay as they are.
func (t TagResource) UpdateTags(ctx context.Context, arn tagging.ARN, set map[string]string, remove []string) error {
	key, err := t.key(arn)
	if err != nil {
		return err
	}
	return t.stored().Update(ctx, key, arn, errdefs.MissingResource("No cluster found for arn: %s.", arn.Raw), fmt.Sprintf("cluster %q", arn.Path[0]), set, remove)
}
