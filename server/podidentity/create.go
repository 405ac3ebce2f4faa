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
	"github.com/saltbush/saltbush/identity"
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
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	cn := req.GetClusterName()
	tok, err := idempotency.New(who.AccountID, opCreate, req)
	if err != nil {
		return nil, withCluster(err, cn)
	}
	var rec *storagev1.PodIdentityAssociationRecord
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cn, true)
		if err != nil {
			return err
		}
		if prior, err := s.replay(ctx, tok, cn); prior != nil || err != nil {
			rec = prior
			return err
		}
		if err := validateCreate(who.AccountID, req); err != nil {
			return withCluster(err, cn)
		}
		if held, err := holder(ctx, s.store, c.GetUid(), req.GetNamespace(), req.GetServiceAccount()); err != nil || held != "" {
			if err == nil {
				err = inUse(cn, held)
			}
			return err
		}
		rec = s.newRecord(who.AccountID, c, req)
		key := store.PodIdentityAssociationKey(c.GetUid(), rec.GetAssociationId())
		txn := store.NewTxn().RequireModRevision(store.ClusterKey(who.AccountID, cn), clusterRev)
		createWrites(txn, rec)
		tok.Remember(txn, key, rec.GetAssociationId(), s.cfg.IdempotencyTTL, s.cfg.Now())
		_, err = s.store.Commit(ctx, txn)
		if errors.Is(err, store.ErrExists) {
			// The service account was taken, or the token used, in
			// between: read again to say which.
			return fmt.Errorf("create pod identity association: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return nil, wrapUnlessAPI(err, "create pod identity association for %s/%s on cluster %q",
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

// replay answers a request whose token was used before: the association
// it created or changed, if it still exists; an error for a token used
// with different parameters; nil, nil for an unknown token.
func (s *Service) replay(ctx context.Context, tok idempotency.Token, cluster string) (*storagev1.PodIdentityAssociationRecord, error) {
	prior, err := tok.Lookup(ctx, s.store)
	if err != nil {
		return nil, withCluster(err, cluster)
	}
	if prior == nil {
		return nil, nil
	}
	rec := &storagev1.PodIdentityAssociationRecord{}
	_, err = s.store.Get(ctx, prior.GetResourceKey(), rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the pod identity association of an earlier request: %w", err)
	}
	if err != nil || rec.GetAssociationId() != prior.GetResourceUid() {
		return nil, errdefs.ResourceInUse(
			"The clientRequestToken was already used for a Pod Identity Association that no longer exists.").
			WithField("clusterName", cluster)
	}
	return rec, nil
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
