package iam

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/store"
)

// Session durations, as STS and IAM bound them.
const (
	// MinSessionDuration is AssumeRole's smallest DurationSeconds.
	MinSessionDuration = 15 * time.Minute
	// DefaultSessionDuration is a session's length when AssumeRole names
	// none, and a role's MaxSessionDuration when it was never set.
	DefaultSessionDuration = time.Hour
	// MaxSessionDurationLimit is the largest MaxSessionDuration a role
	// may have.
	MaxSessionDurationLimit = 12 * time.Hour
	// ChainedSessionLimit bounds a session a role session asks for (role
	// chaining), whatever the role allows.
	ChainedSessionLimit = time.Hour
	// sessionLeaseStep rounds the lease of a session record up, so that
	// sessions of many different lengths share few leases (store/leases.go
	// pools leases by TTL).
	sessionLeaseStep = 15 * time.Minute
)

// ErrSessionExpired is returned by LookupSession for a session whose
// expiry has passed: clients are told ExpiredToken, not "invalid", so
// that they refresh their credentials.
var ErrSessionExpired = errors.New("the session has expired")

// sessionKeyIDPattern is the access key id of temporary credentials.
var sessionKeyIDPattern = regexp.MustCompile(`^ASIA[A-Z2-7]{16}$`)

// sessionName is STS's RoleSessionName: 2-64 of [\w+=,.@-].
var sessionName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

func sessionKey(akid string) string { return "iam/sessions/" + akid }

// AssumeRoleInput is a validated request for a role session: sts:AssumeRole
// by an AWS principal (Caller), sts:AssumeRoleWithWebIdentity by a verified
// web identity (Federated), or a service acting for a workload (Service:
// EKS Auth's AssumeRoleForPodIdentity). server/sts and server/eksauth check
// the members against their models first.
type AssumeRoleInput struct {
	// Caller is who asks, for sts:AssumeRole: an IAM user or role, or a
	// role session.
	Caller identity.Caller
	// Federated is the OIDC provider ARN of a verified web identity token
	// (sts:AssumeRoleWithWebIdentity).
	Federated string
	// Service is the service principal asking (pods.eks.amazonaws.com).
	Service string
	// Context holds the request's condition keys (lower-cased): the
	// token's {provider}:sub and :aud, aws:SourceAccount, … Session tags
	// and the session name are added to it here.
	Context map[string][]string
	// RoleARN is the role to assume, exactly as it was created.
	RoleARN string
	// SessionName is RoleSessionName.
	SessionName string
	// Duration is DurationSeconds; DefaultSessionDuration when zero.
	Duration time.Duration
	// Tags are the session tags (sts:TagSession must be trusted too).
	Tags []*storagev1.SessionTag
	// SourceIdentity is kept with the session.
	SourceIdentity string
	// SessionPolicy is an inline session policy ("" for none): the
	// session may do only what both it and the role's policies allow.
	SessionPolicy string
}

// action is the trust-policy action the request needs.
func (in AssumeRoleInput) action() string {
	if in.Federated != "" {
		return ActionAssumeRoleWithWebIdentity
	}
	return ActionAssumeRole
}

// denied is AccessDenied for the request, in the words STS uses for its
// kind of caller.
func (in AssumeRoleInput) denied(action string) error {
	switch {
	case in.Federated != "":
		return errdefs.AccessDenied("Not authorized to perform %s", action)
	case in.Service != "":
		return errdefs.AccessDenied("Service: %s is not authorized to perform: %s on resource: %s", in.Service, action, in.RoleARN)
	}
	return notAuthorized(in.Caller.PrincipalARN, action, in.RoleARN)
}

// trustCaller is the request as the role's trust policy sees it.
func (in AssumeRoleInput) trustCaller() Caller {
	ctx := make(map[string][]string, len(in.Context)+len(in.Tags)+2)
	for k, v := range in.Context {
		ctx[strings.ToLower(k)] = v
	}
	for _, t := range in.Tags {
		ctx["aws:requesttag/"+strings.ToLower(t.GetKey())] = []string{t.GetValue()}
		ctx["aws:tagkeys"] = append(ctx["aws:tagkeys"], t.GetKey())
	}
	ctx["sts:rolesessionname"] = []string{in.SessionName}
	c := Caller{Federated: in.Federated, Service: in.Service, Context: ctx}
	if in.Federated == "" && in.Service == "" {
		c.Account, c.ARN = in.Caller.AccountID, in.Caller.PrincipalARN
	}
	return c
}

