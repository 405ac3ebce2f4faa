// Package update owns EKS update records as callers see them:
// DescribeUpdate and ListUpdates. The records are written by the resource
// that changes (server/addon writes an add-on update in the same transaction
// as the add-on generation it describes, server/cluster a cluster update in
// the same transaction as the cluster record it changed); this package reads
// and renders them.
package update

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/google/uuid"

	"github.com/saltbush/saltbush/errdefs"
	controlv1 "github.com/saltbush/saltbush/gen/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// The update types, as AWS names them.
const (
	// TypeAddonUpdate is the type of every add-on update.
	TypeAddonUpdate = "AddonUpdate"
	// The cluster update types UpdateClusterConfig records.
	TypeAccessConfigUpdate       = "AccessConfigUpdate"
	TypeLoggingUpdate            = "LoggingUpdate"
	TypeDeletionProtectionUpdate = "DeletionProtectionUpdate"
	TypeUpgradePolicyUpdate      = "UpgradePolicyUpdate"
)

// Clusters resolves a cluster name of the caller's account.
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// ARN is the ARN of a cluster of account.
	ARN(account, name string) string
}

// Service reads update records.
type Service struct {
	store    *store.Store
	clusters Clusters
	log      *slog.Logger
}

// NewService returns the update service.
func NewService(st *store.Store, clusters Clusters, log *slog.Logger) *Service {
	return &Service{store: st, clusters: clusters, log: log}
}

var addonNamePattern = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9-_]{0,99}$`)

// Filter is the optional scoping members of DescribeUpdate and ListUpdates.
type Filter struct {
	AddonName, NodegroupName, CapabilityName string
}

func (s *Service) cluster(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	who, ok := identity.FromContext(ctx)
	if !ok {
		return nil, errors.New("request has no authenticated caller")
	}
	rec, _, err := s.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: who.AccountID, Name: name})
	return rec, err
}

// scope checks the filter and, for an add-on, that the add-on exists. It
// returns the key prefix the updates live under: the add-on's, or without
// addonName the cluster's own (UpdateClusterConfig).
func (s *Service) scope(ctx context.Context, c *storagev1.ClusterRecord, f Filter) (string, error) {
	switch {
	case f.NodegroupName != "":
		return "", errdefs.NotFound("No node group found for name: %s.", f.NodegroupName).
			WithField("clusterName", c.GetName()).WithField("nodegroupName", f.NodegroupName)
	case f.CapabilityName != "":
		return "", errdefs.NotFound("No capability found for name: %s.", f.CapabilityName).
			WithField("clusterName", c.GetName())
	case f.AddonName == "":
		return store.ClusterUpdatesPrefix(c.GetUid()), nil
	}
	if !addonNamePattern.MatchString(f.AddonName) {
		return "", errdefs.InvalidParameter("Addon name %q is not valid.", f.AddonName).
			WithField("clusterName", c.GetName()).WithField("addonName", f.AddonName)
	}
	if _, err := s.store.Get(ctx, store.AddonKey(c.GetUid(), f.AddonName), &storagev1.AddonRecord{}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", errdefs.NotFound("No addon: %s found in cluster: %s", f.AddonName, c.GetName()).
				WithField("clusterName", c.GetName()).WithField("addonName", f.AddonName).WithCause(err)
		}
		return "", fmt.Errorf("cluster %q add-on %q: %w", c.GetName(), f.AddonName, err)
	}
	return store.AddonUpdatesPrefix(c.GetUid(), f.AddonName), nil
}

// Describe returns one update of the caller's cluster.
func (s *Service) Describe(ctx context.Context, clusterName, updateID string, f Filter) (*storagev1.UpdateRecord, error) {
	c, err := s.cluster(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	prefix, err := s.scope(ctx, c, f)
	if err != nil {
		return nil, err
	}
	missing := errdefs.NotFound("No update found for id: %s.", updateID).WithField("clusterName", clusterName)
	if f.AddonName != "" {
		missing = missing.WithField("addonName", f.AddonName)
	}
	// Update ids are UUIDs; anything else (a "/" above all) is not a key.
	if _, perr := uuid.Parse(updateID); perr != nil {
		return nil, missing
	}
	rec := &storagev1.UpdateRecord{}
	if _, err := s.store.Get(ctx, prefix+updateID, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, missing.WithCause(err)
		}
		return nil, fmt.Errorf("cluster %q update %q: %w", clusterName, updateID, err)
	}
	return rec, nil
}

// List returns one page of update ids of the caller's cluster in key
// order. Update ids are UUIDv7, so key order is creation order.
func (s *Service) List(ctx context.Context, clusterName string, f Filter, maxResults *int32, nextToken string) ([]string, string, error) {
	c, err := s.cluster(ctx, clusterName)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	prefix, err := s.scope(ctx, c, f)
	if err != nil {
		return nil, "", err
	}
	page, err := s.store.List(ctx, store.ListOptions{
		Prefix:   prefix,
		Scope:    "ListUpdates/" + c.GetUid() + "/" + f.AddonName,
		Limit:    limit,
		Token:    nextToken,
		KeysOnly: true,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err)
		}
		return nil, "", fmt.Errorf("list updates of cluster %q: %w", clusterName, err)
	}
	ids := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		ids = append(ids, kv.Name)
	}
	return ids, page.NextToken, nil
}

// StatusName is the EKS name of an update status.
func StatusName(st storagev1.UpdateStatus) string {
	switch st {
	case storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS:
		return "InProgress"
	case storagev1.UpdateStatus_UPDATE_STATUS_FAILED:
		return "Failed"
	case storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED:
		return "Cancelled"
	case storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL:
		return "Successful"
	}
	return ""
}

// ToAPI renders an update record in AWS's shape.
func ToAPI(u *storagev1.UpdateRecord) *eksv1.Update {
	out := &eksv1.Update{
		Id:     u.GetId(),
		Status: StatusName(u.GetStatus()),
		Type:   u.GetType(),
		Params: []*eksv1.UpdateParam{},
		Errors: []*eksv1.ErrorDetail{},
	}
	if t := u.GetCreatedAt(); t != nil {
		out.CreatedAt = float64(t.AsTime().UnixMilli()) / 1000
	}
	for _, p := range u.GetParams() {
		out.Params = append(out.Params, &eksv1.UpdateParam{Type: p.GetType(), Value: p.GetValue()})
	}
	for _, e := range u.GetErrors() {
		out.Errors = append(out.Errors, &eksv1.ErrorDetail{
			ErrorCode:    e.GetErrorCode(),
			ErrorMessage: e.GetErrorMessage(),
			ResourceIds:  e.GetResourceIds(),
		})
	}
	return out
}
