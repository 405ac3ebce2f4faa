package access

import (
	"context"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// Delete removes an entry and its associations, guarded by the entry's
// and the cluster's revisions.
func (s *Service) Delete(ctx context.Context, cluster, principalArn string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cluster, true)
		if err != nil {
			return err
		}
		rec, rev, err := s.get(ctx, c, principalArn)
		if err != nil {
			return err
		}
		key, _ := entryKey(c, principalArn)
		_, err = s.store.Commit(ctx, store.NewTxn().
			Delete(key, rev).
			RequireModRevision(store.ClusterKey(who.AccountID, cluster), clusterRev))
		if err == nil {
			s.log.InfoContext(ctx, "access entry deleted", "account", who.AccountID, "cluster", cluster,
				"principal", rec.GetPrincipalArn(), "uid", rec.GetUid())
		}
		return err
	})
	return wrapUnlessAPI(err, "delete access entry %q of cluster %q", principalArn, cluster)
}
