package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/saltbush/saltbush/errdefs"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
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

// Tags implements tagging.Resource.
func (t TagResource) Tags(ctx context.Context, arn tagging.ARN) (map[string]string, error) {
	key, err := t.key(arn)
	if err != nil {
		return nil, err
	}
	rec := &storagev1.ClusterRecord{}
	if _, err := t.svc.store.Get(ctx, key, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.MissingResource("No cluster found for arn: %s.", arn.Raw).WithCause(err)
		}
		return nil, fmt.Errorf("tags of cluster %q: %w", arn.Path[0], err)
	}
	return rec.GetTags(), nil
}

// UpdateTags implements tagging.Resource. Tags are metadata: changing them
// is not a lifecycle change, so status and the rest stay as they are.
func (t TagResource) UpdateTags(ctx context.Context, arn tagging.ARN, set map[string]string, remove []string) error {
	key, err := t.key(arn)
	if err != nil {
		return err
	}
	_, err = store.Update(ctx, t.svc.store, key, &storagev1.ClusterRecord{}, func(c *storagev1.ClusterRecord, _ *store.Txn) error {
		tags, err := tagging.Apply(c.GetTags(), set, remove)
		if err != nil {
			return err
		}
		if !maps.Equal(tags, c.GetTags()) {
			c.Tags = tags
			c.ModifiedAt = timestamppb.New(t.svc.cfg.Now())
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.MissingResource("No cluster found for arn: %s.", arn.Raw).WithCause(err)
	}
	if err != nil {
		var apiErr *errdefs.Error
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("tag cluster %q: %w", arn.Path[0], err)
	}
	return nil
}
