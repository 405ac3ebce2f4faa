package delivery

// snapshotAtLeast: a reader waits for the watch to bring a snapshot as new
// as a revision, woken by the watch, bounded by its context.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	w := &clusterWatch{uid: "uid-watch", subs: map[chan struct{}]string{}}
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
	w, changed := s.subscribe(c, "i-a")
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

// TestWatchAppliesSessionEventsToTheirStreams: a session written under a
// watched cluster reaches the snapshot from the watch event, and wakes
// only its own instance's stream; a write of anything else (the executor
// record) is read again and wakes every stream. The first session of a
// cluster without an executor is assigned from the event alone.
func TestWatchAppliesSessionEventsToTheirStreams(t *testing.T) {
	st := storetest.New(t)
	gauge := func(name string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"cluster_uid"})
	}
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock: newMonoClock(), watches: map[string]*clusterWatch{}, live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{},
		epochs: gauge("epochs"), sessions: gauge("sessions"), desired: gauge("desired"), lastReport: gauge("last_report"),
		appliedVersion: gauge("applied_version"), inSync: gauge("in_sync"),
		assignments: prometheus.NewCounter(prometheus.CounterOpts{Name: "assignments"})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &storagev1.ClusterRecord{Uid: "uid-watch", AccountId: "111122223333", Name: "watch", Status: storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}
	if _, err := st.Commit(ctx, store.NewTxn().Put(store.ClusterKey(c.GetAccountId(), c.GetName()), c)); err != nil {
		t.Fatal(err)
	}
	wa, changedA := s.subscribe(c, "i-a")
	defer s.unsubscribe(wa, changedA)
	w, changedB := s.subscribe(c, "i-b")
	defer s.unsubscribe(w, changedB)
	if w != wa {
		t.Fatal("two watches of one cluster")
	}
	// The first read (of nothing) wakes both; then quiet.
	if sn := w.snapshotAtLeast(ctx, 1); sn == nil {
		t.Fatal("no first snapshot")
	}
	drain := func(ch chan struct{}) {
		select {
		case <-ch:
		default:
		}
	}
	drain(changedA)
	drain(changedB)

	session := func(instance string) int64 {
		t.Helper()
		res, err := st.Commit(ctx, store.NewTxn().Put(store.SessionKey(c.GetUid(), instance), &storagev1.AgentSessionRecord{InstanceId: instance}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}
	// i-b connects: no executor yet, so it is assigned (the executor
	// record's event is read again and wakes both).
	rev := session("i-b")
	var sn *snapshot
	for sn == nil || sn.executor == nil {
		select {
		case <-changedB:
		case <-ctx.Done():
			t.Fatal("i-b's stream was not woken with an executor")
		}
		if sn = w.snapshotAtLeast(ctx, rev); sn == nil {
			t.Fatal("no snapshot with i-b's session")
		}
	}
	if sn.executor.GetInstanceId() != "i-b" || sn.executor.GetEpoch() != 1 {
		t.Fatalf("executor %v, want i-b at epoch 1", sn.executor)
	}
	if mod, _, ok := sn.session("i-b"); !ok || mod != rev {
		t.Fatalf("i-b's session at %d (%v), want %d", mod, ok, rev)
	}
	select {
	case <-changedA:
	case <-ctx.Done():
		t.Fatal("the new executor did not wake i-a's stream")
	}
	drain(changedB)

	// i-a connects: the event wakes i-a's stream only.
	rev = session("i-a")
	select {
	case <-changedA:
	case <-ctx.Done():
		t.Fatal("i-a's session did not wake its stream")
	}
	sn = w.snapshotAtLeast(ctx, rev)
	if mod, _, ok := sn.session("i-a"); !ok || mod != rev || sn.sessionCount() != 2 || sn.executor.GetInstanceId() != "i-b" {
		t.Fatalf("snapshot at %d: i-a's session at %d (%v), %d sessions, executor %v; want i-a's at %d, 2, i-b",
			sn.revision, mod, ok, sn.sessionCount(), sn.executor, rev)
	}
	select {
	case <-changedB:
		t.Fatal("i-a's session woke i-b's stream")
	default:
	}
}

// TestSnapshotWithSessionsMatchesAMap: session changes applied one watch
// batch at a time, through the overlay and its folds into new maps, give
// the sessions a plain map of the same changes holds.
func TestSnapshotWithSessionsMatchesAMap(t *testing.T) {
	want := map[string]sessionRevs{}
	sn := &snapshot{revision: 1, sessions: map[string]int64{}, sessionsCreated: map[string]int64{}}
	rev := int64(1)
	for i := range 500 {
		var batch []sessionChange
		for j := range 1 + i%3 {
			rev++
			instance := fmt.Sprintf("i-%03d", (i*7+j*13)%150)
			c := sessionChange{instance: instance}
			if (i+j)%5 != 0 {
				created := rev
				if old, ok := want[instance]; ok {
					created = old.created
				}
				c.revs = sessionRevs{mod: rev, created: created}
				want[instance] = c.revs
			} else {
				delete(want, instance)
			}
			batch = append(batch, c)
		}
		sn = sn.withSessions(batch, rev)
		if sn.sessionCount() != len(want) {
			t.Fatalf("after batch %d: %d sessions, want %d", i, sn.sessionCount(), len(want))
		}
	}
	got := map[string]sessionRevs{}
	sn.eachSession(func(instance string) {
		mod, created, ok := sn.session(instance)
		if !ok {
			t.Fatalf("%s listed but not live", instance)
		}
		got[instance] = sessionRevs{mod: mod, created: created}
	})
	if !maps.Equal(got, want) {
		t.Fatalf("sessions %v, want %v", got, want)
	}
	if sn.revision != rev {
		t.Fatalf("revision %d, want %d", sn.revision, rev)
	}
}
