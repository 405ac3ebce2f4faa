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
	"github.com/saltbush/saltbush/server/clusterscope"
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
	cn, name := req.GetClusterName(), req.GetAddonName()
	who, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opCreateAddon, req)
	if err != nil {
		return nil, withAddonFields(err, cn, name)
	}
	var rec *storagev1.AddonRecord
	err = s.scopes.Create(ctx, s.store, ref, clusterscope.Creation{
		Build: func(ctx context.Context, sc clusterscope.Scope) (*store.Txn, error) {
			r, err := s.newRecord(ctx, who, sc.Cluster, req)
			if err != nil {
				return nil, err
			}
			rec = r
			key := store.AddonKey(sc.UID(), rec.GetName())
			txn := store.NewTxn().Create(key, rec)
			hintDeadline(txn, rec)
			// The add-on's pod identity associations are created with it.
			// Their service accounts may be held by the associations of
			// this very request's earlier, successful attempt: Create
			// then answers with that add-on (Replay).
			if err := s.pods.Create(ctx, txn, sc.Cluster, rec, podNamespace(rec), rec.GetSpec().GetPodIdentityAssociations()); err != nil {
				return nil, withAddonFields(err, cn, name)
			}
			tok.Remember(txn, key, rec.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
			return txn, nil
		},
		Replay: func(ctx context.Context, sc clusterscope.Scope) (bool, error) {
			rec = &storagev1.AddonRecord{}
			found, err := idempotency.Replay(ctx, s.store, tok, rec, (*storagev1.AddonRecord).GetUid,
				errdefs.ResourceInUse("The clientRequestToken was already used for addon %s, which no longer exists.", name))
			return found, withAddonFields(err, cn, name)
		},
		Exists: func(ctx context.Context, sc clusterscope.Scope, err error) error {
			if _, gerr := s.store.Get(ctx, store.AddonKey(sc.UID(), name), &storagev1.AddonRecord{}); errors.Is(gerr, store.ErrNotFound) {
				// What existed was a service account's association, taken
				// in between: read again to say which.
				return fmt.Errorf("create add-on %q: %w", name, store.ErrConflict)
			}
			return errdefs.ResourceInUse("Addon already exists.").
				WithField("clusterName", cn).WithField("addonName", name).WithCause(err)
		},
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "create add-on %q on cluster %q", name, cn)
	}
	s.log.InfoContext(ctx, "add-on created", "account", who.AccountID, "cluster", rec.GetClusterName(),
		"addon", rec.GetName(), "uid", rec.GetUid(), "version", rec.GetSpec().GetVersion())
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
