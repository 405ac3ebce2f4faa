package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// UpdateFunc mutates cur, the current record, in place. It may add more
// compares and writes to txn (an update log entry, an idempotency key, a
// fencing compare); they commit together with the record or not at all. It
// must be free of side effects: it runs again, on fresh state, after every
// conflict. Returning an error aborts the update with that error.
type UpdateFunc func(cur proto.Message, txn *Txn) error

// GuaranteedUpdate is Kubernetes' read-modify-CAS loop: read key, let update
// mutate it, write it back only if the key's mod revision is unchanged. On a
// lost race the transaction's Else branch returns the winning value, and the
// loop retries from it without another read. If update leaves the record
// unchanged and adds no writes, nothing is written (its guards, if it added
// any, are still checked in a transaction without writes). The record is
// written back on the lease it is on, if any: an update changes a record's
// value, never its lifetime. The final record is left in into; the returned
// revision is its mod revision.
//
// If a guard added by update fails while the record itself is unchanged, the
// guard is what stopped the write: ErrConflict is returned, not retried (and
// ErrExists when a Create added by update found its key). When the record
// did change, a failed guard or create is retried with the rest, on the
// fresh record.
func (s *Store) GuaranteedUpdate(ctx context.Context, key string, into proto.Message, update UpdateFunc) (int64, error) {
	if err := s.refuse(key); err != nil {
		return 0, err
	}
	getCtx, cancel := s.withTimeout(ctx)
	resp, err := s.client.Get(getCtx, s.Key(key))
	cancel()
	if err != nil {
		return 0, mapErr(err, key)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	value, modRev := resp.Kvs[0].Value, resp.Kvs[0].ModRevision

	// Contention is retried for as long as the caller may wait (its
	// deadline, or the store's contention timeout when it set none), with
	// a pause that grows with every lost race: a hot record under many
	// writers converges however slow the machine is, instead of failing
	// writes that would have succeeded a moment later.
	loopCtx, cancelLoop := s.contentionContext(ctx)
	defer cancelLoop()
	for attempt := 0; s.maxAttempts == 0 || attempt < s.maxAttempts; attempt++ {
		if attempt > 0 && !sleep(loopCtx, conflictBackoff(attempt)) {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, mapErr(err, key)
		}
		cur := into.ProtoReflect().New().Interface()
		if err := Decode(value, cur); err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		orig := proto.Clone(cur)
		txn := NewTxn()
		if err := update(cur, txn); err != nil {
			return 0, err
		}
		unchanged := txn.Empty() && proto.Equal(orig, cur)
		if unchanged && len(txn.cmps) == 0 {
			proto.Reset(into)
			proto.Merge(into, cur)
			return modRev, nil
		}
		if unchanged {
			// Nothing to write, but update's guards (a fencing compare) must
			// still hold: check them, and that the record is the one read,
			// in a transaction without writes.
			txn.RequireModRevision(key, modRev)
		} else {
			txn.updateKeepingLease(key, cur, modRev)
		}

		res, elseResp, err := s.commit(ctx, txn, []clientv3.Op{clientv3.OpGet(s.Key(key))})
		if err == nil {
			proto.Reset(into)
			proto.Merge(into, cur)
			if unchanged {
				return modRev, nil
			}
			return res.Revision, nil
		}
		// elseResp is set only when a compare failed (ErrConflict, or
		// ErrExists when one of update's creates collided). Either way, if
		// the record moved the update ran on stale state: its creates and
		// guards may be derived from it (an update log keyed by sequence
		// number), so retry on the fresh record before blaming them.
		if elseResp == nil || (!errors.Is(err, ErrConflict) && !errors.Is(err, ErrExists)) {
			return 0, err
		}
		kvs := elseResp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return 0, fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		if kvs[0].ModRevision == modRev {
			// The record did not move: one of update's own guards or
			// creates failed.
			return 0, err
		}
		value, modRev = kvs[0].Value, kvs[0].ModRevision
	}
	// Out of time (or attempts) while still losing races: that is a
	// conflict, whatever the deadline says, so the caller learns to retry
	// rather than that etcd is down.
	return 0, fmt.Errorf("%s: every attempt lost the race: %w", key, ErrConflict)
}

// Update is GuaranteedUpdate for a record of type T: update receives the
// current record already typed, so callers need no type assertion. into
// must be a non-nil T (the record is decoded into a fresh value of its
// type, so cur always is a T).
func Update[T proto.Message](ctx context.Context, s *Store, key string, into T, update func(cur T, txn *Txn) error) (int64, error) {
	return s.GuaranteedUpdate(ctx, key, into, func(cur proto.Message, txn *Txn) error {
		return update(cur.(T), txn)
	})
}

// DefaultContentionTimeout bounds the retries of a write that keeps losing
// races when the caller's context has no deadline (a gRPC or HTTP client
// that set none). Options.ContentionTimeout overrides it for GuaranteedUpdate.
const DefaultContentionTimeout = 30 * time.Second

// The pause before retry n of a lost race grows exponentially from
// conflictBackoffBase to conflictBackoffMax, with full jitter: the more
// writers contend, the more often each loses and the further apart their
// attempts spread, so every round has a winner and the hot record is not
// hammered by every loser at once. The first retry is immediate: most
// races have a single rival that has just won.
const (
	conflictBackoffBase = time.Millisecond
	conflictBackoffMax  = 250 * time.Millisecond
)

func conflictBackoff(retry int) time.Duration {
	return rand.N(conflictBackoffBound(retry) + 1) //nolint:gosec // G404: jitter spreads retries; nothing depends on it being unpredictable
}

// conflictBackoffBound is the longest pause before retry n.
func conflictBackoffBound(retry int) time.Duration {
	if retry <= 1 {
		return 0
	}
	if shift := retry - 2; shift < 8 {
		return min(conflictBackoffBase<<shift, conflictBackoffMax)
	}
	return conflictBackoffMax
}

// contentionContext is how long a write may keep retrying lost races: the
// caller's deadline, or the store's contention timeout when it has none.
func (s *Store) contentionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.contention)
}

// RetryOnConflict runs attempt until it does not fail with ErrConflict (a
// lost race on the records it read), for as long as ctx allows: until its
// deadline, or DefaultContentionTimeout when it has none. The pause between
// attempts grows with the number of races lost (conflictBackoff). attempt
// receives true on its first run, so callers can read cheaply
// (serializably) first and linearizably after a conflict. When time runs
// out, the last conflict is returned: the caller is told the resource was
// modified concurrently, not that etcd is unavailable.
func RetryOnConflict(ctx context.Context, attempt func(first bool) error) error {
	loopCtx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		loopCtx, cancel = context.WithTimeout(ctx, DefaultContentionTimeout)
	}
	defer cancel()
	for i := 0; ; i++ {
		err := attempt(i == 0)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			// The caller gave up: nobody is waiting for a verdict.
			return ctx.Err()
		}
		if ctx.Err() != nil || !sleep(loopCtx, conflictBackoff(i+1)) {
			return err
		}
	}
}
