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

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
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
	clusterscope.Reader
	// ARN is the ARN of a cluster of account.
	ARN(account, name string) string
}

// Service reads update records.
type Service struct {
	store    *store.Store
	clusters Clusters
	scopes   *clusterscope.Scopes
	log      *slog.Logger
}

// NewService returns the update service.
func NewService(st *store.Store, clusters Clusters, log *slog.Logger) *Service {
	return &Service{store: st, clusters: clusters, log: log,
		scopes: clusterscope.New(clusters, clusterscope.Config{Resources: "updates"})}
}

var addonNamePattern = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9-_]{0,99}$`)

// Filter is the optional scoping members of DescribeUpdate and ListUpdates.
type Filter struct {
	AddonName, NodegroupName, CapabilityName string
}

// cluster reads the caller's cluster from the read view: update records
// are only read here.
func (s *Service) cluster(ctx context.Context, name string) (*storagev1.ClusterRecord, error) {
	_, ref, err := clusterscope.Ref(ctx, name)
	if err != nil {
		return nil, err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.FromView)
	return sc.Cluster, err
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
	if _, err := s.store.Read(ctx, store.AddonKey(c.GetUid(), f.AddonName), &storagev1.AddonRecord{}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", errdefs.NotFound("No addon: %s found in cluster: %s", f.AddonName, c.GetName()).
				WithField("clusterName", c.GetName()).WithField("addonName", f.AddonName).WithCause(err)
		}
		return "", fmt.Errorf("cluster %q add-on %q: %w", c.GetName(), f.AddonName, err)
	}
	return store.AddonUpdatesPrefix(c.GetUid(), f.AddonName), nil
}
