package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/netproxy"
	"github.com/saltbush/saltbush/tlsclient"
)

// TestDeliveryTwoReplicas: two saltbush replicas over one etcd serve one
// ACTIVE cluster of four members whose agents are spread over both.
// Add-ons created on either replica reach the executor, wherever it is,
// and its READY reports make them ACTIVE. The replica holding the
// executor's stream is killed: its agents stay away (as a real agent's
// backoff would) and, once the executor's session has expired, a standby
// on the other replica becomes executor at the next epoch, its reports are
// accepted, and add-ons created and updated after the kill converge. The
// killed replica is restarted and every agent moved to it and back; the
// executor keeps its epoch across the moves. (A further failover is
// accepted only after the host ended the executor's stream: on a loaded
// machine a lease renewal can fall behind, and the protocol then fails
// over again, as it must.) Throughout, every Assignment
// each agent receives is recorded with its local receive time, and the run
// is checked:
//   - by the agents' clocks, at most one agent was an unfenced executor at
//     every instant (an agent is one from its Assignment{EXECUTOR} until a
//     Fence, another Assignment, or fence-after past the last message it
//     heard);
//   - from etcd's history, never from clocks, epoch e+1 was committed only
//     at a revision where epoch e's holder had no session (or had
//     acknowledged a drain's fence), to a member with a session;
//   - every report accepted was judged while its reporter was the executor
//     at its epoch, for the add-on's current generation;
//   - every Assignment an agent received names the executor etcd recorded
//     for that epoch.
//
// The variant runs over a three-member etcd and stops one etcd member
// while the executor fails over.
func TestDeliveryTwoReplicas(t *testing.T) {
	t.Run("one etcd", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		etcd := startSharedEtcd(t, ctx)
		runTwoReplicas(t, ctx, etcd.Endpoints(), nil)
	})
	t.Run("three-member etcd", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		etcd, err := embedetcd.StartCluster(ctx, embedetcd.ClusterConfig{Dir: t.TempDir(), Size: 3, UnsafeNoFsync: true, URL: heldURL(t)})
		if err != nil {
			t.Fatalf("start 3-member etcd: %v", err)
		}
		// Registered before the replicas start, so it runs after they stop.
		t.Cleanup(etcd.Close)
		stopped := -1
		runTwoReplicas(t, ctx, etcd.Endpoints(), func(phase string) {
			switch phase {
			case "killed":
				// Stop etcd's leader too (leases are extended on the
				// new leader: the failover takes longer, never less).
				stopped = etcdLeader(t, ctx, etcd.Endpoints())
				t.Logf("stopping etcd member %d, the leader", stopped)
				etcd.Stop(stopped)
			case "failed over":
				if err := etcd.Restart(ctx, stopped); err != nil {
					t.Errorf("restart etcd member %d: %v", stopped, err)
				}
			}
		})
	})
}

