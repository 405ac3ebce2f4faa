package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/store"
)

const opCreateCluster = "CreateCluster"

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
		creator, ok, err := access.Creator(ctx, who, s.cfg.RoleOfSession)
		if err != nil {
			return nil, fmt.Errorf("create cluster %q: creator: %w", req.GetName(), err)
		}
		if ok {
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
