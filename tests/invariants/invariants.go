// Package invariants checks a saltbush keyspace in etcd against what the
// server's transactions promise (docs/architecture.md, "Store": everything
// that must happen together is one transaction, so no interruption can
// leave half of a change behind). Any test can use it on the etcd it ran
// saltbush on: after a SIGKILL, after a fault schedule, at the end of a
// suite.
//
// Check reads the whole keyspace under a prefix at one revision and
// reports every violation of:
//
//   - decode: every key names its record type (the families in
//     families.go, one per key of the architecture's key table) and its
//     value is exactly that record in the store's canonical encoding;
//   - unknown-key: no key outside those families;
//   - key: every record agrees with its key (names, uids, ids, hashes,
//     ARNs) and holds what its type requires;
//   - lease: sessions, idempotency records, role sessions and election
//     keys live on an etcd lease, and nothing else does;
//   - orphan: nothing lives under a cluster uid that no cluster record
//     has, no update outlives its add-on incarnation, no role session,
//     key or OIDC provider outlives its principal or account (a hosted
//     issuer's keys may outlive their cluster: they serve nothing then,
//     server/oidc/issuers.go);
//   - index: the exclusivity and index keys and the records they name
//     agree both ways (pod identity service accounts and associations,
//     IAM names and principals, add-ons and the associations they own,
//     in-flight add-ons and their deadline hints, the CA state's issuer);
//   - lifecycle: an UPDATING add-on has its InProgress update and an
//     InProgress add-on update its UPDATING add-on; an UPDATING cluster
//     has exactly one InProgress cluster update, and one is InProgress
//     only while its cluster is UPDATING or DELETING;
//   - executor: at most one executor epoch is live per cluster: a
//     DELETING or FAILED cluster's executor names nobody, no report or
//     service-account key set accepted through delivery is from an epoch
//     later than the executor's, one epoch names one instance (also
//     against the previous snapshot), and epochs never go back;
//   - monotonic (against the previous snapshot, Previous): the etcd
//     revision, add-on generations and observed generations, cluster
//     versions never go back; a DELETING cluster stays DELETING, an ended
//     update stays ended, and an incarnation that was gone never returns;
//   - acked: every write the workload recorded in its Acked (and did not
//     forget by asking for a deletion) is in the keyspace.
package invariants

import (
	"context"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The invariants a Violation names (see the package comment).
const (
	InvDecode     = "decode"
	InvUnknownKey = "unknown-key"
	InvKey        = "key"
	InvLease      = "lease"
	InvOrphan     = "orphan"
	InvIndex      = "index"
	InvLifecycle  = "lifecycle"
	InvExecutor   = "executor"
	InvMonotonic  = "monotonic"
	InvAcked      = "acked"
)

// Violation is one broken invariant.
type Violation struct {
	// Invariant is one of the Inv* names.
	Invariant string
	// Key is the key concerned, relative to the prefix ("" for an
	// acknowledged write that is missing).
	Key string
	// Detail says what is wrong, naming the records.
	Detail string
}

func (v Violation) String() string {
	if v.Key == "" {
		return v.Invariant + ": " + v.Detail
	}
	return v.Invariant + ": " + v.Key + ": " + v.Detail
}

// Report is what Check found.
type Report struct {
	// Revision is the etcd revision the keyspace was read at.
	Revision int64
	// Checked counts the records checked, by family (families.go).
	Checked map[string]int
	// Violations lists every broken invariant, sorted.
	Violations []Violation
	// AckedVerified is the number of acknowledged writes found.
	AckedVerified int
	// Snapshot is what the next Check compares with (Previous).
	Snapshot *Snapshot
}

// Records is the number of records checked.
func (r *Report) Records() int {
	n := 0
	for _, c := range r.Checked {
		n += c
	}
	return n
}

// Summary is the counts by family, for a log line.
func (r *Report) Summary() string {
	names := make([]string, 0, len(r.Checked))
	for n := range r.Checked {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", n, r.Checked[n])
	}
	return fmt.Sprintf("%d records at revision %d (%s), %d acknowledged writes verified, %d violations",
		r.Records(), r.Revision, b.String(), r.AckedVerified, len(r.Violations))
}

// Option configures Check.
type Option func(*options)

type options struct {
	prev *Snapshot
}

// Previous compares the keyspace with an earlier Check's snapshot of the
// same keyspace (monotonic and executor invariants across checks).
func Previous(s *Snapshot) Option { return func(o *options) { o.prev = s } }

// Check reads every key under prefix (the store's root prefix, e.g.
// store.DefaultPrefix) at one revision and checks the invariants of the
// package comment. acked may be nil. An error means the keyspace could not
// be read; what is wrong with it is in the Report.
func Check(ctx context.Context, cli *clientv3.Client, prefix string, acked *Acked, opts ...Option) (*Report, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the keyspace under %q: %w", prefix, err)
	}
	c := newChecker(resp.Header.Revision)
	for _, kv := range resp.Kvs {
		c.load(strings.TrimPrefix(string(kv.Key), prefix), kv.Value, kv.Lease)
	}
	c.checkRecords()
	c.checkClusters()
	c.checkAddons()
	c.checkPodIdentity()
	c.checkExecutors()
	c.checkIAM()
	c.checkPKI()
	if acked != nil {
		c.checkAcked(acked)
	}
	snap := c.snapshot(o.prev)
	sort.Slice(c.violations, func(i, j int) bool {
		a, b := c.violations[i], c.violations[j]
		if a.Invariant != b.Invariant {
			return a.Invariant < b.Invariant
		}
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		return a.Detail < b.Detail
	})
	return &Report{Revision: c.revision, Checked: c.checked, Violations: c.violations,
		AckedVerified: c.ackedVerified, Snapshot: snap}, nil
}

// item is one key of the keyspace.
type item struct {
	key   string
	fam   *family
	caps  map[string]string
	rec   proto.Message // nil when it did not decode, or for a raw family
	raw   []byte
	lease int64
}

func (c *checker) violate(inv, key, format string, args ...any) {
	c.violations = append(c.violations, Violation{Invariant: inv, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// load matches key to its family and decodes its value.
func (c *checker) load(key string, value []byte, lease int64) {
	f, caps := match(key)
	if f == nil {
		c.violate(InvUnknownKey, key, "no key family of tests/invariants/families.go matches it (%d bytes): a new family must be added there", len(value))
		return
	}
	it := &item{key: key, fam: f, caps: caps, raw: value, lease: lease}
	switch {
	case f.leased && lease == 0:
		c.violate(InvLease, key, "a %s must live on an etcd lease, and this one has none", f.name)
	case !f.leased && lease != 0:
		c.violate(InvLease, key, "a %s is on etcd lease %x: it would vanish when the lease expires", f.name, lease)
	}
	if f.record != nil {
		m := f.record()
		if err := decodeStrict(value, m); err != nil {
			c.violate(InvDecode, key, "%v", err)
		} else {
			it.rec = m
			c.checked[f.name]++
		}
	} else {
		c.checked[f.name]++
	}
	c.items = append(c.items, it)
	c.byFamily[f.name] = append(c.byFamily[f.name], it)
}
