// Package store is saltbush's etcd layer: record codecs, exclusive creates,
// read-modify-CAS updates, multi-op transactions, paged listing with signed
// continuation tokens, and resumable watches. Every key it takes is relative
// to the configured root prefix (default /saltbush/); keys.go says where each
// resource lives.
//
// Errors are mapped to the sentinels in store.go once, here; callers wrap
// them with resource names and never look at etcd's own errors.
//
// # Which write style for which write
//
// There are three ways to write, and each write has exactly one right one.
//
// Read-modify-write of a record — read record R, change it, write it back
// only if nobody wrote R in between — goes through GuaranteedUpdate (Update
// for a typed record). Never read R and commit Txn.Update(R, v, rev) or
// Txn.RequireModRevision(R, rev) by hand:
//
//   - GuaranteedUpdate retries a lost race on the fresh value the failed
//     transaction's Else branch returned, without another read, with a
//     pause that grows with every race lost, for as long as the caller's
//     deadline (or Options.ContentionTimeout) allows; a hand-written loop
//     reads again and tends to get the bounds, the backoff or the final
//     error wrong.
//   - Guards travel with the transaction: the UpdateFunc may add compares
//     (a fencing compare, RequireExists of a record the change refers to)
//     and writes (an update log entry, an idempotency key) to txn, and they
//     commit together with R or not at all. A guard that fails while R is
//     unchanged is returned as ErrConflict (ErrExists for a Create), not
//     retried: the guard is what stopped the write.
//   - The UpdateFunc decides from cur alone and has no side effects: it runs
//     again, on fresh state, after every lost race. Anything that must
//     happen once (a key generated, a log line, a metric) happens before
//     the call or after it returns; a refusal is an error returned from the
//     UpdateFunc, which ends the update with that error.
//   - The record stays on the lease it is on: GuaranteedUpdate changes a
//     record's value, never its lifetime.
//
// Store.Commit of a Txn built by hand is for writes that read nothing they
// modify:
//
//   - exclusive creates (Txn.Create, Store.Create): ErrExists is the answer,
//     and a retry would only find the key again;
//   - guarded deletes (Txn.Delete of the revision read, RequireExists and
//     Remove): the record is removed, not changed;
//   - blind writes of one or many keys (Put, PutWithLease, DeleteRange),
//     whether or not guarded by records they do not change (an account that
//     must exist, the cluster record's revision at admission);
//   - moving a record, as read, onto another lease (an agent session that
//     outlives its stream): GuaranteedUpdate keeps leases, so a lease move
//     is a guarded Put of the unchanged value.
//
// A create-or-update (a policy put by name) is both: Update, and on
// ErrNotFound an exclusive Create; on ErrExists (made meanwhile) Update
// again.
//
// RetryOnConflict is for a write guarded by records read outside the
// written record: the attempt re-reads all of them (the cluster a refresh,
// an add-on or an access entry belongs to) and commits one transaction
// guarded by their revisions; a lost race on any of them re-runs the whole
// attempt. It is not for a write that reads only the record it writes:
// that is GuaranteedUpdate's. A watch-driven reconciler whose decision is
// guarded the same way (server/delivery's executor assignment) commits it
// once with Commit instead: when it loses, the watch brings the state that
// beat it and it decides again.
package store
