package addon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/store"
)

// Update applies UpdateAddon: a new desired spec at generation+1, status
// UPDATING, and a new InProgress update record with a UUID of its own, in
// one transaction (with the idempotency key, when a token is given). An
// add-on that is CREATING, UPDATING or DELETING is refused with AWS's
// ResourceInUseException.
func (s *Service) Update(ctx context.Context, req *eksv1.UpdateAddonRequest) (*storagev1.UpdateRecord, error) {
	who, ref, err := clusterscope.Ref(ctx, req.GetClusterName())
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opUpdateAddon, req)
	if err != nil {
		return nil, withAddonFields(err, req.GetClusterName(), req.GetAddonName())
	}
	var upd *storagev1.UpdateRecord
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		c := sc.Cluster
		// A retry of an update that already happened gets that update,
		// even though the add-on is UPDATING now.
		if prior, err := s.replayUpdate(ctx, tok, c, req.GetAddonName()); prior != nil || err != nil {
			upd = prior
			return err
		}
		if !namePattern.MatchString(req.GetAddonName()) {
			return addonNotFound(c.GetName(), req.GetAddonName())
		}
		a, err := s.lookupAddon(ctx, c, req.GetAddonName())
		if err != nil {
			return addonNotFound(c.GetName(), req.GetAddonName())
		}
		key := store.AddonKey(c.GetUid(), req.GetAddonName())
		rec := &storagev1.AddonRecord{}
		_, err = store.Update(ctx, s.store, key, rec, func(r *storagev1.AddonRecord, txn *store.Txn) error {
			u, err := s.applyUpdate(who.AccountID, c, a, r, req)
			if err != nil {
				return err
			}
			// The associations follow the new spec in the same txn: kept
			// ones keep their ids, new ones are created, dropped ones go.
			if err := s.pods.Sync(ctx, txn, c, r, podNamespace(r), r.GetSpec().GetPodIdentityAssociations()); err != nil {
				return withAddonFields(err, c.GetName(), r.GetName())
			}
			sc.Guard(txn.Create(store.AddonUpdateKey(c.GetUid(), r.GetName(), u.GetId()), u))
			hintDeadline(txn, r)
			tok.Remember(txn, store.AddonUpdateKey(c.GetUid(), r.GetName(), u.GetId()), u.GetId(), s.cfg.IdempotencyTTL, s.cfg.Now())
			upd = u
			return nil
		})
		if errors.Is(err, store.ErrNotFound) {
			if sc.Consistency == clusterscope.Serializable {
				// The cluster uid may be stale: confirm the miss.
				return fmt.Errorf("add-on %q: %w", req.GetAddonName(), store.ErrConflict)
			}
			return addonNotFound(c.GetName(), req.GetAddonName()).WithCause(err)
		}
		if err != nil && tok.Present() {
			// A concurrent request with the same token may have won.
			if prior, rerr := s.replayUpdate(ctx, tok, c, req.GetAddonName()); prior != nil {
				upd = prior
				return nil
			} else if rerr != nil {
				return rerr
			}
		}
		if errors.Is(err, store.ErrExists) {
			// A service account's association was taken in between:
			// read again to say which.
			return fmt.Errorf("add-on %q: %w", req.GetAddonName(), store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "update add-on %q on cluster %q", req.GetAddonName(), req.GetClusterName())
	}
	s.log.InfoContext(ctx, "add-on updating", "account", who.AccountID, "cluster", req.GetClusterName(),
		"addon", req.GetAddonName(), "update", upd.GetId(), "generation", upd.GetGeneration())
	return upd, nil
}

