package delivery

// snapshotAtLeast: a reader waits for the watch to bring a snapshot as new
// as a revision, woken by the watch, bounded by its context.

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
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

// TestPublishWakesTheStreamsConcerned: a snapshot that changed only some
// instances' sessions signals only their streams; a change of the cluster
// record, the executor or the desired set's content, and a failed read,
// signal every stream.
func TestPublishWakesTheStreamsConcerned(t *testing.T) {
	w := &clusterWatch{uid: "uid-watch", subs: map[chan struct{}]string{}}
	subs := map[string]chan struct{}{}
	for _, instance := range []string{"i-a", "i-b", "i-c"} {
		ch := make(chan struct{}, 1)
		w.subs[ch], subs[instance] = instance, ch
	}
	cluster := &storagev1.ClusterRecord{Uid: "uid-watch"}
	desired := &deliveryv1.DesiredSet{Digest: "d1"}
	base := func() *snapshot {
		return &snapshot{revision: 10, cluster: cluster, clusterRev: 5, executorRev: 6, desired: desired,
			sessions:        map[string]int64{"i-a": 7, "i-b": 8, "i-c": 9},
			sessionsCreated: map[string]int64{"i-a": 7, "i-b": 8, "i-c": 9}}
	}
	cases := []struct {
		name   string
		change func(sn *snapshot)
		err    error
		want   []string
	}{
		{"nothing it reads changed", func(sn *snapshot) { sn.revision = 11 }, nil, nil},
		{"one session moved", func(sn *snapshot) { sn.sessions["i-b"] = 11 }, nil, []string{"i-b"}},
		{"a session taken over in place", func(sn *snapshot) { sn.sessions["i-a"], sn.sessionsCreated["i-a"] = 7, 3 }, nil, []string{"i-a"}},
		{"a session gone", func(sn *snapshot) { delete(sn.sessions, "i-c"); delete(sn.sessionsCreated, "i-c") }, nil, []string{"i-c"}},
		{"a session of another instance", func(sn *snapshot) { sn.sessions["i-z"], sn.sessionsCreated["i-z"] = 11, 11 }, nil, nil},
		{"the cluster record", func(sn *snapshot) { sn.clusterRev = 11 }, nil, []string{"i-a", "i-b", "i-c"}},
		{"the incarnation gone", func(sn *snapshot) { sn.cluster = nil }, nil, []string{"i-a", "i-b", "i-c"}},
		{"the executor", func(sn *snapshot) { sn.executorRev = 11 }, nil, []string{"i-a", "i-b", "i-c"}},
		{"the desired set read again, the same", func(sn *snapshot) { sn.desired = &deliveryv1.DesiredSet{Version: 11, Digest: "d1"} }, nil, nil},
		{"the desired set", func(sn *snapshot) { sn.desired = &deliveryv1.DesiredSet{Version: 11, Digest: "d2"} }, nil, []string{"i-a", "i-b", "i-c"}},
		{"a failed read", nil, context.DeadlineExceeded, []string{"i-a", "i-b", "i-c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.publish(base(), nil)
			for _, ch := range subs {
				select {
				case <-ch:
				default:
				}
			}
			var sn *snapshot
			if tc.err == nil {
				sn = base()
				tc.change(sn)
			}
			w.publish(sn, tc.err)
			var got []string
			for _, instance := range []string{"i-a", "i-b", "i-c"} {
				select {
				case <-subs[instance]:
					got = append(got, instance)
				default:
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("signalled %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWatchedRereadsOnlyForNewerEvents: an event the latest snapshot
// already holds asks for no re-read; a newer one, a failed or closed
// watch, or events before any snapshot do.
func TestWatchedRereadsOnlyForNewerEvents(t *testing.T) {
	event := func(revs ...int64) clientv3.WatchResponse {
		var resp clientv3.WatchResponse
		for _, r := range revs {
			resp.Events = append(resp.Events, &clientv3.Event{Kv: &mvccpb.KeyValue{ModRevision: r}})
		}
		return resp
	}
	cases := []struct {
		name  string
		last  *snapshot
		resp  clientv3.WatchResponse
		ok    bool
		poked bool
	}{
		{"held by the snapshot", &snapshot{revision: 100}, event(90, 100), true, false},
		{"one newer", &snapshot{revision: 100}, event(99, 101), true, true},
		{"no snapshot yet", nil, event(5), true, true},
		{"watch failed", &snapshot{revision: 100}, clientv3.WatchResponse{Canceled: true, CompactRevision: 50}, true, true},
		{"watch closed", &snapshot{revision: 100}, clientv3.WatchResponse{}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &clusterWatch{uid: "uid-watch", trigger: make(chan struct{}, 1), last: tc.last}
			w.watched(tc.resp, tc.ok)
			poked := len(w.trigger) == 1
			if poked != tc.poked {
				t.Fatalf("re-read asked: %v, want %v", poked, tc.poked)
			}
		})
	}
}
