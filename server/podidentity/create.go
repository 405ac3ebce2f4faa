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

const (
	opCreate = "CreatePodIdentityAssociation"
	opUpdate = "UpdatePodIdentityAssociation"
)

// Create records a new association and its service account's exclusivity
// key in one transaction guarded by the cluster record's revision: of
// concurrent creates for one (namespace, serviceAccount) exactly one wins,
// and the others get AWS's ResourceInUseException naming the winner. With
// a clientRequestToken the request is idempotent.
func (s *Service) Create(ctx context.Context, req *eksv1.CreatePodIdentityAssociationRequest) (*storagev1.PodIdentityAssociationRecord, error) {
	cn := req.GetClusterName()
	who, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opCreate, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", cn)
	}
	var rec *storagev1.PodIdentityAssociationRecord
	err = s.scopes.Create(ctx, s.store, ref, clusterscope.Creation{
		Build: func(ctx context.Context, sc clusterscope.Scope) (*store.Txn, error) {
			if err := validateCreate(who.AccountID, req); err != nil {
				return nil, errdefs.WithField(err, "clusterName", cn)
			}
			if held, err := holder(ctx, s.store, sc.UID(), req.GetNamespace(), req.GetServiceAccount()); err != nil || held != "" {
				if err == nil {
					err = inUse(cn, held)
				}
				return nil, err
			}
			rec = s.newRecord(who.AccountID, sc.Cluster, req)
			txn := store.NewTxn()
			createWrites(txn, rec)
			tok.Remember(txn, store.PodIdentityAssociationKey(sc.UID(), rec.GetAssociationId()), rec.GetAssociationId(),
				s.cfg.IdempotencyTTL, s.cfg.Now())
			return txn, nil
		},
		Replay: func(ctx context.Context, _ clusterscope.Scope) (bool, error) {
			rec = &storagev1.PodIdentityAssociationRecord{}
			return s.replay(ctx, tok, cn, rec)
		},
		Exists: func(context.Context, clusterscope.Scope, error) error {
			// The service account was taken in between: read again to
			// say by which association.
			return fmt.Errorf("create pod identity association: %w", store.ErrConflict)
		},
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "create pod identity association for %s/%s on cluster %q",
			req.GetNamespace(), req.GetServiceAccount(), cn)
	}
	s.log.InfoContext(ctx, "pod identity association created", "account", who.AccountID, "cluster", cn,
		"association", rec.GetAssociationId(), "namespace", rec.GetNamespace(), "serviceAccount", rec.GetServiceAccount())
	return rec, nil
}

// createWrites adds an association and its exclusivity key to txn, both
// created exclusively.
func createWrites(txn *store.Txn, rec *storagev1.PodIdentityAssociationRecord) {
	uid := rec.GetClusterUid()
	txn.Create(store.PodIdentityAssociationKey(uid, rec.GetAssociationId()), rec).
		Create(store.PodIdentityServiceAccountKey(uid, rec.GetNamespace(), rec.GetServiceAccount()),
			&storagev1.PodIdentityServiceAccountRecord{AssociationId: rec.GetAssociationId()})
}

// deleteWrites adds the deletion of an association (guarded by its mod
// revision) and of its exclusivity key to txn.
func deleteWrites(txn *store.Txn, rec *storagev1.PodIdentityAssociationRecord, rev int64) {
	uid := rec.GetClusterUid()
	txn.Delete(store.PodIdentityAssociationKey(uid, rec.GetAssociationId()), rev).
		Remove(store.PodIdentityServiceAccountKey(uid, rec.GetNamespace(), rec.GetServiceAccount()))
}

// holder returns the id of the association that holds (namespace,
// serviceAccount) in cluster incarnation uid, "" when none does.
func holder(ctx context.Context, st *store.Store, uid, namespace, serviceAccount string) (string, error) {
	sa := &storagev1.PodIdentityServiceAccountRecord{}
	_, err := st.Get(ctx, store.PodIdentityServiceAccountKey(uid, namespace, serviceAccount), sa)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the association of %s/%s: %w", namespace, serviceAccount, err)
	}
	return sa.GetAssociationId(), nil
}

// replay reads into rec the association an earlier request with tok
// created or changed (idempotency.Replay): found false for an unknown
// token.
func (s *Service) replay(ctx context.Context, tok idempotency.Token, cluster string, rec *storagev1.PodIdentityAssociationRecord) (bool, error) {
	found, err := idempotency.Replay(ctx, s.store, tok, rec, (*storagev1.PodIdentityAssociationRecord).GetAssociationId,
		errdefs.ResourceInUse("The clientRequestToken was already used for a Pod Identity Association that no longer exists."))
	return found, errdefs.WithField(err, "clusterName", cluster)
}

// newRecord builds the record a validated create makes.
func (s *Service) newRecord(account string, c *storagev1.ClusterRecord, req *eksv1.CreatePodIdentityAssociationRequest) *storagev1.PodIdentityAssociationRecord {
	now := timestamppb.New(s.cfg.Now())
	id := NewID()
	rec := &storagev1.PodIdentityAssociationRecord{
		ClusterUid:         c.GetUid(),
		AccountId:          account,
		ClusterName:        c.GetName(),
		AssociationId:      id,
		Arn:                s.ARN(account, c.GetName(), id),
		Namespace:          req.GetNamespace(),
		ServiceAccount:     req.GetServiceAccount(),
		RoleArn:            req.GetRoleArn(),
		TargetRoleArn:      req.GetTargetRoleArn(),
		DisableSessionTags: req.GetDisableSessionTags(),
		Policy:             req.GetPolicy(),
		Tags:               req.GetTags(),
		CreatedAt:          now,
		ModifiedAt:         now,
		ClientRequestToken: req.GetClientRequestToken(),
	}
	if rec.GetTargetRoleArn() != "" {
		rec.ExternalId = uuid.NewString()
	}
	return rec
}
