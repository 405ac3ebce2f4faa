package podidentity

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// Owner writes the associations add-ons own (CreateAddon and UpdateAddon's
// podIdentityAssociations), inside the add-on service's own transactions:
// an add-on and its associations change together or not at all. An owned
// association's ownerArn is its add-on's ARN; the direct API refuses to
// update or delete it.
type Owner struct {
	store  *store.Store
	region string
	now    func() time.Time
}

// NewOwner returns the add-on side of associations over st, making ARNs of
// region.
func NewOwner(st *store.Store, region string, now func() time.Time) *Owner {
	if now == nil {
		now = time.Now
	}
	return &Owner{store: st, region: region, now: now}
}

// ARN is the ARN of association id of cluster in account.
func (o *Owner) ARN(account, cluster, id string) string { return ARN(o.region, account, cluster, id) }

// Sync adds to txn the writes that make the associations addon owns in
// cluster c exactly want, in namespace: an association whose id is kept is
// updated in place when its role changed, a new id is created with its
// service account's exclusivity key, and an owned association whose id is
// not wanted is deleted with its key. Each write is guarded by the
// revision it was read at. A service account another association already
// holds is AWS's ResourceInUseException (the caller adds its names).
func (o *Owner) Sync(ctx context.Context, txn *store.Txn, c *storagev1.ClusterRecord, addon *storagev1.AddonRecord,
	namespace string, want []*storagev1.PodIdentityAssociation) error {
	have, err := o.owned(ctx, c.GetUid(), addon.GetArn())
	if err != nil {
		return err
	}
	return o.sync(ctx, txn, c, addon, namespace, want, have)
}

// Create is Sync for an add-on being created: it owns no association yet
// (its ARN ends in the uuid it was just given, which no association can
// name as its owner), so Create adds only the creation of want and, unlike
// Sync, lists none of the cluster's associations.
func (o *Owner) Create(ctx context.Context, txn *store.Txn, c *storagev1.ClusterRecord, addon *storagev1.AddonRecord,
	namespace string, want []*storagev1.PodIdentityAssociation) error {
	return o.sync(ctx, txn, c, addon, namespace, want, nil)
}

func (o *Owner) sync(ctx context.Context, txn *store.Txn, c *storagev1.ClusterRecord, addon *storagev1.AddonRecord,
	namespace string, want []*storagev1.PodIdentityAssociation, have map[string]revisioned) error {
	now := timestamppb.New(o.now())
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.GetAssociationId()] = true
		cur, ok := have[w.GetAssociationId()]
		if !ok {
			held, err := holder(ctx, o.store, c.GetUid(), namespace, w.GetServiceAccount())
			if err != nil {
				return err
			}
			if held != "" {
				return inUse(c.GetName(), held)
			}
			createWrites(txn, &storagev1.PodIdentityAssociationRecord{
				ClusterUid:     c.GetUid(),
				AccountId:      addon.GetAccountId(),
				ClusterName:    c.GetName(),
				AssociationId:  w.GetAssociationId(),
				Arn:            o.ARN(addon.GetAccountId(), c.GetName(), w.GetAssociationId()),
				Namespace:      namespace,
				ServiceAccount: w.GetServiceAccount(),
				RoleArn:        w.GetRoleArn(),
				OwnerArn:       addon.GetArn(),
				CreatedAt:      now,
				ModifiedAt:     now,
			})
			continue
		}
		if cur.rec.GetRoleArn() != w.GetRoleArn() {
			next := proto.Clone(cur.rec).(*storagev1.PodIdentityAssociationRecord)
			next.RoleArn = w.GetRoleArn()
			next.ModifiedAt = now
			txn.Update(store.PodIdentityAssociationKey(c.GetUid(), next.GetAssociationId()), next, cur.rev)
		} else {
			txn.RequireModRevision(store.PodIdentityAssociationKey(c.GetUid(), cur.rec.GetAssociationId()), cur.rev)
		}
	}
	for id, cur := range have {
		if !wanted[id] {
			deleteWrites(txn, cur.rec, cur.rev)
		}
	}
	return nil
}

// Release adds to txn what deleting addon does to the associations it
// owns: they are deleted with their exclusivity keys, or, with preserve
// (the add-on's workloads stay on the cluster, unmanaged), they stay and
// are no longer owned.
func (o *Owner) Release(ctx context.Context, txn *store.Txn, addon *storagev1.AddonRecord, preserve bool) error {
	have, err := o.owned(ctx, addon.GetClusterUid(), addon.GetArn())
	if err != nil {
		return err
	}
	for _, cur := range have {
		if !preserve {
			deleteWrites(txn, cur.rec, cur.rev)
			continue
		}
		next := proto.Clone(cur.rec).(*storagev1.PodIdentityAssociationRecord)
		next.OwnerArn = ""
		next.ModifiedAt = timestamppb.New(o.now())
		txn.Update(store.PodIdentityAssociationKey(next.GetClusterUid(), next.GetAssociationId()), next, cur.rev)
	}
	return nil
}

type revisioned struct {
	rec *storagev1.PodIdentityAssociationRecord
	rev int64
}

// owned returns the associations of cluster incarnation uid that ownerArn
// owns, by id.
func (o *Owner) owned(ctx context.Context, uid, ownerArn string) (map[string]revisioned, error) {
	out := map[string]revisioned{}
	err := eachAssociation(ctx, o.store, uid, func(rec *storagev1.PodIdentityAssociationRecord, rev int64) {
		if rec.GetOwnerArn() == ownerArn {
			out[rec.GetAssociationId()] = revisioned{rec: rec, rev: rev}
		}
	})
	return out, err
}

// eachAssociation calls f with every association of cluster incarnation
// uid, page by page.
func eachAssociation(ctx context.Context, st *store.Store, uid string, f func(*storagev1.PodIdentityAssociationRecord, int64)) error {
	token := ""
	for {
		page, err := st.List(ctx, store.ListOptions{
			Prefix: store.PodIdentityAssociationsPrefix(uid),
			Scope:  "podidentity-owned/" + uid,
			Token:  token,
		})
		if err != nil {
			return fmt.Errorf("list pod identity associations of cluster %s: %w", uid, err)
		}
		for _, kv := range page.Items {
			rec := &storagev1.PodIdentityAssociationRecord{}
			if err := store.Decode(kv.Value, rec); err != nil {
				return fmt.Errorf("pod identity association %s: %w", kv.Key, err)
			}
			f(rec, kv.ModRev)
		}
		if page.NextToken == "" {
			return nil
		}
		token = page.NextToken
	}
}
