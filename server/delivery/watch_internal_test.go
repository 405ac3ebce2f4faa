package delivery

// snapshotAtLeast: a reader waits for the watch to bring a snapshot as new
// as a revision, woken by the watch, bounded by its context.

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// awaitWaiter returns once a reader waits for w's next snapshot (it made
// the channel publish closes).
func awaitWaiter(t *testing.T, w *clusterWatch) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		w.mu.Lock()
		waiting := w.next != nil
		w.mu.Unlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody waits for the watch's next snapshot")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSnapshotAtLeastWaitsForTheRevision: a reader of revision 100 is not
// given the older snapshots the watch publishes meanwhile (90, then a
// failed read), and is woken by the one at 100; one whose snapshot is
// there already gets it even with its context over; one whose context
// ends first gets nothing.
func TestSnapshotAtLeastWaitsForTheRevision(t *testing.T) {
	w := &clusterWatch{uid: "uid-watch", subs: map[chan struct{}]bool{}}
	got := make(chan *snapshot, 1)
	go func() { got <- w.snapshotAtLeast(context.Background(), 100) }()
	awaitWaiter(t, w)
	w.publish(&snapshot{revision: 90}, nil)
	w.publish(nil, context.DeadlineExceeded)
	select {
	case sn := <-got:
		t.Fatalf("woken with a snapshot at %d, want one at 100", sn.revision)
	default:
	}
	w.publish(&snapshot{revision: 100}, nil)
	select {
	case sn := <-got:
		if sn == nil || sn.revision != 100 {
			t.Fatalf("got %v, want the snapshot at 100", sn)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reader was not woken by the snapshot at 100")
	}

	over, cancel := context.WithCancel(context.Background())
	cancel()
	if sn := w.snapshotAtLeast(over, 95); sn == nil || sn.revision != 100 {
		t.Errorf("with the snapshot there already: got %v, want the one at 100", sn)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if sn := w.snapshotAtLeast(short, 101); sn != nil || short.Err() == nil {
		t.Errorf("got %v before the context ended (%v), want nil once it did", sn, short.Err())
	}
}

// TestWatchPublishesWhatEtcdHolds: a real watch on a real etcd wakes a
// reader of a revision written after the watch started with the snapshot
// that holds the write.
func TestWatchPublishesWhatEtcdHolds(t *testing.T) {
	st := storetest.New(t)
	gauge := func(name string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"cluster_uid"})
	}
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock: newMonoClock(), watches: map[string]*clusterWatch{}, live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{},
		epochs: gauge("epochs"), sessions: gauge("sessions"), desired: gauge("desired"), lastReport: gauge("last_report"),
		appliedVersion: gauge("applied_version"), inSync: gauge("in_sync")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &storagev1.ClusterRecord{Uid: "uid-watch", AccountId: "111122223333", Name: "watch"}
	if _, err := st.Commit(ctx, store.NewTxn().Put(store.ClusterKey(c.GetAccountId(), c.GetName()), c)); err != nil {
		t.Fatal(err)
	}
	w, changed := s.subscribe(c)
	defer s.unsubscribe(w, changed)
	// An executor record nobody's session backs: nothing to assign.
	res, err := st.Commit(ctx, store.NewTxn().Put(store.ExecutorKey(c.GetUid()), &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 3}))
	if err != nil {
		t.Fatal(err)
	}
	sn := w.snapshotAtLeast(ctx, res.Revision)
	if sn == nil || sn.executor.GetEpoch() != 3 || sn.cluster.GetName() != "watch" {
		t.Fatalf("got %+v within the deadline, want the snapshot with the executor at epoch 3", sn)
	}
}
