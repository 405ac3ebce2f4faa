package iam

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// bootstrapKey marks a store whose development identities were made. Its
// exclusive create rides in the same transaction as everything it marks, so
// of many replicas starting on one empty store exactly one bootstraps it
// and prints a key.
const bootstrapKey = "iam/bootstrap"

// AdministratorAccess allows everything: the policy of the development
// user and of the admin service.
const AdministratorAccess = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`

// Bootstrap names what the first start on an empty store creates.
type Bootstrap struct {
	// AccountID is the development account.
	AccountID string
	// UserName is the development IAM user, with AdministratorAccess.
	UserName string
	// AdminService is the service identity the admin CLI's certificate
	// names, with AdministratorAccess (it may act for every account).
	AdminService string
}

// BootstrapResult is what Bootstrap made; the secret exists nowhere else in
// clear.
type BootstrapResult struct {
	AccountID, UserARN, AccessKeyID, SecretAccessKey string
}

// Bootstrap creates, in one transaction, the development account, its
// administrator user with an access key, and the admin service's policy,
// unless the store was bootstrapped before (created is then false and
// nothing changes).
func (s *Service) Bootstrap(ctx context.Context, b Bootstrap) (res BootstrapResult, created bool, err error) {
	if err := identity.ValidateAccountID(b.AccountID); err != nil {
		return res, false, errdefs.InvalidParameter("%v.", err)
	}
	if err := identity.ValidateName("service name", b.AdminService); err != nil {
		return res, false, errdefs.InvalidParameter("%v.", err)
	}
	userARN := "arn:aws:iam::" + b.AccountID + ":user/" + b.UserName
	if _, err := ParsePrincipal(userARN); err != nil {
		return res, false, err
	}
	now := timestamppb.New(s.now())
	akid, secret := newAccessKeyID(), newSecret()
	sealed, err := s.seal(akid, b.AccountID, secret)
	if err != nil {
		return res, false, err
	}
	const policyName = "AdministratorAccess"
	txn := store.NewTxn().
		Create(bootstrapKey, &storagev1.AccountRecord{AccountId: b.AccountID, Name: "bootstrap", CreatedAt: now}).
		Create(policyKey(b.AccountID, policyName), &storagev1.PolicyRecord{
			AccountId: b.AccountID, Name: policyName, Document: AdministratorAccess, CreatedAt: now, ModifiedAt: now,
		}).
		Create(principalKey(b.AccountID, userARN), &storagev1.PrincipalRecord{
			Arn: userARN, AccountId: b.AccountID, PolicyNames: []string{policyName}, CreatedAt: now,
		}).
		Create(nameKey(b.AccountID, "user", b.UserName), &storagev1.PrincipalNameRecord{Arn: userARN}).
		Create(accessKeyKey(akid), &storagev1.AccessKeyRecord{
			AccessKeyId: akid, AccountId: b.AccountID, PrincipalArn: userARN, SealedSecret: sealed,
			Status: KeyActive, CreatedAt: now,
		}).
		Put(serviceKey(b.AdminService), &storagev1.ServiceRecord{
			Name: b.AdminService, Document: AdministratorAccess, CreatedAt: now, ModifiedAt: now,
		})
	// The account may exist (an operator made it before the first start);
	// it is created only when absent, decided in the same transaction.
	acctRev, err := s.store.Get(ctx, accountKey(b.AccountID), &storagev1.AccountRecord{})
	switch {
	case errors.Is(err, store.ErrNotFound):
		txn.Create(accountKey(b.AccountID), &storagev1.AccountRecord{AccountId: b.AccountID, Name: "development", CreatedAt: now})
	case err != nil:
		return res, false, fmt.Errorf("bootstrap account %s: %w", b.AccountID, err)
	default:
		txn.RequireModRevision(accountKey(b.AccountID), acctRev)
	}
	if _, err := s.store.Commit(ctx, txn); err != nil {
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrConflict) {
			// Another replica bootstrapped (or the store was bootstrapped
			// before and its user or policy exists).
			return res, false, nil
		}
		return res, false, fmt.Errorf("bootstrap identities: %w", err)
	}
	return BootstrapResult{AccountID: b.AccountID, UserARN: userARN, AccessKeyID: akid, SecretAccessKey: secret}, true, nil
}
