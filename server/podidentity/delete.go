package podidentity

import (
	"context"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// Delete removes an association and its exclusivity key in one
// transaction guarded by the association's and the cluster's revisions,
// and returns the association as it was. One an add-on owns is refused:
// it goes with its add-on.
func (s *Service) Delete(ctx context.Context, cluster, id string) (*storagev1.PodIdentityAssociationRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	var rec *storagev1.PodIdentityAssociationRecord
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cluster, true)
		if err != nil {
			return err
		}
		var rev int64
		if rec, rev, err = s.get(ctx, c, id); err != nil {
			return err
		}
		if rec.GetOwnerArn() != "" {
			return owned(cluster, rec)
		}
		txn := store.NewTxn().RequireModRevision(store.ClusterKey(who.AccountID, cluster), clusterRev)
		deleteWrites(txn, rec, rev)
		_, err = s.store.Commit(ctx, txn)
		return err
	})
	if err != nil {
		return nil, wrapUnlessAPI(err, "delete pod identity association %q of cluster %q", id, cluster)
	}
	s.log.InfoContext(ctx, "pod identity association deleted", "account", who.AccountID, "cluster", cluster,
		"association", id, "namespace", rec.GetNamespace(), "serviceAccount", rec.GetServiceAccount())
	return rec, nil
}
