// Package iam owns saltbush's key store: accounts, their principals (IAM
// users and roles), the access keys SigV4 requests are signed with, and the
// policy documents attached to principals. Everything lives in etcd under
// iam/; access-key secrets are sealed with a master key (AES-256-GCM) and
// never stored or logged in clear.
package iam

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/store"
)

// MasterKeySize is the size of the key that seals access-key secrets.
const MasterKeySize = 32

// Access-key statuses, as IAM names them.
const (
	KeyActive   = "Active"
	KeyInactive = "Inactive"
)

// Keys (relative to the store root).
func accountKey(account string) string { return "iam/accounts/" + account }

func principalKey(account, arn string) string {
	sum := sha256.Sum256([]byte(arn))
	return accountKey(account) + "/principals/" + hex.EncodeToString(sum[:])
}

// nameKey indexes a user or role by name: IAM names are unique in an
// account whatever the path and whatever the case.
func nameKey(account, kind, name string) string {
	return accountKey(account) + "/names/" + kind + "/" + strings.ToLower(name)
}

func policyKey(account, name string) string { return accountKey(account) + "/policies/" + name }

func accessKeyKey(akid string) string { return "iam/keys/" + akid }

// principalARN is an IAM user or role ARN: the account and the kind.
var principalARN = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):(user|role)/((?:[\x21-\x7e]*/)?)([\w+=,.@-]{1,64})$`)

// policyName is IAM's policy name: 1–128 of [\w+=,.@-].
var policyName = regexp.MustCompile(`^[\w+=,.@-]{1,128}$`)

// accessKeyIDPattern is an AWS-shaped access key id.
var accessKeyIDPattern = regexp.MustCompile(`^AKIA[A-Z2-7]{16}$`)

// Service is the key store. It is safe for concurrent use.
type Service struct {
	store *store.Store
	aead  cipher.AEAD
	now   func() time.Time
}

// NewService returns the key store on st, sealing secrets with masterKey
// (MasterKeySize bytes).
func NewService(st *store.Store, masterKey []byte, now func() time.Time) (*Service, error) {
	if len(masterKey) != MasterKeySize {
		return nil, fmt.Errorf("iam: master key must be %d bytes, got %d", MasterKeySize, len(masterKey))
	}
	block, err := aes.NewCipher(masterKey)
	if err != nil {
		return nil, fmt.Errorf("iam: master key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("iam: master key: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &Service{store: st, aead: aead, now: now}, nil
}

// ParseMasterKey reads a master key given as base64 (how it is kept in a
// file or the environment).
func ParseMasterKey(b64 string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("master key is not base64: %w", err)
	}
	if len(key) != MasterKeySize {
		return nil, fmt.Errorf("master key must be %d bytes, got %d", MasterKeySize, len(key))
	}
	return key, nil
}

// CreateAccount records an account, exclusively.
func (s *Service) CreateAccount(ctx context.Context, account, name string) (*storagev1.AccountRecord, error) {
	if err := identity.ValidateAccountID(account); err != nil {
		return nil, errdefs.InvalidParameter("%v.", err)
	}
	rec := &storagev1.AccountRecord{AccountId: account, Name: name, CreatedAt: timestamppb.New(s.now())}
	if _, err := s.store.Create(ctx, accountKey(account), rec); err != nil {
		if errors.Is(err, store.ErrExists) {
			return nil, errdefs.ResourceInUse("Account %s already exists.", account)
		}
		return nil, fmt.Errorf("create account %s: %w", account, err)
	}
	return rec, nil
}

// ParsePrincipal returns the account of an IAM user or role ARN.
func ParsePrincipal(arn string) (account string, err error) {
	m := principalARN.FindStringSubmatch(arn)
	if m == nil {
		return "", errdefs.InvalidParameter("%q is not an IAM user or role ARN.", arn)
	}
	return m[1], nil
}

// CreatePrincipal records an IAM user or role of an existing account; the
// account's existence is checked in the same transaction.
func (s *Service) CreatePrincipal(ctx context.Context, arn string) (*storagev1.PrincipalRecord, error) {
	account, err := ParsePrincipal(arn)
	if err != nil {
		return nil, err
	}
	rec := &storagev1.PrincipalRecord{Arn: arn, AccountId: account, CreatedAt: timestamppb.New(s.now())}
	m := principalARN.FindStringSubmatch(arn)
	_, err = s.store.Commit(ctx, store.NewTxn().
		Create(principalKey(account, arn), rec).
		Create(nameKey(account, m[2], m[4]), &storagev1.PrincipalNameRecord{Arn: arn}).
		RequireExists(accountKey(account)))
	switch {
	case errors.Is(err, store.ErrExists):
		return nil, errdefs.ResourceInUse("Principal %s already exists: a %s named %s exists in account %s (names are unique whatever the path and case).", arn, m[2], m[4], account)
	case errors.Is(err, store.ErrConflict):
		return nil, errdefs.NotFound("Account %s does not exist.", account)
	case err != nil:
		return nil, fmt.Errorf("create principal %s: %w", arn, err)
	}
	return rec, nil
}

// PutPolicy creates or replaces a policy document of an account. The
// document must parse (server/policy); the account must exist.
func (s *Service) PutPolicy(ctx context.Context, account, name, document string) (*storagev1.PolicyRecord, error) {
	if !policyName.MatchString(name) {
		return nil, errdefs.InvalidParameter("Policy name %q is not 1 to 128 of letters, digits and +=,.@_-.", name)
	}
	if _, err := policy.Parse([]byte(document)); err != nil {
		return nil, errdefs.InvalidParameter("Policy %s: %v.", name, err)
	}
	if _, err := s.store.Get(ctx, accountKey(account), &storagev1.AccountRecord{}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("Account %s does not exist.", account)
		}
		return nil, fmt.Errorf("put policy %s of %s: %w", name, account, err)
	}
	now := timestamppb.New(s.now())
	key := policyKey(account, name)
	inUse := func() error {
		return errdefs.ResourceInUse("Policy %s of account %s changed concurrently; retry.", name, account)
	}
	for {
		// A policy that exists is replaced, keeping when it was created,
		// in a transaction that checks the account still exists.
		out := &storagev1.PolicyRecord{}
		_, err := store.Update(ctx, s.store, key, out, func(rec *storagev1.PolicyRecord, txn *store.Txn) error {
			rec.AccountId, rec.Name, rec.Document, rec.ModifiedAt = account, name, document, now
			txn.RequireExists(accountKey(account))
			return nil
		})
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, store.ErrConflict):
			// The account went away meanwhile, or every attempt lost
			// the race.
			return nil, inUse()
		case !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("put policy %s of %s: %w", name, account, err)
		}
		rec := &storagev1.PolicyRecord{AccountId: account, Name: name, Document: document, CreatedAt: now, ModifiedAt: now}
		_, err = s.store.Commit(ctx, store.NewTxn().Create(key, rec).RequireExists(accountKey(account)))
		switch {
		case err == nil:
			return rec, nil
		case errors.Is(err, store.ErrExists):
			// Made meanwhile: replace that one.
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("put policy %s of %s: %w", name, account, err)
			}
			continue
		case errors.Is(err, store.ErrConflict):
			return nil, inUse()
		default:
			return nil, fmt.Errorf("put policy %s of %s: %w", name, account, err)
		}
	}
}

// AttachPolicy attaches an account policy to one of its principals, in one
// transaction that checks the policy exists.
func (s *Service) AttachPolicy(ctx context.Context, arn, name string) error {
	account, err := ParsePrincipal(arn)
	if err != nil {
		return err
	}
	_, err = store.Update(ctx, s.store, principalKey(account, arn), &storagev1.PrincipalRecord{},
		func(p *storagev1.PrincipalRecord, txn *store.Txn) error {
			if !slices.Contains(p.PolicyNames, name) {
				p.PolicyNames = append(p.PolicyNames, name)
				slices.Sort(p.PolicyNames)
			}
			txn.RequireExists(policyKey(account, name))
			return nil
		})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errdefs.NotFound("Principal %s does not exist.", arn)
	case errors.Is(err, store.ErrConflict):
		return errdefs.NotFound("Policy %s does not exist in account %s.", name, account)
	case err != nil:
		return fmt.Errorf("attach policy %s to %s: %w", name, arn, err)
	}
	return nil
}

// Policies returns the parsed documents attached to a principal. A policy
// deleted since it was attached is skipped.
func (s *Service) Policies(ctx context.Context, arn string) ([]*policy.Document, error) {
	// A role session has the policies of its role.
	arn, err := s.effectivePrincipal(ctx, arn)
	if err != nil {
		return nil, err
	}
	account, err := ParsePrincipal(arn)
	if err != nil {
		return nil, err
	}
	p := &storagev1.PrincipalRecord{}
	if _, err := s.store.Get(ctx, principalKey(account, arn), p); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("Principal %s does not exist.", arn)
		}
		return nil, fmt.Errorf("policies of %s: %w", arn, err)
	}
	var docs []*policy.Document
	for _, name := range p.GetPolicyNames() {
		rec := &storagev1.PolicyRecord{}
		if _, err := s.store.Get(ctx, policyKey(account, name), rec); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			return nil, fmt.Errorf("policy %s of %s: %w", name, account, err)
		}
		doc, err := policy.Parse([]byte(rec.GetDocument()))
		if err != nil {
			return nil, fmt.Errorf("stored policy %s of %s: %w", name, account, err)
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

// rootARN is an account's root principal, arn:aws:iam::{account}:root.
var rootARN = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):root$`)

