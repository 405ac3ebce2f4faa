package version

import (
	"context"
	"errors"
	"fmt"

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
	var out *storagev1.UpdateRecord
	err = store.RetryOnConflict(ctx, func(bool) error {
		var err error
		out, err = s.cancelOnce(ctx, who.AccountID, name, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) cancelOnce(ctx context.Context, account, name, id string) (*storagev1.UpdateRecord, error) {
	c, _, err := s.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: account, Name: name})
	if err != nil {
		return nil, err
	}
	key := store.ClusterUpdateKey(c.GetUid(), id)
	u := &storagev1.UpdateRecord{}
	rev, err := s.store.Get(ctx, key, u)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("No update found for id: %s.", id).WithField("clusterName", name).WithCause(err)
		}
		return nil, fmt.Errorf("cancel update %s of cluster %q: %w", id, name, err)
	}
	if u.GetType() != TypeVersionRollback {
		return nil, errdefs.InvalidRequest("Update %s is a %s; only a %s can be cancelled.", id, u.GetType(), TypeVersionRollback).
			WithField("clusterName", name)
	}
	if u.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
		return nil, errdefs.InvalidRequest("Update %s is %s; only an update in progress can be cancelled.", id, update.StatusName(u.GetStatus())).
			WithField("clusterName", name)
	}
	if u.GetCancellation().GetStatus() == storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS {
		return u, nil
	}
	now := timestamppb.New(s.cfg.Now())
	u.Cancellation = &storagev1.UpdateCancellation{
		Status:      storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS,
		Reason:      "Cancellation requested; the rollback stops if the provisioner has not completed it.",
		RequestedAt: now,
	}
	u.ModifiedAt = now
	if _, err := s.store.Commit(ctx, store.NewTxn().Update(key, u, rev)); err != nil {
		return nil, fmt.Errorf("cancel update %s of cluster %q: %w", id, name, err)
	}
	s.log.InfoContext(ctx, "cluster update cancellation requested", "account", account, "cluster", name,
		"uid", c.GetUid(), "update", id)
	return u, nil
}