// etcdLeader returns the index of the member that leads.
func etcdLeader(t *testing.T, ctx context.Context, endpoints []string) int {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	for i, ep := range endpoints {
		st, err := cli.Status(ctx, ep)
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd member leads")
	return -1
}

func runTwoReplicas(t *testing.T, ctx context.Context, endpoints []string, hook func(phase string)) {
	if hook == nil {
		hook = func(string) {}
	}
	env := newDLEnv(t, endpoints, 2)
	const cluster = "two-replicas"
	instances := []string{"i-1", "i-2", "i-3", "i-4"}
	uid, from, err := env.createCluster(ctx, cluster, instances)
	if err != nil {
		t.Fatal(err)
	}
	rec := &dlRecorder{}
	// An agent whose stream the host ended (its replica died) comes back
	// after the session TTL: long enough for its sessions to expire.
	backoff := func() time.Duration { return dlSessionTTL + time.Second }
	agents := map[string]*dlAgent{}
	for i, inst := range instances {
		a, err := newDLAgent(t, env, rec, uid, cluster, inst, env.replica(i%2), backoff)
		if err != nil {
			t.Fatal(err)
		}
		agents[inst] = a
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nrecorded assignments:\n%s", append(args, formatAssignments(rec))...)
	}

	// Every agent connected; one of them is the executor. (How many of
	// its streams the host had ended is counted before each read of the
	// executor, for waitSettled.)
	var first *storagev1.ExecutorRecord
	var firstEnds int
	err = waitFor(ctx, 30*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		if err != nil {
			return false, err
		}
		ends := rec.endedByInstance()
		first, err = env.executor(ctx, uid)
		firstEnds = ends[first.GetInstanceId()]
		return len(s) == len(instances) && first != nil, err
	})
	if err != nil {
		fail("agents connected and an executor assigned: %v", err)
	}

	// Add-ons, created on either replica, become ACTIVE through the
	// executor's reports.
	for i, name := range dlAddons[:2] {
		if err := env.createAddon(ctx, cluster, name, i+1); err != nil {
			t.Fatalf("CreateAddon %s: %v", name, err)
		}
	}
	// waitSettled waits until names are settled at the epoch of the
	// executor read in the same poll, and returns that executor with how
	// many of its streams the host had ended before the read. It is
	// want's epoch unless the host ended a stream of want's instance
	// after the test read want (ends is how many it had ended then): on
	// a loaded machine a replica's lease renewal can fall behind the
	// freshness window, the host then ends the executor's stream (as it
	// must), its session runs out and another member takes over at the
	// next epoch. The history checks below hold every such failover to
	// the protocol's rules; an epoch change with no stream ended by the
	// host fails.
	waitSettled := func(what string, want *storagev1.ExecutorRecord, ends int, names ...string) (*storagev1.ExecutorRecord, int) {
		t.Helper()
		var e *storagev1.ExecutorRecord
		var eEnds int
		err := waitFor(ctx, 30*time.Second, func() (bool, error) {
			before := rec.endedByInstance()
			var err error
			if e, err = env.executor(ctx, uid); err != nil {
				return false, err
			}
			eEnds = before[e.GetInstanceId()]
			for _, n := range names {
				a, err := env.addon(ctx, uid, n)
				if err != nil || !settled(a, e.GetEpoch()) {
					return false, fmt.Errorf("%s: %v (record %v; executor %v)", n, err, a, e)
				}
			}
			return true, nil
		})
		if err != nil {
			fail("%s: %v", what, err)
		}
		if e.GetEpoch() != want.GetEpoch() {
			if rec.endedStreams(want.GetInstanceId()) == ends {
				fail("%s: executor %v, want %s at epoch %d still: the host ended none of its streams", what, e, want.GetInstanceId(), want.GetEpoch())
			}
			t.Logf("%s: executor %s at epoch %d (%s), after the host ended a stream of %s", what, e.GetInstanceId(), e.GetEpoch(), e.GetReason(), want.GetInstanceId())
		}
		return e, eEnds
	}
	first, firstEnds = waitSettled("add-ons ACTIVE through the first executor", first, firstEnds, dlAddons[:2]...)

	// Kill the replica that holds the executor's stream.
	sessions, err := env.sessions(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	holder := sessions[first.GetInstanceId()]
	slot := slices.IndexFunc([]string{env.replica(0).name, env.replica(1).name}, func(n string) bool { return n == holder })
	if slot < 0 {
		t.Fatalf("executor %s's session names replica %q", first.GetInstanceId(), holder)
	}
	survivor := env.replica(1 - slot)
	var standbys []string
	for inst, r := range sessions {
		if r == survivor.name {
			standbys = append(standbys, inst)
		}
	}
	t.Logf("executor %s at epoch %d on %s; killing it; standbys on %s: %v", first.GetInstanceId(), first.GetEpoch(), holder, survivor.name, standbys)
	env.kill(slot)
	// Its agents stay away (their backoff is longer than the TTL anyway)
	// until the successor is assigned: a leader change of etcd extends
	// every lease, so they could otherwise come back, to the survivor,
	// before the executor's session expired, and keep their roles.
	var away []*dlAgent
	for inst, r := range sessions {
		if r == holder {
			agents[inst].hold()
			away = append(away, agents[inst])
		}
	}
	hook("killed")

	// A standby on the survivor takes over at the next epoch.
	var second *storagev1.ExecutorRecord
	var secondEnds int
	err = waitFor(ctx, 30*time.Second, func() (bool, error) {
		ends := rec.endedByInstance()
		var err error
		second, err = env.executor(ctx, uid)
		secondEnds = ends[second.GetInstanceId()]
		return second.GetEpoch() > first.GetEpoch(), err
	})
	if err != nil {
		sess, serr := env.sessions(ctx, uid)
		fail("no successor after the kill: %v; executor %v, sessions %v (%v)", err, second, sess, serr)
	}
	if second.GetEpoch() != first.GetEpoch()+1 || !slices.Contains(standbys, second.GetInstanceId()) {
		fail("successor %v, want a standby of %v at epoch %d", second, standbys, first.GetEpoch()+1)
	}
	// Its reports (level triggered) are accepted: the add-ons are now
	// observed at its epoch.
	current, currentEnds := waitSettled("the successor's reports accepted", second, secondEnds, dlAddons[:2]...)
	hook("failed over")
	for _, a := range away {
		a.release(nil)
	}

	// Changes made after the kill converge.
	if err := env.createAddon(ctx, cluster, dlAddons[2], 1); err != nil {
		t.Fatalf("CreateAddon after the kill: %v", err)
	}
	if err := env.updateAddon(ctx, cluster, dlAddons[1], 3); err != nil {
		t.Fatalf("UpdateAddon after the kill: %v", err)
	}
	current, currentEnds = waitSettled("add-ons created and updated after the kill", current, currentEnds, dlAddons...)
	if a, _ := env.addon(ctx, uid, dlAddons[1]); a.GetGeneration() != 2 {
		t.Errorf("%s at generation %d after one update, want 2", dlAddons[1], a.GetGeneration())
	}
	// The killed replica's agents come back, to the survivor, as standbys.
	err = waitFor(ctx, 30*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		return len(s) == len(instances), err
	})
	if err != nil {
		fail("the killed replica's agents did not come back: %v", err)
	}

	// Restart the killed replica and move every agent to it (the executor
	// last), then update again: streams move, the executor and its epoch
	// stay (its session never lapses), and the change converges.
	env.restart(slot)
	restarted := env.replica(slot)
	order := slices.DeleteFunc(slices.Clone(instances), func(s string) bool { return s == current.GetInstanceId() })
	for _, inst := range append(order, current.GetInstanceId()) {
		agents[inst].cut(0, restarted)
		err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			s, err := env.sessions(ctx, uid)
			return s[inst] == restarted.name, err
		})
		if err != nil {
			fail("%s did not move to %s: %v", inst, restarted.name, err)
		}
	}
	if err := env.updateAddon(ctx, cluster, dlAddons[0], 4); err != nil {
		t.Fatalf("UpdateAddon after the move: %v", err)
	}
	waitSettled("an update after every stream moved", current, currentEnds, dlAddons...)

	for _, a := range agents {
		a.stop()
	}
	end, err := env.rev(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := env.history(ctx, env.account, cluster, uid, from, end)
	if err != nil {
		t.Fatal(err)
	}
	assigned, errs := h.checkExecutorHistory(h.membersAt(env.account, cluster))
	accepted, commits, rerrs := h.checkReports(rec.reports)
	errs = append(errs, rerrs...)
	intervals, ierrs, closest := checkIntervals(rec.intervals)
	errs = append(errs, ierrs...)
	errs = append(errs, rec.errs...)
	errs = append(errs, checkAssignmentsMatch(rec, assigned)...)
	if len(assigned) < 2 || accepted == 0 || commits == 0 || intervals < 2 {
		errs = append(errs, fmt.Sprintf("too little observed: %d assignments in etcd, %d accepted reports, %d report commits, %d executor intervals",
			len(assigned), accepted, commits, intervals))
	}
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.Logf("recorded assignments:\n%s", formatAssignments(rec))
	}
	t.Logf("%d executor assignments in etcd (%v), %d agent assignments, %d unfenced-executor intervals (closest two agents' came: %s apart), %d accepted reports, %d report commits",
		len(assigned), assigned, len(rec.assignments), intervals, closest.Round(time.Millisecond), accepted, commits)
}

