package delivery

// Sessions on the replica's lease and their retirement (renew.go), the
// removed member's handover (fence.go) and the executor metrics
// (metrics.go): each test here reproduced a bug an adversarial review
// found (helper-written), and guards its fix; TestRetiredSessionRunsOutOnTime guards the
// retirement deadline itself.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// reviewTiming is the fault tests' timing (fence-after + margin +
// heartbeat < TTL).
var reviewTiming = Config{
	SessionTTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
	FenceAfter: 1500 * time.Millisecond, SafetyMargin: 500 * time.Millisecond,
	HelloTimeout: 5 * time.Second, Replica: "replica-review",
}

// serviceWithFaults is a delivery Service on a real embedded etcd whose
// client passes every unary call through fault (to fail or lose some);
// the second result is a client without faults.
func serviceWithFaults(t *testing.T, fault grpc.UnaryClientInterceptor) (*Service, *clientv3.Client) {
	t.Helper()
	base := storetest.New(t)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: base.Client().Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fault)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.New(ctx, cli, store.Options{Prefix: base.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	clock := newMonoClock()
	s := &Service{store: st, client: cli, cfg: reviewTiming, log: log, watches: map[string]*clusterWatch{},
		live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{}, clock: clock,
		renewer:  newRenewer(cli, clock, reviewTiming, log),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected"}, []string{"reason"})}
	return s, base.Client()
}

// lossyService is a delivery Service whose client can be told to lose the
// response of its next Txn after etcd applied it (a response lost to a
// timeout, a cancelled stream context, or etcd's own "request timed out"
// for a proposal that is applied later: the classic ambiguous write).
func lossyService(t *testing.T) (*Service, *atomic.Bool, *clientv3.Client) {
	t.Helper()
	var lose atomic.Bool
	s, etcd := serviceWithFaults(t, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/etcdserverpb.KV/Txn" && lose.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "review: connection lost after the Txn was applied")
		}
		return err
	})
	return s, &lose, etcd
}

