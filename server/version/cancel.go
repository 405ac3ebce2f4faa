package version

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/store"
)

// Cancel applies CancelUpdate: it asks for the caller's InProgress
// VersionRollback to be cancelled. The update's cancellation becomes
// InProgress (the provisioner's next report decides it: Complete) in one
// transaction guarded by the update record's mod revision. Asking again
// while a cancellation is in progress returns the update unchanged (a
// retry, with or without its clientRequestToken, changes nothing); asking
// after a cancellation failed asks again. Other updates, and updates that
// have ended, cannot be cancelled: AWS's InvalidRequestException.
func (s *Service) Cancel(ctx context.Context, req *eksv1.CancelUpdateRequest) (*storagev1.UpdateRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	name, id := req.GetName(), req.GetUpdateId()
	if id == "" {
		return nil, errdefs.InvalidParameter("updateId is required.").WithField("clusterName", name)
	}
	c, _, err := s.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: who.AccountID, Name: name})
	if err != nil {
		return nil, err
	}
	// The cluster is read only to find its incarnation's update: the
	// update record is the one record written.
	key := store.ClusterUpdateKey(c.GetUid(), id)
	u := &storagev1.UpdateRecord{}
	_, err = store.Update(ctx, s.store, key, u, func(u *storagev1.UpdateRecord, _ *store.Txn) error {
		return s.cancel(u, name, id)
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("No update found for id: %s.", id).WithField("clusterName", name).WithCause(err)
		}
		return nil, errdefs.Wrap(err, "cancel update %s of cluster %q", id, name)
	}
	s.log.InfoContext(ctx, "cluster update cancellation requested", "account", who.AccountID, "cluster", name,
		"uid", c.GetUid(), "update", id)
	return u, nil
}

// cancel mutates u to a cancellation in progress, refusing what cannot
// be cancelled; one already in progress is left as it is (nothing is
// written).
func (s *Service) cancel(u *storagev1.UpdateRecord, name, id string) error {
	if u.GetType() != TypeVersionRollback {
		return errdefs.InvalidRequest("Update %s is a %s; only a %s can be cancelled.", id, u.GetType(), TypeVersionRollback).
			WithField("clusterName", name)
	}
	if u.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
		return errdefs.InvalidRequest("Update %s is %s; only an update in progress can be cancelled.", id, update.StatusName(u.GetStatus())).
			WithField("clusterName", name)
	}
	if u.GetCancellation().GetStatus() == storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS {
		return nil
	}
	now := timestamppb.New(s.cfg.Now())
	u.Cancellation = &storagev1.UpdateCancellation{
		Status:      storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS,
		Reason:      "Cancellation requested; the rollback stops if the provisioner has not completed it.",
		RequestedAt: now,
	}
	u.ModifiedAt = now
	return nil
}