// checkAssignmentsMatch checks every Assignment an agent received against
// etcd: its epoch was assigned there, to the instance it names.
func checkAssignmentsMatch(rec *dlRecorder, assigned []dlAssigned) []string {
	byEpoch := map[int64]string{}
	for _, a := range assigned {
		byEpoch[a.epoch] = a.instance
	}
	var errs []string
	for _, a := range rec.assignments {
		if a.epoch == 0 && a.executor == "" && a.role == deliveryv1.Role_ROLE_STANDBY {
			continue // no executor assigned yet
		}
		if inst, ok := byEpoch[a.epoch]; !ok || inst != a.executor {
			errs = append(errs, fmt.Sprintf("%s stream %d was told %s epoch %d with executor %s; etcd assigned epoch %d to %q",
				a.instance, a.stream, a.role, a.epoch, a.executor, a.epoch, inst))
		}
		if a.role == deliveryv1.Role_ROLE_EXECUTOR && a.executor != a.instance {
			errs = append(errs, fmt.Sprintf("%s stream %d: EXECUTOR assignment for %s", a.instance, a.stream, a.executor))
		}
	}
	return errs
}

func formatAssignments(rec *dlRecorder) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var b strings.Builder
	for _, a := range rec.assignments {
		fmt.Fprintf(&b, "  %s %s stream %d on %s: %s epoch %d (executor %s)\n", a.at.Format("15:04:05.000"), a.instance, a.stream, a.replica,
			strings.TrimPrefix(a.role.String(), "ROLE_"), a.epoch, a.executor)
	}
	for _, iv := range rec.intervals {
		fmt.Fprintf(&b, "  unfenced executor %s epoch %d stream %d on %s: %s .. %s (%s)\n", iv.instance, iv.epoch, iv.stream, iv.replica,
			iv.start.Format("15:04:05.000"), iv.end.Format("15:04:05.000"), iv.why)
	}
	whys := slices.Sorted(maps.Keys(rec.ends))
	for _, why := range whys {
		fmt.Fprintf(&b, "  %d streams ended by the host (not cut by the test): %s\n", rec.ends[why], why)
	}
	return b.String()
}

