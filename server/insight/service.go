// Package insight owns EKS cluster insights: checks computed on every call
// from a cluster's records and the add-on catalogue, served by ListInsights
// and DescribeInsight. saltbush has two checks, both named "Amazon EKS
// add-on version compatibility" (addoncompat.go): AWS's UPGRADE_READINESS
// insight about the next minor version and its ROLLBACK_READINESS insight
// about the previous one (rollbackcompat.go), whose verdict RollbackBlockers
// also gives the rollback itself. No insight is stored: an insight's id is
// derived from the cluster incarnation and the check (a name-based UUID),
// so it is stable for as long as the cluster exists. What is stored is
// the latest insights refresh (StartInsightsRefresh, refresh.go), which
// completes at once since insights are computed on every read.
package insight

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/validation"
	"github.com/saltbush/saltbush/store"
)

// The insight categories and statuses, as AWS names them.
const (
	CategoryUpgradeReadiness  = "UPGRADE_READINESS"
	CategoryMisconfiguration  = "MISCONFIGURATION"
	CategoryRollbackReadiness = "ROLLBACK_READINESS"

	StatusPassing = "PASSING"
	StatusWarning = "WARNING"
	StatusError   = "ERROR"
	StatusUnknown = "UNKNOWN"
)

// idNamespace is the UUID namespace insight ids are derived in.
var idNamespace = uuid.MustParse("6f1d8c2e-4b7a-5e39-9a0c-2d4e6f8a1b3c")

// insightID is the id of check on the cluster incarnation clusterUID.
func insightID(clusterUID, check string) string {
	return uuid.NewSHA1(idNamespace, []byte(clusterUID+"/"+check)).String()
}

// Clusters resolves a cluster name of the caller's account.
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// ARN is the ARN of a cluster of account.
	ARN(account, name string) string
}

// Versions says which Kubernetes versions follow and precede a cluster's
// (version.Service).
type Versions interface {
	NextOffered(minor string) (string, bool)
	// RollbackTarget is the version the cluster can roll back to; false
	// when it has none.
	RollbackTarget(ctx context.Context, c *storagev1.ClusterRecord) (string, bool, error)
}

// Service computes insights. It is safe for concurrent use.
type Service struct {
	store    *store.Store
	clusters Clusters
	versions Versions
	catalog  catalog.Source
	now      func() time.Time
	log      *slog.Logger
}

// NewService returns the insight service; now is the clock (time.Now when
// nil).
func NewService(st *store.Store, clusters Clusters, versions Versions, cat catalog.Source, now func() time.Time, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: st, clusters: clusters, versions: versions, catalog: cat, now: now, log: log}
}

// ClusterARN is the ARN of the caller's cluster name, for authorization.
func (s *Service) ClusterARN(account, name string) string { return s.clusters.ARN(account, name) }

// cluster reads the caller's cluster name and its mod revision
// (linearizable).
func (s *Service) cluster(ctx context.Context, name string) (*storagev1.ClusterRecord, int64, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, 0, err
	}
	if name == "" {
		return nil, 0, errdefs.InvalidParameter("clusterName is required.")
	}
	return s.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: who.AccountID, Name: name})
}

// insights computes every insight of the caller's cluster name, in a
// stable order.
func (s *Service) insights(ctx context.Context, name string) (*storagev1.ClusterRecord, []*eksv1.Insight, error) {
	c, _, err := s.cluster(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	addons, err := s.addons(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	now := s.now()
	var out []*eksv1.Insight
	for _, check := range []compatCheck{s.upgradeCheck(), s.rollbackCheck()} {
		in, err := s.compatibility(ctx, c, addons, check, now)
		if err != nil {
			return nil, nil, err
		}
		if in != nil {
			out = append(out, in)
		}
	}
	return c, out, nil
}

func (s *Service) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.log, op, validation.Conform(op, err))
}

// epoch is t in the façade's timestamp form.
func epoch(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }
