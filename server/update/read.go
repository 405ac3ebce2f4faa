package update

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// Describe returns one update of the caller's cluster.
func (s *Service) Describe(ctx context.Context, clusterName, updateID string, f Filter) (*storagev1.UpdateRecord, error) {
	c, err := s.cluster(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	prefix, err := s.scope(ctx, c, f)
	if err != nil {
		return nil, err
	}
	missing := errdefs.NotFound("No update found for id: %s.", updateID).WithField("clusterName", clusterName)
	if f.AddonName != "" {
		missing = missing.WithField("addonName", f.AddonName)
	}
	// Update ids are UUIDs; anything else (a "/" above all) is not a key.
	if _, perr := uuid.Parse(updateID); perr != nil {
		return nil, missing
	}
	rec := &storagev1.UpdateRecord{}
	if _, err := s.store.Read(ctx, prefix+updateID, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, missing.WithCause(err)
		}
		return nil, fmt.Errorf("cluster %q update %q: %w", clusterName, updateID, err)
	}
	return rec, nil
}

// List returns one page of update ids of the caller's cluster in key
// order. Update ids are UUIDv7, so key order is creation order.
func (s *Service) List(ctx context.Context, clusterName string, f Filter, maxResults *int32, nextToken string) ([]string, string, error) {
	c, err := s.cluster(ctx, clusterName)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	prefix, err := s.scope(ctx, c, f)
	if err != nil {
		return nil, "", err
	}
	page, err := s.store.ReadList(ctx, store.ListOptions{
		Prefix:   prefix,
		Scope:    "ListUpdates/" + c.GetUid() + "/" + f.AddonName,
		Limit:    limit,
		Token:    nextToken,
		KeysOnly: true,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err)
		}
		return nil, "", fmt.Errorf("list updates of cluster %q: %w", clusterName, err)
	}
	ids := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		ids = append(ids, kv.Name)
	}
	return ids, page.NextToken, nil
}
