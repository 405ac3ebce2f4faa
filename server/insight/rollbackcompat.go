package insight

import (
	"context"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// The rollback check: the add-on compatibility check of addoncompat.go
// about the previous minor version, the one UpdateClusterVersion rolls a
// cluster back to. Description and recommendation are worded like the
// upgrade check's.
const (
	checkRollbackAddonCompatibility = "rollback-addon-version-compatibility"
	rollbackCompatibilityDesc       = "Checks the version of every installed Amazon EKS add-on to ensure it is " +
		"compatible with the previous Kubernetes version, the one a rollback returns the cluster to. An add-on whose " +
		"installed version is not compatible would run on the rolled-back cluster unmanaged by any compatible release; " +
		"update it first."
	rollbackCompatibilityRecommendation = "Update each listed add-on (UpdateAddon) to a version compatible with the " +
		"previous Kubernetes version before rolling the cluster back; DescribeAddonVersions with kubernetesVersion set " +
		"to that version lists them, defaultVersion marking the recommended one."
)

// rollbackCheck is the ROLLBACK_READINESS insight for the version the
// cluster can roll back to (Versions.RollbackTarget: the previous minor
// version, once an upgrade brought the cluster to its version): a cluster
// with nothing to roll back to has none.
func (s *Service) rollbackCheck() compatCheck {
	return compatCheck{
		check: checkRollbackAddonCompatibility, category: CategoryRollbackReadiness,
		description: rollbackCompatibilityDesc, recommendation: rollbackCompatibilityRecommendation,
		target: s.versions.RollbackTarget,
	}
}

// RollbackBlockers names, as "name (version)", each installed add-on of
// the cluster (one not being deleted) whose installed version is not
// compatible with the target Kubernetes version: the add-ons the
// ROLLBACK_READINESS insight about target finds in ERROR, from the same
// verdicts. Empty when there is none. The cluster's add-ons are read from
// etcd (linearizable).
func (s *Service) RollbackBlockers(ctx context.Context, c *storagev1.ClusterRecord, target string) ([]string, error) {
	addons, err := s.addons(ctx, c)
	if err != nil {
		return nil, err
	}
	verdicts, err := s.verdicts(ctx, c, addons, target)
	if err != nil {
		return nil, err
	}
	return incompatible(verdicts), nil
}