// assumedRoleARN is an assumed-role session principal,
// arn:aws:sts::{account}:assumed-role/{role}/{session}. Its role's path is
// not part of it, as in AWS.
var assumedRoleARN = regexp.MustCompile(`^arn:aws:sts::([0-9]{12}):assumed-role/([\w+=,.@-]{1,64})/([\w+=,.@-]{2,64})$`)

// AssumedRole splits a role session ARN into its account, role name and
// session name.
func AssumedRole(arn string) (account, role, session string, ok bool) {
	m := assumedRoleARN.FindStringSubmatch(arn)
	if m == nil {
		return "", "", "", false
	}
	return m[1], m[2], m[3], true
}

// EffectivePrincipal is the principal whose policies apply to arn when
// its role has no path: the role of an assumed-role session, arn itself
// otherwise. A session names its role without the path; the role's full
// ARN is in the name index (see effectivePrincipal).
func EffectivePrincipal(arn string) string {
	if account, role, _, ok := AssumedRole(arn); ok {
		return "arn:aws:iam::" + account + ":role/" + role
	}
	return arn
}

// effectivePrincipal is EffectivePrincipal with the session's role looked
// up by name, so a role with a path is found. A role missing from the
// index (recorded before the index existed) is taken to have no path.
func (s *Service) effectivePrincipal(ctx context.Context, arn string) (string, error) {
	account, role, _, ok := AssumedRole(arn)
	if !ok {
		return arn, nil
	}
	rec := &storagev1.PrincipalNameRecord{}
	if _, err := s.store.Get(ctx, nameKey(account, "role", role), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return EffectivePrincipal(arn), nil
		}
		return "", fmt.Errorf("role of session %s: %w", arn, err)
	}
	return rec.GetArn(), nil
}