// replayUpdate returns the update an earlier request with the same token
// made, nil when the token is new.
func (s *Service) replayUpdate(ctx context.Context, tok idempotency.Token, c *storagev1.ClusterRecord, name string) (*storagev1.UpdateRecord, error) {
	u := &storagev1.UpdateRecord{}
	found, err := idempotency.Replay(ctx, s.store, tok, u, (*storagev1.UpdateRecord).GetId,
		errdefs.ResourceInUse("The clientRequestToken was already used for an update of addon %s, which no longer exists.", name))
	if !found || err != nil {
		return nil, withAddonFields(err, c.GetName(), name)
	}
	return u, nil
}

// applyUpdate validates req against the current record r and mutates r to
// the next generation; it returns the update record to create. The
// checks run in AWS's order: the status, the version, the configuration
// against the (new or kept) version, the role, resolveConflicts, the pod
// identity associations.
func (s *Service) applyUpdate(account string, c *storagev1.ClusterRecord, a *catalog.Addon, r *storagev1.AddonRecord, req *eksv1.UpdateAddonRequest) (*storagev1.UpdateRecord, error) {
	cn, name := c.GetName(), r.GetName()
	if err := updatable(cn, r); err != nil {
		return nil, err
	}
	spec := proto.Clone(r.GetSpec()).(*storagev1.AddonSpec)
	var params []*storagev1.UpdateParam
	param := func(typ, value string) {
		params = append(params, &storagev1.UpdateParam{Type: typ, Value: value})
	}

	target, changed, err := updatedVersion(c, a, name, spec.GetVersion(), req)
	if err != nil {
		return nil, err
	}
	if changed {
		spec.Version = target.Version
		param("AddonVersion", target.Version)
	}
	if req.ConfigurationValues != nil {
		spec.ConfigurationValues = req.GetConfigurationValues()
		param("ConfigurationValues", req.GetConfigurationValues())
	}
	// The (new or kept) configuration must fit the (new or kept) version.
	if err := parseConfiguration(c, target, spec.GetConfigurationValues()); err != nil {
		return nil, err
	}
	if req.ServiceAccountRoleArn != nil {
		if arn := req.GetServiceAccountRoleArn(); arn != "" {
			if err := validateRoleARN(cn, name, "serviceAccountRoleArn", arn, account); err != nil {
				return nil, err
			}
		}
		spec.ServiceAccountRoleArn = req.GetServiceAccountRoleArn()
		param("ServiceAccountRoleArn", req.GetServiceAccountRoleArn())
	}
	if err := validateResolveConflicts(cn, name, req.GetResolveConflicts(), false); err != nil {
		return nil, err
	}
	// resolveConflicts belongs to the call, as in AWS: an update that
	// names none resolves its conflicts as NONE, whatever an earlier call
	// chose (the agent applies this generation, and re-applies it against
	// drift, in this mode).
	spec.ResolveConflicts = req.GetResolveConflicts()
	if rc := req.GetResolveConflicts(); rc != "" {
		param("ResolveConflicts", rc)
	}
	pia, replaced, err := updatedPodIdentity(account, c, target, name, spec, req)
	if err != nil {
		return nil, err
	}
	if replaced {
		spec.PodIdentityAssociations = pia
		arns := make([]string, 0, len(pia))
		for _, p := range pia {
			arns = append(arns, s.podIdentityARN(account, cn, p.GetAssociationId()))
		}
		b, _ := json.Marshal(arns)
		param("PodIdentityAssociations", string(b))
	}

	now := s.cfg.Now()
	r.Spec = spec
	r.Generation++
	r.Status = storagev1.AddonStatus_ADDON_STATUS_UPDATING
	r.Issues = nil
	r.Deadline = timestamppb.New(now.Add(s.cfg.UpdateTimeout))
	r.ModifiedAt = timestamppb.New(now)
	id := uuid.Must(uuid.NewV7()).String()
	r.UpdateId = id
	return &storagev1.UpdateRecord{
		Id:         id,
		ClusterUid: c.GetUid(),
		AddonName:  name,
		AddonUid:   r.GetUid(),
		Generation: r.GetGeneration(),
		Type:       update.TypeAddonUpdate,
		Status:     storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS,
		Params:     params,
		CreatedAt:  timestamppb.New(now),
		ModifiedAt: timestamppb.New(now),
	}, nil
}

