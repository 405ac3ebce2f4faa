package iam

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/time/rate"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/store"
)

// Cache answers the questions every request asks (whose key is this, what
// may this principal or service do) from memory, kept current by one etcd
// watch over iam/. Authentication, throttling and authorization then cost
// no etcd round trip, and a deactivated key, a detached policy or a changed
// service policy takes effect as soon as the watch delivers the change
// (milliseconds), on every replica.
//
// Until the first snapshot has arrived, and for an access key the mirror
// does not hold (a key created an instant ago on another replica), the
// cache reads etcd instead: it never answers "unknown" from a view that may
// be behind.
type Cache struct {
	svc *Service

	mu    sync.RWMutex
	ready bool
	kv    map[string]store.KV
	// docs memoises parsed policy documents by key and mod revision.
	docs map[string]parsedDoc
	// creds memoises opened access keys by mod revision: opening a sealed
	// secret per request would cost a decode and an AES-GCM open.
	creds map[string]openedKey
	// principals memoises each principal's policy set, valid while the
	// principal's and every attached policy's revisions are unchanged.
	principals map[string]principalMemo
	// misses bounds the etcd reads for access keys the mirror does not
	// hold: a key made an instant ago is found, but a flood of made-up key
	// ids (no account to throttle yet) cannot turn into a flood of etcd
	// reads.
	misses *rate.Limiter
}

// Etcd reads for unknown access keys, per second and burst, per replica.
const (
	missRate  = 50
	missBurst = 100
)

type principalMemo struct {
	keys []string // the principal's key, then its policies' keys
	revs []int64
	docs []*policy.Document
}

// current reports whether m still describes the mirror (caller holds mu).
func (c *Cache) current(m principalMemo) bool {
	for i, k := range m.keys {
		if kv, ok := c.kv[k]; !ok || kv.ModRev != m.revs[i] {
			return false
		}
	}
	return true
}

type openedKey struct {
	rev  int64
	cred Credential
	ok   bool
}

type parsedDoc struct {
	rev int64
	doc *policy.Document
}

// NewCache returns a cache over s; Run keeps it current.
func (s *Service) NewCache() *Cache {
	return &Cache{svc: s, kv: map[string]store.KV{}, docs: map[string]parsedDoc{}, creds: map[string]openedKey{},
		principals: map[string]principalMemo{}, misses: rate.NewLimiter(missRate, missBurst)}
}

// Run mirrors iam/ until ctx ends. ready is closed once the first snapshot
// is loaded.
func (c *Cache) Run(ctx context.Context, ready chan<- struct{}) {
	first := true
	for ev := range c.svc.store.Watch(ctx, "iam/", 0) {
		c.mu.Lock()
		switch ev.Type {
		case store.EventSnapshot:
			c.kv = make(map[string]store.KV, len(ev.Snapshot))
			for _, kv := range ev.Snapshot {
				c.kv[kv.Key] = kv
			}
			c.docs = map[string]parsedDoc{}
			c.creds = map[string]openedKey{}
			c.principals = map[string]principalMemo{}
			c.ready = true
		case store.EventPut:
			c.kv[ev.Key] = store.KV{Key: ev.Key, Value: ev.Value, ModRev: ev.Revision}
		case store.EventDelete:
			delete(c.kv, ev.Key)
			delete(c.docs, ev.Key)
			delete(c.creds, ev.Key)
		}
		c.mu.Unlock()
		if first && ev.Type == store.EventSnapshot {
			first = false
			if ready != nil {
				close(ready)
			}
		}
	}
	c.mu.Lock()
	c.ready = false
	c.mu.Unlock()
}

