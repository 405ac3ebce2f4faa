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
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/saltbush/saltbush/errdefs"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/server/paging"
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
	RoleOfSession func(sessionARN string) string
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

const opCreateCluster = "CreateCluster"

func notFound(name string) *errdefs.Error {
	return errdefs.NotFound("No cluster found for name: %s.", name).WithField("clusterName", name)
}

// Create records a new cluster in CREATING, exclusively: of concurrent
// creates of one name exactly one wins. With a clientRequestToken the
// request is idempotent: the token is remembered in the same transaction,
// a retry with the same parameters returns the cluster it created, and a
// retry with different parameters is refused.
func (s *Service) Create(ctx context.Context, req *eksv1.CreateClusterRequest) (*storagev1.ClusterRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.validateCreate(req); err != nil {
		return nil, err
	}
	// A cluster acts through its roles: they must be the caller's own (and
	// the caller needs iam:PassRole on them, checked by the EKS shell).
	for member, arn := range map[string]string{"roleArn": req.GetRoleArn(), "computeConfig nodeRoleArn": req.GetComputeConfig().GetNodeRoleArn()} {
		if arn != "" && strings.Split(arn, ":")[4] != who.AccountID {
			return nil, invalid(req.GetName(), "%s %q is not a role of account %s.", member, arn, who.AccountID)
		}
	}
	now := s.cfg.Now()
	rec := s.newRecord(who, req, now)
	key := store.ClusterKey(who.AccountID, req.GetName())

	tok, err := idempotency.New(who.AccountID, opCreateCluster, req)
	if err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) {
			return nil, e.WithField("clusterName", req.GetName())
		}
		return nil, err
	}
	txn := store.NewTxn().Create(key, rec)
	if rec.GetAccessConfig().GetBootstrapClusterCreatorAdminPermissions() {
		// The creator's admin entry is written with the cluster, never
		// after it: no entry for the creator can exist yet to be
		// overwritten (entries live under the new uid).
		if creator, ok := access.Creator(who, s.cfg.RoleOfSession); ok {
			txn.Create(access.CreatorEntry(s.cfg.Region, creator, rec))
		}
	}
	tok.Remember(txn, key, rec.GetUid(), s.cfg.IdempotencyTTL, now)
	if _, err := s.store.Commit(ctx, txn); err != nil {
		if !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("create cluster %q: %w", req.GetName(), err)
		}
		if prior, err := s.replay(ctx, tok, req.GetName()); prior != nil || err != nil {
			return prior, err
		}
		return nil, errdefs.ResourceInUse("Cluster already exists with name: %s", req.GetName()).
			WithField("clusterName", req.GetName()).WithCause(err)
	}
	s.log.InfoContext(ctx, "cluster created", "account", who.AccountID, "cluster", rec.GetName(), "uid", rec.GetUid())
	return rec, nil
}

// replay answers a create whose token was used before: the original
// cluster for the same parameters, an error for different ones. It returns
// nil, nil when the token is unknown (the collision was on the name).
func (s *Service) replay(ctx context.Context, tok idempotency.Token, name string) (*storagev1.ClusterRecord, error) {
	prior, err := tok.Lookup(ctx, s.store)
	if err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) {
			return nil, e.WithField("clusterName", name)
		}
		return nil, fmt.Errorf("create cluster %q: %w", name, err)
	}
	if prior == nil {
		return nil, nil
	}
	rec := &storagev1.ClusterRecord{}
	_, err = s.store.Get(ctx, prior.GetResourceKey(), rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("create cluster %q: read the cluster of an earlier request: %w", name, err)
	}
	if err != nil || rec.GetUid() != prior.GetResourceUid() {
		// The cluster this token created is gone; the name may be reused.
		return nil, errdefs.ResourceInUse(
			"The clientRequestToken was already used for cluster %s, which no longer exists.", name).
			WithField("clusterName", name)
	}
	return rec, nil
}

