package delivery

// The session ownership check, one stream per instance on a replica,
// reports for unassigned epochs and the snapshot's cluster-record reuse:
// tests from a second adversarial review (helper-written); the first two
// reproduced bugs and guard their fixes.

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// busyRangeService is a delivery Service on a real embedded etcd whose
// client can be told to fail its next Range as etcd does when it sheds
// load ("too many requests", ResourceExhausted: not retried by the
// client), e.g. in a connect storm.
func busyRangeService(t *testing.T) (*Service, *atomic.Bool, *clientv3.Client) {
	t.Helper()
	var busy atomic.Bool
	s, etcd := serviceWithFaults(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Range" && busy.CompareAndSwap(true, false) {
			return status.Error(codes.ResourceExhausted, "etcdserver: too many requests")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	return s, &busy, etcd
}

// TestStreamStopsWhenItsOwnershipCheckFails: a newer stream of the
// instance (on another replica) took the session key over. The older
// stream's watch shows the key's revision moved; its check against etcd
// fails once (etcd shedding load). ownsSession once said "still mine" and
// left `verified` as it was, so the check would be made again on the
// next snapshot — but in a quiet cluster there is none: the stream relayed
// an Assignment and a desired set and heartbeats its agent for as long as
// nothing else is written under the cluster, a grant no lease holding the
// key covers (the stream's freshness is its own replica's lease, which no
// longer holds the session). If the newer stream's replica then dies, the
// key goes with its lease and a successor can be assigned while this
// stream's agent still has up to fence-after of grant.
func TestStreamStopsWhenItsOwnershipCheckFails(t *testing.T) {
	s, busy, etcd := busyRangeService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const uid = "uid-review"
	key := store.SessionKey(uid, "i-a")
	mine := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: "replica-a", ConnectedAt: timestamppb.New(time.Unix(100, 0))}
	g, err := etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.store.Commit(ctx, store.NewTxn().PutWithLease(key, mine, g.ID))
	if err != nil {
		t.Fatal(err)
	}
	newer := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: "replica-b", ConnectedAt: timestamppb.New(time.Unix(200, 0))}
	taken, err := s.store.Commit(ctx, store.NewTxn().Put(key, newer))
	if err != nil {
		t.Fatal(err)
	}

	w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
	changed := make(chan struct{}, 1)
	stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 256)}
	lease := &replicaLease{id: g.ID, lost: make(chan struct{})}
	lease.renewed.Store(s.clock.now())
	a := newAgentStream(s, stream, w, changed, &session{key: key, rec: mine, lease: lease, revision: first.Revision},
		&deliveryv1.Hello{InstanceId: "i-a"}, make(chan struct{}))
	go func() { // this replica renews its lease; the agent heartbeats
		for ctx.Err() == nil {
			lease.renewed.Store(s.clock.now())
			a.heard.Store(s.clock.now())
			time.Sleep(50 * time.Millisecond)
		}
	}()
	cluster := &storagev1.ClusterRecord{Uid: uid, Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}
	w.state = &snapshot{revision: taken.Revision, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 1},
		sessions: map[string]int64{"i-a": taken.Revision, "i-b": 1}, desired: &deliveryv1.DesiredSet{Version: 5, Digest: "d1"}}
	busy.Store(true)
	changed <- struct{}{}
	done := make(chan error, 1)
	go func() { done <- a.sendLoop(ctx) }()

	// Nothing else happens under the cluster.
	var spoken []string
	limit := time.After(2 * s.cfg.FenceAfter)
	for {
		select {
		case err := <-done:
			if status.Code(err) != codes.Aborted {
				t.Errorf("ended with %v, want Aborted", err)
			}
			if len(spoken) > 0 {
				t.Errorf("sent %v on a session that is another stream's", spoken)
			}
			return
		case m := <-stream.sent:
			switch {
			case m.GetAssignment() != nil:
				spoken = append(spoken, "Assignment")
			case m.GetDesiredSet() != nil:
				spoken = append(spoken, "DesiredSet")
			case m.GetHeartbeat() != nil:
				spoken = append(spoken, "Heartbeat")
			}
		case <-limit:
			if busy.Load() {
				t.Fatal("setup: the ownership check did not reach etcd")
			}
			t.Fatalf("the session key holds another stream's session (replica-b) and the stream's one check of it failed; %s later the stream is still speaking to its agent (%d messages: %v...), extending a grant no lease covers",
				2*s.cfg.FenceAfter, len(spoken), spoken[:min(4, len(spoken))])
		}
	}
}