// TestDeliveryReplicaCutOffFromEtcd: the replica holding the executor's
// stream loses etcd (a partition between it and etcd; its agents can
// still reach it). Its executor's session cannot be kept alive and
// expires, and a standby on the other replica is assigned the next epoch —
// so the cut-off replica must stop the old executor first: tell it, end
// its stream, or at least stop sending it heartbeats, so that it stops by
// itself fence-after past the last message it heard, before its session
// can expire (docs/delivery-protocol.md, rule 14). Checked by the agents' clocks: at no
// instant are both agents unfenced executors.
func TestDeliveryReplicaCutOffFromEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	proxy := netproxy.Start(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	env := newDLEnvVia(t, etcd.Endpoints(), [][]string{{"http://" + proxy.Addr()}, nil})
	const cluster = "cut-off"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1", "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &dlRecorder{}
	one, err := newDLAgent(t, env, rec, uid, cluster, "i-1", env.replica(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		e, err := env.executor(ctx, uid)
		return e.GetInstanceId() == "i-1", err
	}); err != nil {
		t.Fatalf("i-1 (on the replica to be cut off) is not the executor: %v", err)
	}
	two, err := newDLAgent(t, env, rec, uid, cluster, "i-2", env.replica(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		return len(s) == 2, err
	}); err != nil {
		t.Fatalf("i-2 (on the other replica) did not connect: %v", err)
	}

	proxy.Partition()
	cutAt := time.Now()
	t.Logf("%s: replica %s cut off from etcd", cutAt.Format("15:04:05.000"), env.replica(0).name)
	// The session of i-1 expires; i-2 is assigned epoch 2 and told so.
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		return rec.toldExecutor("i-2", 2), nil
	}); err != nil {
		t.Fatalf("i-2 was not assigned epoch 2: %v", err)
	}
	// Long enough for i-1 to have stopped by itself, had it stopped
	// hearing from its replica.
	time.Sleep(dlFenceAfter + dlMargin)
	one.stop()
	two.stop()
	proxy.Heal()

	_, errs, _ := checkIntervals(rec.intervals)
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.Logf("replica cut off at %s; recorded:\n%s", cutAt.Format("15:04:05.000"), formatAssignments(rec))
	}
}