// Session is what AssumeRole issued. The secret and token are here only.
type Session struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	Expiration                                 time.Time
	// ARN is the session principal,
	// arn:aws:sts::{account}:assumed-role/{role}/{session}.
	ARN string
	// RoleARN is the assumed role, path included.
	RoleARN string
}

// RoleSessionARN is the principal ARN of a role session: the role's name
// without its path.
func RoleSessionARN(account, roleName, session string) string {
	return "arn:aws:sts::" + account + ":assumed-role/" + roleName + "/" + session
}

// AssumeRole issues temporary credentials for a session of a role, when
// the role's trust policy lets the caller in under the request's
// conditions. An AWS caller's own policies (sts:AssumeRole on the role) are
// checked before, by the STS endpoint. The session record is created in
// one transaction that requires the role to exist.
func (s *Service) AssumeRole(ctx context.Context, in AssumeRoleInput) (Session, error) {
	action := in.action()
	role, err := s.role(ctx, in.RoleARN)
	if errdefs.IsException(err, errdefs.ResourceNotFoundException) {
		// AWS does not tell a caller whether a role it may not assume exists.
		return Session{}, in.denied(action)
	}
	if err != nil {
		return Session{}, err
	}
	aws := in.Federated == "" && in.Service == ""
	if aws && in.Caller.IsRoot() {
		return Session{}, errdefs.AccessDenied("Roles may not be assumed by root accounts.")
	}
	if !sessionName.MatchString(in.SessionName) {
		return Session{}, errdefs.InvalidParameter("RoleSessionName %q must be 2 to 64 of letters, digits and +=,.@_-.", in.SessionName)
	}
	caller := in.trustCaller()
	chained := false
	if _, _, _, ok := AssumedRole(in.Caller.PrincipalARN); aws && ok {
		chained = true
		if caller.RoleARN, err = s.effectivePrincipal(ctx, in.Caller.PrincipalARN); err != nil {
			return Session{}, err
		}
	}
	trust, err := ParseTrustPolicy(role.GetTrustPolicy())
	if err != nil || role.GetTrustPolicy() == "" || !trust.Allows(caller, action) {
		return Session{}, in.denied(action)
	}
	if len(in.Tags) > 0 && !trust.Allows(caller, ActionTagSession) {
		return Session{}, in.denied(ActionTagSession)
	}
	if in.SessionPolicy != "" {
		if _, err := policy.Parse([]byte(in.SessionPolicy)); err != nil {
			return Session{}, errdefs.InvalidParameter("The session policy is not a policy document saltbush evaluates: %v.", err)
		}
	}
	d := in.Duration
	if d == 0 {
		d = DefaultSessionDuration
	}
	switch {
	case d < MinSessionDuration:
		return Session{}, errdefs.InvalidParameter("The requested DurationSeconds is less than %d seconds.", int(MinSessionDuration/time.Second))
	case chained && d > ChainedSessionLimit:
		return Session{}, errdefs.InvalidParameter("The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining.")
	case d > maxSession(role):
		return Session{}, errdefs.InvalidParameter("The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
	}

	account, _ := ParsePrincipal(role.GetArn())
	roleName := principalARN.FindStringSubmatch(role.GetArn())[4]
	now := s.now()
	akid, secret, token := newSessionKeyID(), newSecret(), newSessionToken()
	sealed, err := s.seal(akid, account, secret)
	if err != nil {
		return Session{}, err
	}
	sum := sha256.Sum256([]byte(token))
	rec := &storagev1.SessionRecord{
		AccessKeyId: akid, AccountId: account, RoleArn: role.GetArn(),
		SessionArn: RoleSessionARN(account, roleName, in.SessionName), SessionName: in.SessionName,
		SealedSecret: sealed, SessionTokenSha256: sum[:],
		IssuedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(d)),
		SourcePrincipalArn: in.source(), Tags: in.Tags, SourceIdentity: in.SourceIdentity, SessionPolicy: in.SessionPolicy,
	}
	lease := (d + sessionLeaseStep - 1) / sessionLeaseStep * sessionLeaseStep
	_, err = s.store.Commit(ctx, store.NewTxn().
		CreateWithTTL(sessionKey(akid), rec, lease).
		RequireExists(principalKey(account, role.GetArn())))
	switch {
	case errors.Is(err, store.ErrConflict):
		return Session{}, in.denied(action)
	case err != nil:
		return Session{}, fmt.Errorf("assume role %s: %w", in.RoleARN, err)
	}
	return Session{
		AccessKeyID: akid, SecretAccessKey: secret, SessionToken: token, Expiration: now.Add(d),
		ARN: rec.GetSessionArn(), RoleARN: role.GetArn(),
	}, nil
}

