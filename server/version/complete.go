package version

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/store"
)

// maxUpdateErrors bounds the errors a report may carry.
const maxUpdateErrors = 20

// validateComplete checks a provisioner's report without the records.
func validateComplete(req *controlv1.CompleteUpdateRequest) error {
	if req.GetUpdateId() == "" {
		return errdefs.InvalidParameter("updateId is required.")
	}
	switch req.GetOutcome() {
	case controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL:
		if len(req.GetErrors()) > 0 {
			return errdefs.InvalidParameter("errors are only reported with outcome FAILED.")
		}
	case controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED:
		if len(req.GetErrors()) > maxUpdateErrors {
			return errdefs.InvalidParameter("At most %d errors may be reported, got %d.", maxUpdateErrors, len(req.GetErrors()))
		}
		for _, e := range req.GetErrors() {
			if e.GetErrorCode() == "" || len(e.GetErrorCode()) > 64 || len(e.GetErrorMessage()) > 1024 {
				return errdefs.InvalidParameter("Each error needs an errorCode of at most 64 characters and an errorMessage of at most 1024.")
			}
		}
	case controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED:
		if len(req.GetErrors()) > 0 || req.GetPlatformVersion() != "" {
			return errdefs.InvalidParameter("a CANCELLED report carries no errors and no platformVersion.")
		}
	default:
		return errdefs.InvalidParameter("outcome must be SUCCESSFUL, FAILED or CANCELLED, got %s.", req.GetOutcome())
	}
	if len(req.GetPlatformVersion()) > 64 {
		return errdefs.InvalidParameter("platformVersion is longer than 64 characters.")
	}
	return nil
}

// outcomeStatus is the update status an outcome ends an update with.
func outcomeStatus(o controlv1.UpdateOutcome) storagev1.UpdateStatus {
	switch o {
	case controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL:
		return storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL
	case controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED:
		return storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED
	}
	return storagev1.UpdateStatus_UPDATE_STATUS_FAILED
}

