// Package cluster owns EKS clusters: their records, lifecycle and wire
// shapes. Service holds the domain logic; eks.go and control.go are the thin
// gRPC shells for the EKS façade and the internal control API.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Config is the cluster service's configuration.
type Config struct {
	// Region appears in ARNs.
	Region string
	// KubernetesVersions are the minors a cluster may be created with.
	KubernetesVersions []string
	// DefaultKubernetesVersion is used when CreateCluster names none.
	DefaultKubernetesVersion string
	// IdempotencyTTL is how long a clientRequestToken is remembered.
	IdempotencyTTL time.Duration
	// RoleOfSession returns the ARN, path included, of an assumed-role
	// session's role (the key store's name index), for the creator's
	// access entry; when nil the role is taken to have no path.
	RoleOfSession func(ctx context.Context, sessionARN string) (string, error)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DefaultConfig returns the configuration `saltbush serve` starts with.
func DefaultConfig() Config {
	return Config{
		Region:                   "us-east-1",
		KubernetesVersions:       []string{"1.32", "1.33", "1.34", "1.35", "1.36", "1.37"},
		DefaultKubernetesVersion: "1.36",
		IdempotencyTTL:           8 * time.Hour,
	}
}

// Validate checks the configuration at start.
func (c Config) Validate() error {
	if c.Region == "" {
		return errors.New("cluster config: region required")
	}
	if !slices.Contains(c.KubernetesVersions, c.DefaultKubernetesVersion) {
		return fmt.Errorf("cluster config: default Kubernetes version %q is not among the supported %v",
			c.DefaultKubernetesVersion, c.KubernetesVersions)
	}
	if c.IdempotencyTTL < time.Minute {
		return fmt.Errorf("cluster config: idempotency TTL %s is shorter than a minute", c.IdempotencyTTL)
	}
	return nil
}

// Service is the cluster domain logic. It is safe for concurrent use.
type Service struct {
	store *store.Store
	cfg   Config
	log   *slog.Logger
}

// NewService returns a Service on st.
func NewService(st *store.Store, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: st, cfg: cfg, log: log}, nil
}

func notFound(name string) *errdefs.Error {
	return errdefs.NotFound("No cluster found for name: %s.", name).WithField("clusterName", name)
}

// ARN returns the cluster ARN AWS would give name in account.
func (s *Service) ARN(account, name string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.cfg.Region, account, name)
}