// keyOwner returns the account of a principal that may hold access keys (an
// IAM user or role, or the account root) and the key its existence is
// checked against.
func (s *Service) keyOwner(ctx context.Context, arn string) (account, mustExist string, err error) {
	if m := rootARN.FindStringSubmatch(arn); m != nil {
		return m[1], accountKey(m[1]), nil
	}
	// A key of a role session signs as the session; the role must exist.
	if _, _, _, ok := AssumedRole(arn); !ok {
		if _, err := ParsePrincipal(arn); err != nil {
			return "", "", errdefs.InvalidParameter("%q is not an IAM user or role ARN, an assumed-role session or an account root.", arn)
		}
	}
	role, err := s.effectivePrincipal(ctx, arn)
	if err != nil {
		return "", "", err
	}
	account, err = ParsePrincipal(role)
	if err != nil {
		return "", "", errdefs.InvalidParameter("%q is not an IAM user or role ARN, an assumed-role session or an account root.", arn)
	}
	if _, name, _, ok := AssumedRole(arn); ok && !strings.HasSuffix(role, "/"+name) {
		// The index matches names in any case; a session names its role
		// exactly as the role is named.
		return "", "", errdefs.NotFound("Principal %s does not exist: its role is named %s.", arn, role)
	}
	return account, principalKey(account, role), nil
}

