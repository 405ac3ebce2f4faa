package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// Delete moves the caller's cluster to DELETING. The record stays until the
// provisioner confirms teardown (FinalizeDeletion). Deleting a cluster that
// is already DELETING returns it unchanged.
func (s *Service) Delete(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	rec := &storagev1.ClusterRecord{}
	_, err = store.Update(ctx, s.store, store.ClusterKey(who.AccountID, name), rec, func(c *storagev1.ClusterRecord, txn *store.Txn) error {
		if c.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING {
			return nil
		}
		before := proto.Clone(c).(*storagev1.ClusterRecord)
		if c.GetSpec().GetDeletionProtection() {
			return errdefs.InvalidRequest("Cannot delete cluster %s because deletion protection is enabled.", name).
				WithField("clusterName", name)
		}
		c.Status = storagev1.ClusterStatus_CLUSTER_STATUS_DELETING
		c.ModifiedAt = timestamppb.New(s.cfg.Now())
		return s.fenceDelivery(ctx, txn, before, c)
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(name).WithCause(err)
		}
		return nil, fmt.Errorf("delete cluster %q: %w", name, err)
	}
	s.log.InfoContext(ctx, "cluster deleting", "account", who.AccountID, "cluster", name, "uid", rec.GetUid())
	return rec, nil
}
