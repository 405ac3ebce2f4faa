package podidentity

import (
	"context"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Delete removes an association and its exclusivity key in one
// transaction guarded by the association's and the cluster's revisions,
// and returns the association as it was. One an add-on owns is refused:
// it goes with its add-on.
func (s *Service) Delete(ctx context.Context, cluster, id string) (*storagev1.PodIdentityAssociationRecord, error) {
	who, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return nil, err
	}
	var rec *storagev1.PodIdentityAssociationRecord
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		r, rev, err := s.get(ctx, sc.Cluster, id)
		if err != nil {
			return err
		}
		if r.GetOwnerArn() != "" {
			return owned(cluster, r)
		}
		rec = r
		txn := store.NewTxn()
		deleteWrites(txn, rec, rev)
		_, err = s.store.Commit(ctx, sc.Guard(txn))
		return err
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "delete pod identity association %q of cluster %q", id, cluster)
	}
	s.log.InfoContext(ctx, "pod identity association deleted", "account", who.AccountID, "cluster", cluster,
		"association", id, "namespace", rec.GetNamespace(), "serviceAccount", rec.GetServiceAccount())
	return rec, nil
}
