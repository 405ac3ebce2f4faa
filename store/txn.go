package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Txn collects compares and writes that must happen together: a record, its
// update log entry and its idempotency key; a report's status change and its
// fencing compare; a cluster key and the DeleteRange of its children. Build
// it with the methods below, then Store.Commit it. The first encoding error
// is kept and returned by Commit.
type Txn struct {
	cmps    []cmp
	ops     []op
	creates []string
	err     error
}

type cmpKind int

const (
	cmpAbsent cmpKind = iota
	cmpModRev
	cmpExists
	cmpValue
)

// cmp and op hold relative keys; Commit makes them absolute, so a Txn is
// independent of the store's prefix.
type cmp struct {
	kind  cmpKind
	key   string
	rev   int64
	value []byte
}

type opKind int

const (
	opPut opKind = iota
	opDelete
	opDeleteRange
)

type op struct {
	kind  opKind
	key   string
	value []byte
	ttl   time.Duration
	lease clientv3.LeaseID
	// keepLease writes the value on the lease the key is on (etcd's
	// ignore_lease): a read-modify-write of a record that lives on a lease
	// (an agent's session) must not detach it and make it immortal. The
	// put fails unless the key exists, which the mod revision compare
	// that always comes with it guarantees.
	keepLease bool
}

// NewTxn returns an empty transaction.
func NewTxn() *Txn { return &Txn{} }

// Empty reports whether the transaction has no writes.
func (t *Txn) Empty() bool { return len(t.ops) == 0 }

func (t *Txn) encode(rec proto.Message) []byte {
	b, err := Encode(rec)
	if err != nil && t.err == nil {
		t.err = err
	}
	return b
}

// Create writes rec at key only if key does not exist. If it does, Commit
// returns ErrExists.
func (t *Txn) Create(key string, rec proto.Message) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpAbsent, key: key})
	t.ops = append(t.ops, op{kind: opPut, key: key, value: t.encode(rec)})
	t.creates = append(t.creates, key)
	return t
}

// CreateWithTTL is Create with the key attached to a lease, so etcd removes
// it once it has lived at least ttl (normally by ttl plus the lease-reuse
// window; etcd restarts a lease's countdown on leader change, so later is
// possible): idempotency records. Keys written close together share a lease
// (leases.go), so this costs no extra raft write per transaction.
func (t *Txn) CreateWithTTL(key string, rec proto.Message, ttl time.Duration) *Txn {
	t.Create(key, rec)
	t.ops[len(t.ops)-1].ttl = ttl
	return t
}

// Update writes rec at key only if the key's mod revision is still modRev.
func (t *Txn) Update(key string, rec proto.Message, modRev int64) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpModRev, key: key, rev: modRev})
	t.ops = append(t.ops, op{kind: opPut, key: key, value: t.encode(rec)})
	return t
}

// updateKeepingLease is Update on the lease the key is on: GuaranteedUpdate
// changes a record's value, never its lifetime.
func (t *Txn) updateKeepingLease(key string, rec proto.Message, modRev int64) *Txn {
	t.Update(key, rec, modRev)
	t.ops[len(t.ops)-1].keepLease = true
	return t
}

// Put writes rec at key unconditionally.
func (t *Txn) Put(key string, rec proto.Message) *Txn {
	t.ops = append(t.ops, op{kind: opPut, key: key, value: t.encode(rec)})
	return t
}

// PutWithLease writes rec at key attached to lease, which the caller
// grants and keeps alive: the key lives exactly as long as the lease (a
// guest agent's session).
func (t *Txn) PutWithLease(key string, rec proto.Message, lease clientv3.LeaseID) *Txn {
	t.ops = append(t.ops, op{kind: opPut, key: key, value: t.encode(rec), lease: lease})
	return t
}

// Remove deletes key unconditionally (nothing when it is absent).
func (t *Txn) Remove(key string) *Txn {
	t.ops = append(t.ops, op{kind: opDelete, key: key})
	return t
}

// RequireAbsent guards the transaction on key not existing.
func (t *Txn) RequireAbsent(key string) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpAbsent, key: key})
	return t
}

// Delete removes key only if its mod revision is still modRev.
func (t *Txn) Delete(key string, modRev int64) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpModRev, key: key, rev: modRev})
	t.ops = append(t.ops, op{kind: opDelete, key: key})
	return t
}

// DeleteRange removes every key under prefix.
func (t *Txn) DeleteRange(prefix string) *Txn {
	t.ops = append(t.ops, op{kind: opDeleteRange, key: prefix})
	return t
}

