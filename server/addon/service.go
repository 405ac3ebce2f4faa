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

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/clusterscope"
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

// Service is the add-on domain logic. It is safe for concurrent use.
type Service struct {
	store       *store.Store
	clusters    clusterscope.Reader
	scopes      *clusterscope.Scopes
	catalog     catalog.Source
	pods        *podidentity.Owner
	cfg         Config
	log         *slog.Logger
	reports     *prometheus.CounterVec
	expired     prometheus.Counter
	sweepErrors prometheus.Counter
}

// NewService returns the add-on service. Its metrics are registered on reg.
func NewService(st *store.Store, clusters clusterscope.Reader, cat catalog.Source, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{
		store: st, clusters: clusters, catalog: cat, cfg: cfg, log: log,
		scopes: clusterscope.New(clusters, clusterscope.Config{Resources: "add-ons"}),
		pods:   podidentity.NewOwner(st, cfg.Region, cfg.Now),
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
	return errdefs.WithField(errdefs.WithField(err, "clusterName", cluster), "addonName", addon)
}

func addonNotFound(cluster, addon string) *errdefs.Error {
	return errdefs.NotFound("No addon: %s found in cluster: %s", addon, cluster).
		WithField("clusterName", cluster).WithField("addonName", addon)
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
