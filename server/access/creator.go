package access

import (
	"context"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/store"
)

// ClusterAdminPolicy is the policy the cluster creator's entry gets.
const ClusterAdminPolicy = accesspolicy.ARNPrefix + "AmazonEKSClusterAdminPolicy"

// Creator is the principal CreateCluster seeds an admin entry for: the
// signing IAM user, the account root, or the role of an assumed-role
// session — with its path, which roleOf finds (the key store's name
// index; a session ARN names its role without the path). ok is false
// when the caller is not an IAM principal (a saltbush service acting for
// the account): nobody is seeded. An error is roleOf's (etcd's).
func Creator(ctx context.Context, who identity.Caller,
	roleOf func(ctx context.Context, sessionARN string) (string, error)) (Principal, bool, error) {
	if who.Service != "" || who.Agent != nil {
		return Principal{}, false, nil
	}
	signer, ok := ParseSigner(who.PrincipalARN)
	if !ok {
		return Principal{}, false, nil
	}
	if signer.SessionName == "" || roleOf == nil {
		return signer.Principal, true, nil
	}
	arn, err := roleOf(ctx, who.PrincipalARN)
	if err != nil {
		return Principal{}, false, err
	}
	p, err := ParsePrincipal(arn)
	if err != nil || p.Canonical() != signer.Principal.Canonical() {
		return signer.Principal, true, nil
	}
	return p, true, nil
}

// CreatorEntry returns the entry CreateCluster seeds, in its own
// transaction, for its creator p when bootstrapClusterCreatorAdminPermissions
// is set: a STANDARD entry with AmazonEKSClusterAdminPolicy on cluster
// scope. Seeding in the cluster's create transaction means no entry can
// exist yet to be overwritten (the cluster key did not exist, and entries
// live under the new uid).
func CreatorEntry(region string, p Principal, c *storagev1.ClusterRecord) (key string, rec *storagev1.AccessEntryRecord) {
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
	return store.AccessEntryKey(c.GetUid(), p.Canonical()), rec
}
