package version

import (
	"context"
	"fmt"
	"strings"

	"github.com/saltbush/saltbush/errdefs"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
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
