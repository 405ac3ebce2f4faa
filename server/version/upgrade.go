package version

import (
	"context"
	"regexp"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/store"
)

const opUpdateClusterVersion = "UpdateClusterVersion"

// The update parameter types of a VersionUpdate, as AWS names them.
const (
	ParamVersion         = "Version"
	ParamPlatformVersion = "PlatformVersion"
)

var namePattern = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9\-_]*$`)

// validateUpgrade checks what can be checked without the cluster.
func (s *Service) validateUpgrade(req *eksv1.UpdateClusterVersionRequest) error {
	name := req.GetName()
	if name == "" || utf8.RuneCountInString(name) > 100 || !namePattern.MatchString(name) {
		return errdefs.InvalidParameter(
			"1 validation error detected: Value '%s' at 'name' failed to satisfy constraint: "+
				"Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]* and be 1 to 100 characters long",
			name).WithField("clusterName", name)
	}
	v := req.GetVersion()
	if v == "" {
		return errdefs.InvalidParameter("version is required.").WithField("clusterName", name)
	}
	if !s.Offered(v) {
		// AWS's exact message (InvalidParameterException) for a version it
		// does not offer.
		return errdefs.InvalidParameter("unsupported Kubernetes version").WithField("clusterName", name)
	}
	return nil
}

// Upgrade applies UpdateClusterVersion to the caller's cluster: one minor
// version up from the cluster's (or, as a VersionRollback checked by
// checkRollback, one down), only while the cluster is ACTIVE. A new
// VersionUpdate record InProgress (params Version and PlatformVersion), the
// cluster UPDATING, and the idempotency key when a token is given, commit
// in one transaction guarded by the cluster record's mod revision, so two
// concurrent calls cannot both start an upgrade. A retry with the same
// clientRequestToken and parameters returns the update the first call
// made. Add-ons that are not compatible with the new version do not block
// it, as in AWS: the add-on version compatibility insight warns of them.
func (s *Service) Upgrade(ctx context.Context, req *eksv1.UpdateClusterVersionRequest) (*storagev1.UpdateRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if err := s.validateUpgrade(req); err != nil {
		return nil, err
	}
	timeout, err := rollbackTimeout(req)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opUpdateClusterVersion, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", name)
	}
	rec, upd, err := cluster.RecordUpdate(ctx, s.store, tok, s.cfg.IdempotencyTTL, who.AccountID, name, "version",
		func(c *storagev1.ClusterRecord, txn *store.Txn) (*storagev1.UpdateRecord, error) {
			kind, err := s.upgradable(ctx, c, req.GetVersion())
			if err != nil {
				return nil, err
			}
			switch kind {
			case TypeVersionUpdate:
				if req.GetRollbackConfig() != nil {
					return nil, errdefs.InvalidParameter("rollbackConfig applies only to a rollback to version %s; %s is an upgrade.",
						prevOrNone(c.GetKubernetesVersion()), req.GetVersion()).WithField("clusterName", name)
				}
			case TypeVersionRollback:
				if err := s.checkRollback(ctx, c, req.GetVersion(), req.GetForce()); err != nil {
					return nil, err
				}
				if timeout == 0 {
					timeout = defaultRollbackTimeout
				}
			}
			target, _ := release(req.GetVersion())
			now := s.cfg.Now()
			u := &storagev1.UpdateRecord{
				Id:         uuid.Must(uuid.NewV7()).String(),
				ClusterUid: c.GetUid(),
				Type:       kind,
				Status:     storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS,
				Params: []*storagev1.UpdateParam{
					{Type: ParamVersion, Value: req.GetVersion()},
					{Type: ParamPlatformVersion, Value: target.PlatformVersion},
				},
				CreatedAt:  timestamppb.New(now),
				ModifiedAt: timestamppb.New(now),
			}
			if kind == TypeVersionRollback {
				u.RollbackTimeoutMinutes = timeout
				txn.Create(rollbackDeadlineKey(u), &storagev1.UpdateDeadlineHint{ClusterUid: u.GetClusterUid(), UpdateId: u.GetId()})
			}
			c.Status = storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING
			c.ModifiedAt = timestamppb.New(now)
			return u, nil
		})
	if err != nil || rec == nil {
		return upd, err
	}
	s.log.InfoContext(ctx, "cluster version update started", "account", who.AccountID, "cluster", name,
		"uid", rec.GetUid(), "update", upd.GetId(), "type", upd.GetType(), "from", rec.GetKubernetesVersion(), "to", req.GetVersion())
	return upd, nil
}

// upgradable says what moving c to version is — an upgrade
// (VersionUpdate, the next minor version) or a rollback (VersionRollback,
// the previous one) — or refuses it: AWS's ResourceInUseException while
// another update is in progress or the cluster is not ACTIVE, its
// InvalidParameterException for any other version.
func (s *Service) upgradable(ctx context.Context, c *storagev1.ClusterRecord, version string) (string, error) {
	name := c.GetName()
	switch st := c.GetStatus(); st {
	case storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE:
	case storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING:
		id, err := s.inProgress(ctx, c.GetUid())
		if err != nil {
			return "", err
		}
		if id == "" {
			return "", errdefs.ResourceInUse("Cannot %s because cluster %s is currently in UPDATING state; it must be ACTIVE",
				TypeVersionUpdate, name).WithField("clusterName", name)
		}
		// AWS's wording.
		return "", errdefs.ResourceInUse("Cannot %s because cluster %s currently has update %s in progress",
			TypeVersionUpdate, name, id).WithField("clusterName", name)
	default:
		return "", errdefs.ResourceInUse("Cannot %s because cluster %s is currently in %s state; it must be ACTIVE",
			TypeVersionUpdate, name, cluster.StatusName(st)).WithField("clusterName", name)
	}
	if next, _ := NextMinor(c.GetKubernetesVersion()); version == next {
		return TypeVersionUpdate, nil
	}
	if prev, _ := PreviousMinor(c.GetKubernetesVersion()); version == prev {
		return TypeVersionRollback, nil
	}
	// AWS's exact message (InvalidParameterException), also for the same
	// version and for a downgrade of more than one minor version.
	return "", errdefs.InvalidParameter("Unsupported Kubernetes minor version update from %s to %s",
		c.GetKubernetesVersion(), version).WithField("clusterName", name)
}

// prevOrNone is the version a cluster on minor could roll back to, for
// messages.
func prevOrNone(minor string) string {
	if prev, ok := PreviousMinor(minor); ok {
		return prev
	}
	return "(none)"
}

// inProgress returns the id of the cluster update that is InProgress, for
// the message that refuses another; "" when none is found.
func (s *Service) inProgress(ctx context.Context, clusterUID string) (string, error) {
	id := ""
	err := s.eachUpdate(ctx, clusterUID, func(u *storagev1.UpdateRecord) bool {
		if u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
			id = u.GetId()
		}
		return id == ""
	})
	return id, err
}
