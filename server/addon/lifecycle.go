package addon

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// The lifecycle table of docs/architecture.md, "Add-ons", as pure functions over a record, so
// that every transition is in one place and table-tested.

// Issue codes used by saltbush itself.
const (
	issueClusterUnreachable  = "ClusterUnreachable"
	issueInternalFailure     = "InternalFailure"
	issueK8sResourceNotFound = "K8sResourceNotFound"
)

// inFlight reports whether st waits for a report (and has a deadline).
func inFlight(st storagev1.AddonStatus) bool {
	switch st {
	case storagev1.AddonStatus_ADDON_STATUS_CREATING,
		storagev1.AddonStatus_ADDON_STATUS_UPDATING,
		storagev1.AddonStatus_ADDON_STATUS_DELETING:
		return true
	}
	return false
}

// failedStatus is the *_FAILED status of an in-flight status.
func failedStatus(st storagev1.AddonStatus) storagev1.AddonStatus {
	switch st {
	case storagev1.AddonStatus_ADDON_STATUS_CREATING:
		return storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED
	case storagev1.AddonStatus_ADDON_STATUS_UPDATING:
		return storagev1.AddonStatus_ADDON_STATUS_UPDATE_FAILED
	case storagev1.AddonStatus_ADDON_STATUS_DELETING:
		return storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED
	}
	return st
}

// outcome is what a report or a deadline does to the add-on's update.
type outcome int

const (
	outcomeNone outcome = iota
	outcomeSuccessful
	outcomeFailed
)

// transition is the result of applying a report to a record.
type transition struct {
	// erase: the record goes (REMOVED observed while DELETING).
	erase bool
	// update: what happens to the current generation's update record.
	update outcome
}

// applyReport applies a report for the record's current generation (the
// caller has checked incarnation and generation) to rec in place.
func applyReport(rec *storagev1.AddonRecord, obs *storagev1.AddonObserved) transition {
	rec.Observed = obs
	st := rec.GetStatus()
	issues := obs.GetIssues()
	var tr transition
	switch obs.GetPhase() {
	case storagev1.AddonPhase_ADDON_PHASE_READY:
		switch st {
		case storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_UPDATING,
			storagev1.AddonStatus_ADDON_STATUS_ACTIVE, storagev1.AddonStatus_ADDON_STATUS_DEGRADED:
			if st == storagev1.AddonStatus_ADDON_STATUS_UPDATING {
				tr.update = outcomeSuccessful
			}
			// Ready with health issues is DEGRADED; without, ACTIVE.
			if len(issues) > 0 {
				rec.Status = storagev1.AddonStatus_ADDON_STATUS_DEGRADED
			} else {
				rec.Status = storagev1.AddonStatus_ADDON_STATUS_ACTIVE
			}
			rec.Issues = cloneIssues(issues)
			rec.Deadline = nil
		}
		// *_FAILED is terminal for its generation; DELETING waits for
		// REMOVED. Neither moves on READY.
	case storagev1.AddonPhase_ADDON_PHASE_FAILED:
		if len(issues) == 0 {
			issues = []*storagev1.AddonIssue{{Code: issueInternalFailure, Message: "The add-on failed to apply."}}
		}
		switch st {
		case storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_UPDATING,
			storagev1.AddonStatus_ADDON_STATUS_DELETING:
			if st == storagev1.AddonStatus_ADDON_STATUS_UPDATING {
				tr.update = outcomeFailed
			}
			rec.Status = failedStatus(st)
			rec.Issues = cloneIssues(issues)
			rec.Deadline = nil
		case storagev1.AddonStatus_ADDON_STATUS_ACTIVE, storagev1.AddonStatus_ADDON_STATUS_DEGRADED:
			// A generation that was ready broke: a health issue.
			rec.Status = storagev1.AddonStatus_ADDON_STATUS_DEGRADED
			rec.Issues = cloneIssues(issues)
		}
	case storagev1.AddonPhase_ADDON_PHASE_REMOVED:
		switch st {
		case storagev1.AddonStatus_ADDON_STATUS_DELETING:
			tr.erase = true
		case storagev1.AddonStatus_ADDON_STATUS_ACTIVE, storagev1.AddonStatus_ADDON_STATUS_DEGRADED:
			// The objects of a generation that was ready are gone, and
			// nothing asked for that: a health issue, not a removal.
			if len(issues) == 0 {
				issues = []*storagev1.AddonIssue{{Code: issueK8sResourceNotFound, Message: "The add-on's Kubernetes objects are gone from the cluster."}}
			}
			rec.Status = storagev1.AddonStatus_ADDON_STATUS_DEGRADED
			rec.Issues = cloneIssues(issues)
		}
	}
	return tr
}

// expire gives up an in-flight generation whose deadline passed.
func expire(rec *storagev1.AddonRecord, now time.Time) transition {
	st := rec.GetStatus()
	if !inFlight(st) {
		return transition{}
	}
	var tr transition
	if st == storagev1.AddonStatus_ADDON_STATUS_UPDATING {
		tr.update = outcomeFailed
	}
	rec.Status = failedStatus(st)
	rec.Issues = []*storagev1.AddonIssue{{
		Code:    issueClusterUnreachable,
		Message: "No report for generation " + strconv.FormatInt(rec.GetGeneration(), 10) + " arrived before its deadline; the cluster's agent is unreachable.",
	}}
	rec.Deadline = nil
	rec.ModifiedAt = timestamppb.New(now)
	return tr
}

// settleUpdate moves an update record to the outcome of its generation.
func settleUpdate(u *storagev1.UpdateRecord, o outcome, issues []*storagev1.AddonIssue, now time.Time) {
	switch o {
	case outcomeSuccessful:
		u.Status = storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL
	case outcomeFailed:
		u.Status = storagev1.UpdateStatus_UPDATE_STATUS_FAILED
		for _, i := range issues {
			u.Errors = append(u.Errors, &storagev1.UpdateError{
				ErrorCode: i.GetCode(), ErrorMessage: i.GetMessage(), ResourceIds: i.GetResourceIds(),
			})
		}
	default:
		return
	}
	u.ModifiedAt = timestamppb.New(now)
}

// sameObservation reports whether obs repeats what rec already holds, so
// the level-triggered re-sends of an agent cost no write.
func sameObservation(rec *storagev1.AddonRecord, obs *storagev1.AddonObserved) bool {
	prev := rec.GetObserved()
	if prev == nil {
		return false
	}
	a, b := proto.Clone(prev).(*storagev1.AddonObserved), proto.Clone(obs).(*storagev1.AddonObserved)
	a.ObservedAt, b.ObservedAt = nil, nil
	return proto.Equal(a, b)
}

func cloneIssues(in []*storagev1.AddonIssue) []*storagev1.AddonIssue {
	out := make([]*storagev1.AddonIssue, 0, len(in))
	for _, i := range in {
		out = append(out, proto.Clone(i).(*storagev1.AddonIssue))
	}
	return out
}
