package iam

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/errdefs"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/store"
)

func TestParseTrustPolicy(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{"one statement", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"AWS":"111122223333"},"Action":"sts:AssumeRole"}}`, ""},
		{"lists", `{"Statement":[{"Sid":"a","Effect":"Allow","Principal":{"AWS":["arn:aws:iam::111122223333:root","arn:aws:iam::111122223333:role/p/r"]},"Action":["sts:AssumeRole","sts:TagSession"]}]}`, ""},
		{"anyone", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:*"}]}`, ""},
		{"a session ARN", `{"Statement":[{"Effect":"Deny","Principal":{"AWS":"arn:aws:sts::111122223333:assumed-role/r/s1"},"Action":"*"}]}`, ""},
		{"a condition", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:ExternalId":"x"}}}]}`, `member "Condition" is not supported`},
		{"a service principal", `{"Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`, `Principal type "Service" is not supported`},
		{"another action", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"eks:ListClusters"}]}`, `Action "eks:ListClusters" is not sts:AssumeRole`},
		{"no principal", `{"Statement":[{"Effect":"Allow","Action":"sts:AssumeRole"}]}`, "Principal is required"},
		{"a malformed principal", `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"alice"},"Action":"sts:AssumeRole"}]}`, `Principal "alice" is not an account id`},
		{"no statement", `{"Version":"2012-10-17"}`, "no Statement"},
		{"a bad effect", `{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"sts:AssumeRole"}]}`, `Effect must be Allow or Deny`},
		{"too long", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Sid":"` + strings.Repeat("s", MaxTrustPolicyBytes) + `"}]}`, "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrustPolicy(tc.doc)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ParseTrustPolicy: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ParseTrustPolicy: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestTrustPolicyAllows(t *testing.T) {
	const (
		acct    = "111122223333"
		user    = "arn:aws:iam::" + acct + ":user/alice"
		role    = "arn:aws:iam::" + acct + ":role/ci/builder"
		session = "arn:aws:sts::" + acct + ":assumed-role/builder/run-1"
	)
	tp, err := ParseTrustPolicy(`{"Statement":[
		{"Effect":"Allow","Principal":{"AWS":["` + user + `","` + role + `","arn:aws:iam::444455556666:root"]},"Action":"sts:AssumeRole"},
		{"Effect":"Allow","Principal":{"AWS":"` + user + `"},"Action":"sts:TagSession"},
		{"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::444455556666:user/mallory"},"Action":"*"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		caller Caller
		action string
		want   bool
	}{
		{"the named user", Caller{Account: acct, ARN: user}, ActionAssumeRole, true},
		{"the named user tags", Caller{Account: acct, ARN: user}, ActionTagSession, true},
		{"another user of the account", Caller{Account: acct, ARN: "arn:aws:iam::" + acct + ":user/bob"}, ActionAssumeRole, false},
		{"a session of the named role", Caller{Account: acct, ARN: session, RoleARN: role}, ActionAssumeRole, true},
		{"the named role may not tag", Caller{Account: acct, ARN: session, RoleARN: role}, ActionTagSession, false},
		{"anyone of a trusted account", Caller{Account: "444455556666", ARN: "arn:aws:iam::444455556666:user/eve"}, ActionAssumeRole, true},
		{"an explicit deny wins", Caller{Account: "444455556666", ARN: "arn:aws:iam::444455556666:user/mallory"}, ActionAssumeRole, false},
		{"an untrusted account", Caller{Account: "777788889999", ARN: "arn:aws:iam::777788889999:user/alice"}, ActionAssumeRole, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tp.Allows(tc.caller, tc.action); got != tc.want {
				t.Errorf("Allows(%+v, %s) = %v, want %v", tc.caller, tc.action, got, tc.want)
			}
		})
	}
}

// TestSessionRecord: AssumeRole writes one leased record that opens only
// with its token, expires by the store's clock and is revoked by its role.
func TestSessionRecord(t *testing.T) {
	st := newTestStoreOnly(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	svc, err := NewService(st, testMasterKey, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	const (
		acct = "111122223333"
		user = "arn:aws:iam::" + acct + ":user/alice"
		role = "arn:aws:iam::" + acct + ":role/builder"
	)
	if _, err := svc.CreateAccount(ctx, acct, "a"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{user, role} {
		if _, err := svc.CreatePrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	caller := identity.Caller{AccountID: acct, PrincipalARN: user}
	in := AssumeRoleInput{Caller: caller, RoleARN: role, SessionName: "run-1"}
	if _, err := svc.AssumeRole(ctx, in); !errdefs.IsException(err, errdefs.AccessDeniedException) {
		t.Fatalf("AssumeRole without a trust policy: %v, want AccessDenied", err)
	}
	trust := `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + user + `"},"Action":"sts:AssumeRole"}]}`
	if _, err := svc.UpdateRole(ctx, role, RoleUpdate{TrustPolicy: &trust}); err != nil {
		t.Fatal(err)
	}
	sess, err := svc.AssumeRole(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if sess.ARN != "arn:aws:sts::"+acct+":assumed-role/builder/run-1" || !sess.Expiration.Equal(now.Add(time.Hour)) {
		t.Errorf("session %s until %v, want the assumed-role ARN until %v", sess.ARN, sess.Expiration, now.Add(time.Hour))
	}
	// The secret is sealed and the token kept only as a hash.
	rec := &storagev1.SessionRecord{}
	if _, err := st.Get(ctx, sessionKey(sess.AccessKeyID), rec); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rec.GetSealedSecret()), sess.SecretAccessKey) || len(rec.GetSessionTokenSha256()) != 32 {
		t.Error("the session record keeps its secret or token in clear")
	}
	if c, ok, err := svc.LookupSession(ctx, sess.AccessKeyID, sess.SessionToken); err != nil || !ok || c.Secret != sess.SecretAccessKey || c.PrincipalARN != sess.ARN {
		t.Fatalf("LookupSession = %+v %v %v", c, ok, err)
	}
	if _, ok, err := svc.LookupSession(ctx, sess.AccessKeyID, sess.SessionToken+"x"); ok || err != nil {
		t.Errorf("another token: ok %v err %v, want refused", ok, err)
	}
	if _, ok, _ := svc.Lookup(ctx, sess.AccessKeyID); ok {
		t.Error("a session key looked up as an access key")
	}
	// Revoked: sessions issued before the revocation are refused.
	now = now.Add(time.Minute)
	if _, err := svc.RevokeRoleSessions(ctx, role); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := svc.LookupSession(ctx, sess.AccessKeyID, sess.SessionToken); ok || err != nil {
		t.Errorf("revoked session: ok %v err %v, want refused", ok, err)
	}
	now = now.Add(time.Minute)
	later, err := svc.AssumeRole(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := svc.LookupSession(ctx, later.AccessKeyID, later.SessionToken); !ok || err != nil {
		t.Errorf("a session issued after the revocation: ok %v err %v", ok, err)
	}
	now = now.Add(time.Hour)
	if _, _, err := svc.LookupSession(ctx, later.AccessKeyID, later.SessionToken); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("after its expiry: %v, want ErrSessionExpired", err)
	}
}

