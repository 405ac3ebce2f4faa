package iam

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saltbush/saltbush/server/policy"
)

// startCache runs a cache over svc until the test ends and waits for its
// first snapshot.
func startCache(t *testing.T, svc *Service) *Cache {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := svc.NewCache()
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, ready) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("cache did not load its first snapshot")
	}
	return c
}

// eventually polls cond for up to 5 s (a watch delivers in milliseconds).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 5s", what)
}

func TestCacheFollowsTheStore(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	c := startCache(t, svc)
	const user = "arn:aws:iam::111122223333:user/alice"
	if _, err := svc.CreateAccount(ctx, "111122223333", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, user); err != nil {
		t.Fatal(err)
	}
	akid, secret, err := svc.CreateAccessKey(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	// Made an instant ago: a miss falls back to etcd, never "unknown".
	cred, ok, err := c.Lookup(ctx, akid)
	if err != nil || !ok || cred.Secret != secret || cred.AccountID != "111122223333" || cred.PrincipalARN != user {
		t.Fatalf("Lookup of a fresh key = %+v %v %v", cred, ok, err)
	}
	if docs, err := c.Policies(ctx, user); err != nil || len(docs) != 0 {
		t.Fatalf("policies of a user with none = %v %v", docs, err)
	}
	if _, err := svc.PutPolicy(ctx, "111122223333", "ro", `{"Statement":{"Effect":"Allow","Action":"eks:Describe*","Resource":"*"}}`); err != nil {
		t.Fatal(err)
	}
	if err := svc.AttachPolicy(ctx, user, "ro"); err != nil {
		t.Fatal(err)
	}
	allowed := func(action string) bool {
		docs, err := c.Policies(ctx, user)
		return err == nil && policy.Evaluate(docs, action, "*") == policy.Allowed
	}
	eventually(t, "attached policy allows DescribeCluster", func() bool { return allowed("eks:DescribeCluster") })
	if allowed("eks:DeleteCluster") {
		t.Fatal("read-only policy allows DeleteCluster")
	}
	// A changed document is re-parsed (memoised per revision).
	if _, err := svc.PutPolicy(ctx, "111122223333", "ro", `{"Statement":{"Effect":"Allow","Action":"eks:*","Resource":"*"}}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replaced policy allows DeleteCluster", func() bool { return allowed("eks:DeleteCluster") })

	// Deactivation takes effect from the watch, without a restart.
	if err := svc.SetAccessKeyStatus(ctx, akid, KeyInactive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "inactive key refused", func() bool {
		_, ok, err := c.Lookup(ctx, akid)
		return err == nil && !ok
	})
	if _, ok, err := c.Lookup(ctx, "AKIA2222222222222222"); ok || err != nil {
		t.Fatalf("unknown key: %v %v", ok, err)
	}
	if _, ok, err := c.Lookup(ctx, "not-a-key"); ok || err != nil {
		t.Fatalf("malformed key: %v %v", ok, err)
	}
}

func TestServicePolicies(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	c := startCache(t, svc)
	if _, ok, err := c.ServicePolicy(ctx, "ci"); ok || err != nil {
		t.Fatalf("policy of an unknown service: %v %v", ok, err)
	}
	for name, tc := range map[string]struct{ service, doc string }{
		"bad name":     {"bad/name", `{"Statement":[]}`},
		"bad document": {"ci", `{"Statement":{"Effect":"Maybe","Action":"*","Resource":"*"}}`},
	} {
		if _, err := svc.PutServicePolicy(ctx, tc.service, tc.doc); !isException(err, "InvalidParameterException") {
			t.Errorf("%s: %v, want InvalidParameterException", name, err)
		}
	}
	rec, err := svc.PutServicePolicy(ctx, "ci", `{"Statement":{"Effect":"Allow","Action":"saltbush:GetCluster","Resource":"*"}}`)
	if err != nil {
		t.Fatal(err)
	}
	again, err := svc.PutServicePolicy(ctx, "ci", rec.GetDocument())
	if err != nil || !again.GetModifiedAt().AsTime().Equal(rec.GetModifiedAt().AsTime()) {
		t.Fatalf("an unchanged document moved modifiedAt: %v", err)
	}
	eventually(t, "service policy seen", func() bool {
		doc, ok, err := c.ServicePolicy(ctx, "ci")
		return err == nil && ok && policy.Evaluate([]*policy.Document{doc}, "saltbush:GetCluster", "*") == policy.Allowed
	})
}

func TestBootstrapOnce(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	b := Bootstrap{AccountID: "000000000000", UserName: "dev", AdminService: "admin"}
	// Replicas starting together on one empty store: exactly one creates.
	var mu sync.Mutex
	var made []BootstrapResult
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, created, err := svc.Bootstrap(ctx, b)
			if err != nil {
				t.Error(err)
				return
			}
			if created {
				mu.Lock()
				made = append(made, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(made) != 1 {
		t.Fatalf("%d replicas bootstrapped, want exactly 1", len(made))
	}
	res := made[0]
	cred, ok, err := svc.Lookup(ctx, res.AccessKeyID)
	if err != nil || !ok || cred.Secret != res.SecretAccessKey || cred.PrincipalARN != "arn:aws:iam::000000000000:user/dev" {
		t.Fatalf("bootstrapped key: %+v %v %v", cred, ok, err)
	}
	docs, err := svc.Policies(ctx, res.UserARN)
	if err != nil || policy.Evaluate(docs, "eks:DeleteCluster", "arn:aws:eks:us-east-1:000000000000:cluster/x") != policy.Allowed {
		t.Fatalf("development user is not an administrator: %v", err)
	}
	if doc, ok, err := svc.ServicePolicy(ctx, "admin"); err != nil || !ok ||
		policy.Evaluate([]*policy.Document{doc}, "saltbush:ActForAccount", "arn:aws:iam::123456789012:root") != policy.Allowed {
		t.Fatalf("admin service may not act for accounts: %v %v", ok, err)
	}
	if _, created, err := svc.Bootstrap(ctx, b); created || err != nil {
		t.Fatalf("second bootstrap: created=%v err=%v", created, err)
	}
}

func TestAssumedRoleSessionKeys(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	c := startCache(t, svc)
	const role = "arn:aws:iam::111122223333:role/deployer"
	const session = "arn:aws:sts::111122223333:assumed-role/deployer/ci-run-7"
	if _, _, err := svc.CreateAccessKey(ctx, session); !isException(err, "ResourceNotFoundException") {
		t.Fatalf("key for a session of a missing role: %v, want ResourceNotFoundException", err)
	}
	if _, err := svc.CreateAccount(ctx, "111122223333", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, role); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutPolicy(ctx, "111122223333", "deploy", `{"Statement":{"Effect":"Allow","Action":"eks:CreateAddon","Resource":"*"}}`); err != nil {
		t.Fatal(err)
	}
	if err := svc.AttachPolicy(ctx, role, "deploy"); err != nil {
		t.Fatal(err)
	}
	akid, _, err := svc.CreateAccessKey(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	cred, ok, err := c.Lookup(ctx, akid)
	if err != nil || !ok || cred.PrincipalARN != session {
		t.Fatalf("session key: %+v %v %v", cred, ok, err)
	}
	eventually(t, "the session has its role's policies", func() bool {
		docs, err := c.Policies(ctx, session)
		return err == nil && policy.Evaluate(docs, "eks:CreateAddon", "*") == policy.Allowed
	})
	for _, bad := range []string{"arn:aws:sts::111122223333:assumed-role/deployer", "arn:aws:sts::1:assumed-role/r/s"} {
		if _, _, err := svc.CreateAccessKey(ctx, bad); !isException(err, "InvalidParameterException") {
			t.Errorf("key for %q: %v, want InvalidParameterException", bad, err)
		}
	}
}

func TestCacheBoundsUnknownKeyReads(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	c := startCache(t, svc)
	// Made-up key ids beyond the miss budget are answered from the mirror.
	for i := range missBurst + 50 {
		akid := fmt.Sprintf("AKIA%016d", i)
		akid = strings.NewReplacer("0", "A", "1", "B", "2", "C", "3", "D", "4", "E", "5", "F", "6", "G", "7", "H", "8", "I", "9", "J").Replace(akid[4:])
		if _, ok, err := c.Lookup(ctx, "AKIA"+akid); ok || err != nil {
			t.Fatalf("made-up key %d: %v %v", i, ok, err)
		}
	}
	if c.misses.Tokens() >= 1 {
		t.Fatalf("miss budget not spent by %d unknown keys: %.1f tokens left", missBurst+50, c.misses.Tokens())
	}
	// A real key is still found once the watch has delivered it.
	if _, err := svc.CreateAccount(ctx, "111122223333", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, "arn:aws:iam::111122223333:user/u"); err != nil {
		t.Fatal(err)
	}
	akid, _, err := svc.CreateAccessKey(ctx, "arn:aws:iam::111122223333:user/u")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "new key found from the mirror", func() bool {
		_, ok, err := c.Lookup(ctx, akid)
		return err == nil && ok
	})
}

// TestRoleWithPathSessions: a session names its role without the path;
// the role is found by name, for its keys and its policies (through the
// service and the cache), and IAM names stay unique whatever the path.
func TestRoleWithPathSessions(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	c := startCache(t, svc)
	const role = "arn:aws:iam::111122223333:role/ops/ci/deployer"
	const session = "arn:aws:sts::111122223333:assumed-role/deployer/ci-run-7"
	if _, err := svc.CreateAccount(ctx, "111122223333", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, role); err != nil {
		t.Fatal(err)
	}
	// Made an instant ago, and in a cache that has loaded nothing: the
	// session's role is still the one with the path (etcd's name index),
	// never the pathless ARN the session names.
	for name, cache := range map[string]*Cache{"running": c, "not loaded": svc.NewCache()} {
		if got, err := cache.EffectivePrincipal(ctx, session); err != nil || got != role {
			t.Errorf("%s cache: role of %s = %q, %v; want %s", name, session, got, err, role)
		}
	}
	for _, dup := range []string{"arn:aws:iam::111122223333:role/deployer", "arn:aws:iam::111122223333:role/other/deployer"} {
		if _, err := svc.CreatePrincipal(ctx, dup); !isException(err, "ResourceInUseException") {
			t.Errorf("second role named deployer (%s): %v, want ResourceInUseException", dup, err)
		}
	}
	// A user may share a role's name: they are different kinds.
	if _, err := svc.CreatePrincipal(ctx, "arn:aws:iam::111122223333:user/deployer"); err != nil {
		t.Errorf("user named like a role: %v", err)
	}
	if _, err := svc.PutPolicy(ctx, "111122223333", "deploy", `{"Statement":{"Effect":"Allow","Action":"eks:CreateAddon","Resource":"*"}}`); err != nil {
		t.Fatal(err)
	}
	if err := svc.AttachPolicy(ctx, role, "deploy"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.CreateAccessKey(ctx, session); err != nil {
		t.Fatalf("key for a session of a role with a path: %v", err)
	}
	docs, err := svc.Policies(ctx, session)
	if err != nil || policy.Evaluate(docs, "eks:CreateAddon", "*") != policy.Allowed {
		t.Errorf("service: the session lacks its role's policies: %v", err)
	}
	eventually(t, "the cache gives the session its role's policies", func() bool {
		docs, err := c.Policies(ctx, session)
		return err == nil && policy.Evaluate(docs, "eks:CreateAddon", "*") == policy.Allowed
	})
}
