package addon

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/store"
)

// Delete moves an add-on to DELETING at generation+1; the record stays,
// describable, until the guest reports REMOVED for that generation. With
// preserve the guest stops managing the workloads and leaves them. An
// in-progress update is Cancelled in the same transaction. Deleting an
// add-on that is DELETING already returns it unchanged.
func (s *Service) Delete(ctx context.Context, clusterName, name string, preserve bool) (*storagev1.AddonRecord, error) {
	who, ref, err := clusterscope.Ref(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	var rec *storagev1.AddonRecord
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		if !namePattern.MatchString(name) {
			return addonNotFound(clusterName, name)
		}
		rec = &storagev1.AddonRecord{}
		_, err = store.Update(ctx, s.store, store.AddonKey(sc.UID(), name), rec, func(r *storagev1.AddonRecord, txn *store.Txn) error {
			if r.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_DELETING {
				return nil
			}
			if err := s.markDeleting(ctx, r, preserve, txn); err != nil {
				return err
			}
			sc.Guard(txn)
			return nil
		})
		if errors.Is(err, store.ErrNotFound) {
			if sc.Consistency == clusterscope.Serializable {
				// The cluster uid may be stale: confirm the miss.
				return fmt.Errorf("add-on %q: %w", name, store.ErrConflict)
			}
			return addonNotFound(clusterName, name).WithCause(err)
		}
		return err
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "delete add-on %q on cluster %q", name, clusterName)
	}
	s.log.InfoContext(ctx, "add-on deleting", "account", who.AccountID, "cluster", clusterName,
		"addon", name, "generation", rec.GetGeneration(), "preserve", preserve)
	return rec, nil
}

// markDeleting mutates r to its DELETING generation and cancels its
// in-progress update in txn.
func (s *Service) markDeleting(ctx context.Context, r *storagev1.AddonRecord, preserve bool, txn *store.Txn) error {
	now := s.cfg.Now()
	if r.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_UPDATING && r.GetUpdateId() != "" {
		key := store.AddonUpdateKey(r.GetClusterUid(), r.GetName(), r.GetUpdateId())
		u := &storagev1.UpdateRecord{}
		if _, err := s.store.Get(ctx, key, u); err == nil {
			if u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
				u.Status = storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED
				u.ModifiedAt = timestamppb.New(now)
				// A plain put is safe: update records change only together
				// with their add-on record, whose revision guards this txn.
				txn.Put(key, u)
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("read update %s of add-on %q: %w", r.GetUpdateId(), r.GetName(), err)
		}
	}
	// Its pod identity associations go with it (with preserve they stay,
	// no longer owned, for the workloads left behind).
	if err := s.pods.Release(ctx, txn, r, preserve); err != nil {
		return err
	}
	r.Spec.Deleted = true
	r.Spec.Preserve = preserve
	r.Generation++
	r.Status = storagev1.AddonStatus_ADDON_STATUS_DELETING
	r.Issues = nil
	r.UpdateId = ""
	r.Deadline = timestamppb.New(now.Add(s.cfg.DeleteTimeout))
	r.ModifiedAt = timestamppb.New(now)
	hintDeadline(txn, r)
	return nil
}