// updatable refuses an update of an add-on that is busy (CREATING,
// UPDATING, DELETING) or half deleted (DELETE_FAILED: only deleting it
// again can settle it).
func updatable(cn string, r *storagev1.AddonRecord) error {
	name := r.GetName()
	switch st := r.GetStatus(); st {
	case storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_UPDATING,
		storagev1.AddonStatus_ADDON_STATUS_DELETING:
		return errdefs.ResourceInUse("Addon %s cannot be updated as it is currently in %s state", name, StatusName(st)).
			WithField("clusterName", cn).WithField("addonName", name)
	case storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED:
		return errdefs.InvalidRequest(
			"Addon %s cannot be updated as it is currently in DELETE_FAILED state; delete it again.", name).
			WithField("clusterName", cn).WithField("addonName", name)
	}
	return nil
}

// updatedVersion is the catalogue version the update targets: the
// current one, or the one req names (changed). The kept version must
// still be offered for the cluster; a named one must be, and no older
// than the current.
func updatedVersion(c *storagev1.ClusterRecord, a *catalog.Addon, name, current string, req *eksv1.UpdateAddonRequest) (*catalog.Version, bool, error) {
	cn := c.GetName()
	changesVersion := req.AddonVersion != nil && req.GetAddonVersion() != current
	target, err := lookupVersion(c, a, current, current)
	if err != nil && !changesVersion {
		// The current version is no longer compatible (the cluster was
		// upgraded) or no longer offered; an update that keeps it cannot
		// proceed.
		return nil, false, err
	}
	if !changesVersion {
		return target, false, nil
	}
	if req.GetAddonVersion() == "" {
		return nil, false, invalid(cn, name, "addonVersion must not be empty.")
	}
	if target, err = lookupVersion(c, a, req.GetAddonVersion(), current); err != nil {
		return nil, false, err
	}
	// No downgrades, as in AWS. A current version the catalogue no
	// longer lists may move to any offered version.
	if cur := versionIndex(a, current); cur >= 0 && versionIndex(a, target.Version) > cur {
		return nil, false, invalid(cn, name, "Updating addon %s from version %s to the older version %s is not supported.",
			name, current, target.Version)
	}
	return target, true, nil
}

// updatedPodIdentity checks the pod identity associations against the
// target version: a list req carries (possibly empty) replaces the
// current ones (replaced), and kept ones must still be valid for it.
func updatedPodIdentity(account string, c *storagev1.ClusterRecord, target *catalog.Version, name string,
	spec *storagev1.AddonSpec, req *eksv1.UpdateAddonRequest) ([]*storagev1.PodIdentityAssociation, bool, error) {
	requested, err := podIdentityList(c.GetName(), name, req.GetPodIdentityAssociations())
	if err != nil {
		return nil, false, err
	}
	if requested != nil {
		// Present, possibly empty: replace (an empty list removes all).
		pia, err := podIdentity(c, target, account, requested, spec.GetPodIdentityAssociations(), newAssociationID)
		if err != nil {
			return nil, false, err
		}
		return pia, true, nil
	}
	if len(spec.GetPodIdentityAssociations()) > 0 {
		// Kept associations must still be valid for the target version.
		kept := make([]*eksv1.AddonPodIdentityAssociations, 0, len(spec.GetPodIdentityAssociations()))
		for _, p := range spec.GetPodIdentityAssociations() {
			kept = append(kept, &eksv1.AddonPodIdentityAssociations{ServiceAccount: p.GetServiceAccount(), RoleArn: p.GetRoleArn()})
		}
		if _, err := podIdentity(c, target, account, kept, spec.GetPodIdentityAssociations(), newAssociationID); err != nil {
			return nil, false, err
		}
	}
	return nil, false, nil
}