// TestDeliverySlowEtcdKeepsSessions: a replica that etcd answers more
// slowly than one heartbeat interval, though well within the freshness
// window (TTL - fence-after - margin), keeps its agents connected: the
// lease is granted and renewed, a new stream's ownership check is
// answered, the agent hears its Assignment, its add-on converges, and no
// stream is ended by the host for three TTLs. Each grant, renewal and
// ownership check was once cut off at one heartbeat interval, so that
// such a replica (or a loaded machine, where etcd answers as slowly)
// refused every agent or left it without an Assignment, and let its
// lease run out.
func TestDeliverySlowEtcdKeepsSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	proxy := netproxy.Start(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	env := newDLEnvVia(t, etcd.Endpoints(), [][]string{{"http://" + proxy.Addr()}})
	const cluster = "slow-etcd"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1"})
	if err != nil {
		t.Fatal(err)
	}
	// A round trip of 1.5 heartbeat intervals: a third of the window.
	proxy.SetLatency(3 * dlHeartbeat / 4)
	rec := &dlRecorder{}
	if _, err := newDLAgent(t, env, rec, uid, cluster, "i-1", env.replica(0), nil); err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nrecorded:\n%s", append(args, formatAssignments(rec))...)
	}
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		return rec.toldExecutor("i-1", 0), nil
	}); err != nil {
		fail("i-1 was not assigned the executor over the slow replica: %v", err)
	}
	if err := env.createAddon(ctx, cluster, "saltbush-noop", 1); err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		a, err := env.addon(ctx, uid, "saltbush-noop")
		return settled(a, 0), err
	}); err != nil {
		fail("saltbush-noop did not converge over the slow replica: %v", err)
	}
	// The session must live on renewals that each take longer than an
	// interval: three TTLs without a lapse.
	time.Sleep(3 * dlSessionTTL)
	e, err := env.executor(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	ends := len(rec.ends)
	rec.mu.Unlock()
	if ends > 0 || e.GetInstanceId() != "i-1" || e.GetEpoch() != 1 {
		fail("over a replica etcd answers in 1.5 heartbeat intervals: executor %s epoch %d, want i-1 at epoch 1 and no stream ended by the host",
			e.GetInstanceId(), e.GetEpoch())
	}
}

