package addon

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Add-ons owned by reference (docs/architecture.md, "Add-ons"): a node-group
// controller that needs nvidia-device-plugin on a cluster calls EnsureAddon
// with its own reference and ReleaseAddon when it no longer needs it. Errors
// are returned to the caller, never swallowed.

// Ensure makes sure the add-on exists for reference: it creates it if
// absent (marked as created for references), re-drives a CREATE_FAILED or
// DELETE_FAILED record to a new CREATING generation, and records the
// reference. It
// reports whether it created or re-drove the add-on. An add-on being
// deleted is refused; the caller retries once the deletion finished.
func (s *Service) Ensure(ctx context.Context, req *controlv1.EnsureAddonRequest) (*storagev1.AddonRecord, bool, error) {
	if err := validateReference(req.GetReference()); err != nil {
		return nil, false, err
	}
	var (
		rec     *storagev1.AddonRecord
		created bool
	)
	err := s.scopes.Write(ctx, req.GetCluster(), func(sc clusterscope.Scope) error {
		var err error
		rec, created, err = s.ensureOnce(ctx, sc, req)
		return err
	})
	if err != nil {
		return nil, false, errdefs.Wrap(err, "ensure add-on %q for %q", req.GetAddonName(), req.GetReference())
	}
	return rec, created, nil
}

