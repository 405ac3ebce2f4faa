package delivery

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/store"
)

// phases maps the wire phases to the stored ones.
var phases = map[deliveryv1.Phase]storagev1.AddonPhase{
	deliveryv1.Phase_PHASE_APPLIED: storagev1.AddonPhase_ADDON_PHASE_APPLIED,
	deliveryv1.Phase_PHASE_READY:   storagev1.AddonPhase_ADDON_PHASE_READY,
	deliveryv1.Phase_PHASE_FAILED:  storagev1.AddonPhase_ADDON_PHASE_FAILED,
	deliveryv1.Phase_PHASE_REMOVED: storagev1.AddonPhase_ADDON_PHASE_REMOVED,
}

// Why a report changed nothing, beyond the add-on lifecycle's reasons.
const (
	rejectNotExecutor = "not_executor"
	rejectDraining    = "draining"
	rejectInvalid     = "invalid"
)

// report applies one report if this stream's instance is the executor at
// the report's epoch — checked again, with the add-on's incarnation and
// generation, in the transaction that applies it — and answers it; a
// report from a stale epoch or a standby is also answered with a Fence.
//
// A report naming an epoch later than any assigned is a confused agent:
// it is fenced at that epoch (which covers the one it holds) and the
// stream ends (the returned error), so it connects again and hears its
// assignment afresh — answering it with a Fence alone would stop it for
// good while it stays the executor.
func (a *agentStream) report(ctx context.Context, r *deliveryv1.Report) ([]*deliveryv1.HostMessage, error) {
	result := &deliveryv1.ReportResult{Addon: r.GetAddon(), Generation: r.GetGeneration()}
	answer := func(reason string, fenced bool) []*deliveryv1.HostMessage {
		result.Reason = reason
		out := []*deliveryv1.HostMessage{{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: result}}}
		if reason != addon.ReportAccepted {
			a.s.rejected.WithLabelValues(reason).Inc()
		}
		if fenced {
			out = append(out, fence(r.GetEpoch(), "reports from epoch "+fmt.Sprint(r.GetEpoch())+" are no longer accepted: "+reason))
		}
		return out
	}
	sn := a.snapshotOfSession(ctx)
	if sn == nil {
		// No view of the cluster that includes this stream's session (etcd
		// reads failing): nothing can be judged, and a Fence alone would
		// leave a fenced executor in place. End the stream.
		return answer("unavailable", false), status.Error(codes.Unavailable, "no current view of the cluster; connect again")
	}
	if reason, violation := a.judgeEpoch(sn, r.GetEpoch()); reason != "" {
		return answer(reason, true), violation
	}
	issues := make([]*storagev1.AddonIssue, 0, len(r.GetIssues()))
	for _, is := range r.GetIssues() {
		issues = append(issues, &storagev1.AddonIssue{Code: is.GetCode(), Message: is.GetMessage(), ResourceIds: is.GetResourceIds()})
	}
	executorKey, executorRev := store.ExecutorKey(a.uid), sn.executorRev
	apply := func(executorRev int64) (addon.ReportResult, error) {
		return a.s.addons.ApplyReport(ctx, addon.Report{
			ClusterUID: a.uid, AddonName: r.GetAddon(), AddonUID: r.GetAddonUid(), Generation: r.GetGeneration(),
			Phase: phases[r.GetPhase()], Issues: issues, ExecutorEpoch: r.GetEpoch(), InstanceID: a.instance,
		}, func(txn *store.Txn) {
			// The fence: the executor record is still the one that
			// named this instance at this epoch.
			txn.RequireModRevision(executorKey, executorRev)
		})
	}
	res, err := apply(executorRev)
	if err == nil && res.Reason == addon.ReportStaleEpoch {
		// The fence compares the executor record's revision in the
		// snapshot. A record written since that still names this
		// instance at this epoch, not draining, has not fenced it: judge
		// again against the record as stored, once.
		cur := &storagev1.ExecutorRecord{}
		curRev, gerr := a.s.store.Get(ctx, executorKey, cur)
		switch {
		case gerr == nil && curRev != executorRev && cur.GetInstanceId() == a.instance && cur.GetEpoch() == r.GetEpoch() && !cur.GetDraining():
			a.s.log.WarnContext(ctx, "report fence: the executor record was rewritten at the same epoch",
				"cluster_uid", a.uid, "instance", a.instance, "epoch", r.GetEpoch(), "snapshot_revision", sn.revision,
				"executor_revision_seen", executorRev, "executor_revision_now", curRev, "executor_reason", cur.GetReason(),
				"executor_since", cur.GetSince().AsTime(), "fence_acked", cur.GetFenceAcked())
			res, err = apply(curRev)
		case gerr == nil && curRev == executorRev:
			// The fence held, yet the report was refused for it: the
			// add-on's transaction failed on something else. Never
			// expected; said, so that it is found if it happens.
			a.s.log.WarnContext(ctx, "report refused as stale_epoch, yet the executor record is unchanged",
				"cluster_uid", a.uid, "instance", a.instance, "addon", r.GetAddon(), "generation", r.GetGeneration(),
				"epoch", r.GetEpoch(), "snapshot_revision", sn.revision, "executor_revision", executorRev)
		}
	}
	var apiErr *errdefs.Error
	switch {
	case errors.As(err, &apiErr):
		return answer(rejectInvalid, false), nil
	case err != nil:
		a.s.log.WarnContext(ctx, "report not applied", "cluster_uid", a.uid, "addon", r.GetAddon(), "err", err)
		return answer("unavailable", false), nil
	}
	result.Accepted = res.Accepted
	return answer(res.Reason, res.Reason == addon.ReportStaleEpoch), nil
}

// judgeEpoch decides whether what this stream's agent sent at epoch may
// change anything: "" when it is the executor at that epoch and not
// draining, else the reason it is refused and fenced. An epoch later than
// any assigned is a confused agent: the violation ends its stream.
func (a *agentStream) judgeEpoch(sn *snapshot, epoch int64) (string, error) {
	switch {
	case epoch > sn.executor.GetEpoch():
		return rejectInvalid, status.Errorf(codes.FailedPrecondition,
			"a message for epoch %d, which was never assigned (the executor's epoch is %d); connect again", epoch, sn.executor.GetEpoch())
	case sn.executor.GetInstanceId() != a.instance:
		return rejectNotExecutor, nil
	case epoch != sn.executor.GetEpoch():
		return addon.ReportStaleEpoch, nil
	case sn.executor.GetDraining():
		return rejectDraining, nil
	}
	return "", nil
}

// snapshotOfSession returns the watch's snapshot once it includes this
// stream's session (nil if none comes within fence-after): a report
// re-sent at once by a reconnecting executor must be judged against a
// view at least as new as the assignment it names, not a lagging one
// that would reject it and fence the executor of the current epoch.
func (a *agentStream) snapshotOfSession(ctx context.Context) *snapshot {
	ctx, cancel := context.WithTimeout(ctx, a.s.cfg.FenceAfter)
	defer cancel()
	return a.watch.snapshotAtLeast(ctx, a.session.revision)
}