// Lookup is Service.Lookup from memory.
func (c *Cache) Lookup(ctx context.Context, akid string) (Credential, bool, error) {
	if !accessKeyIDPattern.MatchString(akid) {
		return Credential{}, false, nil
	}
	key := accessKeyKey(akid)
	c.mu.RLock()
	kv, ok := c.kv[key]
	opened, memo := c.creds[key]
	ready := c.ready
	c.mu.RUnlock()
	switch {
	case !ready:
		return c.svc.Lookup(ctx, akid)
	case !ok && c.misses.Allow():
		return c.svc.Lookup(ctx, akid)
	case !ok:
		// Over the miss budget: answered from the mirror, which the
		// watch keeps within milliseconds of the store.
		return Credential{}, false, nil
	}
	if memo && opened.rev == kv.ModRev {
		return opened.cred, opened.ok, nil
	}
	rec := &storagev1.AccessKeyRecord{}
	if err := store.Decode(kv.Value, rec); err != nil {
		return Credential{}, false, fmt.Errorf("access key %s: %w", akid, err)
	}
	opened = openedKey{rev: kv.ModRev}
	if rec.GetStatus() == KeyActive {
		secret, err := c.svc.open(akid, rec.GetAccountId(), rec.GetSealedSecret())
		if err != nil {
			return Credential{}, false, err
		}
		opened.cred = Credential{AccessKeyID: akid, AccountID: rec.GetAccountId(), PrincipalARN: rec.GetPrincipalArn(), Secret: secret}
		opened.ok = true
	}
	c.mu.Lock()
	if cur, ok := c.kv[key]; ok && cur.ModRev == kv.ModRev {
		c.creds[key] = opened
	}
	c.mu.Unlock()
	return opened.cred, opened.ok, nil
}

// Policies is Service.Policies from memory.
func (c *Cache) Policies(ctx context.Context, arn string) (_ []*policy.Document, err error) {
	// A role session has the policies of its role, the one
	// EffectivePrincipal finds (CreateCluster seeds its creator entry for
	// the same one).
	if arn, err = c.EffectivePrincipal(ctx, arn); err != nil {
		return nil, err
	}
	c.mu.RLock()
	m, ok := c.principals[arn]
	if ok && c.ready && c.current(m) {
		c.mu.RUnlock()
		return m.docs, nil
	}
	c.mu.RUnlock()
	account, err := ParsePrincipal(arn)
	if err != nil {
		return nil, err
	}
	kv, ok, ready := c.raw(principalKey(account, arn))
	if !ready || !ok {
		// Not loaded, or made an instant ago and not seen yet: ask etcd.
		// A principal that does not exist has no policies.
		docs, err := c.svc.Policies(ctx, arn)
		if errdefs.IsException(err, errdefs.ResourceNotFoundException) {
			return nil, nil
		}
		return docs, err
	}
	p := &storagev1.PrincipalRecord{}
	if err := store.Decode(kv.Value, p); err != nil {
		return nil, fmt.Errorf("principal %s: %w", arn, err)
	}
	var docs []*policy.Document
	memo := principalMemo{keys: []string{principalKey(account, arn)}, revs: []int64{kv.ModRev}}
	for _, name := range p.GetPolicyNames() {
		doc, rev, ok, err := c.document(policyKey(account, name), func(b []byte) (string, error) {
			rec := &storagev1.PolicyRecord{}
			err := store.Decode(b, rec)
			return rec.GetDocument(), err
		})
		if err != nil {
			return nil, fmt.Errorf("policy %s of %s: %w", name, account, err)
		}
		if !ok {
			// Attached an instant ago and not seen yet (or deleted since,
			// which etcd confirms): ask etcd for the whole set.
			return c.svc.Policies(ctx, arn)
		}
		docs = append(docs, doc)
		memo.keys, memo.revs = append(memo.keys, policyKey(account, name)), append(memo.revs, rev)
	}
	memo.docs = docs
	c.mu.Lock()
	if c.current(memo) {
		c.principals[arn] = memo
	}
	c.mu.Unlock()
	return docs, nil
}

// ServicePolicy is Service.ServicePolicy from memory.
func (c *Cache) ServicePolicy(ctx context.Context, name string) (*policy.Document, bool, error) {
	if _, ok, ready := c.raw(serviceKey(name)); !ready || !ok {
		return c.svc.ServicePolicy(ctx, name)
	}
	doc, _, ok, err := c.document(serviceKey(name), func(b []byte) (string, error) {
		rec := &storagev1.ServiceRecord{}
		err := store.Decode(b, rec)
		return rec.GetDocument(), err
	})
	return doc, ok, err
}

func (c *Cache) raw(key string) (store.KV, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	kv, ok := c.kv[key]
	return kv, ok, c.ready
}