// source is who the session was issued to: the AWS principal, the OIDC
// provider or the service.
func (in AssumeRoleInput) source() string {
	switch {
	case in.Federated != "":
		return in.Federated
	case in.Service != "":
		return in.Service
	}
	return in.Caller.PrincipalARN
}

// notAuthorized is STS's AccessDenied for an action on a role.
func notAuthorized(who, action, role string) error {
	return errdefs.AccessDenied("User: %s is not authorized to perform: %s on resource: %s", who, action, role)
}

func maxSession(role *storagev1.PrincipalRecord) time.Duration {
	if s := role.GetMaxSessionDurationSeconds(); s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultSessionDuration
}

// role reads a role's record by its exact ARN.
func (s *Service) role(ctx context.Context, arn string) (*storagev1.PrincipalRecord, error) {
	m := principalARN.FindStringSubmatch(arn)
	if m == nil || m[2] != "role" {
		return nil, errdefs.InvalidParameter("%q is not an IAM role ARN.", arn)
	}
	rec := &storagev1.PrincipalRecord{}
	if _, err := s.store.Get(ctx, principalKey(m[1], arn), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errdefs.NotFound("Role %s does not exist.", arn)
		}
		return nil, fmt.Errorf("role %s: %w", arn, err)
	}
	return rec, nil
}

// RoleUpdate changes a role's session settings; nil members are kept.
type RoleUpdate struct {
	TrustPolicy        *string
	MaxSessionDuration *time.Duration
}

// UpdateRole sets a role's trust policy and maximum session duration in
// one guarded update.
func (s *Service) UpdateRole(ctx context.Context, arn string, u RoleUpdate) (*storagev1.PrincipalRecord, error) {
	if u.TrustPolicy != nil {
		if _, err := ParseTrustPolicy(*u.TrustPolicy); err != nil {
			return nil, errdefs.InvalidParameter("Trust policy of %s: %v.", arn, err)
		}
	}
	if d := u.MaxSessionDuration; d != nil && (*d < DefaultSessionDuration || *d > MaxSessionDurationLimit || *d%time.Second != 0) {
		return nil, errdefs.InvalidParameter("MaxSessionDuration of %s must be %d to %d seconds, got %v.", arn,
			int(DefaultSessionDuration/time.Second), int(MaxSessionDurationLimit/time.Second), *d)
	}
	if _, err := s.role(ctx, arn); err != nil {
		return nil, err
	}
	account, _ := ParsePrincipal(arn)
	var out *storagev1.PrincipalRecord
	_, err := store.Update(ctx, s.store, principalKey(account, arn), &storagev1.PrincipalRecord{},
		func(p *storagev1.PrincipalRecord, _ *store.Txn) error {
			if u.TrustPolicy != nil {
				p.TrustPolicy = *u.TrustPolicy
			}
			if u.MaxSessionDuration != nil {
				p.MaxSessionDurationSeconds = int32(*u.MaxSessionDuration / time.Second) //nolint:gosec // G115: at most MaxSessionDurationLimit, checked above
			}
			out = p
			return nil
		})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.NotFound("Role %s does not exist.", arn)
	}
	if err != nil {
		return nil, fmt.Errorf("update role %s: %w", arn, err)
	}
	return out, nil
}

