// Package addon owns EKS managed add-ons: their records, the
// generation-based lifecycle of docs/architecture.md, "Add-ons", report application, the
// deadline sweeper, and add-ons owned by reference (EnsureAddon).
//
// Every desired change (create, update, delete, re-drive) bumps the
// record's generation; status moves on a guest report only when the report
// names the current incarnation and generation, in one transaction with the
// check. The gRPC shells in grpc.go convert errors to the wire once.
package addon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/store"
)

// Config is the add-on service's configuration.
type Config struct {
	// Region appears in ARNs.
	Region string
	// IdempotencyTTL is how long a clientRequestToken is remembered.
	IdempotencyTTL time.Duration
	// CreateTimeout, UpdateTimeout and DeleteTimeout are how long a
	// generation may stay CREATING, UPDATING or DELETING before the sweeper
	// gives it up as *_FAILED with ClusterUnreachable.
	CreateTimeout, UpdateTimeout, DeleteTimeout time.Duration
	// SweepInterval is how often the elected sweeper looks for passed
	// deadlines.
	SweepInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DefaultConfig returns the configuration `saltbush serve` starts with.
// The deadlines are generous: a control plane that is being provisioned may
// take a while to connect its agent.
func DefaultConfig() Config {
	return Config{
		Region:         "us-east-1",
		IdempotencyTTL: 8 * time.Hour,
		CreateTimeout:  30 * time.Minute,
		UpdateTimeout:  30 * time.Minute,
		DeleteTimeout:  30 * time.Minute,
		SweepInterval:  15 * time.Second,
	}
}

// Validate checks the configuration at start.
func (c Config) Validate() error {
	switch {
	case c.Region == "":
		return errors.New("addon config: region required")
	case c.IdempotencyTTL < time.Minute:
		return fmt.Errorf("addon config: idempotency TTL %s is shorter than a minute", c.IdempotencyTTL)
	case c.CreateTimeout <= 0 || c.UpdateTimeout <= 0 || c.DeleteTimeout <= 0:
		return errors.New("addon config: create, update and delete timeouts must be positive")
	case c.SweepInterval <= 0:
		return errors.New("addon config: sweep interval must be positive")
	}
	return nil
}

// Clusters is what the add-on service needs of the cluster service: the
// record of a cluster (and its mod revision, which add-on writes guard on so
// that a cluster that turned DELETING, or was recreated, in between is
// noticed).
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// GetSerializable may return a stale record; see readCluster.
	GetSerializable(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
}

// Service is the add-on domain logic. It is safe for concurrent use.
type Service struct {
	store       *store.Store
	clusters    Clusters
	catalog     catalog.Source
	pods        *podidentity.Owner
	cfg         Config
	log         *slog.Logger
	reports     *prometheus.CounterVec
	expired     prometheus.Counter
	sweepErrors prometheus.Counter
}

// NewService returns the add-on service. Its metrics are registered on reg.
func NewService(st *store.Store, clusters Clusters, cat catalog.Source, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{
		store: st, clusters: clusters, catalog: cat, cfg: cfg, log: log,
		pods: podidentity.NewOwner(st, cfg.Region, cfg.Now),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_addon_reports_total",
			Help: "Add-on reports by result: accepted, or why it changed nothing (stale_generation, stale_incarnation, unknown_addon, stale_epoch).",
		}, []string{"result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "saltbush_addon_deadlines_expired_total",
			Help: "Add-on generations the sweeper moved to *_FAILED because their deadline passed.",
		}),
		sweepErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "saltbush_addon_sweep_errors_total",
			Help: "Deadline hints the sweeper could not judge (unreadable hint or add-on record) and skipped.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.reports, s.expired, s.sweepErrors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("addon metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Catalog returns the add-on catalogue the service validates against: the
// embedded one with the published versions, when the server has them.
func (s *Service) Catalog() catalog.Source { return s.catalog }

// ClusterARN is the ARN of a cluster of account.
func (s *Service) ClusterARN(account, cluster string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.cfg.Region, account, cluster)
}

// ARN is the add-on ARN of one incarnation.
func (s *Service) ARN(account, cluster, addon, uid string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:addon/%s/%s/%s", s.cfg.Region, account, cluster, addon, uid)
}