// TestDeliverySessionOutlivesSelfFence: rule 14 — the old executor stops
// (fence-after past the last message it heard) before its session can
// expire. The session expires a TTL after its lease's last renewal, not
// after the last message the agent heard, so the renewal period must come
// out of the TTL too: timing where fence-after + margin + heartbeat
// interval reach the TTL is refused at start (it once was accepted, and
// the session could then expire 1.4s before the agent stopped). With the
// tightest timing that is accepted, the test watches the live executor's
// lease — etcd reports its remaining TTL in whole seconds — and checks it
// never has less than 2s left (below fence-after + margin here) while
// the host keeps the stream, then cuts the stream and checks by the
// agents' clocks that the successor was not assigned before the old
// executor stopped by itself.
func TestDeliverySessionOutlivesSelfFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	unsafe := server.DefaultConfig().Delivery
	unsafe.SessionTTL, unsafe.HeartbeatInterval, unsafe.FenceAfter, unsafe.SafetyMargin = 3*time.Second, dlHeartbeat, 2900*time.Millisecond, 50*time.Millisecond
	if err := unsafe.Validate(); err == nil || !strings.Contains(err.Error(), "heartbeat interval") {
		t.Errorf("timing TTL 3s, fence-after 2.9s, margin 50ms, heartbeat 200ms: %v, want it refused", err)
	}
	const (
		ttl        = 3 * time.Second
		fenceAfter = 2300 * time.Millisecond
		margin     = 450 * time.Millisecond
	)
	etcd := startSharedEtcd(t, ctx)
	env := newDLEnv(t, etcd.Endpoints(), 1, servertest.WithConfig(func(c *server.Config) {
		c.Delivery.SessionTTL, c.Delivery.FenceAfter, c.Delivery.SafetyMargin = ttl, fenceAfter, margin
	}))
	env.fenceAfter = fenceAfter
	const cluster = "keepalive"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1", "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &dlRecorder{}
	one, err := newDLAgent(t, env, rec, uid, cluster, "i-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		e, err := env.executor(ctx, uid)
		return e.GetInstanceId() == "i-1", err
	}); err != nil {
		t.Fatalf("i-1 is not the executor: %v", err)
	}
	two, err := newDLAgent(t, env, rec, uid, cluster, "i-2", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		return len(s) == 2, err
	}); err != nil {
		t.Fatalf("i-2 did not connect: %v", err)
	}
	// sessionLease waits for i-1's session to be on a lease other than
	// not and returns it.
	sessionLease := func(not clientv3.LeaseID) clientv3.LeaseID {
		var lease clientv3.LeaseID
		if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			resp, err := env.cli.Get(ctx, env.prefix+store.SessionKey(uid, "i-1"))
			if err != nil || len(resp.Kvs) != 1 {
				return false, err
			}
			lease = clientv3.LeaseID(resp.Kvs[0].Lease)
			return lease != not, nil
		}); err != nil {
			t.Fatalf("session of i-1: %v", err)
		}
		return lease
	}
	lease := sessionLease(clientv3.NoLease)

	// While the stream is live, the lease always has at least 2s left: a
	// renewal within the freshness window (TTL - fence-after - margin)
	// leaves TTL - interval - window = 2.55s. A lower reading means a
	// renewal later than the window (a stalled replica on a loaded
	// machine); the host must then stop counting the session fresh and end
	// the stream, so it was not live. The watch goes on with the session
	// of the agent's next stream.
	readings, stalls, ended := 0, 0, rec.endedStreams("i-1")
	for deadline := time.Now().Add(3 * ttl); time.Now().Before(deadline); {
		r, err := env.cli.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		readings++
		if r.TTL < 2 {
			if err := waitFor(ctx, ttl+fenceAfter, func() (bool, error) {
				return rec.endedStreams("i-1") > ended, nil
			}); err != nil {
				t.Fatalf("i-1's stream is live, yet its session has less than 2s left (TTL reading %d)", r.TTL)
			}
			stalls++
			ended = rec.endedStreams("i-1")
			lease = sessionLease(lease)
			continue
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d readings of the live session's TTL; %d renewals beyond the window, each followed by the host ending the stream", readings, stalls)
	one.hold()
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		e, err := env.executor(ctx, uid)
		return e.GetInstanceId() == "i-2", err
	}); err != nil {
		t.Fatalf("i-2 did not take over: %v", err)
	}
	time.Sleep(fenceAfter)
	one.stop()
	two.stop()
	_, errs, closest := checkIntervals(rec.intervals)
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("closest approach of the two executors %s\n%s", closest.Round(time.Millisecond), formatAssignments(rec))
}

