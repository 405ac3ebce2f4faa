package addon

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// newTestService runs the add-on service on a real embedded etcd.
func newTestService(t *testing.T) (*Service, *store.Store) {
	t.Helper()
	st := storetest.New(t)
	clusters, err := cluster.NewService(st, cluster.DefaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(st, clusters, cat, DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// TestSweepCarriesTheElectionFence: a sweep whose fence key is gone (a
// leader that lost its election) writes nothing; with a held fence key the
// same sweep expires the overdue add-on, drops the due hint of an add-on
// that is gone, and leaves the hint that is not due yet.
func TestSweepCarriesTheElectionFence(t *testing.T) {
	svc, st := newTestService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	clusterUID := uuid.NewString()
	key := store.AddonKey(clusterUID, "coredns")
	rec := &storagev1.AddonRecord{
		ClusterUid: clusterUID, Name: "coredns", Uid: uuid.NewString(), Generation: 1,
		Status:   storagev1.AddonStatus_ADDON_STATUS_CREATING,
		Spec:     &storagev1.AddonSpec{Version: "v1"},
		Deadline: timestamppb.New(time.Now().Add(-time.Minute)),
	}
	txn := store.NewTxn().Create(key, rec)
	hintDeadline(txn, rec)
	if _, err := st.Commit(ctx, txn); err != nil {
		t.Fatal(err)
	}
	// A due hint of an add-on that is gone, and one not yet due.
	gone := &storagev1.AddonRecord{ClusterUid: clusterUID, Name: "kube-proxy", Generation: 1, Deadline: rec.GetDeadline()}
	later := &storagev1.AddonRecord{ClusterUid: clusterUID, Name: "vpc-cni", Generation: 1, Deadline: timestamppb.New(time.Now().Add(time.Hour))}
	hints := store.NewTxn()
	hintDeadline(hints, gone)
	hintDeadline(hints, later)
	if _, err := st.Commit(ctx, hints); err != nil {
		t.Fatal(err)
	}
	countHints := func() int {
		page, err := st.List(ctx, store.ListOptions{Prefix: store.AddonDeadlinesPrefix, Scope: "test", KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Items)
	}
	fenceKey := electionPrefix + "/test-leader"
	if _, err := st.Create(ctx, fenceKey, &storagev1.StoreMeta{}); err != nil {
		t.Fatal(err)
	}
	got := &storagev1.StoreMeta{}
	fenceRev, err := st.Get(ctx, fenceKey, got)
	if err != nil {
		t.Fatal(err)
	}

	stale := func(txn *store.Txn) { txn.RequireModRevision(fenceKey, fenceRev+1000) }
	n, err := svc.sweep(ctx, stale)
	if err != nil {
		t.Fatalf("sweep with a stale fence: %v", err)
	}
	cur := &storagev1.AddonRecord{}
	if _, err := st.Get(ctx, key, cur); err != nil {
		t.Fatal(err)
	}
	if n != 0 || cur.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_CREATING {
		t.Fatalf("a fenced-off sweeper expired %d add-ons (status now %s)", n, StatusName(cur.GetStatus()))
	}
	if n := countHints(); n != 3 {
		t.Fatalf("a fenced-off sweeper changed the deadline index: %d hints, want 3", n)
	}

	held := func(txn *store.Txn) { txn.RequireModRevision(fenceKey, fenceRev) }
	if n, err = svc.sweep(ctx, held); err != nil || n != 1 {
		t.Fatalf("sweep with the held fence: expired %d, err %v; want 1", n, err)
	}
	if _, err := st.Get(ctx, key, cur); err != nil {
		t.Fatal(err)
	}
	if cur.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED || cur.GetIssues()[0].GetCode() != issueClusterUnreachable {
		t.Fatalf("after sweep: %s %v", StatusName(cur.GetStatus()), cur.GetIssues())
	}
	if n := countHints(); n != 1 {
		t.Fatalf("%d deadline hints left, want only the one not yet due", n)
	}
}