// RequireModRevision guards the transaction on key's mod revision (0 means
// the key must be absent).
func (t *Txn) RequireModRevision(key string, modRev int64) *Txn {
	if modRev == 0 {
		t.cmps = append(t.cmps, cmp{kind: cmpAbsent, key: key})
	} else {
		t.cmps = append(t.cmps, cmp{kind: cmpModRev, key: key, rev: modRev})
	}
	return t
}

// RequireExists guards the transaction on key existing.
func (t *Txn) RequireExists(key string) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpExists, key: key})
	return t
}

// RequireValue guards the transaction on key holding exactly rec (the
// fencing compare: e.g. the executor record still names the reporter's
// epoch).
func (t *Txn) RequireValue(key string, rec proto.Message) *Txn {
	t.cmps = append(t.cmps, cmp{kind: cmpValue, key: key, value: t.encode(rec)})
	return t
}

// Result describes a committed transaction.
type Result struct {
	// Revision is the etcd revision of the commit.
	Revision int64
	// Deleted counts keys removed by Delete and DeleteRange.
	Deleted int64
}

// Commit runs t as one etcd transaction. If a Create found its key it
// returns ErrExists; if any other compare failed it returns ErrConflict.
func (s *Store) Commit(ctx context.Context, t *Txn) (Result, error) {
	res, _, err := s.commit(ctx, t, nil)
	return res, err
}

// commit runs t with extra Else operations and returns the Else responses
// when the compares failed.
func (s *Store) commit(ctx context.Context, t *Txn, elseOps []clientv3.Op) (Result, *clientv3.TxnResponse, error) {
	if t.err != nil {
		return Result{}, nil, t.err
	}
	if err := s.refuse(firstKey(t)); err != nil {
		return Result{}, nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()

	cmps := make([]clientv3.Cmp, 0, len(t.cmps))
	for _, c := range t.cmps {
		k := s.Key(c.key)
		switch c.kind {
		case cmpAbsent:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		case cmpExists:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
		case cmpModRev:
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", c.rev))
		case cmpValue:
			cmps = append(cmps, clientv3.Compare(clientv3.Value(k), "=", string(c.value)))
		}
	}
	ops := make([]clientv3.Op, 0, len(t.ops))
	for _, o := range t.ops {
		k := s.Key(o.key)
		switch o.kind {
		case opPut:
			var opts []clientv3.OpOption
			if o.lease != 0 {
				opts = append(opts, clientv3.WithLease(o.lease))
			}
			if o.keepLease {
				opts = append(opts, clientv3.WithIgnoreLease())
			}
			if o.ttl > 0 {
				lease, err := s.leases.get(ctx, o.ttl)
				if err != nil {
					return Result{}, nil, mapErr(err, o.key)
				}
				opts = append(opts, clientv3.WithLease(lease))
			}
			ops = append(ops, clientv3.OpPut(k, string(o.value), opts...))
		case opDelete:
			ops = append(ops, clientv3.OpDelete(k))
		case opDeleteRange:
			ops = append(ops, clientv3.OpDelete(k, clientv3.WithPrefix()))
		}
	}
	// When compares fail, learn which creates collided so the caller gets
	// ErrExists rather than a generic conflict.
	elseAll := append([]clientv3.Op(nil), elseOps...)
	for _, key := range t.creates {
		elseAll = append(elseAll, clientv3.OpGet(s.Key(key), clientv3.WithCountOnly()))
	}

	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Else(elseAll...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// A shared lease vanished (revoked by hand, or etcd restored
			// from a backup): forget it, so the caller's retry gets a new one.
			s.leases.reset()
		}
		return Result{}, nil, mapErr(err, firstKey(t))
	}
	s.observe(resp.Header.Revision)
	if !resp.Succeeded {
		for i, key := range t.creates {
			if resp.Responses[len(elseOps)+i].GetResponseRange().GetCount() > 0 {
				return Result{}, resp, fmt.Errorf("%s: %w", key, ErrExists)
			}
		}
		return Result{}, resp, fmt.Errorf("%s: %w", firstKey(t), ErrConflict)
	}
	res := Result{Revision: resp.Header.Revision}
	for _, r := range resp.Responses {
		if d := r.GetResponseDeleteRange(); d != nil {
			res.Deleted += d.Deleted
		}
	}
	return res, resp, nil
}

func firstKey(t *Txn) string {
	if len(t.ops) > 0 {
		return t.ops[0].key
	}
	if len(t.cmps) > 0 {
		return t.cmps[0].key
	}
	return "txn"
}
