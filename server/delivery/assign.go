package delivery

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// assign makes a live member the executor when the cluster has none, or
// when the executor's session has expired: break before make. The
// transaction checks what the decision rests on — the executor record
// read, the old executor's session absent (or, for an executor that came
// back, present), the candidate's present, the cluster record (status,
// members) unchanged — so of all replicas trying at once exactly one wins,
// and never while the old executor's session lives. It reports whether it
// committed.
//
// An executor whose session lapsed and that connected again before a
// successor was assigned (no replica with a watch of the cluster saw the
// gap, or nobody else could take over) has a session again, but a new
// one: its key was created after the executor record was written. Its
// session expired all the same (docs/delivery-protocol.md, rule 6), so it
// is assigned again at the next epoch: reports made under the lapsed
// session, still queued anywhere, carry the old epoch and are refused,
// whichever replica saw what.
func (s *Service) assign(ctx context.Context, sn *snapshot) (bool, error) {
	e := sn.executor
	acked := e.GetDraining() && e.GetFenceAcked()
	// A record naming no instance is a cluster's fenced executor (it was
	// FAILED or DELETING): nobody holds the epoch, which goes on from it.
	vacant := e != nil && e.GetInstanceId() == ""
	_, live := sn.sessions[e.GetInstanceId()]
	// Only assignments write a record that is not draining, and an
	// assignment requires its instance's session: so a session key
	// created after such a record was deleted in between, and came back.
	// (A draining executor's record was written since; it acknowledges
	// the drain's fence on its new stream, or its session runs out.) A
	// create revision only grows: once true, this stays true.
	lapsed := e != nil && !vacant && live && !e.GetDraining() && sn.member(e.GetInstanceId()) &&
		sn.sessionsCreated[e.GetInstanceId()] > sn.executorRev
	if e != nil && !vacant && live && !acked && !lapsed {
		// Live, and not known to have stopped (a removed member's
		// session runs out first; a draining executor acknowledges).
		return false, nil
	}
	var candidates []string
	for instance := range sn.sessions {
		// A drained executor is passed over while anyone else can take
		// over.
		if sn.member(instance) && (!e.GetDraining() || instance != e.GetInstanceId()) {
			candidates = append(candidates, instance)
		}
	}
	if lapsed {
		// It keeps the role, at the next epoch: its new session lives,
		// so no other member may be assigned (break before make).
		candidates = []string{e.GetInstanceId()}
	}
	if len(candidates) == 0 {
		// A drained executor with nobody to take over stays fenced: the
		// operator asked for it to stop.
		return false, nil
	}
	slices.Sort(candidates)
	next := &storagev1.ExecutorRecord{InstanceId: candidates[0], Since: timestamppb.Now(), Reason: "first executor"}
	uid := sn.cluster.GetUid()
	txn := store.NewTxn().
		RequireExists(store.SessionKey(uid, next.GetInstanceId())).
		RequireModRevision(store.ClusterKey(sn.cluster.GetAccountId(), sn.cluster.GetName()), sn.clusterRev)
	if e == nil {
		txn.RequireAbsent(store.ExecutorKey(uid))
		next.Epoch = 1
	} else {
		// Break before make: the old executor's session has expired, or
		// it acknowledged the drain's fence (the guard on the record's
		// revision checks that acknowledgement still stands).
		txn.RequireModRevision(store.ExecutorKey(uid), sn.executorRev)
		next.Epoch = e.GetEpoch() + 1
		switch {
		case vacant:
			next.Reason = "first executor after " + e.GetReason()
		case acked:
			next.Reason = e.GetInstanceId() + " was drained and acknowledged the fence"
		case lapsed:
			// The guard on the candidate's session (its own) is the one
			// needed: a key that lapsed again since the read is either
			// absent (no commit) or newer still.
			next.Reason = "session of " + e.GetInstanceId() + " expired; it connected again with a new one"
		case !sn.member(e.GetInstanceId()):
			// Its session ran out, or it acknowledged the fence of its
			// removal (which removes the session).
			txn.RequireAbsent(store.SessionKey(uid, e.GetInstanceId()))
			next.Reason = e.GetInstanceId() + " was removed from the cluster"
		default:
			txn.RequireAbsent(store.SessionKey(uid, e.GetInstanceId()))
			next.Reason = "session of " + e.GetInstanceId() + " expired"
		}
	}
	txn.Put(store.ExecutorKey(uid), next)
	if _, err := s.store.Commit(ctx, txn); err != nil {
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
			// Another replica decided, or something moved: the watch
			// brings it.
			return false, nil
		}
		return false, err
	}
	s.assignments.Inc()
	s.log.InfoContext(ctx, "executor assigned", "cluster_uid", uid, "instance", next.GetInstanceId(),
		"epoch", next.GetEpoch(), "reason", next.GetReason())
	return true, nil
}