// TestSessionRetiredAfterAnAmbiguousAck: an Ack's session write whose
// response is lost (the write was applied) once left the stream's copy of
// its record stale (ownership is now the record's identity, read back). Every later guarded write of the stream
// conflicts, including the retirement when the stream ends, which takes the
// conflict for "a newer stream owns the key" and gives up: the ended
// stream's session stays on the replica's lease, which the replica renews
// for as long as it has any other stream (of any cluster). The agent is
// gone, yet its session never runs out, so its executor role is never
// given to a standby (rule 5 waits for the session to be absent).
//
// With per-stream leases (before 46849cc) the same stale `written` only
// lost later acknowledgements: the session still ran out with its lease.
func TestSessionRetiredAfterAnAmbiguousAck(t *testing.T) {
	s, lose, etcd := lossyService(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Another stream on this replica (any cluster's agent) keeps the
	// replica's lease renewed.
	other, err := s.renewer.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.renewer.release(other)

	// The executor's stream: its session on the replica's lease.
	lease, err := s.renewer.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := store.SessionKey("uid-review", "i-a")
	rec := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
	if _, err := s.store.Commit(ctx, store.NewTxn().PutWithLease(key, rec, lease.id)); err != nil {
		t.Fatal(err)
	}
	ss := &session{key: key, rec: rec, lease: lease}
	a := &agentStream{s: s, watch: &clusterWatch{}, uid: "uid-review", instance: "i-a", session: ss, left: make(chan struct{})}
	a.lastSet.Store(&deliveryv1.DesiredSet{Version: 7, Nonce: "nonce-7", Digest: "digest-7"})

	// The agent acknowledges set 7; etcd applies the session write, the
	// response is lost (not retried: a Txn is not idempotent).
	lose.Store(true)
	err = a.acked(ctx, &deliveryv1.Ack{Version: 7, Nonce: "nonce-7"})
	t.Logf("acked: %v", err)
	stored := &storagev1.AgentSessionRecord{}
	if _, err := s.store.Get(ctx, key, stored); err != nil || stored.GetAckedDigest() != "digest-7" {
		t.Fatalf("the Ack's write was not applied (setup): %v %v", stored, err)
	}

	// The stream ends (the agent is gone: VM lost). Its receiver has
	// stopped; the session is retired.
	ended := time.Now()
	done := make(chan struct{})
	close(done)
	s.closeSession(ss, done)

	// The agent stopped applying fence-after after the last message it
	// heard; the session must be gone by the replica lease's last renewal
	// + TTL (rounded up to a second), plus etcd's expiry granularity.
	limit := ended.Add(s.cfg.SessionTTL + 3*time.Second)
	for time.Now().Before(limit) {
		resp, err := etcd.Get(ctx, s.store.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := etcd.Get(ctx, s.store.Key(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 1 {
		t.Errorf("the ended stream's session still exists %s after the stream ended, on lease %x (the replica's lease %x, renewed while the replica has streams): it never runs out, and its executor is never succeeded",
			time.Since(ended).Round(100*time.Millisecond), resp.Kvs[0].Lease, int64(lease.id))
	}
}

// TestSessionRetiredAfterAnAmbiguousOpen: the same for the session's first
// write (openSession now retires it). openSession's transaction is applied, its
// response lost (the agent's stream context cancelled mid-commit, or
// etcd's "request timed out" for a proposal applied later): connect
// returns the error and releases the lease, but nothing ever retires the
// record it wrote on the replica's lease. If the agent does not connect
// again (its VM is gone), the session lives as long as the replica has
// any stream.
func TestSessionRetiredAfterAnAmbiguousOpen(t *testing.T) {
	s, lose, etcd := lossyService(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	other, err := s.renewer.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.renewer.release(other)

	c := &storagev1.ClusterRecord{Uid: "uid-review", AccountId: "111122223333", Name: "review",
		Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}}}
	res, err := s.store.Commit(ctx, store.NewTxn().Put(store.ClusterKey(c.GetAccountId(), c.GetName()), c))
	if err != nil {
		t.Fatal(err)
	}
	lose.Store(true)
	started := time.Now()
	if _, err := s.openSession(ctx, c, res.Revision, &deliveryv1.Hello{InstanceId: "i-a", BootId: "boot-1"}); err == nil {
		t.Fatal("setup: the injected loss did not reach openSession")
	}
	key := s.store.Key(store.SessionKey(c.GetUid(), "i-a"))
	limit := started.Add(s.cfg.SessionTTL + 3*time.Second)
	for time.Now().Before(limit) {
		resp, err := etcd.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, err := etcd.Get(ctx, key); err == nil && len(resp.Kvs) == 1 {
		t.Errorf("a session whose stream never started still exists %s later, on the replica's lease %x: it never runs out",
			time.Since(started).Round(100*time.Millisecond), resp.Kvs[0].Lease)
	}
}

// reviewReports is how many reports the removed member sends before its
// FenceAck (each rejected one is answered by a result and a Fence).
var reviewReports = 10

// fakeStream is the host side of a delivery stream without a network: it
// records what the sender sends; Recv blocks until the test ends.
type fakeStream struct {
	ctx  context.Context
	sent chan *deliveryv1.HostMessage
	// in, when set, is what the agent sends.
	in chan *deliveryv1.AgentMessage
}

func (f *fakeStream) Send(m *deliveryv1.HostMessage) error {
	select {
	case f.sent <- m:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}
func (f *fakeStream) Recv() (*deliveryv1.AgentMessage, error) {
	select {
	case m := <-f.in: // nil channel: never
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}
func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}
func (f *fakeStream) SendMsg(any) error            { return nil }
func (f *fakeStream) RecvMsg(any) error            { return nil }

// gaugeValue reads one series of g (ok false: not exposed).
func gaugeValue(t *testing.T, g *prometheus.GaugeVec, uid string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(g); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster_uid" && l.GetValue() == uid {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestExecutorMetricsLeaveWithTheExecutor: the executor's applied version
// and in-sync gauges are set only by a stream that is the executor, and
// were once removed only when the replica's last stream of the cluster
// ended. A stream here that stops being the executor (the executor is now
// another member, its stream on another replica) leaves the old figures
// in place: this replica goes on saying the cluster's executor is in sync
// (1) with the content it acknowledged, while the desired content has
// changed and the new executor (elsewhere) has applied nothing.
func TestExecutorMetricsLeaveWithTheExecutor(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gauge := func(name string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"cluster_uid"})
	}
	s := &Service{cfg: reviewTiming, log: log, watches: map[string]*clusterWatch{}, clock: newMonoClock(),
		live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{},
		appliedVersion: gauge("applied_version"), inSync: gauge("in_sync")}
	const uid = "uid-review"
	w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
	s.watches[uid] = w
	changed := make(chan struct{}, 1)
	w.subs[changed] = "i-a"
	cluster := &storagev1.ClusterRecord{Uid: uid, Name: "review", Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}
	publish := func(sn *snapshot) {
		w.mu.Lock()
		w.state = sn
		w.mu.Unlock()
		changed <- struct{}{}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 64)}
	lease := &replicaLease{lost: make(chan struct{})}
	go func() { // the replica keeps renewing
		for ctx.Err() == nil {
			lease.renewed.Store(s.clock.now())
			time.Sleep(50 * time.Millisecond)
		}
	}()
	lease.renewed.Store(s.clock.now())
	// The agent says it has applied d1 (its Hello).
	hello := &deliveryv1.Hello{InstanceId: "i-a", DesiredVersion: 10, DesiredDigest: "d1"}
	a := newAgentStream(s, stream, w, changed, &session{lease: lease, revision: 1}, hello, make(chan struct{}))
	go func() { // keep the agent "heard"
		for ctx.Err() == nil {
			a.heard.Store(s.clock.now())
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go func() { _ = a.sendLoop(ctx) }()
	waitFor := func(what string, match func(*deliveryv1.HostMessage) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case m := <-stream.sent:
				if match(m) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s", what)
			}
		}
	}

	// i-a is the executor at epoch 1, in sync with d1.
	publish(&snapshot{revision: 10, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 1},
		sessions: map[string]int64{"i-a": 1, "i-b": 1}, desired: &deliveryv1.DesiredSet{Version: 10, Digest: "d1"}})
	waitFor("executor assignment", func(m *deliveryv1.HostMessage) bool {
		return m.GetAssignment().GetRole() == deliveryv1.Role_ROLE_EXECUTOR
	})
	time.Sleep(100 * time.Millisecond)
	if v, ok := gaugeValue(t, s.inSync, uid); !ok || v != 1 {
		t.Fatalf("setup: in_sync = %v (%v), want 1", v, ok)
	}

	// i-b (its stream on another replica) is now the executor at epoch 2,
	// and the content changed (d2): nobody has applied it.
	publish(&snapshot{revision: 20, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-b", Epoch: 2},
		sessions: map[string]int64{"i-a": 1, "i-b": 1}, desired: &deliveryv1.DesiredSet{Version: 20, Digest: "d2"}})
	waitFor("standby assignment", func(m *deliveryv1.HostMessage) bool {
		return m.GetAssignment().GetRole() == deliveryv1.Role_ROLE_STANDBY
	})
	waitFor("desired set d2", func(m *deliveryv1.HostMessage) bool { return m.GetDesiredSet().GetDigest() == "d2" })
	time.Sleep(100 * time.Millisecond)
	if v, ok := gaugeValue(t, s.inSync, uid); ok && v == 1 {
		av, _ := gaugeValue(t, s.appliedVersion, uid)
		t.Errorf("this replica has no executor stream and the desired content is d2, which no executor acknowledged, yet it exposes executor_in_sync=1 (applied_version %v: the old executor's d1)", av)
	}
}

// TestRemovedMemberFenceAckBehindReportResults: while a removed member's
// sender waits for its FenceAck it must go on draining the stream's outbox
// (16 messages). Report results (a result, and a Fence when the
// report is rejected) that the receiver produced for reports the agent sent
// before it heard its Fence fill it; the receiver then blocks on the outbox
// and never reads the FenceAck behind them. The session is not removed,
// and the removed executor is succeeded only after its session runs out,
// not "at once" (rule 6).
func TestRemovedMemberFenceAckBehindReportResults(t *testing.T) {
	st := storetest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: log, watches: map[string]*clusterWatch{},
		clock: newMonoClock(), live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{},
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected"}, []string{"reason"})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const uid = "uid-review"
	w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
	s.watches[uid] = w
	changed := make(chan struct{}, 1)
	publish := func(sn *snapshot) {
		w.mu.Lock()
		w.state = sn
		w.mu.Unlock()
		changed <- struct{}{}
	}

	// i-b's session, on a lease that outlives the test.
	g, err := st.Client().Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	lease := &replicaLease{id: g.ID, lost: make(chan struct{})}
	lease.renewed.Store(s.clock.now())
	go func() {
		for ctx.Err() == nil {
			lease.renewed.Store(s.clock.now())
			time.Sleep(50 * time.Millisecond)
		}
	}()
	key := store.SessionKey(uid, "i-b")
	rec := &storagev1.AgentSessionRecord{InstanceId: "i-b", BootId: "boot-1", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
	res, err := st.Commit(ctx, store.NewTxn().PutWithLease(key, rec, lease.id))
	if err != nil {
		t.Fatal(err)
	}
	stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 256), in: make(chan *deliveryv1.AgentMessage, 64)}
	a := newAgentStream(s, stream, w, changed, &session{key: key, rec: rec, lease: lease, revision: res.Revision},
		&deliveryv1.Hello{InstanceId: "i-b"}, make(chan struct{}))
	go a.recvLoop(ctx)
	sendDone := make(chan error, 1)
	go func() { sendDone <- a.sendLoop(ctx) }()

	members := []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}
	publish(&snapshot{revision: res.Revision, cluster: &storagev1.ClusterRecord{Uid: uid, Members: members},
		executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 3}, sessions: map[string]int64{"i-a": 1, "i-b": res.Revision}})
	for m := range stream.sent {
		if m.GetAssignment() != nil {
			break
		}
	}

	// The agent sends ten reports (level-triggered, e.g. after a reconnect)
	// and, having heard its Fence, a FenceAck; meanwhile it is removed.
	publish(&snapshot{revision: res.Revision + 1, cluster: &storagev1.ClusterRecord{Uid: uid, Members: members[:1]},
		executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 3}, sessions: map[string]int64{"i-a": 1, "i-b": res.Revision}})
	for m := range stream.sent {
		if m.GetFence() != nil {
			break
		}
	}
	for i := range reviewReports {
		stream.in <- &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Report{Report: &deliveryv1.Report{
			Epoch: 3, Addon: fmt.Sprintf("addon-%d", i), AddonUid: "u", Generation: 1, Phase: deliveryv1.Phase_PHASE_READY}}}
	}
	stream.in <- &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_FenceAck{FenceAck: &deliveryv1.FenceAck{Epoch: 3}}}

	started := time.Now()
	select {
	case <-a.left:
	case <-time.After(s.cfg.FenceAfter + time.Second):
	}
	took := time.Since(started)
	r, err := st.Client().Get(ctx, st.Key(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Errorf("the removed member acknowledged its fence, yet its session is still there after %s (the receiver is stuck on the full outbox behind %d report results)",
			took.Round(10*time.Millisecond), len(a.out))
	}
}

