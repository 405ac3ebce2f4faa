package iam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

var testMasterKey = bytes.Repeat([]byte{7}, MasterKeySize)

// newTestService runs the key store on a real embedded etcd.
func newTestService(t *testing.T) (*Service, *store.Store) {
	t.Helper()
	st := storetest.New(t)
	svc, err := NewService(st, testMasterKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isException(err error, exception string) bool { return errdefs.IsException(err, exception) }

func TestAccessKeyLifecycle(t *testing.T) {
	svc, st := newTestService(t)
	ctx := ctxT(t)
	const user = "arn:aws:iam::111122223333:user/alice"
	if _, err := svc.CreatePrincipal(ctx, user); !isException(err, errdefs.ResourceNotFoundException) {
		t.Fatalf("principal of a missing account: %v, want ResourceNotFoundException", err)
	}
	if _, err := svc.CreateAccount(ctx, "111122223333", "team-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateAccount(ctx, "111122223333", "again"); !isException(err, errdefs.ResourceInUseException) {
		t.Fatalf("second create of an account: %v, want ResourceInUseException", err)
	}
	if _, _, err := svc.CreateAccessKey(ctx, user); !isException(err, errdefs.ResourceNotFoundException) {
		t.Fatalf("key for a missing principal: %v, want ResourceNotFoundException", err)
	}
	if _, err := svc.CreatePrincipal(ctx, user); err != nil {
		t.Fatal(err)
	}
	akid, secret, err := svc.CreateAccessKey(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if !accessKeyIDPattern.MatchString(akid) || len(secret) != 40 {
		t.Fatalf("access key %q / secret of %d characters, want AKIA… and 40", akid, len(secret))
	}
	cred, ok, err := svc.Lookup(ctx, akid)
	if err != nil || !ok {
		t.Fatalf("Lookup: %v, %v", ok, err)
	}
	if cred.Secret != secret || cred.AccountID != "111122223333" || cred.PrincipalARN != user {
		t.Fatalf("Lookup = %+v", cred)
	}

	// The secret is not stored in clear.
	raw, err := st.Client().Get(ctx, st.Key(accessKeyKey(akid)))
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("read the key record: %v", err)
	}
	if bytes.Contains(raw.Kvs[0].Value, []byte(secret)) {
		t.Fatal("the access key record holds the secret in clear")
	}

	// Another master key cannot open it: an error, not a wrong secret.
	other, err := NewService(st, bytes.Repeat([]byte{8}, MasterKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Lookup(ctx, akid); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Lookup with another master key: %v, want ErrCorrupt", err)
	}

	if err := svc.SetAccessKeyStatus(ctx, akid, KeyInactive); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := svc.Lookup(ctx, akid); ok || err != nil {
		t.Fatalf("Lookup of an inactive key: %v, %v; want not found", ok, err)
	}
	for _, id := range []string{"AKIAUNKNOWNUNKNOWN23", "not-a-key", strings.Repeat("A", 4096)} {
		if _, ok, err := svc.Lookup(ctx, id); ok || err != nil {
			t.Errorf("Lookup(%q) = %v, %v; want not found", id, ok, err)
		}
	}
}

func TestPoliciesAttachAndEvaluate(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	const role = "arn:aws:iam::111122223333:role/ops/deployer"
	if _, err := svc.CreateAccount(ctx, "111122223333", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, role); err != nil {
		t.Fatal(err)
	}
	read := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:Describe*","Resource":"*"}]}`
	if _, err := svc.PutPolicy(ctx, "111122223333", "read", read); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutPolicy(ctx, "111122223333", "bad", `{"Statement":[{"Effect":"Maybe","Action":"*","Resource":"*"}]}`); !isException(err, errdefs.InvalidParameterException) {
		t.Fatalf("malformed policy: %v, want InvalidParameterException", err)
	}
	if _, err := svc.PutPolicy(ctx, "999999999999", "read", read); !isException(err, errdefs.ResourceNotFoundException) {
		t.Fatalf("policy of a missing account: %v, want ResourceNotFoundException", err)
	}
	if err := svc.AttachPolicy(ctx, role, "missing"); !isException(err, errdefs.ResourceNotFoundException) {
		t.Fatalf("attach a missing policy: %v, want ResourceNotFoundException", err)
	}
	if err := svc.AttachPolicy(ctx, role, "read"); err != nil {
		t.Fatal(err)
	}
	if err := svc.AttachPolicy(ctx, role, "read"); err != nil {
		t.Fatalf("attaching twice is harmless: %v", err)
	}
	docs, err := svc.Policies(ctx, role)
	if err != nil || len(docs) != 1 {
		t.Fatalf("Policies = %d, %v; want 1", len(docs), err)
	}
	const cluster = "arn:aws:eks:us-east-1:111122223333:cluster/prod"
	if got := policy.Evaluate(docs, "eks:DescribeCluster", cluster); got != policy.Allowed {
		t.Fatalf("DescribeCluster = %s, want allow", got)
	}
	if got := policy.Evaluate(docs, "eks:DeleteCluster", cluster); got != policy.ImplicitDeny {
		t.Fatalf("DeleteCluster = %s, want implicit deny", got)
	}

	// Replacing the document changes what the principal may do.
	deny := `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"eks:*","Resource":"*"}]}`
	if _, err := svc.PutPolicy(ctx, "111122223333", "read", deny); err != nil {
		t.Fatal(err)
	}
	docs, _ = svc.Policies(ctx, role)
	if got := policy.Evaluate(docs, "eks:DescribeCluster", cluster); got != policy.ExplicitDeny {
		t.Fatalf("after replacing the policy: %s, want explicit deny", got)
	}
}

func TestParsePrincipal(t *testing.T) {
	tests := []struct {
		arn, account string
	}{
		{"arn:aws:iam::111122223333:user/alice", "111122223333"},
		{"arn:aws:iam::111122223333:role/a/b/c", "111122223333"},
		{"arn:aws:iam::111122223333:group/g", ""},
		{"arn:aws:sts::111122223333:assumed-role/r/s", ""},
		{"arn:aws:iam::1111:user/x", ""},
	}
	for _, tt := range tests {
		got, err := ParsePrincipal(tt.arn)
		if (tt.account == "") != (err != nil) || got != tt.account {
			t.Errorf("ParsePrincipal(%q) = %q, %v; want %q", tt.arn, got, err, tt.account)
		}
	}
}

func TestMasterKey(t *testing.T) {
	if _, err := NewService(nil, []byte("short"), nil); err == nil {
		t.Fatal("a short master key was accepted")
	}
	if _, err := ParseMasterKey("not base64!"); err == nil {
		t.Fatal("a non-base64 master key was accepted")
	}
	if _, err := ParseMasterKey("AAAA"); err == nil {
		t.Fatal("a 3-byte master key was accepted")
	}
}

// Concurrent PutPolicy calls of one name all succeed, whether they find
// the policy or make it: the last one's document stands, and the policy
// keeps when it was first created.
func TestPutPolicyConcurrent(t *testing.T) {
	svc, st := newTestService(t)
	ctx := ctxT(t)
	if _, err := svc.CreateAccount(ctx, "111122223333", ""); err != nil {
		t.Fatal(err)
	}
	doc := func(i int) string {
		return fmt.Sprintf(`{"Statement":[{"Effect":"Allow","Action":"eks:Describe*","Resource":"arn:aws:eks:us-east-1:111122223333:cluster/c%d"}]}`, i)
	}
	for _, tc := range []struct {
		name     string
		existing bool
	}{
		{name: "Create", existing: false},
		{name: "Replace", existing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var created *storagev1.PolicyRecord
			if tc.existing {
				rec, err := svc.PutPolicy(ctx, "111122223333", tc.name, doc(-1))
				if err != nil {
					t.Fatal(err)
				}
				created = rec
			}
			const writers = 8
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i := range writers {
				wg.Go(func() { _, errs[i] = svc.PutPolicy(ctx, "111122223333", tc.name, doc(i)) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
				}
			}
			got := &storagev1.PolicyRecord{}
			if _, err := st.Get(ctx, policyKey("111122223333", tc.name), got); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got.GetDocument(), "cluster/c") {
				t.Errorf("document %s, want one of the writers'", got.GetDocument())
			}
			if created != nil && !got.GetCreatedAt().AsTime().Equal(created.GetCreatedAt().AsTime()) {
				t.Errorf("created at %v, want %v as first put", got.GetCreatedAt().AsTime(), created.GetCreatedAt().AsTime())
			}
		})
	}
}