// GetRole returns a role's record.
func (s *Service) GetRole(ctx context.Context, arn string) (*storagev1.PrincipalRecord, error) {
	return s.role(ctx, arn)
}

// MaxSessionSeconds is a role's effective maximum session duration in
// seconds.
func MaxSessionSeconds(role *storagev1.PrincipalRecord) int32 {
	if s := role.GetMaxSessionDurationSeconds(); s > 0 {
		return s
	}
	return int32(DefaultSessionDuration / time.Second)
}

// RevokeRoleSessions refuses every session of a role issued before now, as
// AWS's "revoke active sessions" does. The change is one write to the
// role's record; every replica's key cache sees it through its watch.
func (s *Service) RevokeRoleSessions(ctx context.Context, arn string) (time.Time, error) {
	if _, err := s.role(ctx, arn); err != nil {
		return time.Time{}, err
	}
	account, _ := ParsePrincipal(arn)
	now := s.now()
	_, err := store.Update(ctx, s.store, principalKey(account, arn), &storagev1.PrincipalRecord{},
		func(p *storagev1.PrincipalRecord, _ *store.Txn) error {
			p.SessionsRevokedBefore = timestamppb.New(now)
			return nil
		})
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, errdefs.NotFound("Role %s does not exist.", arn)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("revoke sessions of %s: %w", arn, err)
	}
	return now, nil
}

// LookupSession returns the credential of a valid role session: the key
// id and its session token must match, the session must not have expired
// (ErrSessionExpired) and its role must exist and not have revoked it. ok
// is false for anything else unknown or refused.
func (s *Service) LookupSession(ctx context.Context, akid, token string) (Credential, bool, error) {
	if !sessionKeyIDPattern.MatchString(akid) {
		return Credential{}, false, nil
	}
	rec := &storagev1.SessionRecord{}
	if _, err := s.store.Get(ctx, sessionKey(akid), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Credential{}, false, nil
		}
		return Credential{}, false, fmt.Errorf("session %s: %w", akid, err)
	}
	role := &storagev1.PrincipalRecord{}
	if _, err := s.store.Get(ctx, principalKey(rec.GetAccountId(), rec.GetRoleArn()), role); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Credential{}, false, nil
		}
		return Credential{}, false, fmt.Errorf("role of session %s: %w", akid, err)
	}
	if ok, err := s.validSession(rec, role, token); !ok || err != nil {
		return Credential{}, false, err
	}
	secret, err := s.open(akid, rec.GetAccountId(), rec.GetSealedSecret())
	if err != nil {
		return Credential{}, false, err
	}
	return sessionCredential(rec, secret), true, nil
}

// validSession decides whether a session record (and its role's record)
// admit a request carrying token. An expired session is ErrSessionExpired.
func (s *Service) validSession(rec *storagev1.SessionRecord, role *storagev1.PrincipalRecord, token string) (bool, error) {
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], rec.GetSessionTokenSha256()) != 1 {
		return false, nil
	}
	if !s.now().Before(rec.GetExpiresAt().AsTime()) {
		return false, fmt.Errorf("session %s of %s: %w", rec.GetAccessKeyId(), rec.GetSessionArn(), ErrSessionExpired)
	}
	if rb := role.GetSessionsRevokedBefore(); rb != nil && rec.GetIssuedAt().AsTime().Before(rb.AsTime()) {
		return false, nil
	}
	return true, nil
}

func sessionCredential(rec *storagev1.SessionRecord, secret string) Credential {
	return Credential{
		AccessKeyID: rec.GetAccessKeyId(), AccountID: rec.GetAccountId(), PrincipalARN: rec.GetSessionArn(), Secret: secret,
		SessionExpires: rec.GetExpiresAt().AsTime(), SessionPolicy: rec.GetSessionPolicy(),
	}
}

// newSessionKeyID makes a temporary credential's id: ASIA and 16 of A-Z2-7.
func newSessionKeyID() string { return "ASIA" + newAccessKeyID()[4:] }

// newSessionToken makes an opaque session token (768 random bits).
func newSessionToken() string {
	b := make([]byte, 96)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
