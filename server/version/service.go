// Package version owns Kubernetes versions: the support calendar saltbush
// offers (calendar.go), DescribeClusterVersions, and a cluster's upgrade
// to the next minor version — UpdateClusterVersion starts it, the
// provisioner's CompleteUpdate (control.v1) ends it
// (docs/architecture.md, "Kubernetes versions and upgrades").
package version

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/validation"
	"github.com/saltbush/saltbush/store"
)

// TypeVersionUpdate is the AWS update type of an UpdateClusterVersion.
const TypeVersionUpdate = "VersionUpdate"

// Config is the version service's configuration.
type Config struct {
	// Versions are the minors saltbush offers (cluster.Config's
	// KubernetesVersions); each needs a row in Calendar.
	Versions []string
	// Default is the version CreateCluster uses when it names none.
	Default string
	// IdempotencyTTL is how long a clientRequestToken is remembered.
	IdempotencyTTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Validate checks the configuration at start.
func (c Config) Validate() error {
	if !slices.Contains(c.Versions, c.Default) {
		return fmt.Errorf("version config: default Kubernetes version %q is not among %v", c.Default, c.Versions)
	}
	for _, v := range c.Versions {
		if _, ok := release(v); !ok {
			return fmt.Errorf("version config: Kubernetes version %q has no row in the support calendar", v)
		}
	}
	if c.IdempotencyTTL < time.Minute {
		return fmt.Errorf("version config: idempotency TTL %s is shorter than a minute", c.IdempotencyTTL)
	}
	return nil
}

// release returns the calendar row of minor.
func release(minor string) (Release, bool) {
	i := slices.IndexFunc(Calendar, func(r Release) bool { return r.Minor == minor })
	if i < 0 {
		return Release{}, false
	}
	return Calendar[i], true
}

// Clusters resolves clusters (cluster.Service).
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// ARN is the ARN of a cluster of account.
	ARN(account, name string) string
}

// Service serves Kubernetes versions and upgrades. It is safe for
// concurrent use.
type Service struct {
	store    *store.Store
	clusters Clusters
	cfg      Config
	log      *slog.Logger
	// readiness judges a rollback's add-ons (the insight service); set
	// once at wiring, before the service serves (SetRollbackReadiness).
	readiness RollbackReadiness
}

// NewService returns the version service.
func NewService(st *store.Store, clusters Clusters, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: st, clusters: clusters, cfg: cfg, log: log}, nil
}

// Offered reports whether saltbush offers minor.
func (s *Service) Offered(minor string) bool { return slices.Contains(s.cfg.Versions, minor) }

// NextOffered is the minor version an upgrade of a cluster on minor goes
// to, when saltbush offers it.
func (s *Service) NextOffered(minor string) (string, bool) {
	next, ok := NextMinor(minor)
	if !ok || !s.Offered(next) {
		return "", false
	}
	return next, true
}

func (s *Service) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.log, op, validation.Conform(op, err))
}