// ensureOnce is one attempt of Ensure in the scope of the add-on's
// cluster: the add-on is created when absent, else the record it should
// become is written, guarded by its own and the cluster's revisions. It
// reports whether the add-on was created or re-driven; ErrConflict means
// try again.
func (s *Service) ensureOnce(ctx context.Context, sc clusterscope.Scope, req *controlv1.EnsureAddonRequest) (*storagev1.AddonRecord, bool, error) {
	c := sc.Cluster
	a, err := s.lookupAddon(ctx, c, req.GetAddonName())
	if err != nil {
		return nil, false, err
	}
	rec := &storagev1.AddonRecord{}
	redriven := false
	_, err = store.Update(ctx, s.store, store.AddonKey(c.GetUid(), a.Name), rec, func(cur *storagev1.AddonRecord, txn *store.Txn) error {
		// This runs again after a lost race: decide afresh.
		redriven = false
		next, again, err := s.ensured(c, a, cur, req)
		if err != nil || proto.Equal(cur, next) {
			return err
		}
		redriven = again
		proto.Reset(cur)
		proto.Merge(cur, next)
		sc.Guard(txn)
		if redriven {
			hintDeadline(txn, cur)
			// A DeleteAddon removed its pod identity associations: the
			// re-driven add-on has them again.
			if err := s.pods.Sync(ctx, txn, c, cur, podNamespace(cur), cur.GetSpec().GetPodIdentityAssociations()); err != nil {
				return withAddonFields(err, c.GetName(), a.Name)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return s.createForReference(ctx, sc, a, req)
	case errors.Is(err, store.ErrExists):
		// A service account's association was taken in between.
		return nil, false, fmt.Errorf("ensure add-on %q: %w", a.Name, store.ErrConflict)
	case err != nil:
		return nil, false, err
	}
	return rec, redriven, nil
}

// createForReference creates an absent add-on for a reference, marked as
// created for references (so that releasing the last one deletes it).
func (s *Service) createForReference(ctx context.Context, sc clusterscope.Scope, a *catalog.Addon, req *controlv1.EnsureAddonRequest) (*storagev1.AddonRecord, bool, error) {
	c := sc.Cluster
	v, err := lookupVersion(c, a, req.GetAddonVersion(), "")
	if err != nil {
		return nil, false, err
	}
	if err := parseConfiguration(c, v, req.GetConfigurationValues()); err != nil {
		return nil, false, err
	}
	now := s.cfg.Now()
	uid := uuid.NewString()
	rec := &storagev1.AddonRecord{
		ClusterUid: c.GetUid(), AccountId: c.GetAccountId(), ClusterName: c.GetName(),
		Name: a.Name, Uid: uid, Arn: s.ARN(c.GetAccountId(), c.GetName(), a.Name, uid),
		Generation: 1, Status: storagev1.AddonStatus_ADDON_STATUS_CREATING,
		Spec: &storagev1.AddonSpec{
			Version: v.Version, ConfigurationValues: req.GetConfigurationValues(), Namespace: a.DefaultNamespace,
		},
		CreatedAt: timestamppb.New(now), ModifiedAt: timestamppb.New(now),
		Deadline:             timestamppb.New(now.Add(s.cfg.CreateTimeout)),
		References:           []string{req.GetReference()},
		CreatedForReferences: true,
	}
	txn := sc.Guard(store.NewTxn().Create(store.AddonKey(c.GetUid(), a.Name), rec))
	hintDeadline(txn, rec)
	_, err = s.store.Commit(ctx, txn)
	if errors.Is(err, store.ErrExists) {
		// Someone created it in between: ensure it as existing.
		return nil, false, store.ErrConflict
	}
	if err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// ensured is the record an existing add-on becomes when reference ensures
// it: the reference recorded, and a CREATE_FAILED or DELETE_FAILED add-on
// re-driven as a new CREATING generation (reported as true). It writes
// nothing.
func (s *Service) ensured(c *storagev1.ClusterRecord, a *catalog.Addon, cur *storagev1.AddonRecord, req *controlv1.EnsureAddonRequest) (*storagev1.AddonRecord, bool, error) {
	next := proto.Clone(cur).(*storagev1.AddonRecord)
	redrivable := next.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED ||
		next.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED
	// What the reference asks for is checked for an existing add-on
	// too (errors are returned, never dropped): a re-drive takes it;
	// a working add-on that differs is not changed behind its owner's
	// back, so the caller is told.
	if want, err := s.ensureSpec(c, a, cur, req); err != nil {
		return nil, false, err
	} else if !proto.Equal(want, cur.GetSpec()) {
		if !redrivable {
			return nil, false, errdefs.InvalidRequest(
				"Addon %s exists at version %s with other configuration values than %s asks for; update it, or ensure it without a version and values.",
				a.Name, cur.GetSpec().GetVersion(), req.GetReference()).
				WithField("clusterName", c.GetName()).WithField("addonName", a.Name)
		}
		next.Spec = want
	}
	redriven := false
	switch next.GetStatus() {
	case storagev1.AddonStatus_ADDON_STATUS_DELETING:
		return nil, false, errdefs.ResourceInUse("Addon %s is being deleted; ensure it again once it is gone.", a.Name).
			WithField("clusterName", c.GetName()).WithField("addonName", a.Name)
	case storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED, storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED:
		// Re-drive: the same desired add-on (no longer deleted), as a
		// new generation. A DELETE_FAILED add-on that a reference needs
		// is wanted again, not half-removed.
		now := s.cfg.Now()
		next.Spec.Deleted, next.Spec.Preserve = false, false
		next.Generation++
		next.Status = storagev1.AddonStatus_ADDON_STATUS_CREATING
		next.Issues = nil
		next.Deadline = timestamppb.New(now.Add(s.cfg.CreateTimeout))
		next.ModifiedAt = timestamppb.New(now)
		redriven = true
	}
	if !slices.Contains(next.References, req.GetReference()) {
		next.References = append(next.References, req.GetReference())
		slices.Sort(next.References)
	}
	return next, redriven, nil
}

// Release drops reference from the add-on. When it was the last reference
// and the add-on was created for references, the add-on moves to DELETING
// in the same transaction. Releasing an absent reference or add-on changes
// nothing.
func (s *Service) Release(ctx context.Context, req *controlv1.ReleaseAddonRequest) (*storagev1.AddonRecord, bool, error) {
	if err := validateReference(req.GetReference()); err != nil {
		return nil, false, err
	}
	var (
		rec      *storagev1.AddonRecord
		deleting bool
	)
	// Releasing is allowed on a DELETING cluster: the scope is read, not
	// writable, and guards only the move to DELETING.
	err := store.RetryOnConflict(ctx, func(bool) error {
		sc, err := s.scopes.Read(ctx, req.GetCluster(), clusterscope.Linearizable)
		if err != nil {
			return err
		}
		c := sc.Cluster
		if !namePattern.MatchString(req.GetAddonName()) {
			return invalid(c.GetName(), req.GetAddonName(), "addon name %q is not valid.", req.GetAddonName())
		}
		rec = &storagev1.AddonRecord{}
		deleting = false
		_, err = store.Update(ctx, s.store, store.AddonKey(c.GetUid(), req.GetAddonName()), rec,
			func(r *storagev1.AddonRecord, txn *store.Txn) error {
				// This function runs again after a lost race: decide afresh.
				deleting = false
				i := slices.Index(r.GetReferences(), req.GetReference())
				if i < 0 {
					return nil
				}
				r.References = slices.Delete(r.References, i, i+1)
				r.ModifiedAt = timestamppb.New(s.cfg.Now())
				if len(r.References) == 0 && r.GetCreatedForReferences() &&
					r.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_DELETING {
					if err := s.markDeleting(ctx, r, false, txn); err != nil {
						return err
					}
					deleting = true
					sc.Guard(txn)
				}
				return nil
			})
		if errors.Is(err, store.ErrNotFound) {
			rec = nil
			return nil
		}
		return err
	})
	if err != nil {
		return nil, false, errdefs.Wrap(err, "release add-on %q for %q", req.GetAddonName(), req.GetReference())
	}
	return rec, deleting, nil
}

// ensureSpec is the spec an EnsureAddon request asks of the existing
// add-on cur: its version and configuration values where the request names
// them, validated against the catalogue and the cluster.
func (s *Service) ensureSpec(c *storagev1.ClusterRecord, a *catalog.Addon, cur *storagev1.AddonRecord, req *controlv1.EnsureAddonRequest) (*storagev1.AddonSpec, error) {
	want := proto.Clone(cur.GetSpec()).(*storagev1.AddonSpec)
	if req.GetAddonVersion() == "" && req.GetConfigurationValues() == "" {
		return want, nil
	}
	if req.GetAddonVersion() != "" {
		want.Version = req.GetAddonVersion()
	}
	if req.GetConfigurationValues() != "" {
		want.ConfigurationValues = req.GetConfigurationValues()
	}
	v, err := lookupVersion(c, a, want.GetVersion(), cur.GetSpec().GetVersion())
	if err != nil {
		return nil, err
	}
	if err := parseConfiguration(c, v, want.GetConfigurationValues()); err != nil {
		return nil, err
	}
	return want, nil
}
