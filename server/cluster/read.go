package cluster

import (
	"context"
	"errors"
	"fmt"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// Describe returns the caller's cluster name. Reads that answer callers
// (Describe, List) come from the replica's read view (store.ReadShared):
// what this replica wrote is always there; another replica's write a
// moment later (docs/architecture.md, "Read view"). The record may be
// shared with other readers and is only converted, never changed.
func (s *Service) Describe(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	rec, _, err := store.ReadShared(ctx, s.store, store.ClusterKey(who.AccountID, name), newRecord)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(name).WithCause(err)
		}
		return nil, fmt.Errorf("describe cluster %q: %w", name, err)
	}
	return rec, nil
}

// List returns one page of the caller's cluster names.
func (s *Service) List(ctx context.Context, maxResults *int32, nextToken string) ([]string, string, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	page, err := s.store.ReadList(ctx, store.ListOptions{
		Prefix:   store.ClustersPrefix(who.AccountID),
		Scope:    "ListClusters/" + who.AccountID,
		Limit:    limit,
		Token:    nextToken,
		KeysOnly: true,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err)
		}
		return nil, "", fmt.Errorf("list clusters: %w", err)
	}
	names := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		names = append(names, kv.Name)
	}
	return names, page.NextToken, nil
}
