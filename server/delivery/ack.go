package delivery

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// acked records the desired set the agent applied in its session record
// (on the session's lease), for the status RPC, and for an executor in
// the cluster's metrics.
func (a *agentStream) acked(ctx context.Context, ack *deliveryv1.Ack) error {
	set := a.lastSet.Load()
	if set == nil || set.GetNonce() != ack.GetNonce() || set.GetVersion() != ack.GetVersion() {
		// Not the last set this stream sent: the Ack of the one after it
		// is on its way, or it is not an Ack of anything sent here.
		return nil
	}
	a.applied.Store(set)
	if sn, _ := a.watch.current(); sn != nil && a.executor.Load() {
		a.s.observeExecutor(a.watch, a, set, sn.desired.GetDigest())
	}
	// Only over this stream's own record, on the lease it is on: a newer
	// stream of the instance owns the key (and its lease) now, and an Ack
	// late on the old stream must not move the session back onto the old
	// lease. Update keeps the record on its lease.
	rev, err := store.Update(ctx, a.s.store, a.session.key, &storagev1.AgentSessionRecord{},
		func(rec *storagev1.AgentSessionRecord, _ *store.Txn) error {
			if !a.session.owns(rec) {
				return errNotOwnSession
			}
			rec.AckedVersion, rec.AckedDigest, rec.AckedAt = set.GetVersion(), set.GetDigest(), timestamppb.Now()
			return nil
		})
	switch {
	case err == nil:
		// The sender need not ask etcd whose the session is when it
		// sees the key move to this revision: it is this write.
		a.ownWrite.Store(rev)
		return nil
	case errors.Is(err, store.ErrNotFound), errors.Is(err, errNotOwnSession):
		return nil // expired or replaced: nothing to record
	case errors.Is(err, store.ErrConflict):
		// Every attempt lost the race: the next Ack records its set.
		return nil
	}
	return err
}

// leave removes the session of a removed member that acknowledged its
// fence: it has stopped applying, so the executor it may have been can be
// succeeded at once (rule 5). Only this stream's own record is removed.
func (a *agentStream) leave(ctx context.Context) error {
	for {
		rec, kv, err := a.s.ownSession(ctx, a.session)
		if err != nil {
			return err
		}
		if rec != nil {
			_, err = a.s.store.Commit(ctx, store.NewTxn().RequireModRevision(a.session.key, kv.ModRevision).Remove(a.session.key))
			if errors.Is(err, store.ErrConflict) {
				continue // written since: read again
			}
			if err != nil {
				return err
			}
		}
		a.leaving.Store(0)
		close(a.left)
		return nil
	}
}

// fenceAcked records that a draining executor stopped for its epoch, in a
// transaction guarded by the executor record: the watch then assigns a
// successor without waiting for the session to expire.
func (a *agentStream) fenceAcked(ctx context.Context, epoch int64) error {
	sn, _ := a.watch.current()
	if !a.acknowledges(sn.executorOrNil(), epoch) {
		return nil
	}
	// Decided again on the record as stored: the watch's may be behind.
	_, err := store.Update(ctx, a.s.store, store.ExecutorKey(a.uid), &storagev1.ExecutorRecord{},
		func(e *storagev1.ExecutorRecord, _ *store.Txn) error {
			if a.acknowledges(e, epoch) {
				e.FenceAcked = true
			}
			return nil
		})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		// No executor any more, or every attempt lost the race: the
		// watch brings what replaced it.
		return nil
	}
	return err
}

// acknowledges reports whether a fence acknowledgement of this stream's
// instance for epoch is news to executor record e: e names the instance
// at that epoch, draining, and not yet acknowledged.
func (a *agentStream) acknowledges(e *storagev1.ExecutorRecord, epoch int64) bool {
	return e != nil && e.GetInstanceId() == a.instance && e.GetEpoch() == epoch && e.GetDraining() && !e.GetFenceAcked()
}