// TestRegisterKeepsTheNewerStream: two streams of an instance connect to
// one replica at nearly the same time (an agent that retried its connect).
// X's session is written first, then Y's: the key holds Y's. If X reaches
// register after Y (it was delayed in subscribe, say), register once ended
// Y — the stream whose session the key holds — and X ended too as soon as
// its watch showed the key moved: the agent lost both.
func TestRegisterKeepsTheNewerStream(t *testing.T) {
	s := &Service{live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{}}
	stream := func(rev int64) *agentStream {
		return &agentStream{s: s, uid: "uid-review", instance: "i-a", replaced: make(chan struct{}), session: &session{revision: rev}}
	}
	x, y := stream(100), stream(101)
	s.register(y)
	s.register(x)
	select {
	case <-y.replaced:
		t.Error("the stream whose session the key holds (written at 101) was ended by an older one (written at 100) that registered later")
	default:
	}
}

// TestOwnAckDoesNotEndTheStream: the stream's own Ack moves its
// session key's mod revision; the sender's next snapshot shows the move,
// checks etcd, finds its own record on its lease, and goes on.
func TestOwnAckDoesNotEndTheStream(t *testing.T) {
	st := storetest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: log, watches: map[string]*clusterWatch{},
		clock: newMonoClock(), live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const uid = "uid-review"
	key := store.SessionKey(uid, "i-a")
	rec := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
	g, err := st.Client().Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Commit(ctx, store.NewTxn().PutWithLease(key, rec, g.ID))
	if err != nil {
		t.Fatal(err)
	}
	w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
	changed := make(chan struct{}, 1)
	publish := func(sn *snapshot) {
		w.mu.Lock()
		w.state = sn
		w.mu.Unlock()
		changed <- struct{}{}
	}
	stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 256), in: make(chan *deliveryv1.AgentMessage, 4)}
	lease := &replicaLease{id: g.ID, lost: make(chan struct{})}
	lease.renewed.Store(s.clock.now())
	a := newAgentStream(s, stream, w, changed, &session{key: key, rec: rec, lease: lease, revision: first.Revision},
		&deliveryv1.Hello{InstanceId: "i-a"}, make(chan struct{}))
	go func() {
		for ctx.Err() == nil {
			lease.renewed.Store(s.clock.now())
			a.heard.Store(s.clock.now())
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go a.recvLoop(ctx)
	done := make(chan error, 1)
	go func() { done <- a.sendLoop(ctx) }()
	cluster := &storagev1.ClusterRecord{Uid: uid, Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}}}
	executor := &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 1}
	publish(&snapshot{revision: first.Revision, cluster: cluster, executor: executor,
		sessions: map[string]int64{"i-a": first.Revision}, desired: &deliveryv1.DesiredSet{Version: first.Revision, Digest: "d1"}})
	next := func(what string, match func(*deliveryv1.HostMessage) bool) *deliveryv1.HostMessage {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case m := <-stream.sent:
				if m.GetFence() != nil {
					t.Fatalf("fenced while waiting for %s: %v", what, m)
				}
				if match(m) {
					return m
				}
			case err := <-done:
				t.Fatalf("stream ended while waiting for %s: %v", what, err)
			case <-deadline:
				t.Fatalf("no %s", what)
			}
		}
	}
	set := next("desired set d1", func(m *deliveryv1.HostMessage) bool { return m.GetDesiredSet() != nil }).GetDesiredSet()
	stream.in <- &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{Version: set.GetVersion(), Nonce: set.GetNonce()}}}
	var moved int64
	for deadline := time.Now().Add(5 * time.Second); moved <= first.Revision; {
		resp, err := st.Client().Get(ctx, st.Key(key))
		if err != nil || len(resp.Kvs) != 1 || time.Now().After(deadline) {
			t.Fatalf("setup: the Ack was not recorded: %v %v", resp, err)
		}
		moved = resp.Kvs[0].ModRevision
		time.Sleep(10 * time.Millisecond)
	}
	publish(&snapshot{revision: moved, cluster: cluster, executor: executor,
		sessions: map[string]int64{"i-a": moved}, desired: &deliveryv1.DesiredSet{Version: moved, Digest: "d2"}})
	next("desired set d2", func(m *deliveryv1.HostMessage) bool { return m.GetDesiredSet().GetDigest() == "d2" })
}

