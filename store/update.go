package store

import (
	"context"
	"errors"
	"fmt"
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
// any, are still checked in a transaction without writes). The final record
// is left in into; the returned revision is its mod revision.
//
// If a guard added by update fails while the record itself is unchanged, the
// guard is what stopped the write: ErrConflict is returned, not retried (and
// ErrExists when a Create added by update found its key). When the record
// did change, a failed guard or create is retried with the rest, on the
// fresh record.
func (s *Store) GuaranteedUpdate(ctx context.Context, key string, into proto.Message, update UpdateFunc) (int64, error) {
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

	// Contention is retried for as long as the request may take (the
	// caller's deadline, or the store's request timeout): a hot record under
	// many writers still converges instead of failing writes that would
	// have succeeded a moment later.
	loopCtx, cancelLoop := s.withTimeout(ctx)
	defer cancelLoop()
	for attempt := 0; s.maxAttempts == 0 || attempt < s.maxAttempts; attempt++ {
		if attempt >= 3 {
			// Past the first few immediate retries, spread the losers out.
			backoff := 50 * time.Millisecond
			if shift := attempt - 3; shift < 6 {
				backoff = time.Millisecond << shift
			}
			if !sleep(loopCtx, jitter(backoff)) {
				break
			}
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
			txn.Update(key, cur, modRev)
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
	if err := ctx.Err(); err != nil {
		return 0, mapErr(err, key)
	}
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

// Retries of RetryOnConflict: the attempts after the first, and the pause
// before retry i (i+1 times the step). The policy lives here so that every
// service retries the same way.
const (
	conflictRetries   = 20
	conflictRetryStep = time.Millisecond
)

// RetryOnConflict runs attempt until it does not fail with ErrConflict (a
// guard on another record failed because that record changed in between,
// or a fast read was stale: read again and retry), the retries are used up
// (the last error is returned) or the context ends. attempt is told
// whether this is the first try: only the first may read fast (a
// serializable read that a failed guard then corrects).
func RetryOnConflict(ctx context.Context, attempt func(first bool) error) error {
	for i := 0; ; i++ {
		err := attempt(i == 0)
		if !errors.Is(err, ErrConflict) || i >= conflictRetries {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Duration(i+1) * conflictRetryStep)
	}
}