// document returns the parsed policy document stored at key and the
// revision it was parsed from, parsing it once per revision.
func (c *Cache) document(key string, text func([]byte) (string, error)) (*policy.Document, int64, bool, error) {
	c.mu.RLock()
	kv, ok := c.kv[key]
	pd, parsed := c.docs[key]
	c.mu.RUnlock()
	if !ok {
		return nil, 0, false, nil
	}
	if parsed && pd.rev == kv.ModRev {
		return pd.doc, kv.ModRev, true, nil
	}
	src, err := text(kv.Value)
	if err != nil {
		return nil, 0, false, fmt.Errorf("stored policy %s: %w", key, err)
	}
	doc, err := policy.Parse([]byte(src))
	if err != nil {
		return nil, 0, false, fmt.Errorf("stored policy %s: %w", key, err)
	}
	c.mu.Lock()
	if cur, ok := c.kv[key]; ok && cur.ModRev == kv.ModRev {
		c.docs[key] = parsedDoc{rev: kv.ModRev, doc: doc}
	}
	c.mu.Unlock()
	return doc, kv.ModRev, true, nil
}

// PrincipalExists is Service.PrincipalExists from memory; a principal the
// mirror does not hold (made an instant ago) is looked up in etcd.
func (c *Cache) PrincipalExists(ctx context.Context, arn string) (bool, error) {
	account, err := ParsePrincipal(arn)
	if err != nil {
		return false, nil
	}
	if _, ok, ready := c.raw(principalKey(account, arn)); ok && ready {
		return true, nil
	}
	return c.svc.PrincipalExists(ctx, arn)
}

// EffectivePrincipal is Service.effectivePrincipal from memory: a
// session's role found by name in the mirror (so a role with a path is
// found), or in etcd when the mirror has not seen the role yet — as
// Policies does, so the role a request was authorized as and the role it
// acts as are the same one; any other ARN unchanged.
func (c *Cache) EffectivePrincipal(ctx context.Context, arn string) (string, error) {
	account, role, _, ok := AssumedRole(arn)
	if !ok {
		return arn, nil
	}
	if resolved, ok := c.roleByName(account, role); ok {
		return resolved, nil
	}
	return c.svc.effectivePrincipal(ctx, arn)
}

// roleByName is a role's ARN from the mirror's name index.
func (c *Cache) roleByName(account, role string) (string, bool) {
	kv, ok, _ := c.raw(nameKey(account, "role", role))
	if !ok {
		return "", false
	}
	rec := &storagev1.PrincipalNameRecord{}
	if store.Decode(kv.Value, rec) != nil {
		return "", false
	}
	return rec.GetArn(), true
}

// LookupSession is Service.LookupSession from memory: the session record
// and its role's record from the mirror (a session issued an instant ago
// on another replica, within the miss budget, from etcd). A revocation or
// a deleted role takes effect as soon as the watch delivers it.
func (c *Cache) LookupSession(ctx context.Context, akid, token string) (Credential, bool, error) {
	if !sessionKeyIDPattern.MatchString(akid) {
		return Credential{}, false, nil
	}
	key := sessionKey(akid)
	c.mu.RLock()
	kv, ok := c.kv[key]
	opened, memo := c.creds[key]
	ready := c.ready
	c.mu.RUnlock()
	switch {
	case !ready:
		return c.svc.LookupSession(ctx, akid, token)
	case !ok && c.misses.Allow():
		return c.svc.LookupSession(ctx, akid, token)
	case !ok:
		return Credential{}, false, nil
	}
	rec := &storagev1.SessionRecord{}
	if err := store.Decode(kv.Value, rec); err != nil {
		return Credential{}, false, fmt.Errorf("session %s: %w", akid, err)
	}
	roleKV, ok, _ := c.raw(principalKey(rec.GetAccountId(), rec.GetRoleArn()))
	if !ok {
		// The role is gone (or made an instant ago, which a session
		// cannot outrun): etcd has the last word.
		return c.svc.LookupSession(ctx, akid, token)
	}
	role := &storagev1.PrincipalRecord{}
	if err := store.Decode(roleKV.Value, role); err != nil {
		return Credential{}, false, fmt.Errorf("role of session %s: %w", akid, err)
	}
	if ok, err := c.svc.validSession(rec, role, token); !ok || err != nil {
		return Credential{}, false, err
	}
	if memo && opened.rev == kv.ModRev {
		return opened.cred, opened.ok, nil
	}
	secret, err := c.svc.open(akid, rec.GetAccountId(), rec.GetSealedSecret())
	if err != nil {
		return Credential{}, false, err
	}
	opened = openedKey{rev: kv.ModRev, cred: sessionCredential(rec, secret), ok: true}
	c.mu.Lock()
	if cur, ok := c.kv[key]; ok && cur.ModRev == kv.ModRev {
		c.creds[key] = opened
	}
	c.mu.Unlock()
	return opened.cred, true, nil
}
