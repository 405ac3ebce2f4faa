package addon

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

const (
	opCreateAddon = "CreateAddon"
	opUpdateAddon = "UpdateAddon"
)

// Create records a new add-on in CREATING, generation 1, exclusively: of
// concurrent creates of one name exactly one wins, and the record is
// describable as soon as Create returns (the SDK's AddonActive waiter fails
// on a 404). The write is guarded by the cluster record's revision, so an
// add-on is never created on a cluster that turned DELETING, or was
// recreated, after it was read. With a clientRequestToken the request is
// idempotent (see package idempotency).
func (s *Service) Create(ctx context.Context, req *eksv1.CreateAddonRequest) (*storagev1.AddonRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opCreateAddon, req)
	if err != nil {
		return nil, withAddonFields(err, req.GetClusterName(), req.GetAddonName())
	}
	var rec *storagev1.AddonRecord
	err = store.RetryOnConflict(ctx, func(quick bool) error {
		_, c, clusterRev, err := s.callerCluster(ctx, req.GetClusterName(), true, quick)
		if err != nil {
			return err
		}
		if tok.Present() && len(req.GetPodIdentityAssociations()) > 0 {
			// A retry of a create that happened gets its add-on, before
			// its own associations are found holding the service accounts.
			// Without associations the txn's guard on the token finds a
			// retry (ErrExists below), with no read before it.
			if prior, err := s.replayCreate(ctx, tok, c, req.GetAddonName()); prior != nil || err != nil {
				rec = prior
				return err
			}
		}
		if rec, err = s.newRecord(ctx, who, c, req); err != nil {
			if tok.Present() {
				// A retry of a create that happened answers with its
				// add-on even if its request no longer validates.
				if prior, rerr := s.replayCreate(ctx, tok, c, req.GetAddonName()); prior != nil || rerr != nil {
					rec = prior
					return rerr
				}
			}
			return err
		}
		key := store.AddonKey(c.GetUid(), rec.GetName())
		txn := store.NewTxn().
			Create(key, rec).
			RequireModRevision(store.ClusterKey(who.AccountID, c.GetName()), clusterRev)
		hintDeadline(txn, rec)
		// The add-on's pod identity associations are created with it.
		if err := s.pods.Create(ctx, txn, c, rec, podNamespace(rec), rec.GetSpec().GetPodIdentityAssociations()); err != nil {
			return withAddonFields(err, c.GetName(), rec.GetName())
		}
		tok.Remember(txn, key, rec.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
		_, err = s.store.Commit(ctx, txn)
		if errors.Is(err, store.ErrExists) {
			if prior, rerr := s.replayCreate(ctx, tok, c, req.GetAddonName()); prior != nil || rerr != nil {
				rec = prior
				return rerr
			}
			if _, gerr := s.store.Get(ctx, key, &storagev1.AddonRecord{}); errors.Is(gerr, store.ErrNotFound) {
				// What existed was a service account's association, taken
				// in between: read again to say which.
				return fmt.Errorf("create add-on %q: %w", req.GetAddonName(), store.ErrConflict)
			}
			return errdefs.ResourceInUse("Addon already exists.").
				WithField("clusterName", c.GetName()).WithField("addonName", req.GetAddonName()).WithCause(err)
		}
		return err
	})
	if err != nil {
		return nil, wrapUnlessAPI(err, "create add-on %q on cluster %q", req.GetAddonName(), req.GetClusterName())
	}
	s.log.InfoContext(ctx, "add-on created", "account", who.AccountID, "cluster", rec.GetClusterName(),
		"addon", rec.GetName(), "uid", rec.GetUid(), "version", rec.GetSpec().GetVersion())
	return rec, nil
}

// replayCreate answers a create whose token was used before: the add-on it
// created for the same parameters, an error for different ones; nil, nil
// when the token is unknown (the collision was on the name).
func (s *Service) replayCreate(ctx context.Context, tok idempotency.Token, c *storagev1.ClusterRecord, name string) (*storagev1.AddonRecord, error) {
	prior, err := tok.Lookup(ctx, s.store)
	if err != nil {
		return nil, withAddonFields(err, c.GetName(), name)
	}
	if prior == nil {
		return nil, nil
	}
	rec := &storagev1.AddonRecord{}
	_, err = s.store.Get(ctx, prior.GetResourceKey(), rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the add-on of an earlier request: %w", err)
	}
	if err != nil || rec.GetUid() != prior.GetResourceUid() {
		return nil, errdefs.ResourceInUse(
			"The clientRequestToken was already used for addon %s, which no longer exists.", name).
			WithField("clusterName", c.GetName()).WithField("addonName", name)
	}
	return rec, nil
}

// newRecord validates a CreateAddon request against the catalogue and the
// cluster and builds the record it creates.
func (s *Service) newRecord(ctx context.Context, who identity.Caller, c *storagev1.ClusterRecord, req *eksv1.CreateAddonRequest) (*storagev1.AddonRecord, error) {
	cn, name := c.GetName(), req.GetAddonName()
	a, err := s.lookupAddon(ctx, c, name)
	if err != nil {
		return nil, err
	}
	v, err := lookupVersion(c, a, req.GetAddonVersion(), "")
	if err != nil {
		return nil, err
	}
	if err := parseConfiguration(c, v, req.GetConfigurationValues()); err != nil {
		return nil, err
	}
	if arn := req.GetServiceAccountRoleArn(); arn != "" {
		if err := validateRoleARN(cn, name, "serviceAccountRoleArn", arn, who.AccountID); err != nil {
			return nil, err
		}
	}
	if err := validateResolveConflicts(cn, name, req.GetResolveConflicts(), true); err != nil {
		return nil, err
	}
	pia, err := podIdentity(c, v, who.AccountID, req.GetPodIdentityAssociations(), nil, newAssociationID)
	if err != nil {
		return nil, err
	}
	ns := a.DefaultNamespace
	if req.GetNamespaceConfig() != nil {
		ns = req.GetNamespaceConfig().GetNamespace()
		if err := validateNamespace(cn, name, ns); err != nil {
			return nil, err
		}
	}
	if err := tagging.Validate(req.GetTags()); err != nil {
		return nil, invalid(cn, name, "%v.", err)
	}
	now := s.cfg.Now()
	uid := uuid.NewString()
	return &storagev1.AddonRecord{
		ClusterUid:  c.GetUid(),
		AccountId:   who.AccountID,
		ClusterName: cn,
		Name:        name,
		Uid:         uid,
		Arn:         s.ARN(who.AccountID, cn, name, uid),
		Generation:  1,
		Status:      storagev1.AddonStatus_ADDON_STATUS_CREATING,
		Spec: &storagev1.AddonSpec{
			Version:                 v.Version,
			ConfigurationValues:     req.GetConfigurationValues(),
			ServiceAccountRoleArn:   req.GetServiceAccountRoleArn(),
			ResolveConflicts:        req.GetResolveConflicts(),
			PodIdentityAssociations: pia,
			Namespace:               ns,
		},
		Tags:               req.GetTags(),
		CreatedAt:          timestamppb.New(now),
		ModifiedAt:         timestamppb.New(now),
		Deadline:           timestamppb.New(now.Add(s.cfg.CreateTimeout)),
		ClientRequestToken: req.GetClientRequestToken(),
	}, nil
}