func newTestStoreOnly(t *testing.T) *store.Store {
	t.Helper()
	_, st := newTestService(t)
	return st
}

// TestRoleChaining: a role session may assume a role that trusts its role,
// for at most an hour whatever the role allows.
func TestRoleChaining(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	const (
		acct  = "111122223333"
		first = "arn:aws:iam::" + acct + ":role/ci/first"
		next  = "arn:aws:iam::" + acct + ":role/next"
	)
	if _, err := svc.CreateAccount(ctx, acct, "a"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{first, next} {
		if _, err := svc.CreatePrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	trust := `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + first + `"},"Action":"sts:AssumeRole"}]}`
	longest := 4 * time.Hour
	if _, err := svc.UpdateRole(ctx, next, RoleUpdate{TrustPolicy: &trust, MaxSessionDuration: &longest}); err != nil {
		t.Fatal(err)
	}
	session := identity.Caller{AccountID: acct, PrincipalARN: "arn:aws:sts::" + acct + ":assumed-role/first/run-1"}
	tests := []struct {
		name     string
		duration time.Duration
		wantErr  string
	}{
		{"an hour", time.Hour, ""},
		{"the default", 0, ""},
		{"beyond an hour", time.Hour + time.Second, "1 hour session limit for roles assumed by role chaining"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.AssumeRole(ctx, AssumeRoleInput{Caller: session, RoleARN: next, SessionName: "chained", Duration: tc.duration})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("AssumeRole: %v", err)
			case tc.wantErr != "" && (!errdefs.IsException(err, errdefs.InvalidParameterException) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("AssumeRole: %v, want InvalidParameter saying %q", err, tc.wantErr)
			}
		})
	}
}