// TestReportWaitsForTheStreamsOwnView: a report that arrives
// before the watch's snapshot includes the stream's session is judged
// against the snapshot that does (here: epoch 4, named by the report, with
// another member the executor: a standby answer, not a report for an
// unassigned epoch that would end the stream); and a report for an epoch
// no snapshot has is refused, fenced at its epoch, and ends the stream.
func TestReportWaitsForTheStreamsOwnView(t *testing.T) {
	s := &Service{cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: newMonoClock(),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected"}, []string{"reason"})}
	w := &clusterWatch{s: s, uid: "uid-review", subs: map[chan struct{}]string{}}
	cluster := &storagev1.ClusterRecord{Uid: "uid-review", Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}
	w.state = &snapshot{revision: 90, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 3}}
	a := &agentStream{s: s, watch: w, uid: "uid-review", instance: "i-a", session: &session{revision: 100}}
	ctx := context.Background()
	type judged struct {
		out []*deliveryv1.HostMessage
		err error
	}
	first := make(chan judged, 1)
	go func() {
		out, err := a.report(ctx, &deliveryv1.Report{Epoch: 4, Addon: "vpc-cni"})
		first <- judged{out, err}
	}()
	// The report is waiting for the watch (it asked for the next
	// snapshot); then the watch brings the one with the session.
	awaitWaiter(t, w)
	w.publish(&snapshot{revision: 100, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-b", Epoch: 4}}, nil)
	r := <-first
	out, err := r.out, r.err
	if err != nil || len(out) != 2 || out[0].GetReportResult().GetReason() != rejectNotExecutor || out[1].GetFence().GetEpoch() != 4 {
		t.Fatalf("report of epoch 4 judged against a lagging view: %v, %v", out, err)
	}
	out, err = a.report(ctx, &deliveryv1.Report{Epoch: 9, Addon: "vpc-cni"})
	if status.Code(err) != codes.FailedPrecondition || len(out) != 2 || out[0].GetReportResult().GetReason() != rejectInvalid || out[1].GetFence().GetEpoch() != 9 {
		t.Fatalf("report of unassigned epoch 9: %v, %v", out, err)
	}
}

// TestReadReusesTheClusterRecordOnlyWhenUnchanged: read's
// If(mod revision == previous) reuse of the cluster record and its member
// index: key absent with no previous snapshot; first read; unchanged
// (reused); changed (decoded again); recreated with a new uid (no
// cluster); then a previous snapshot without a cluster.
func TestReadReusesTheClusterRecordOnlyWhenUnchanged(t *testing.T) {
	st := storetest.New(t)
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	const uid = "uid-review"
	ckey := store.ClusterKey("111122223333", "review")
	read := func(prev *snapshot) *snapshot {
		t.Helper()
		sn, err := s.read(ctx, uid, "111122223333", "review", prev)
		if err != nil {
			t.Fatal(err)
		}
		return sn
	}
	if sn := read(nil); sn.cluster != nil || sn.member("i-a") {
		t.Fatalf("absent cluster read as %v", sn.cluster)
	}
	put := func(c *storagev1.ClusterRecord) {
		t.Helper()
		if _, err := st.Commit(ctx, store.NewTxn().Put(ckey, c)); err != nil {
			t.Fatal(err)
		}
	}
	put(&storagev1.ClusterRecord{Uid: uid, AccountId: "111122223333", Name: "review", Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}}})
	s1 := read(read(nil)) // a previous snapshot without a cluster
	if !s1.member("i-a") || s1.member("i-b") {
		t.Fatalf("first read: members %v", s1.members)
	}
	s2 := read(s1)
	if s2.cluster != s1.cluster || !s2.member("i-a") || s2.clusterRev != s1.clusterRev {
		t.Fatal("unchanged record not reused")
	}
	put(&storagev1.ClusterRecord{Uid: uid, AccountId: "111122223333", Name: "review", Members: []*storagev1.ClusterMember{{InstanceId: "i-b"}}})
	s3 := read(s2)
	if s3.member("i-a") || !s3.member("i-b") || s3.clusterRev == s2.clusterRev {
		t.Fatalf("changed record not read again: members %v", s3.members)
	}
	put(&storagev1.ClusterRecord{Uid: "uid-other", AccountId: "111122223333", Name: "review", Members: []*storagev1.ClusterMember{{InstanceId: "i-b"}}})
	s4 := read(s3)
	if s4.cluster != nil || s4.member("i-b") {
		t.Fatal("a new incarnation read as this one")
	}
	if sn := read(s4); sn.cluster != nil || sn.member("i-b") {
		t.Fatal("a new incarnation read as this one (previous snapshot without a cluster)")
	}
}
