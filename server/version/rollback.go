package version

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// TypeVersionRollback is the update type of a rollback to the previous
// minor version, as AWS names it.
const TypeVersionRollback = "VersionRollback"

// A rollback's timeout (rollbackConfig.timeoutMinutes), as AWS bounds it.
const (
	minRollbackTimeout     = 120
	maxRollbackTimeout     = 10080
	defaultRollbackTimeout = 720
)

// RollbackReadiness judges whether a cluster's add-ons allow a rollback to
// target: each installed add-on whose version is not compatible with it,
// as "name (version)" (the ROLLBACK_READINESS insight renders the same
// verdict).
type RollbackReadiness interface {
	RollbackBlockers(ctx context.Context, c *storagev1.ClusterRecord, target string) ([]string, error)
}

// SetRollbackReadiness gives the service the judge of rollbacks; it is
// called once while the server is wired, before it serves. Without one
// every rollback is refused.
func (s *Service) SetRollbackReadiness(r RollbackReadiness) { s.readiness = r }

// rollbackDeadlineKey is the deadline index entry of a rollback: its
// creation plus its timeout.
func rollbackDeadlineKey(u *storagev1.UpdateRecord) string {
	deadline := u.GetCreatedAt().AsTime().Add(time.Duration(u.GetRollbackTimeoutMinutes()) * time.Minute)
	return store.UpdateDeadlineKey(deadline, u.GetClusterUid(), u.GetId())
}

// SweepRollbackDeadlines asks for the cancellation of every rollback whose
// rollbackConfig.timeoutMinutes passed while it was still in progress, as
// AWS cancels a rollback that outlives its timeout: the cancellation
// becomes InProgress (reason: the timeout) and the provisioner's report
// decides it, as after CancelUpdate. It reads the deadline index up to now;
// each due hint is dropped in the transaction that judges it, guarded by
// the update's revision and by fence (the elected sweeper's leadership).
// It is one of the deadline sweeper's sweeps (addon.Service.NewSweeper).
func (s *Service) SweepRollbackDeadlines(ctx context.Context, fence func(*store.Txn)) error {
	now := s.cfg.Now()
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{Prefix: store.UpdateDeadlinesPrefix, Scope: "update-sweeper", Token: token})
		if err != nil {
			return fmt.Errorf("list update deadlines: %w", err)
		}
		for _, kv := range page.Items {
			due, err := store.AddonDeadlineOf(kv.Name)
			if err == nil && due.After(now) {
				return nil // key order is deadline order: the rest are later
			}
			hint := &storagev1.UpdateDeadlineHint{}
			if err == nil {
				err = store.Decode(kv.Value, hint)
			}
			if err == nil {
				err = s.timeOut(ctx, kv, hint, now, fence)
			}
			if err != nil {
				if errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
					return err
				}
				// One bad hint must not stop every later deadline.
				s.log.WarnContext(ctx, "update deadline hint skipped", "key", kv.Key, "err", err)
			}
		}
		if page.NextToken == "" {
			return nil
		}
		token = page.NextToken
	}
}

// timeOut judges one due hint: a rollback still in progress, without a
// cancellation in progress, gets one; the hint goes either way.
func (s *Service) timeOut(ctx context.Context, hint store.KV, h *storagev1.UpdateDeadlineHint, now time.Time, fence func(*store.Txn)) error {
	key := store.ClusterUpdateKey(h.GetClusterUid(), h.GetUpdateId())
	u := &storagev1.UpdateRecord{}
	rev, err := s.store.Get(ctx, key, u)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("rollback deadline of %s: %w", key, err)
	}
	txn := store.NewTxn().Delete(hint.Key, hint.ModRev)
	live := err == nil && u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS &&
		u.GetCancellation().GetStatus() != storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS
	if live {
		u.Cancellation = &storagev1.UpdateCancellation{
			Status: storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS,
			Reason: fmt.Sprintf("The rollback did not complete within rollbackConfig.timeoutMinutes (%d); cancellation requested.",
				u.GetRollbackTimeoutMinutes()),
			RequestedAt: timestamppb.New(now),
		}
		u.ModifiedAt = timestamppb.New(now)
		txn.Update(key, u, rev)
	}
	if fence != nil {
		fence(txn)
	}
	if _, err := s.store.Commit(ctx, txn); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil // the update changed meanwhile: the next sweep judges it again
		}
		return fmt.Errorf("rollback deadline of %s: %w", key, err)
	}
	if live {
		s.log.InfoContext(ctx, "rollback timeout passed; cancellation requested", "cluster_uid", h.GetClusterUid(), "update", h.GetUpdateId())
	}
	return nil
}