// CreateAccessKey makes a new active access key for a principal (an IAM
// user or role, or the account root, which policies do not restrict) and
// returns its id and secret. The secret is returned only here; the store
// keeps it sealed.
func (s *Service) CreateAccessKey(ctx context.Context, arn string) (akid, secret string, err error) {
	account, owner, err := s.keyOwner(ctx, arn)
	if err != nil {
		return "", "", err
	}
	akid, secret = newAccessKeyID(), newSecret()
	sealed, err := s.seal(akid, account, secret)
	if err != nil {
		return "", "", err
	}
	rec := &storagev1.AccessKeyRecord{
		AccessKeyId: akid, AccountId: account, PrincipalArn: arn, SealedSecret: sealed,
		Status: KeyActive, CreatedAt: timestamppb.New(s.now()),
	}
	_, err = s.store.Commit(ctx, store.NewTxn().Create(accessKeyKey(akid), rec).RequireExists(owner))
	switch {
	case errors.Is(err, store.ErrConflict):
		return "", "", errdefs.NotFound("Principal %s does not exist.", arn)
	case err != nil:
		// ErrExists would be a 2^80 id collision: report it as the failure it is.
		return "", "", fmt.Errorf("create access key for %s: %w", arn, err)
	}
	return akid, secret, nil
}

// SetAccessKeyStatus activates or deactivates a key.
func (s *Service) SetAccessKeyStatus(ctx context.Context, akid, status string) error {
	if status != KeyActive && status != KeyInactive {
		return errdefs.InvalidParameter("Status must be %s or %s.", KeyActive, KeyInactive)
	}
	_, err := store.Update(ctx, s.store, accessKeyKey(akid), &storagev1.AccessKeyRecord{},
		func(k *storagev1.AccessKeyRecord, _ *store.Txn) error {
			k.Status = status
			return nil
		})
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.NotFound("Access key %s does not exist.", akid)
	}
	return err
}

// Credential is what a verified access key stands for.
type Credential struct {
	AccessKeyID  string
	AccountID    string
	PrincipalARN string
	Secret       string
	// SessionExpires is when a role session's credential expires; zero
	// for an access key.
	SessionExpires time.Time
	// SessionPolicy is a role session's session policy ("" for none).
	SessionPolicy string
}

// Lookup returns the credential of an active access key; ok is false for
// an unknown, malformed or inactive key.
func (s *Service) Lookup(ctx context.Context, akid string) (Credential, bool, error) {
	if !accessKeyIDPattern.MatchString(akid) {
		return Credential{}, false, nil
	}
	rec := &storagev1.AccessKeyRecord{}
	if _, err := s.store.Get(ctx, accessKeyKey(akid), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Credential{}, false, nil
		}
		return Credential{}, false, fmt.Errorf("access key %s: %w", akid, err)
	}
	if rec.GetStatus() != KeyActive {
		return Credential{}, false, nil
	}
	secret, err := s.open(akid, rec.GetAccountId(), rec.GetSealedSecret())
	if err != nil {
		return Credential{}, false, err
	}
	return Credential{AccessKeyID: akid, AccountID: rec.GetAccountId(), PrincipalARN: rec.GetPrincipalArn(), Secret: secret}, true, nil
}

// seal encrypts a secret; the key id and account are bound in as
// additional data, so a sealed secret moved to another key does not open.
func (s *Service) seal(akid, account, secret string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(secret), []byte(akid+"\x00"+account)), nil
}

func (s *Service) open(akid, account string, sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", fmt.Errorf("access key %s: sealed secret too short: %w", akid, store.ErrCorrupt)
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(akid+"\x00"+account))
	if err != nil {
		// A wrong master key, or a record that was tampered with.
		return "", fmt.Errorf("access key %s: secret does not open with the master key: %w", akid, store.ErrCorrupt)
	}
	return string(plain), nil
}

// newAccessKeyID makes an id shaped like AWS's: AKIA and 16 of A-Z2-7
// (80 random bits).
func newAccessKeyID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "AKIA" + string(b)
}

// newSecret makes a 40-character secret like AWS's (240 random bits).
func newSecret() string {
	b := make([]byte, 30)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// PrincipalExists reports whether an IAM user or role is recorded (by its
// exact ARN, path included, as it was created).
func (s *Service) PrincipalExists(ctx context.Context, arn string) (bool, error) {
	account, err := ParsePrincipal(arn)
	if err != nil {
		return false, nil
	}
	if _, err := s.store.Get(ctx, principalKey(account, arn), &storagev1.PrincipalRecord{}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("principal %s: %w", arn, err)
	}
	return true, nil
}
