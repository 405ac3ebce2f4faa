package podidentity

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/store"
)

// Update changes an association's roleArn, targetRoleArn,
// disableSessionTags or policy (its namespace and service account never
// change), compare-and-swap on the record and guarded by the cluster
// record's revision. One an add-on owns is refused: it changes with its
// add-on. With a clientRequestToken a retry returns the association.
func (s *Service) Update(ctx context.Context, req *eksv1.UpdatePodIdentityAssociationRequest) (*storagev1.PodIdentityAssociationRecord, error) {
	cn, id := req.GetClusterName(), req.GetAssociationId()
	who, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opUpdate, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", cn)
	}
	rec := &storagev1.PodIdentityAssociationRecord{}
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		if found, err := s.replay(ctx, tok, cn, rec); found || err != nil {
			return err
		}
		if _, _, err := s.get(ctx, sc.Cluster, id); err != nil {
			return err
		}
		if err := validateUpdate(who.AccountID, req); err != nil {
			return errdefs.WithField(err, "clusterName", cn)
		}
		key := store.PodIdentityAssociationKey(sc.UID(), id)
		_, err = store.Update(ctx, s.store, key, rec, func(r *storagev1.PodIdentityAssociationRecord, txn *store.Txn) error {
			if r.GetOwnerArn() != "" {
				return owned(cn, r)
			}
			s.apply(r, req)
			sc.Guard(txn)
			tok.Remember(txn, key, id, s.cfg.IdempotencyTTL, s.cfg.Now())
			return nil
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return notFound(cn, id).WithCause(err)
		case errors.Is(err, store.ErrExists):
			// A concurrent retry with the same token won: answer as it.
			return fmt.Errorf("update pod identity association: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "update pod identity association %q of cluster %q", id, cn)
	}
	s.log.InfoContext(ctx, "pod identity association updated", "account", who.AccountID, "cluster", cn, "association", id)
	return rec, nil
}

// apply mutates r as req asks; modifiedAt moves only when something
// changed.
func (s *Service) apply(r *storagev1.PodIdentityAssociationRecord, req *eksv1.UpdatePodIdentityAssociationRequest) {
	changed := false
	set := func(dst *string, v *string) {
		if v != nil && *dst != *v {
			*dst, changed = *v, true
		}
	}
	set(&r.RoleArn, req.RoleArn)
	set(&r.Policy, req.Policy)
	before := r.GetTargetRoleArn()
	set(&r.TargetRoleArn, req.TargetRoleArn)
	if r.GetTargetRoleArn() != before {
		// A new target role gets a new external id; none keeps none.
		r.ExternalId = ""
		if r.GetTargetRoleArn() != "" {
			r.ExternalId = uuid.NewString()
		}
	}
	if req.DisableSessionTags != nil && r.GetDisableSessionTags() != req.GetDisableSessionTags() {
		r.DisableSessionTags, changed = req.GetDisableSessionTags(), true
	}
	if changed {
		r.ModifiedAt = timestamppb.New(s.cfg.Now())
	}
}
