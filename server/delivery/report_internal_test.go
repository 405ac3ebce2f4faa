package delivery

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// TestReportFenceJudgedOnTheStoredExecutor: a report's fence compares the
// executor record's revision in the stream's snapshot. When the record was
// written again after that snapshot, the report is judged on the record as
// stored: still this instance at this epoch and not draining, it is
// applied; draining, or a later epoch, it is refused and fenced.
func TestReportFenceJudgedOnTheStoredExecutor(t *testing.T) {
	const uid, instance = "uid-fence", "i-a"
	for _, tc := range []struct {
		name       string
		rewrite    *storagev1.ExecutorRecord // written after the snapshot; nil: none
		wantReason string
	}{
		{name: "unchanged", wantReason: addon.ReportAccepted},
		{name: "written again, same instance and epoch", rewrite: &storagev1.ExecutorRecord{InstanceId: instance, Epoch: 1, Reason: "written again"},
			wantReason: addon.ReportAccepted},
		{name: "draining", rewrite: &storagev1.ExecutorRecord{InstanceId: instance, Epoch: 1, Draining: true},
			wantReason: addon.ReportStaleEpoch},
		{name: "the next epoch", rewrite: &storagev1.ExecutorRecord{InstanceId: instance, Epoch: 2},
			wantReason: addon.ReportStaleEpoch},
		{name: "another instance", rewrite: &storagev1.ExecutorRecord{InstanceId: "i-b", Epoch: 2},
			wantReason: addon.ReportStaleEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			addons, err := addon.NewService(st, nil, nil, addon.Config{Region: "us-west-2", IdempotencyTTL: time.Hour,
				CreateTimeout: time.Hour, UpdateTimeout: time.Hour, DeleteTimeout: time.Hour, SweepInterval: time.Hour},
				prometheus.NewRegistry(), log)
			if err != nil {
				t.Fatal(err)
			}
			s := &Service{store: st, client: st.Client(), addons: addons, cfg: reviewTiming, log: log, clock: newMonoClock(),
				rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected"}, []string{"reason"})}

			executorKey := store.ExecutorKey(uid)
			executor := &storagev1.ExecutorRecord{InstanceId: instance, Epoch: 1, Reason: "first executor"}
			res, err := st.Commit(ctx, store.NewTxn().Create(executorKey, executor).Create(store.AddonKey(uid, "vpc-cni"),
				&storagev1.AddonRecord{Uid: "addon-uid", Name: "vpc-cni", ClusterUid: uid, Generation: 1,
					Status: storagev1.AddonStatus_ADDON_STATUS_CREATING}))
			if err != nil {
				t.Fatal(err)
			}
			cluster := &storagev1.ClusterRecord{Uid: uid, Members: []*storagev1.ClusterMember{{InstanceId: instance}}}
			w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
			w.state = &snapshot{revision: res.Revision, cluster: cluster, executor: executor, executorRev: res.Revision,
				members: map[string]bool{instance: true}}
			a := &agentStream{s: s, watch: w, uid: uid, instance: instance, session: &session{revision: res.Revision}}
			if tc.rewrite != nil {
				if _, err := st.Commit(ctx, store.NewTxn().Put(executorKey, tc.rewrite)); err != nil {
					t.Fatal(err)
				}
			}

			out, err := a.report(ctx, &deliveryv1.Report{Epoch: 1, Addon: "vpc-cni", AddonUid: "addon-uid", Generation: 1,
				Phase: deliveryv1.Phase_PHASE_READY})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) == 0 || out[0].GetReportResult().GetReason() != tc.wantReason {
				t.Fatalf("answer %v, want reason %q", out, tc.wantReason)
			}
			fenced := len(out) == 2 && out[1].GetFence().GetEpoch() == 1
			if want := tc.wantReason != addon.ReportAccepted; fenced != want || (!want && len(out) != 1) {
				t.Errorf("answer %v: fenced %v, want %v", out, fenced, want)
			}
			rec := &storagev1.AddonRecord{}
			if _, err := st.Get(ctx, store.AddonKey(uid, "vpc-cni"), rec); err != nil {
				t.Fatal(err)
			}
			applied := rec.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_ACTIVE
			if want := tc.wantReason == addon.ReportAccepted; applied != want {
				t.Errorf("add-on %s after the report, applied %v, want %v", rec.GetStatus(), applied, want)
			}
		})
	}
}
