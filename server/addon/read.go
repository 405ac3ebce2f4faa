package addon

import (
	"context"
	"errors"
	"fmt"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// Describe returns one add-on of the caller's cluster, including one that
// is DELETING.
//
// Both are read from the replica's read view (store.Read: every write of
// this replica is in it). A found add-on is consistent with the cluster
// read: a cluster's add-ons are purged in the same transaction as the
// cluster, so the uid read cannot name a gone incarnation whose add-on
// still exists. A miss is confirmed linearizably (the cluster may have been
// recreated, or the add-on created, through another replica a moment ago).
func (s *Service) Describe(ctx context.Context, clusterName, name string) (*storagev1.AddonRecord, error) {
	_, ref, err := clusterscope.Ref(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.Serializable)
	if err != nil {
		return nil, err
	}
	if !namePattern.MatchString(name) {
		return nil, addonNotFound(clusterName, name)
	}
	rec, _, err := s.read(ctx, sc.Cluster, name)
	if !errdefs.IsException(err, errdefs.ResourceNotFoundException) || sc.Consistency == clusterscope.Linearizable {
		return rec, err
	}
	fresh, err := s.scopes.Read(ctx, ref, clusterscope.Linearizable)
	if err != nil {
		return nil, err
	}
	rec, _, err = s.get(ctx, fresh.Cluster, name)
	return rec, err
}

// List returns one page of the add-on names of the caller's cluster.
func (s *Service) List(ctx context.Context, clusterName string, maxResults *int32, nextToken string) ([]string, string, error) {
	_, ref, err := clusterscope.Ref(ctx, clusterName)
	if err != nil {
		return nil, "", err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.Serializable)
	if err != nil {
		return nil, "", err
	}
	c := sc.Cluster
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	page, err := s.store.ReadList(ctx, store.ListOptions{
		Prefix:   store.AddonsPrefix(c.GetUid()),
		Scope:    "ListAddons/" + c.GetUid(),
		Limit:    limit,
		Token:    nextToken,
		KeysOnly: true,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err).WithField("clusterName", clusterName)
		}
		return nil, "", fmt.Errorf("list add-ons of cluster %q: %w", clusterName, err)
	}
	names := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		names = append(names, kv.Name)
	}
	return names, page.NextToken, nil
}