// TestDeliveryLateAckKeepsTheLiveSession: an agent's old stream (whose
// replica has not yet noticed it is gone, or is still processing what it
// received last) and its new stream can overlap. The session record of
// the instance must stay on the lease of a live stream: an Ack processed
// late on the old stream must not re-write the session record onto the old
// stream's lease (it would run out with that lease while the instance's
// new stream is live, and the host would take the live executor's session
// for expired).
//
// Deterministic: i-1 is the executor on stream 1 (replica a), opens stream
// 2 (replica b), then acknowledges a desired set on stream 1 and closes
// it. i-1 must stay the executor, with a session, while stream 2 lives.
func TestDeliveryLateAckKeepsTheLiveSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	env := newDLEnv(t, etcd.Endpoints(), 2)
	const cluster = "late-ack"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1", "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	first := openRawStream(t, ctx, env, env.replica(0), uid, cluster, "i-1")
	first.wait(t, "EXECUTOR epoch 1 on stream 1", func(m *deliveryv1.HostMessage) bool {
		return m.GetAssignment().GetRole() == deliveryv1.Role_ROLE_EXECUTOR && m.GetAssignment().GetEpoch() == 1
	})
	rec := &dlRecorder{}
	two, err := newDLAgent(t, env, rec, uid, cluster, "i-2", env.replica(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		return len(s) == 2, err
	}); err != nil {
		t.Fatalf("i-2 did not connect: %v", err)
	}
	second := openRawStream(t, ctx, env, env.replica(1), uid, cluster, "i-1")
	second.wait(t, "EXECUTOR epoch 1 on stream 2", func(m *deliveryv1.HostMessage) bool {
		return m.GetAssignment().GetRole() == deliveryv1.Role_ROLE_EXECUTOR && m.GetAssignment().GetEpoch() == 1
	})
	leaseOf := func() int64 {
		resp, err := env.cli.Get(ctx, env.prefix+store.SessionKey(uid, "i-1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].Lease
	}
	live := leaseOf()
	t.Logf("i-1's session is on lease %x (stream 2's)", live)

	// Stream 1 no longer holds the session: the host fences it and ends
	// it (a stream must not extend the grant of a session that is not
	// its own). A late Ack on it, if it still gets through, then stream 1
	// ends.
	first.wait(t, "a fence on stream 1", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil })
	if err := first.send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{Version: 1, Nonce: "late"}}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_ = waitFor(ctx, 5*time.Second, func() (bool, error) { return leaseOf() != live, nil })
	if l := leaseOf(); l != live {
		t.Errorf("an Ack on stream 1 moved i-1's session from stream 2's lease %x to stream 1's lease %x", live, l)
	}
	first.cancel()

	// Stream 2 lives on: i-1 must stay the executor with a session.
	deadline := time.Now().Add(3 * dlSessionTTL)
	for time.Now().Before(deadline) {
		e, err := env.executor(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		s, err := env.sessions(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		if e.GetInstanceId() != "i-1" || s["i-1"] == "" {
			t.Errorf("with i-1's stream 2 live (it heard from %s %s ago): executor %v, sessions %v",
				env.replica(1).name, time.Since(second.lastHeard()).Round(time.Millisecond), e, s)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	second.cancel()
	two.stop()
}

// rawStream is a bare delivery stream (a fakeagent.Stream whose test sends
// everything but its heartbeats), for sequences the simulated agent does
// not make (two streams of one instance at once).
type rawStream struct {
	fs     *fakeagent.Stream
	cancel context.CancelFunc
	msgs   chan *deliveryv1.HostMessage
	mu     sync.Mutex
	heard  time.Time
}

func (s *rawStream) send(m *deliveryv1.AgentMessage) error { return s.fs.Send(m) }

func openRawStream(t *testing.T, ctx context.Context, env *dlEnv, r *dlReplica, uid, cluster, instance string) *rawStream {
	t.Helper()
	a := &dlAgent{env: env, uid: uid, instance: instance}
	certPEM, keyPEM, _, err := r.srv.Authority().IssueLocal(ctx, identity.AgentID(uid, instance), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := r.srv.Authority().Bundle()
	if a.tlsCfg, err = tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	a.conns = map[*dlReplica]*grpc.ClientConn{}
	conn, err := a.conn(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	// Heartbeats, as agents send them (saltbush ends a silent stream); the
	// host's count as hearing from it.
	fs, err := fakeagent.Connect(sctx, conn, fakeagent.Options{
		Hello:      &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: env.account, Name: cluster}, InstanceId: instance, BootId: "boot-1"},
		Heartbeats: fakeagent.Ticker, HeartbeatEvery: dlHeartbeat, HostHeartbeats: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &rawStream{fs: fs, cancel: cancel, msgs: make(chan *deliveryv1.HostMessage, 1024)}
	go func() {
		defer close(s.msgs)
		for {
			m, err := fs.Recv()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.heard = time.Now()
			s.mu.Unlock()
			select {
			case s.msgs <- m:
			default:
			}
		}
	}()
	return s
}

func (s *rawStream) lastHeard() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heard
}

func (s *rawStream) wait(t *testing.T, what string, match func(*deliveryv1.HostMessage) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if match(m) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s", what)
		}
	}
}

// TestDeliveryEpochOnlyGrows: the executor epoch only grows (docs/
// delivery-protocol.md, "Parties and records"): reports carry it as a
// fencing token, so a report made under an earlier executorship must never
// match a later one. A cluster turned FAILED has its executor fenced in
// that transaction (a record naming nobody, the epoch kept), and SetStatus
// may make it ACTIVE again; the next executor must then get an epoch above
// every earlier one — not epoch 1 again, which an agent that was executor
// at epoch 1 before would share with its stale reports.
func TestDeliveryEpochOnlyGrows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	env := newDLEnv(t, etcd.Endpoints(), 1)
	const cluster = "epochs"
	uid, from, err := env.createCluster(ctx, cluster, []string{"i-1", "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &dlRecorder{}
	one, err := newDLAgent(t, env, rec, uid, cluster, "i-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	executorIs := func(inst string, epoch int64) {
		t.Helper()
		if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			e, err := env.executor(ctx, uid)
			return e.GetInstanceId() == inst && e.GetEpoch() == epoch, err
		}); err != nil {
			e, _ := env.executor(ctx, uid)
			t.Fatalf("executor %v, want %s at epoch %d: %v", e, inst, epoch, err)
		}
	}
	executorIs("i-1", 1)
	two, err := newDLAgent(t, env, rec, uid, cluster, "i-2", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		return len(s) == 2, err
	}); err != nil {
		t.Fatal(err)
	}
	one.cut(dlSessionTTL+2*time.Second, nil)
	executorIs("i-2", 2)

	setStatus := func(st controlv1.ClusterStatus) {
		t.Helper()
		err := env.api(func(r *dlReplica) error {
			_, err := controlv1.NewClusterControlServiceClient(r.admin).SetStatus(ctx, &controlv1.SetStatusRequest{
				Cluster: &controlv1.ClusterRef{AccountId: env.account, Name: cluster}, Status: st, Reason: "test",
				Endpoint: clustertest.Endpoint, CertificateAuthorityData: clustertest.CertificateAuthorityData(t)})
			return err
		})
		if err != nil {
			t.Fatalf("SetStatus %s: %v", st, err)
		}
	}
	setStatus(controlv1.ClusterStatus_CLUSTER_STATUS_FAILED)
	setStatus(controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	var next *storagev1.ExecutorRecord
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		var err error
		next, err = env.executor(ctx, uid)
		// A record naming nobody is the vacancy FAILED left.
		return next.GetInstanceId() != "", err
	}); err != nil {
		t.Fatalf("no executor once ACTIVE again: %v", err)
	}
	if next.GetEpoch() <= 2 {
		t.Errorf("after FAILED and ACTIVE again the executor is %s at epoch %d: epoch %d was used before (epochs must only grow)",
			next.GetInstanceId(), next.GetEpoch(), next.GetEpoch())
	}
	one.stop()
	two.stop()
	end, err := env.rev(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := env.history(ctx, env.account, cluster, uid, from, end)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := h.checkExecutorHistory(nil)
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.Logf("etcd:\n%s", h.describe())
	}
}