// PreviousMinor is the minor version before v ("1.35" for "1.36"); ok is
// false for a malformed version or a minor of 0.
func PreviousMinor(v string) (string, bool) {
	major, minor, ok := parseMinor(v)
	if !ok || minor == 0 {
		return "", false
	}
	return fmt.Sprintf("%d.%d", major, minor-1), true
}

// RollbackTarget is the version the cluster can roll back to: the
// previous minor version, when saltbush offers it and a successful
// VersionUpdate brought the cluster to its version. The ROLLBACK_READINESS
// insight is about this version.
func (s *Service) RollbackTarget(ctx context.Context, c *storagev1.ClusterRecord) (string, bool, error) {
	prev, ok := PreviousMinor(c.GetKubernetesVersion())
	if !ok || !s.Offered(prev) {
		return "", false, nil
	}
	upgraded, err := s.upgradedTo(ctx, c)
	if err != nil || !upgraded {
		return "", false, err
	}
	return prev, true, nil
}

// rollbackTimeout checks rollbackConfig and returns the timeout in
// minutes; 0 when the request has none.
func rollbackTimeout(req *eksv1.UpdateClusterVersionRequest) (int32, error) {
	rc := req.GetRollbackConfig()
	if rc == nil {
		return 0, nil
	}
	if rc.TimeoutMinutes == nil {
		return defaultRollbackTimeout, nil
	}
	if m := rc.GetTimeoutMinutes(); m < minRollbackTimeout || m > maxRollbackTimeout {
		return 0, errdefs.InvalidParameter("1 validation error detected: Value '%d' at 'rollbackConfig.timeoutMinutes' failed to satisfy constraint: "+
			"Member must have value between %d and %d", m, minRollbackTimeout, maxRollbackTimeout).WithField("clusterName", req.GetName())
	}
	return rc.GetTimeoutMinutes(), nil
}

// upgradedTo reports whether a successful VersionUpdate brought the
// cluster to its version: only then has it a version to roll back to.
func (s *Service) upgradedTo(ctx context.Context, c *storagev1.ClusterRecord) (bool, error) {
	found := false
	err := s.eachUpdate(ctx, c.GetUid(), func(u *storagev1.UpdateRecord) bool {
		found = u.GetType() == TypeVersionUpdate && u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL &&
			param(u, ParamVersion) == c.GetKubernetesVersion()
		return !found
	})
	return found, err
}

// eachUpdate calls f with each of the cluster's updates, oldest first,
// until f returns false.
func (s *Service) eachUpdate(ctx context.Context, clusterUID string, f func(*storagev1.UpdateRecord) bool) error {
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{
			Prefix: store.ClusterUpdatesPrefix(clusterUID), Scope: "cluster-updates/" + clusterUID, Token: token,
		})
		if err != nil {
			return fmt.Errorf("cluster %s: list its updates: %w", clusterUID, err)
		}
		for _, kv := range page.Items {
			u := &storagev1.UpdateRecord{}
			if err := store.Decode(kv.Value, u); err != nil {
				return fmt.Errorf("cluster %s: update %s: %w", clusterUID, kv.Name, err)
			}
			if !f(u) {
				return nil
			}
		}
		if page.NextToken == "" {
			return nil
		}
		token = page.NextToken
	}
}

// checkRollback refuses a rollback of c to target that its history or its
// add-ons do not allow: AWS's InvalidParameterException for a cluster no
// upgrade brought to its version (there is nothing to roll back to), its
// InvalidRequestException for add-ons not compatible with target, unless
// force.
func (s *Service) checkRollback(ctx context.Context, c *storagev1.ClusterRecord, target string, force bool) error {
	name := c.GetName()
	ok, err := s.upgradedTo(ctx, c)
	if err != nil {
		return err
	}
	if !ok {
		return errdefs.InvalidParameter("Cannot roll back cluster %s to %s: no upgrade brought it from %s to %s.",
			name, target, target, c.GetKubernetesVersion()).WithField("clusterName", name)
	}
	if force {
		return nil
	}
	if s.readiness == nil {
		return fmt.Errorf("cluster %q rollback: no rollback readiness judge is wired", name)
	}
	blockers, err := s.readiness.RollbackBlockers(ctx, c, target)
	if err != nil {
		return err
	}
	if len(blockers) > 0 {
		return errdefs.InvalidRequest("Cannot roll back cluster %s to %s: %d add-on(s) not compatible with Kubernetes version %s: %s. "+
			"Update them, or set force to roll back anyway; the ROLLBACK_READINESS insight lists them.",
			name, target, len(blockers), target, strings.Join(blockers, ", ")).WithField("clusterName", name)
	}
	return nil
}