// withAddonFields adds the clusterName and addonName members to an API
// error (other errors pass unchanged).
func withAddonFields(err error, cluster, addon string) error {
	var e *errdefs.Error
	if errors.As(err, &e) {
		return e.WithField("clusterName", cluster).WithField("addonName", addon)
	}
	return err
}

func addonNotFound(cluster, addon string) *errdefs.Error {
	return errdefs.NotFound("No addon: %s found in cluster: %s", addon, cluster).
		WithField("clusterName", cluster).WithField("addonName", addon)
}

// Cluster reads: linearizable, or fast.
const (
	linearizable = false
	fast         = true
)

// readCluster reads a cluster record. A fast read is serializable (no round
// of consensus) and may be stale; it is used where the result is confirmed:
// a write guarded by the returned mod revision (a stale read fails the
// compare and the retry reads linearizably), or a read whose miss is
// re-checked. A fast miss is always re-read linearizably, so a cluster
// created a moment ago is found.
func (s *Service) readCluster(ctx context.Context, ref *controlv1.ClusterRef, quick bool) (*storagev1.ClusterRecord, int64, error) {
	if quick {
		c, rev, err := s.clusters.GetSerializable(ctx, ref)
		if err == nil {
			return c, rev, nil
		}
		if !errdefs.IsException(err, errdefs.ResourceNotFoundException) {
			return nil, 0, err
		}
	}
	return s.clusters.Get(ctx, ref)
}

// cluster returns the cluster ref names and its mod revision, refusing
// clusters that can no longer change (DELETING, FAILED) when forWrite.
func (s *Service) cluster(ctx context.Context, ref *controlv1.ClusterRef, forWrite, quick bool) (*storagev1.ClusterRecord, int64, error) {
	c, rev, err := s.readCluster(ctx, ref, quick)
	if err != nil {
		return nil, 0, err
	}
	if forWrite {
		switch c.GetStatus() {
		case storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, storagev1.ClusterStatus_CLUSTER_STATUS_FAILED:
			if quick {
				// A fast read may be stale: refuse only what a
				// linearizable read confirms (store.RetryOnConflict re-reads).
				return nil, 0, fmt.Errorf("cluster %q read %s: %w", c.GetName(), clusterStatusName(c.GetStatus()), store.ErrConflict)
			}
			return nil, 0, errdefs.InvalidRequest(
				"Cluster %s is in %s state; its add-ons cannot be changed.", c.GetName(), clusterStatusName(c.GetStatus())).
				WithField("clusterName", c.GetName())
		}
	}
	return c, rev, nil
}

func (s *Service) callerCluster(ctx context.Context, name string, forWrite, quick bool) (identity.Caller, *storagev1.ClusterRecord, int64, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return identity.Caller{}, nil, 0, err
	}
	c, rev, err := s.cluster(ctx, &controlv1.ClusterRef{AccountId: who.AccountID, Name: name}, forWrite, quick)
	return who, c, rev, err
}

// get reads one add-on record and its mod revision, linearizably: a
// record of the caller's own.
func (s *Service) get(ctx context.Context, c *storagev1.ClusterRecord, name string) (*storagev1.AddonRecord, int64, error) {
	return s.getWith(ctx, store.GetRecord[*storagev1.AddonRecord], c, name)
}

// read is get from the replica's read view (store.ReadShared), for
// answering callers: the record may be shared with other readers and
// must not be changed.
func (s *Service) read(ctx context.Context, c *storagev1.ClusterRecord, name string) (*storagev1.AddonRecord, int64, error) {
	return s.getWith(ctx, store.ReadShared[*storagev1.AddonRecord], c, name)
}

func newRecord() *storagev1.AddonRecord { return &storagev1.AddonRecord{} }

func (s *Service) getWith(ctx context.Context, read store.RecordReader[*storagev1.AddonRecord],
	c *storagev1.ClusterRecord, name string,
) (*storagev1.AddonRecord, int64, error) {
	rec, rev, err := read(ctx, s.store, store.AddonKey(c.GetUid(), name), newRecord)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, 0, addonNotFound(c.GetName(), name).WithCause(err)
		}
		return nil, 0, fmt.Errorf("cluster %q add-on %q: %w", c.GetName(), name, err)
	}
	return rec, rev, nil
}
