// Package access owns EKS access entries and their access-policy
// associations (docs/architecture.md, "Access entries"): the records under
// clusters/{uid}/access/{sha256(principal)}, AWS's rules for entry types,
// usernames and groups, the creator-admin entry CreateCluster seeds, and
// the narrow view token review and authorization read (Binding).
//
// Every entry belongs to one cluster incarnation, so a cluster recreated
// with the same name starts with none, and entries go with their cluster
// in the purge transaction. Creates are exclusive, updates are
// compare-and-swap, and every write is guarded by the cluster record's
// revision, so nothing is written to a cluster that turned DELETING or
// FAILED after it was read. The gRPC shell in grpc.go converts errors to
// the wire once.
package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Config is the access-entry service's configuration.
type Config struct {
	// Region appears in ARNs.
	Region string
	// IdempotencyTTL is how long a clientRequestToken is remembered.
	IdempotencyTTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DefaultConfig returns the configuration `saltbush serve` starts with.
func DefaultConfig() Config {
	return Config{Region: "us-east-1", IdempotencyTTL: 8 * time.Hour}
}

// Validate checks the configuration at start.
func (c Config) Validate() error {
	switch {
	case c.Region == "":
		return errors.New("access config: region required")
	case c.IdempotencyTTL < time.Minute:
		return fmt.Errorf("access config: idempotency TTL %s is shorter than a minute", c.IdempotencyTTL)
	}
	return nil
}

// Principals says whether an IAM user or role exists (the key store).
type Principals interface {
	PrincipalExists(ctx context.Context, arn string) (bool, error)
}

// Service is the access-entry domain logic. It is safe for concurrent use.
type Service struct {
	store      *store.Store
	clusters   clusterscope.Reader
	scopes     *clusterscope.Scopes
	principals Principals
	policies   *accesspolicy.Catalog
	cfg        Config
	log        *slog.Logger
}

// NewService returns the access-entry service.
func NewService(st *store.Store, clusters clusterscope.Reader, principals Principals, policies *accesspolicy.Catalog, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{
		store: st, clusters: clusters, principals: principals, policies: policies, cfg: cfg, log: log,
		// A cluster's access entries may be used only when its
		// authentication mode includes them.
		scopes: clusterscope.New(clusters, clusterscope.Config{Resources: "access entries", Check: accessEntriesUsed}),
	}, nil
}

// Policies returns the access-policy catalogue.
func (s *Service) Policies() *accesspolicy.Catalog { return s.policies }

// ClusterARN is the ARN of a cluster of account.
func (s *Service) ClusterARN(account, cluster string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.cfg.Region, account, cluster)
}

// ARN is the access-entry ARN of one entry incarnation:
// access-entry/{cluster}/{user|role|root}/{principal account}/{name}/{uuid}.
func (s *Service) ARN(account, cluster string, p Principal, uid string) string {
	return entryARN(s.cfg.Region, account, cluster, p, uid)
}

func entryARN(region, account, cluster string, p Principal, uid string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:access-entry/%s/%s/%s/%s/%s", region, account, cluster, p.Kind, p.Account, p.Name, uid)
}

// Errors AWS answers with, carrying the cluster's name.

func entryNotFound(cluster string) *errdefs.Error {
	return errdefs.NotFound("The specified principalArn could not be found. You can view your available access entries with 'list-access-entries'.").
		WithField("clusterName", cluster)
}

func invalid(cluster, format string, args ...any) *errdefs.Error {
	return errdefs.InvalidParameter(format, args...).WithField("clusterName", cluster)
}

func invalidRequest(cluster, format string, args ...any) *errdefs.Error {
	return errdefs.InvalidRequest(format, args...).WithField("clusterName", cluster)
}

// accessEntriesUsed refuses a cluster whose authentication mode does not
// include access entries.
func accessEntriesUsed(c *storagev1.ClusterRecord) error {
	if UsesAccessEntries(c) {
		return nil
	}
	return invalidRequest(c.GetName(),
		"The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation.")
}

// UsesAccessEntries reports whether a cluster's authentication mode
// includes access entries (API or API_AND_CONFIG_MAP).
func UsesAccessEntries(c *storagev1.ClusterRecord) bool {
	switch c.GetAccessConfig().GetAuthenticationMode() {
	case "API", "API_AND_CONFIG_MAP":
		return true
	}
	return false
}

func clusterRef(account, name string) *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: account, Name: name}
}