// TestRetiredSessionRunsOutOnTime: an ended
// stream's session lasts until the replica lease's last renewal before the
// end + TTL — never less (the agent may apply until fence-after + margin
// after the last message, sent while that much was left) and not much more
// — whether the replica goes on renewing its lease for other streams or
// the ended stream was its last (the renewer stops), and when the
// retirement's move is applied but its response lost (the retry moves the
// same record again, onto a lease with the same deadline).
func TestRetiredSessionRunsOutOnTime(t *testing.T) {
	for _, tc := range []struct {
		others, loseRetire bool
	}{{true, false}, {false, false}, {true, true}} {
		others := tc.others
		t.Run(fmt.Sprintf("other streams %v, retire's response lost %v", tc.others, tc.loseRetire), func(t *testing.T) {
			s, lose, etcd := lossyService(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if others {
				other, err := s.renewer.acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer s.renewer.release(other)
			}
			lease, err := s.renewer.acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			key := store.SessionKey("uid-review", "i-a")
			rec := &storagev1.AgentSessionRecord{InstanceId: "i-a", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
			if _, err := s.store.Commit(ctx, store.NewTxn().PutWithLease(key, rec, lease.id)); err != nil {
				t.Fatal(err)
			}
			// Let a few renewals go by, then end the stream.
			time.Sleep(5 * s.cfg.HeartbeatInterval)
			ss := &session{key: key, rec: rec, lease: lease}
			done := make(chan struct{})
			close(done)
			// The retirement's move applied, its response lost: retried.
			lose.Store(tc.loseRetire)
			s.closeSession(ss, done)
			lastRenewal := s.clock.at(lease.renewed.Load())
			mustLive := lastRenewal.Add(s.cfg.SessionTTL - 50*time.Millisecond)
			for time.Now().Before(mustLive) {
				resp, err := etcd.Get(ctx, s.store.Key(key))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 {
					t.Fatalf("the session ran out %s before the last renewal + TTL", time.Until(lastRenewal.Add(s.cfg.SessionTTL)))
				}
				time.Sleep(20 * time.Millisecond)
			}
			limit := lastRenewal.Add(s.cfg.SessionTTL + 2500*time.Millisecond)
			for {
				resp, err := etcd.Get(ctx, s.store.Key(key))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 {
					if lose.Load() {
						t.Error("setup: the retirement's response was not lost")
					}
					t.Logf("ran out %s after the last renewal + TTL", time.Since(lastRenewal.Add(s.cfg.SessionTTL)).Round(10*time.Millisecond))
					return
				}
				if time.Now().After(limit) {
					t.Fatalf("the session still exists %s after the last renewal + TTL (lease %x, the replica's %x)",
						time.Since(lastRenewal.Add(s.cfg.SessionTTL)), resp.Kvs[0].Lease, int64(lease.id))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestStreamEndsWhenItsSessionIsAnotherStreams: a stream whose session key
// holds another stream's session (a newer stream of the instance, on
// another replica, took it over) or none must stop extending its agent's
// grant: a Fence, and the stream ends.
func TestStreamEndsWhenItsSessionIsAnotherStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken bool // a newer stream's record is at the key; else no session
	}{
		{"a newer stream's session", true},
		{"no session", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.New(t)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: log, watches: map[string]*clusterWatch{},
				clock: newMonoClock(), live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{}}
			const uid = "uid-review"
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			key := store.SessionKey(uid, "i-a")
			mine := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: "replica-a", ConnectedAt: timestamppb.New(time.Unix(100, 0))}
			g, err := st.Client().Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			first, err := st.Commit(ctx, store.NewTxn().PutWithLease(key, mine, g.ID))
			if err != nil {
				t.Fatal(err)
			}
			sessions := map[string]int64{"i-b": 1}
			if tc.taken {
				newer := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: "replica-b", ConnectedAt: timestamppb.New(time.Unix(200, 0))}
				res, err := st.Commit(ctx, store.NewTxn().Put(key, newer))
				if err != nil {
					t.Fatal(err)
				}
				sessions["i-a"] = res.Revision
			}
			w := &clusterWatch{s: s, uid: uid, subs: map[chan struct{}]string{}}
			changed := make(chan struct{}, 1)
			stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 64)}
			lease := &replicaLease{id: g.ID, lost: make(chan struct{})}
			lease.renewed.Store(s.clock.now())
			a := newAgentStream(s, stream, w, changed, &session{key: key, rec: mine, lease: lease, revision: first.Revision},
				&deliveryv1.Hello{InstanceId: "i-a"}, make(chan struct{}))
			cluster := &storagev1.ClusterRecord{Uid: uid, Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}
			w.state = &snapshot{revision: first.Revision + 1, cluster: cluster, executor: &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 1},
				sessions: sessions, desired: &deliveryv1.DesiredSet{Version: 5, Digest: "d1"}}
			changed <- struct{}{}
			done := make(chan error, 1)
			go func() { done <- a.sendLoop(ctx) }()
			select {
			case err := <-done:
				if status.Code(err) != codes.Aborted {
					t.Errorf("stream ended with %v, want Aborted", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the stream goes on")
			}
			var fenced bool
			for len(stream.sent) > 0 {
				m := <-stream.sent
				if m.GetAssignment() != nil || m.GetDesiredSet() != nil {
					t.Errorf("sent %v with a session that is not the stream's", m)
				}
				fenced = fenced || m.GetFence() != nil
			}
			if !fenced {
				t.Error("no Fence")
			}
		})
	}
}

// An Ack is recorded in the stream's own session, which stays on its
// lease (so it still runs out with it); a session of a newer stream of
// the instance at the key is left as it is.
func TestAckRecordedOnOwnSessionOnly(t *testing.T) {
	s, _, etcd := lossyService(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := s.renewer.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.renewer.release(lease)

	for _, tc := range []struct {
		name       string
		replaced   bool // a newer stream of the instance wrote the key
		wantDigest string
	}{
		{name: "Own", wantDigest: "digest-7"},
		{name: "Replaced", replaced: true, wantDigest: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := store.SessionKey("uid-ack-"+tc.name, "i-a")
			rec := &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
			stored := rec
			if tc.replaced {
				stored = &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-2", Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now()}
			}
			if _, err := s.store.Commit(ctx, store.NewTxn().PutWithLease(key, stored, lease.id)); err != nil {
				t.Fatal(err)
			}
			ss := &session{key: key, rec: rec, lease: lease}
			a := &agentStream{s: s, watch: &clusterWatch{}, uid: "uid-ack-" + tc.name, instance: "i-a", session: ss, left: make(chan struct{})}
			a.lastSet.Store(&deliveryv1.DesiredSet{Version: 7, Nonce: "nonce-7", Digest: "digest-7"})
			if err := a.acked(ctx, &deliveryv1.Ack{Version: 7, Nonce: "nonce-7"}); err != nil {
				t.Fatalf("acked: %v", err)
			}
			resp, err := etcd.Get(ctx, s.store.Key(key))
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("Get: %v (%d keys)", err, len(resp.Kvs))
			}
			got := &storagev1.AgentSessionRecord{}
			if err := store.Decode(resp.Kvs[0].Value, got); err != nil {
				t.Fatal(err)
			}
			if got.GetAckedDigest() != tc.wantDigest || got.GetBootId() != stored.GetBootId() {
				t.Errorf("session %v, want boot %s with acked digest %q", got, stored.GetBootId(), tc.wantDigest)
			}
			if l := clientv3.LeaseID(resp.Kvs[0].Lease); l != lease.id {
				t.Errorf("session on lease %x, want the replica's lease %x", l, lease.id)
			}
		})
	}
}