// Describe returns the caller's cluster name.
func (s *Service) Describe(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	rec := &storagev1.ClusterRecord{}
	if _, err := s.store.Get(ctx, store.ClusterKey(who.AccountID, name), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(name).WithCause(err)
		}
		return nil, fmt.Errorf("describe cluster %q: %w", name, err)
	}
	return rec, nil
}

// List returns one page of the caller's cluster names.
func (s *Service) List(ctx context.Context, maxResults *int32, nextToken string) ([]string, string, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	page, err := s.store.List(ctx, store.ListOptions{
		Prefix:   store.ClustersPrefix(who.AccountID),
		Scope:    "ListClusters/" + who.AccountID,
		Limit:    limit,
		Token:    nextToken,
		KeysOnly: true,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err)
		}
		return nil, "", fmt.Errorf("list clusters: %w", err)
	}
	names := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		names = append(names, kv.Name)
	}
	return names, page.NextToken, nil
}

// Delete moves the caller's cluster to DELETING. The record stays until the
// provisioner confirms teardown (FinalizeDeletion). Deleting a cluster that
// is already DELETING returns it unchanged.
func (s *Service) Delete(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	rec := &storagev1.ClusterRecord{}
	_, err = store.Update(ctx, s.store, store.ClusterKey(who.AccountID, name), rec, func(c *storagev1.ClusterRecord, txn *store.Txn) error {
		if c.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING {
			return nil
		}
		before := proto.Clone(c).(*storagev1.ClusterRecord)
		if c.GetSpec().GetDeletionProtection() {
			return errdefs.InvalidRequest("Cannot delete cluster %s because deletion protection is enabled.", name).
				WithField("clusterName", name)
		}
		c.Status = storagev1.ClusterStatus_CLUSTER_STATUS_DELETING
		c.ModifiedAt = timestamppb.New(s.cfg.Now())
		return s.fenceDelivery(ctx, txn, before, c)
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(name).WithCause(err)
		}
		return nil, fmt.Errorf("delete cluster %q: %w", name, err)
	}
	s.log.InfoContext(ctx, "cluster deleting", "account", who.AccountID, "cluster", name, "uid", rec.GetUid())
	return rec, nil
}

// ARN returns the cluster ARN AWS would give name in account.
func (s *Service) ARN(account, name string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", s.cfg.Region, account, name)
}

func (s *Service) newRecord(who identity.Caller, req *eksv1.CreateClusterRequest, now time.Time) *storagev1.ClusterRecord {
	version := req.GetVersion()
	if version == "" {
		version = s.cfg.DefaultKubernetesVersion
	}
	ac := &storagev1.ClusterAccessConfig{
		AuthenticationMode:                      req.GetAccessConfig().GetAuthenticationMode(),
		BootstrapClusterCreatorAdminPermissions: true,
	}
	if ac.AuthenticationMode == "" {
		// AWS's default for clusters created through the API.
		ac.AuthenticationMode = "CONFIG_MAP"
	}
	if req.GetAccessConfig() != nil && req.GetAccessConfig().BootstrapClusterCreatorAdminPermissions != nil {
		ac.BootstrapClusterCreatorAdminPermissions = req.GetAccessConfig().GetBootstrapClusterCreatorAdminPermissions()
	}
	return &storagev1.ClusterRecord{
		Uid:                uuid.NewString(),
		AccountId:          who.AccountID,
		Name:               req.GetName(),
		Arn:                s.ARN(who.AccountID, req.GetName()),
		KubernetesVersion:  version,
		Status:             storagev1.ClusterStatus_CLUSTER_STATUS_CREATING,
		CreatedAt:          timestamppb.New(now),
		ModifiedAt:         timestamppb.New(now),
		AccessConfig:       ac,
		Tags:               req.GetTags(),
		Spec:               specFromRequest(req),
		ClientRequestToken: req.GetClientRequestToken(),
	}
}
