package authz_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/store/storetest"
)

const (
	acctA  = "111111111111"
	acctB  = "222222222222"
	reader = "arn:aws:iam::111111111111:user/reader"
	denied = "arn:aws:iam::111111111111:user/denied"
	nobody = "arn:aws:iam::111111111111:user/nobody"
	passer = "arn:aws:iam::111111111111:user/passer"
)

func clusterARN(acct, name string) string {
	return "arn:aws:eks:us-east-1:" + acct + ":cluster/" + name
}

// newAuthorizer runs the real key store and its cache on a real etcd,
// with principals and policies for the table below.
func newAuthorizer(t *testing.T) *authz.Authorizer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := iam.NewService(storetest.New(t), bytes.Repeat([]byte{1}, iam.MasterKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = svc.CreateAccount(ctx, acctA, "a")
	must(err)
	policies := map[string]string{
		"ro":    `{"Statement":[{"Effect":"Allow","Action":["eks:Describe*","eks:List*"],"Resource":"*"}]}`,
		"all":   `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`,
		"nodel": `{"Statement":[{"Effect":"Deny","Action":"eks:DeleteCluster","Resource":"*"}]}`,
		"pass": `{"Statement":[{"Effect":"Allow","Action":"eks:*","Resource":"*"},
			{"Effect":"Allow","Action":"iam:PassRole","Resource":"arn:aws:iam::111111111111:role/cni"}]}`,
	}
	for name, doc := range policies {
		_, err := svc.PutPolicy(ctx, acctA, name, doc)
		must(err)
	}
	for arn, attach := range map[string][]string{reader: {"ro"}, denied: {"all", "nodel"}, nobody: nil, passer: {"pass"}} {
		_, err := svc.CreatePrincipal(ctx, arn)
		must(err)
		for _, p := range attach {
			must(svc.AttachPolicy(ctx, arn, p))
		}
	}
	_, err = svc.PutServicePolicy(ctx, "ci", `{"Statement":[{"Effect":"Allow","Action":"saltbush:ActForAccount","Resource":"arn:aws:iam::111111111111:root"},
		{"Effect":"Allow","Action":"eks:Describe*","Resource":"*"}]}`)
	must(err)
	c := svc.NewCache()
	runCtx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx, ready) }()
	t.Cleanup(func() { stop(); <-done })
	<-ready
	return authz.New(c)
}

func TestAuthorize(t *testing.T) {
	az := newAuthorizer(t)
	user := func(arn string) identity.Caller { return identity.Caller{AccountID: acctA, PrincipalARN: arn} }
	tests := []struct {
		name     string
		caller   *identity.Caller
		action   string
		resource string
		// want is "" for allowed, else a substring of the AccessDenied message.
		want string
	}{
		{"root in its account", ptr(identity.RootCaller(acctA)), "eks:DeleteCluster", clusterARN(acctA, "x"), ""},
		{"root on another account's resource", ptr(identity.RootCaller(acctA)), "eks:DescribeCluster", clusterARN(acctB, "x"), "not authorized"},
		{"read-only user describes", ptr(user(reader)), "eks:DescribeCluster", clusterARN(acctA, "x"), ""},
		{"read-only user deletes", ptr(user(reader)), "eks:DeleteCluster", clusterARN(acctA, "x"), "because no identity-based policy allows the eks:DeleteCluster action"},
		{"explicit deny wins over allow", ptr(user(denied)), "eks:DeleteCluster", clusterARN(acctA, "x"), "with an explicit deny"},
		{"allow where nothing denies", ptr(user(denied)), "eks:CreateCluster", clusterARN(acctA, "x"), ""},
		{"user without policies", ptr(user(nobody)), "eks:ListClusters", "*", "not authorized"},
		{"unknown principal", ptr(user("arn:aws:iam::111111111111:user/ghost")), "eks:ListClusters", "*", "not authorized"},
		{"service within its policy", &identity.Caller{AccountID: acctA, PrincipalARN: identity.ServiceID("ci"), Service: "ci", Delegated: true},
			"eks:DescribeCluster", clusterARN(acctA, "x"), ""},
		{"service beyond its policy", &identity.Caller{AccountID: acctA, PrincipalARN: identity.ServiceID("ci"), Service: "ci", Delegated: true},
			"eks:DeleteCluster", clusterARN(acctA, "x"), "not authorized"},
		{"service without a policy", &identity.Caller{PrincipalARN: identity.ServiceID("other"), Service: "other"}, "saltbush:GetCluster", "*", "not authorized"},
		{"agent", &identity.Caller{PrincipalARN: identity.AgentID("uid", "vm-1"), Agent: &identity.Agent{ClusterUID: "uid", Instance: "vm-1"}},
			"saltbush:GetCluster", "*", "not authorized"},
		{"no caller", nil, "eks:ListClusters", "*", "no authenticated caller"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.caller != nil {
				ctx = identity.NewContext(ctx, *tc.caller)
			}
			err := az.Authorize(ctx, tc.action, tc.resource)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errdefs.IsException(err, errdefs.AccessDeniedException) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want AccessDeniedException containing %q", err, tc.want)
			}
		})
	}
}

func TestPassRolesAndDelegation(t *testing.T) {
	az := newAuthorizer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	as := func(arn string) context.Context {
		return identity.NewContext(ctx, identity.Caller{AccountID: acctA, PrincipalARN: arn})
	}
	if err := az.PassRoles(as(passer), "arn:aws:iam::111111111111:role/cni", ""); err != nil {
		t.Errorf("allowed role: %v", err)
	}
	if err := az.PassRoles(as(passer), "arn:aws:iam::111111111111:role/other"); !errdefs.IsException(err, errdefs.AccessDeniedException) ||
		!strings.Contains(err.Error(), "iam:PassRole") {
		t.Errorf("role without iam:PassRole: %v", err)
	}
	// Another account's role is the request validation's to refuse
	// (InvalidParameterException), not a PassRole question.
	if err := az.PassRoles(as(reader), "arn:aws:iam::222222222222:role/cni", "not-an-arn"); err != nil {
		t.Errorf("foreign and malformed ARNs: %v", err)
	}
	if err := az.PassRoles(identity.NewContext(ctx, identity.RootCaller(acctA)), "arn:aws:iam::111111111111:role/any"); err != nil {
		t.Errorf("root passing its own role: %v", err)
	}
	if err := az.ActFor(ctx, "ci", acctA); err != nil {
		t.Errorf("delegated account: %v", err)
	}
	for _, tc := range []struct{ service, account string }{{"ci", acctB}, {"other", acctA}} {
		if err := az.ActFor(ctx, tc.service, tc.account); !errdefs.IsException(err, errdefs.AccessDeniedException) {
			t.Errorf("%s acting for %s: %v, want AccessDeniedException", tc.service, tc.account, err)
		}
	}
}

func TestAuthorizeNotesTheFirstAction(t *testing.T) {
	az := newAuthorizer(t)
	ctx, entry := audit.Open(identity.NewContext(context.Background(), identity.RootCaller(acctA)))
	_ = az.Authorize(ctx, "eks:CreateAddon", clusterARN(acctA, "c"))
	_ = az.PassRoles(ctx, "arn:aws:iam::111111111111:role/cni")
	if action, resource := entry.Noted(); action != "eks:CreateAddon" || resource != clusterARN(acctA, "c") {
		t.Errorf("noted %s on %s, want the operation itself", action, resource)
	}
}

func ptr[T any](v T) *T { return &v }
