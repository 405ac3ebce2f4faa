// Package podidentity owns EKS Pod Identity associations
// (docs/architecture.md, "Pod identity associations"): the records under
// clusters/{uid}/podidentity/associations/{id}, the exclusivity key of each
// (namespace, service account) under clusters/{uid}/podidentity/serviceaccounts/,
// AWS's rules for creating, updating and deleting them, and the
// associations add-ons own (owned.go), which the add-on service writes in
// its own transactions.
//
// An association and its exclusivity key are created and deleted in one
// transaction, guarded by the cluster record's revision, so nothing is
// written to a cluster that turned DELETING or FAILED after it was read,
// and no two associations ever hold one service account. The gRPC shell in
// grpc.go converts errors to the wire once.
package podidentity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Config is the pod identity service's configuration.
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
		return errors.New("podidentity config: region required")
	case c.IdempotencyTTL < time.Minute:
		return fmt.Errorf("podidentity config: idempotency TTL %s is shorter than a minute", c.IdempotencyTTL)
	}
	return nil
}

// Service is the pod identity association domain logic. It is safe for
// concurrent use.
type Service struct {
	store    *store.Store
	clusters clusterscope.Reader
	scopes   *clusterscope.Scopes
	cfg      Config
	log      *slog.Logger
}

// NewService returns the pod identity association service.
func NewService(st *store.Store, clusters clusterscope.Reader, cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{
		store: st, clusters: clusters, cfg: cfg, log: log,
		scopes: clusterscope.New(clusters, clusterscope.Config{Resources: "Pod Identity Associations"}),
	}, nil
}

// ClusterARN is the ARN of a cluster of account.
func (s *Service) ClusterARN(account, cluster string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.cfg.Region, account, cluster)
}

// ARN is the ARN of one association.
func (s *Service) ARN(account, cluster, id string) string {
	return ARN(s.cfg.Region, account, cluster, id)
}

// ARN is the ARN of association id of cluster in account and region:
// arn:aws:eks:{region}:{account}:podidentityassociation/{cluster}/{id}.
func ARN(region, account, cluster, id string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:podidentityassociation/%s/%s", region, account, cluster, id)
}

// Errors AWS answers with, carrying the cluster's name.

func notFound(cluster, id string) *errdefs.Error {
	return errdefs.NotFound("No Pod Identity Association found for id: %s", clip(id)).
		WithField("clusterName", cluster)
}

// inUse is AWS's answer when a service account already has an
// association.
func inUse(cluster, holder string) *errdefs.Error {
	return errdefs.ResourceInUse("Association already exists: %s", holder).WithField("clusterName", cluster)
}

// owned refuses a direct change of an association an add-on owns.
func owned(cluster string, rec *storagev1.PodIdentityAssociationRecord) *errdefs.Error {
	return errdefs.InvalidRequest(
		"Pod Identity Association %s is owned by %s and can only be changed through that addon.",
		rec.GetAssociationId(), rec.GetOwnerArn()).WithField("clusterName", cluster)
}

func invalid(cluster, format string, args ...any) *errdefs.Error {
	return errdefs.InvalidParameter(format, args...).WithField("clusterName", cluster)
}

// get reads association id of cluster c and its mod revision,
// linearizably. A malformed id is an InvalidParameterException, as in AWS;
// a well-formed one that names nothing is ResourceNotFoundException.
func (s *Service) get(ctx context.Context, c *storagev1.ClusterRecord, id string) (*storagev1.PodIdentityAssociationRecord, int64, error) {
	return s.getWith(ctx, s.store.Get, c, id)
}

func (s *Service) getWith(ctx context.Context, read func(context.Context, string, proto.Message) (int64, error),
	c *storagev1.ClusterRecord, id string,
) (*storagev1.PodIdentityAssociationRecord, int64, error) {
	if err := validateID(c.GetName(), id); err != nil {
		return nil, 0, err
	}
	rec := &storagev1.PodIdentityAssociationRecord{}
	rev, err := read(ctx, store.PodIdentityAssociationKey(c.GetUid(), id), rec)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, notFound(c.GetName(), id).WithCause(err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("cluster %q pod identity association %q: %w", c.GetName(), id, err)
	}
	return rec, rev, nil
}
