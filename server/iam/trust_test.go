package iam

import (
	"errors"
	"strings"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
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
		{"a condition", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:ExternalId":"x"}}}]}`, ""},
		{"a service principal", `{"Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`, ""},
		{"an IRSA trust policy", `{"Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::111122223333:oidc-provider/oidc.example.com/id/ABC"},"Action":"sts:AssumeRoleWithWebIdentity","Condition":{"StringEquals":{"oidc.example.com/id/ABC:sub":"system:serviceaccount:ns:sa","oidc.example.com/id/ABC:aud":"sts.amazonaws.com"}}}]}`, ""},
		{"set qualifiers and IfExists", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"ForAnyValue:StringLike":{"aws:TagKeys":"kubernetes-*"},"StringEqualsIfExists":{"aws:SourceAccount":"111122223333"}}}]}`, ""},
		{"a SAML principal", `{"Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::111122223333:saml-provider/corp"},"Action":"sts:AssumeRoleWithSAML"}]}`, `Action "sts:AssumeRoleWithSAML" is not`},
		{"a public identity provider", `{"Statement":[{"Effect":"Allow","Principal":{"Federated":"accounts.google.com"},"Action":"sts:AssumeRoleWithWebIdentity"}]}`, `is not an IAM OIDC provider ARN`},
		{"a canonical user", `{"Statement":[{"Effect":"Allow","Principal":{"CanonicalUser":"abc"},"Action":"sts:AssumeRole"}]}`, `Principal type "CanonicalUser" is not supported`},
		{"a malformed service", `{"Statement":[{"Effect":"Allow","Principal":{"Service":"pods"},"Action":"sts:AssumeRole"}]}`, `is not a service principal name`},
		{"an unknown operator", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"NumericLessThan":{"aws:SourceAccount":"1"}}}]}`, `condition operator "NumericLessThan" is not supported`},
		{"an unknown qualifier", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"ForSome:StringEquals":{"aws:SourceAccount":"1"}}}]}`, `only the ForAnyValue and ForAllValues qualifiers`},
		{"an unknown key", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"StringEquals":{"aws:SourceIp":"10.0.0.1"}}}]}`, `condition key "aws:SourceIp" is not supported`},
		{"a policy variable", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:ExternalId":"${aws:username}"}}}]}`, `policy variables`},
		{"a condition without values", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:ExternalId":[]}}}]}`, `has no values`},
		{"a malformed condition", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Condition":["x"]}]}`, `Condition must be an object`},
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

// TestTrustPolicyConditions: web identities, services and the condition
// operators, each judged as IAM judges it.
func TestTrustPolicyConditions(t *testing.T) {
	const (
		provider = "arn:aws:iam::111122223333:oidc-provider/oidc.example.com/id/ABC"
		issuer   = "oidc.example.com/id/abc" // condition keys are lower-cased
	)
	tp, err := ParseTrustPolicy(`{"Statement":[
		{"Effect":"Allow","Principal":{"Federated":"` + provider + `"},"Action":"sts:AssumeRoleWithWebIdentity",
		 "Condition":{"StringEquals":{"oidc.example.com/id/ABC:aud":"sts.amazonaws.com"},"StringLike":{"oidc.example.com/id/ABC:sub":"system:serviceaccount:team-*:app"}}},
		{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"],
		 "Condition":{"StringEquals":{"aws:SourceAccount":"111122223333"},"ArnLike":{"aws:SourceArn":"arn:aws:eks:*:111122223333:cluster/*"}}},
		{"Effect":"Deny","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":"sts:TagSession",
		 "Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":"forbidden"}}},
		{"Effect":"Deny","Principal":{"Federated":"` + provider + `"},"Action":"sts:AssumeRoleWithWebIdentity",
		 "Condition":{"StringNotEquals":{"oidc.example.com/id/ABC:amr":"authenticated"}}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	web := func(sub, aud string, amr ...string) Caller {
		c := Caller{Federated: provider, Context: map[string][]string{issuer + ":sub": {sub}, issuer + ":aud": {aud}}}
		if len(amr) > 0 {
			c.Context[issuer+":amr"] = amr
		}
		return c
	}
	pods := func(account, cluster string, tagKeys ...string) Caller {
		return Caller{Service: "pods.eks.amazonaws.com", Context: map[string][]string{
			"aws:sourceaccount": {account}, "aws:sourcearn": {"arn:aws:eks:us-east-1:" + account + ":cluster/" + cluster}, "aws:tagkeys": tagKeys}}
	}
	tests := []struct {
		name   string
		caller Caller
		action string
		want   bool
	}{
		{"the service account", web("system:serviceaccount:team-a:app", "sts.amazonaws.com", "authenticated"), ActionAssumeRoleWithWebIdentity, true},
		{"a negated condition holds without its key", web("system:serviceaccount:team-a:app", "sts.amazonaws.com"), ActionAssumeRoleWithWebIdentity, false},
		{"another service account", web("system:serviceaccount:team-a:other", "sts.amazonaws.com", "authenticated"), ActionAssumeRoleWithWebIdentity, false},
		{"another audience", web("system:serviceaccount:team-a:app", "pods.eks.amazonaws.com", "authenticated"), ActionAssumeRoleWithWebIdentity, false},
		{"another provider", Caller{Federated: "arn:aws:iam::111122223333:oidc-provider/other.example.com", Context: web("system:serviceaccount:team-a:app", "sts.amazonaws.com", "authenticated").Context}, ActionAssumeRoleWithWebIdentity, false},
		{"a web identity may not AssumeRole", web("system:serviceaccount:team-a:app", "sts.amazonaws.com", "authenticated"), ActionAssumeRole, false},
		{"pods of the account", pods("111122223333", "prod"), ActionAssumeRole, true},
		{"pods tag their session", pods("111122223333", "prod", "kubernetes-namespace"), ActionTagSession, true},
		{"a denied tag key", pods("111122223333", "prod", "kubernetes-namespace", "forbidden"), ActionTagSession, false},
		{"pods of another account", pods("444455556666", "prod"), ActionAssumeRole, false},
		{"another service", Caller{Service: "ec2.amazonaws.com", Context: pods("111122223333", "prod").Context}, ActionAssumeRole, false},
		{"an AWS principal is not the service", Caller{Account: "111122223333", ARN: "arn:aws:iam::111122223333:user/alice", Context: pods("111122223333", "prod").Context}, ActionAssumeRole, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tp.Allows(tc.caller, tc.action); got != tc.want {
				t.Errorf("Allows(%+v, %s) = %v, want %v", tc.caller, tc.action, got, tc.want)
			}
		})
	}
}

// TestConditionOperators: each operator, qualifier and IfExists on
// present, absent and multi-valued keys.
func TestConditionOperators(t *testing.T) {
	tests := []struct {
		name   string
		cond   Condition
		values []string
		want   bool
	}{
		{"equals", Condition{Operator: "StringEquals", Values: []string{"a", "b"}}, []string{"b"}, true},
		{"equals is case-sensitive", Condition{Operator: "StringEquals", Values: []string{"a"}}, []string{"A"}, false},
		{"equals ignoring case", Condition{Operator: "StringEqualsIgnoreCase", Values: []string{"a"}}, []string{"A"}, true},
		{"equals an absent key", Condition{Operator: "StringEquals", Values: []string{"a"}}, nil, false},
		{"not equals an absent key", Condition{Operator: "StringNotEquals", Values: []string{"a"}}, nil, true},
		{"not equals", Condition{Operator: "StringNotEquals", Values: []string{"a"}}, []string{"a"}, false},
		{"equals if exists, absent", Condition{Operator: "StringEquals", IfExists: true, Values: []string{"a"}}, nil, true},
		{"equals if exists, present", Condition{Operator: "StringEquals", IfExists: true, Values: []string{"a"}}, []string{"b"}, false},
		{"like", Condition{Operator: "StringLike", Values: []string{"system:serviceaccount:*:a?p"}}, []string{"system:serviceaccount:ns/x:app"}, true},
		{"like is anchored", Condition{Operator: "StringLike", Values: []string{"abc"}}, []string{"xabcx"}, false},
		{"like takes regexp characters literally", Condition{Operator: "StringLike", Values: []string{"a.c"}}, []string{"abc"}, false},
		{"not like", Condition{Operator: "StringNotLike", Values: []string{"a*"}}, []string{"abc"}, false},
		{"arn like by segment", Condition{Operator: "ArnLike", Values: []string{"arn:aws:eks:*:111122223333:cluster/*"}}, []string{"arn:aws:eks:us-east-1:111122223333:cluster/x"}, true},
		{"arn like keeps the account", Condition{Operator: "ArnLike", Values: []string{"arn:aws:eks:*:111122223333:cluster/*"}}, []string{"arn:aws:eks:us-east-1:444455556666:cluster/x"}, false},
		{"arn like a non-ARN", Condition{Operator: "ArnLike", Values: []string{"arn:aws:eks:*:*:*"}}, []string{"cluster"}, false},
		{"for any value, one matches", Condition{Operator: "StringEquals", Set: "ForAnyValue", Values: []string{"b"}}, []string{"a", "b"}, true},
		{"for any value, absent", Condition{Operator: "StringEquals", Set: "ForAnyValue", Values: []string{"b"}}, nil, false},
		{"for all values, all match", Condition{Operator: "StringLike", Set: "ForAllValues", Values: []string{"kubernetes-*"}}, []string{"kubernetes-a", "kubernetes-b"}, true},
		{"for all values, one does not", Condition{Operator: "StringLike", Set: "ForAllValues", Values: []string{"kubernetes-*"}}, []string{"kubernetes-a", "other"}, false},
		{"for all values, absent", Condition{Operator: "StringLike", Set: "ForAllValues", Values: []string{"kubernetes-*"}}, nil, true},
		{"for all values not equal", Condition{Operator: "StringNotEquals", Set: "ForAllValues", Values: []string{"x"}}, []string{"a", "b"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cond.holds(tc.values); got != tc.want {
				t.Errorf("%+v holds for %q = %v, want %v", tc.cond, tc.values, got, tc.want)
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
