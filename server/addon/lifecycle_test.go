package addon

import (
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// TestApplyReportTable walks the lifecycle table of docs/architecture.md, "Add-ons", for
// reports of the current generation.
func TestApplyReportTable(t *testing.T) {
	const (
		creating     = storagev1.AddonStatus_ADDON_STATUS_CREATING
		active       = storagev1.AddonStatus_ADDON_STATUS_ACTIVE
		createFailed = storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED
		updating     = storagev1.AddonStatus_ADDON_STATUS_UPDATING
		deleting     = storagev1.AddonStatus_ADDON_STATUS_DELETING
		deleteFailed = storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED
		degraded     = storagev1.AddonStatus_ADDON_STATUS_DEGRADED
		updateFailed = storagev1.AddonStatus_ADDON_STATUS_UPDATE_FAILED

		applied = storagev1.AddonPhase_ADDON_PHASE_APPLIED
		ready   = storagev1.AddonPhase_ADDON_PHASE_READY
		failed  = storagev1.AddonPhase_ADDON_PHASE_FAILED
		removed = storagev1.AddonPhase_ADDON_PHASE_REMOVED
	)
	issue := []*storagev1.AddonIssue{{Code: "InsufficientNumberOfReplicas", Message: "0/2 ready"}}
	tests := []struct {
		name       string
		from       storagev1.AddonStatus
		phase      storagev1.AddonPhase
		issues     []*storagev1.AddonIssue
		want       storagev1.AddonStatus
		wantUpdate outcome
		wantErase  bool
		wantIssues int
	}{
		{name: "ready settles creating", from: creating, phase: ready, want: active},
		{name: "ready settles updating and its update", from: updating, phase: ready, want: active, wantUpdate: outcomeSuccessful},
		{name: "ready heals degraded", from: degraded, phase: ready, want: active},
		{name: "ready with issues degrades active", from: active, phase: ready, issues: issue, want: degraded, wantIssues: 1},
		{name: "ready with issues while creating is degraded", from: creating, phase: ready, issues: issue, want: degraded, wantIssues: 1},
		{name: "ready does not lift create failed", from: createFailed, phase: ready, want: createFailed},
		{name: "ready does not lift update failed", from: updateFailed, phase: ready, want: updateFailed},
		{name: "ready does not end deleting", from: deleting, phase: ready, want: deleting},
		{name: "failed while creating", from: creating, phase: failed, issues: issue, want: createFailed, wantIssues: 1},
		{name: "failed while updating fails the update", from: updating, phase: failed, want: updateFailed, wantUpdate: outcomeFailed, wantIssues: 1},
		{name: "failed while deleting", from: deleting, phase: failed, want: deleteFailed, wantIssues: 1},
		{name: "failed after ready is a health issue", from: active, phase: failed, issues: issue, want: degraded, wantIssues: 1},
		{name: "failed keeps delete failed", from: deleteFailed, phase: failed, want: deleteFailed},
		{name: "applied changes no status", from: creating, phase: applied, want: creating},
		{name: "removed erases deleting", from: deleting, phase: removed, want: deleting, wantErase: true},
		{name: "removed while active is a health issue", from: active, phase: removed, want: degraded, wantIssues: 1},
		{name: "removed while creating changes no status", from: creating, phase: removed, want: creating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &storagev1.AddonRecord{Generation: 3, Status: tt.from}
			tr := applyReport(rec, &storagev1.AddonObserved{Generation: 3, Phase: tt.phase, Issues: tt.issues})
			if rec.GetStatus() != tt.want {
				t.Errorf("status = %s, want %s", StatusName(rec.GetStatus()), StatusName(tt.want))
			}
			if tr.update != tt.wantUpdate {
				t.Errorf("update outcome = %d, want %d", tr.update, tt.wantUpdate)
			}
			if tr.erase != tt.wantErase {
				t.Errorf("erase = %v, want %v", tr.erase, tt.wantErase)
			}
			if tt.from != tt.want && len(rec.GetIssues()) != tt.wantIssues {
				t.Errorf("issues = %v, want %d", rec.GetIssues(), tt.wantIssues)
			}
			if rec.GetObserved().GetPhase() != tt.phase {
				t.Errorf("observed phase = %s, want %s", rec.GetObserved().GetPhase(), tt.phase)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name       string
		from, want storagev1.AddonStatus
		wantUpdate outcome
	}{
		{"creating", storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED, outcomeNone},
		{"updating", storagev1.AddonStatus_ADDON_STATUS_UPDATING, storagev1.AddonStatus_ADDON_STATUS_UPDATE_FAILED, outcomeFailed},
		{"deleting", storagev1.AddonStatus_ADDON_STATUS_DELETING, storagev1.AddonStatus_ADDON_STATUS_DELETE_FAILED, outcomeNone},
		{"active is not in flight", storagev1.AddonStatus_ADDON_STATUS_ACTIVE, storagev1.AddonStatus_ADDON_STATUS_ACTIVE, outcomeNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &storagev1.AddonRecord{Generation: 2, Status: tt.from}
			tr := expire(rec, now)
			if rec.GetStatus() != tt.want || tr.update != tt.wantUpdate {
				t.Fatalf("expire: status %s update %d, want %s %d", StatusName(rec.GetStatus()), tr.update, StatusName(tt.want), tt.wantUpdate)
			}
			if tt.from != tt.want {
				if len(rec.GetIssues()) != 1 || rec.GetIssues()[0].GetCode() != "ClusterUnreachable" {
					t.Errorf("issues = %v, want one ClusterUnreachable", rec.GetIssues())
				}
			}
		})
	}
}

func TestSameObservationIgnoresOnlyTime(t *testing.T) {
	rec := &storagev1.AddonRecord{Observed: &storagev1.AddonObserved{Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}}
	same := &storagev1.AddonObserved{Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}
	other := &storagev1.AddonObserved{Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY, ExecutorEpoch: 2}
	if !sameObservation(rec, same) {
		t.Error("an identical re-sent observation was not recognised")
	}
	if sameObservation(rec, other) {
		t.Error("an observation from another epoch was taken as the same")
	}
}

func TestValidateReport(t *testing.T) {
	ok := Report{ClusterUID: "c", AddonName: "coredns", AddonUID: "u", Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}
	tests := []struct {
		name    string
		mutate  func(r *Report)
		wantErr bool
	}{
		{"valid", func(*Report) {}, false},
		{"aws issue code", func(r *Report) {
			r.Issues = []*storagev1.AddonIssue{{Code: "InsufficientNumberOfReplicas", Message: "1/2"}}
		}, false},
		{"unknown issue code", func(r *Report) { r.Issues = []*storagev1.AddonIssue{{Code: "Oops"}} }, true},
		{"no phase", func(r *Report) { r.Phase = storagev1.AddonPhase_ADDON_PHASE_UNSPECIFIED }, true},
		{"generation zero", func(r *Report) { r.Generation = 0 }, true},
		{"no incarnation", func(r *Report) { r.AddonUID = "" }, true},
		{"bad name", func(r *Report) { r.AddonName = "a/b" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mutate(&r)
			if err := validateReport(r); (err != nil) != tt.wantErr {
				t.Fatalf("validateReport = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}