// Complete records the provisioner's report of how an InProgress cluster
// update ended. In one transaction, guarded by the mod revisions of both
// records: the update's status (and errors); on success the cluster's
// Kubernetes version (the update's Version param) and platform version
// (the report's, else the update's PlatformVersion param); and the cluster
// ACTIVE again when it is UPDATING (a cluster deleted meanwhile stays
// DELETING). Reporting the outcome the update already has returns it
// unchanged; a different outcome for an ended update is an
// InvalidRequestException (FailedPrecondition on gRPC). A report on an
// update whose cancellation is in progress (CancelUpdate) decides the
// cancellation too: CANCELLED (only then) makes it Successful, SUCCESSFUL
// or FAILED make it Failed.
func (s *Service) Complete(ctx context.Context, req *controlv1.CompleteUpdateRequest) (*storagev1.ClusterRecord, *storagev1.UpdateRecord, error) {
	if err := validateComplete(req); err != nil {
		return nil, nil, err
	}
	want := outcomeStatus(req.GetOutcome())
	var c *storagev1.ClusterRecord
	var u *storagev1.UpdateRecord
	err := store.RetryOnConflict(ctx, func(bool) error {
		var err error
		c, u, err = s.completeOnce(ctx, req, want)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return c, u, nil
}

// completeOnce is one attempt of Complete.
func (s *Service) completeOnce(ctx context.Context, req *controlv1.CompleteUpdateRequest, want storagev1.UpdateStatus) (*storagev1.ClusterRecord, *storagev1.UpdateRecord, error) {
	ref := req.GetCluster()
	c, crev, err := s.clusters.Get(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	name := c.GetName()
	if ref.GetUid() != "" && ref.GetUid() != c.GetUid() {
		return nil, nil, errdefs.NotFound("No cluster found for name: %s with id %s.", name, ref.GetUid()).
			WithField("clusterName", name)
	}
	ukey := store.ClusterUpdateKey(c.GetUid(), req.GetUpdateId())
	u := &storagev1.UpdateRecord{}
	urev, err := s.store.Get(ctx, ukey, u)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errdefs.NotFound("No update found for id: %s.", req.GetUpdateId()).
				WithField("clusterName", name).WithCause(err)
		}
		return nil, nil, fmt.Errorf("complete update %s of cluster %q: %w", req.GetUpdateId(), name, err)
	}
	if u.GetType() != TypeVersionUpdate && u.GetType() != TypeVersionRollback {
		return nil, nil, errdefs.InvalidRequest("Update %s of cluster %s is a %s; only a %s or a %s is completed by its provisioner.",
			u.GetId(), name, u.GetType(), TypeVersionUpdate, TypeVersionRollback).WithField("clusterName", name)
	}
	switch u.GetStatus() {
	case storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS:
	case want:
		return c, u, nil
	default:
		return nil, nil, errdefs.InvalidRequest("Update %s of cluster %s is already %s; it cannot become %s.",
			u.GetId(), name, update.StatusName(u.GetStatus()), update.StatusName(want)).WithField("clusterName", name)
	}

	cancelling := u.GetCancellation().GetStatus() == storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS
	if want == storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED && !cancelling {
		return nil, nil, errdefs.InvalidRequest("Update %s of cluster %s has no cancellation in progress; report SUCCESSFUL or FAILED.",
			u.GetId(), name).WithField("clusterName", name)
	}

	now := timestamppb.New(s.cfg.Now())
	u.Status = want
	u.ModifiedAt = now
	if cancelling {
		// The report decides the cancellation: the provisioner stopped the
		// rollback, or it ended first.
		u.Cancellation.Status = storagev1.CancellationStatus_CANCELLATION_STATUS_FAILED
		switch want {
		case storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED:
			u.Cancellation.Status = storagev1.CancellationStatus_CANCELLATION_STATUS_SUCCESSFUL
			u.Cancellation.Reason = "The rollback was stopped; the cluster stays at Kubernetes version " + c.GetKubernetesVersion() + "."
		case storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL:
			u.Cancellation.Reason = "The rollback completed before it could be cancelled."
		default:
			u.Cancellation.Reason = "The rollback failed before it could be cancelled."
		}
	}
	for _, e := range req.GetErrors() {
		u.Errors = append(u.Errors, &storagev1.UpdateError{
			ErrorCode: e.GetErrorCode(), ErrorMessage: e.GetErrorMessage(), ResourceIds: e.GetResourceIds(),
		})
	}
	if want == storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL {
		if v := param(u, ParamVersion); v != "" {
			c.KubernetesVersion = v
		}
		if pv := req.GetPlatformVersion(); pv != "" {
			c.PlatformVersion = pv
		} else if pv := param(u, ParamPlatformVersion); pv != "" {
			c.PlatformVersion = pv
		}
	}
	if c.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING {
		c.Status = storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE
	}
	c.ModifiedAt = now
	txn := store.NewTxn().
		Update(store.ClusterKey(c.GetAccountId(), name), c, crev).
		Update(ukey, u, urev)
	if u.GetRollbackTimeoutMinutes() > 0 {
		txn.Remove(rollbackDeadlineKey(u)) // the rollback ended: nothing to time out
	}
	if _, err := s.store.Commit(ctx, txn); err != nil {
		return nil, nil, fmt.Errorf("complete update %s of cluster %q: %w", u.GetId(), name, err)
	}
	s.log.InfoContext(ctx, "cluster update completed", "account", c.GetAccountId(), "cluster", name,
		"uid", c.GetUid(), "update", u.GetId(), "status", update.StatusName(want), "version", c.GetKubernetesVersion())
	return c, u, nil
}

// param is the value of an update's parameter of type t, "" when absent.
func param(u *storagev1.UpdateRecord, t string) string {
	for _, p := range u.GetParams() {
		if p.GetType() == t {
			return p.GetValue()
		}
	}
	return ""
}
