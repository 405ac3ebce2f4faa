package access

import (
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/store"
)

// ClusterAdminPolicy is the policy the cluster creator's entry gets.
const ClusterAdminPolicy = accesspolicy.ARNPrefix + "AmazonEKSClusterAdminPolicy"

// CreatorEntry returns the entry CreateCluster seeds, in its own
// transaction, when bootstrapClusterCreatorAdminPermissions is set: a
// STANDARD entry for the creating principal (a role session's role) with
// AmazonEKSClusterAdminPolicy on cluster scope. Seeding in the cluster's
// create transaction means no entry can exist yet to be overwritten (the
// cluster key did not exist, and entries live under the new uid). ok is
// false when the creator is not an IAM principal (a saltbush service
// acting for the account): nobody is seeded.
func CreatorEntry(region string, who identity.Caller, c *storagev1.ClusterRecord) (key string, rec *storagev1.AccessEntryRecord, ok bool) {
	if who.Service != "" || who.Agent != nil {
		return "", nil, false
	}
	signer, ok := ParseSigner(who.PrincipalARN)
	if !ok {
		return "", nil, false
	}
	p := signer.Principal
	uid := newUID()
	t := storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD
	rec = &storagev1.AccessEntryRecord{
		ClusterUid:   c.GetUid(),
		AccountId:    c.GetAccountId(),
		ClusterName:  c.GetName(),
		PrincipalArn: p.ARN,
		Uid:          uid,
		Arn:          entryARN(region, c.GetAccountId(), c.GetName(), p, uid),
		Type:         t,
		Username:     generatedUsername(t, p),
		CreatedAt:    c.GetCreatedAt(),
		ModifiedAt:   c.GetCreatedAt(),
		Policies: []*storagev1.AssociatedPolicyRecord{{
			PolicyArn:    ClusterAdminPolicy,
			ScopeType:    storagev1.AccessScopeType_ACCESS_SCOPE_TYPE_CLUSTER,
			AssociatedAt: c.GetCreatedAt(),
			ModifiedAt:   c.GetCreatedAt(),
		}},
		ClusterCreator: true,
	}
	return store.AccessEntryKey(c.GetUid(), p.Canonical()), rec, true
}
