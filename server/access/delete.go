package access

import (
	"context"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Delete removes an entry and its associations, guarded by the entry's
// and the cluster's revisions.
func (s *Service) Delete(ctx context.Context, cluster, principalArn string) error {
	who, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return err
	}
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		rec, rev, err := s.get(ctx, sc.Cluster, principalArn)
		if err != nil {
			return err
		}
		key, _ := entryKey(sc.Cluster, principalArn)
		_, err = s.store.Commit(ctx, sc.Guard(store.NewTxn().Delete(key, rev)))
		if err == nil {
			s.log.InfoContext(ctx, "access entry deleted", "account", who.AccountID, "cluster", cluster,
				"principal", rec.GetPrincipalArn(), "uid", rec.GetUid())
		}
		return err
	})
	return errdefs.Wrap(err, "delete access entry %q of cluster %q", principalArn, cluster)
}
