package podidentity

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

// Describe returns one association of the caller's cluster.
func (s *Service) Describe(ctx context.Context, cluster, id string) (*storagev1.PodIdentityAssociationRecord, error) {
	_, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return nil, err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.FromView)
	if err != nil {
		return nil, err
	}
	c := sc.Cluster
	rec, _, err := s.getWith(ctx, s.store.Read, c, id)
	return rec, err
}

// ForServiceAccount returns the association that holds (namespace,
// serviceAccount) in cluster incarnation uid — what EKS Auth issues
// credentials by — or nil when none does.
func (s *Service) ForServiceAccount(ctx context.Context, uid, namespace, serviceAccount string) (*storagev1.PodIdentityAssociationRecord, error) {
	id, err := holder(ctx, s.store, uid, namespace, serviceAccount)
	if err != nil || id == "" {
		return nil, err
	}
	rec := &storagev1.PodIdentityAssociationRecord{}
	if _, err := s.store.Get(ctx, store.PodIdentityAssociationKey(uid, id), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil // deleted since the holder was read
		}
		return nil, fmt.Errorf("pod identity association %s: %w", id, err)
	}
	return rec, nil
}

// Filter selects associations in a listing; empty members match all.
type Filter struct {
	Namespace      string
	ServiceAccount string
}

func (f Filter) matches(rec *storagev1.PodIdentityAssociationRecord) bool {
	return (f.Namespace == "" || rec.GetNamespace() == f.Namespace) &&
		(f.ServiceAccount == "" || rec.GetServiceAccount() == f.ServiceAccount)
}

// List returns one page of the caller's cluster's associations in id
// order, only those f matches. A filtered page may hold fewer than
// maxResults associations (even none) and still have a nextToken: the
// filter runs over one page of the store.
func (s *Service) List(ctx context.Context, cluster string, f Filter, maxResults *int32, nextToken string) ([]*storagev1.PodIdentityAssociationRecord, string, error) {
	_, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return nil, "", err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.FromView)
	if err != nil {
		return nil, "", err
	}
	c := sc.Cluster
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", errdefs.WithField(err, "clusterName", cluster)
	}
	page, err := s.store.ReadList(ctx, store.ListOptions{
		Prefix: store.PodIdentityAssociationsPrefix(c.GetUid()),
		// The filter is part of the scope: a token of a filtered listing
		// does not continue another.
		Scope: "ListPodIdentityAssociations/" + c.GetUid() + "/" + f.Namespace + "/" + f.ServiceAccount,
		Limit: limit,
		Token: nextToken,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err).WithField("clusterName", cluster)
		}
		return nil, "", fmt.Errorf("list pod identity associations of cluster %q: %w", cluster, err)
	}
	out := make([]*storagev1.PodIdentityAssociationRecord, 0, len(page.Items))
	for _, kv := range page.Items {
		rec := &storagev1.PodIdentityAssociationRecord{}
		if err := store.Decode(kv.Value, rec); err != nil {
			return nil, "", fmt.Errorf("list pod identity associations of cluster %q: %s: %w", cluster, kv.Key, err)
		}
		if f.matches(rec) {
			out = append(out, rec)
		}
	}
	return out, page.NextToken, nil
}
