package access

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/store"
)

// Update changes a STANDARD entry's username and groups by compare and
// swap. modifiedAt moves only when something changed; an absent field is
// left as it is, and an empty group list removes every group.
func (s *Service) Update(ctx context.Context, req *eksv1.UpdateAccessEntryRequest) (*storagev1.AccessEntryRecord, error) {
	cn := req.GetClusterName()
	who, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, err
	}
	var groups []string
	setGroups := req.GetKubernetesGroups() != nil
	if setGroups {
		for _, v := range req.GetKubernetesGroups().GetValues() {
			if _, isString := v.GetKind().(*structpb.Value_StringValue); !isString {
				return nil, invalid(cn, "kubernetesGroups must be a list of strings.")
			}
			groups = append(groups, v.GetStringValue())
		}
		if groups, err = validateGroups(cn, groups); err != nil {
			return nil, err
		}
	}
	if req.Username != nil {
		if req.GetUsername() == "" {
			// Kubernetes needs a name for every user; "" is not "keep".
			return nil, invalid(cn, "The username must be 1 to %d characters.", maxUsernameLen)
		}
		if err := validateUsername(cn, req.GetUsername()); err != nil {
			return nil, err
		}
	}
	tok, err := idempotency.New(who.AccountID, opUpdateAccessEntry, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", cn)
	}
	rec := &storagev1.AccessEntryRecord{}
	if found, err := s.replay(ctx, tok, cn, rec); found || err != nil {
		return rec, err
	}
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		err := s.updateEntry(ctx, sc, req.GetPrincipalArn(), rec, func(r *storagev1.AccessEntryRecord, key string, txn *store.Txn) error {
			if r.GetType() != storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD && (setGroups || req.Username != nil) {
				return standardOnly(cn)
			}
			changed := false
			if setGroups && !slices.Equal(groups, r.GetKubernetesGroups()) {
				r.KubernetesGroups, changed = groups, true
			}
			if req.Username != nil && req.GetUsername() != r.GetUsername() {
				r.Username, changed = req.GetUsername(), true
			}
			if changed {
				r.ModifiedAt = timestamppb.New(s.cfg.Now())
			}
			tok.Remember(txn, key, r.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
			return nil
		})
		if errors.Is(err, store.ErrExists) {
			// The token was used a moment ago by a concurrent request.
			if found, rerr := s.replay(ctx, tok, cn, rec); found || rerr != nil {
				return rerr
			}
		}
		return err
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "update access entry %q of cluster %q", req.GetPrincipalArn(), cn)
	}
	return rec, nil
}

// updateEntry is one attempt, in the scope of the entry's cluster, at
// changing the entry of principalArn: change edits the current record
// (read into rec) and may add to the transaction, which is also guarded by
// the cluster's revision, so an entry of a cluster deleted or replaced
// meanwhile is never written. A missing entry is
// ResourceNotFoundException; ErrConflict means try again
// (clusterscope.Scopes.Write).
func (s *Service) updateEntry(ctx context.Context, sc clusterscope.Scope, principalArn string, rec *storagev1.AccessEntryRecord,
	change func(r *storagev1.AccessEntryRecord, key string, txn *store.Txn) error) error {
	cn := sc.Name()
	key, ok := entryKey(sc.Cluster, principalArn)
	if !ok {
		return entryNotFound(cn)
	}
	_, err := store.Update(ctx, s.store, key, rec, func(r *storagev1.AccessEntryRecord, txn *store.Txn) error {
		if err := sameEntry(cn, r, principalArn); err != nil {
			return err
		}
		if err := change(r, key, txn); err != nil {
			return err
		}
		sc.Guard(txn)
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return entryNotFound(cn).WithCause(err)
	}
	return err
}
