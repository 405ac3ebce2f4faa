package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/guest/hostlink"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/netproxy"
	"github.com/saltbush/saltbush/tlsclient"
)

// TestEtcdPartitionOfOneReplica: two replicas share one etcd; replica a
// reaches it only through a proxy, replica b directly. i-1 is the
// executor of a cluster with its stream on a; its agent is the real
// agent's link (guest/hostlink), given both replicas' addresses as the
// real agent is. Then a is cut off from etcd, by a silent partition
// (blackhole) or by resets. Checked:
//   - a turns not ready: /readyz 503 and gRPC health NOT_SERVING, while
//     /healthz stays up;
//   - a fences i-1's stream: a Fence saying the session could not be
//     renewed, then the stream ends Unavailable (session_not_renewed);
//     the last message other than the Fence that i-1 heard on it came
//     early enough that i-1, stopping fence-after later, stopped before
//     the session could expire (docs/delivery-protocol.md, rule 14), and
//     the Fence came before the session TTL had passed since the cut;
//   - b serves SDK requests throughout, without one error (none
//     retried), and an update made on b during the cut converges;
//   - a FAILED report i-1 sent on the fenced stream during the cut never
//     counts: etcd's history of the add-on has no FAILED observation, and
//     every observation after the cut is the new executor's, at its
//     epoch; break before make holds in etcd's history;
//   - once healed, a turns ready again by itself.
//
// Who carries on, once i-1 has stayed away (as an agent whose backoff
// outlasts its session) until its session has run out — a can neither
// renew nor retire it:
//   - the only member comes back: nobody could take over, and b had no
//     stream of the cluster, so the executor record still names i-1 at
//     epoch 1; the link takes i-1 to b, where its session is a new one
//     and it is the executor again at epoch 2 (its session lapsed:
//     docs/delivery-protocol.md, rule 6), its reports are accepted, and
//     its report at the fenced epoch 1 is refused (stale_epoch) and
//     answered with a Fence for epoch 1;
//   - a standby takes over: i-2, a standby on b, becomes the executor at
//     epoch 2; then the link takes i-1 to b, a standby at epoch 2, where
//     its report at the fenced epoch 1 is refused (not_executor) and
//     answered with a Fence for epoch 1.
func TestEtcdPartitionOfOneReplica(t *testing.T) {
	cases := []struct {
		name    string
		cut     func(p *netproxy.Proxy)
		standby bool
		long    bool
	}{
		{name: "blackhole, the only member comes back", cut: (*netproxy.Proxy).Partition},
		{name: "blackhole, a standby takes over", cut: (*netproxy.Proxy).Partition, standby: true},
		{name: "reset, the only member comes back", cut: (*netproxy.Proxy).Reset, long: true},
		{name: "reset, a standby takes over", cut: (*netproxy.Proxy).Reset, standby: true, long: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.long && !*long {
				t.Skip("the short form cuts by blackhole only; -faults.long also cuts by resets")
			}
			runEtcdPartition(t, tc.cut, tc.standby)
		})
	}
}

func runEtcdPartition(t *testing.T, cut func(p *netproxy.Proxy), standby bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	proxy := netproxy.Start(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	env := newDLEnvVia(t, etcd.Endpoints(), [][]string{{"http://" + proxy.Addr()}, nil},
		servertest.WithReadinessInterval(100*time.Millisecond))
	ra, rb := env.replica(0), env.replica(1)
	const cluster, addonName = "partitioned", "coredns"
	members := []string{"i-1"}
	if standby {
		members = append(members, "i-2")
	}
	uid, from, err := env.createCluster(ctx, cluster, members)
	if err != nil {
		t.Fatal(err)
	}
	agent := startLinkAgent(t, env, uid, cluster, "i-1", time.Second, ra.srv.GRPCAddr(), rb.srv.GRPCAddr())
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		e, eerr := env.executor(ctx, uid)
		return s["i-1"] == ra.name && e.GetInstanceId() == "i-1" && e.GetEpoch() == 1, errors.Join(err, eerr)
	}); err != nil {
		t.Fatalf("i-1 is not the executor at epoch 1 with its stream on %s: %v", ra.name, err)
	}
	var other *linkAgent
	if standby {
		other = startLinkAgent(t, env, uid, cluster, "i-2", time.Second, rb.srv.GRPCAddr(), ra.srv.GRPCAddr())
		if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			s, err := env.sessions(ctx, uid)
			return s["i-2"] == rb.name, err
		}); err != nil {
			t.Fatalf("i-2 did not connect to %s: %v", rb.name, err)
		}
	}
	if _, err := rb.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
		ConfigurationValues: aws.String(dlConfig(addonName, 1))}); err != nil {
		t.Fatalf("CreateAddon %s: %v", addonName, err)
	}
	waitAddon(t, ctx, env, uid, addonName, 1, "the add-on ACTIVE through i-1 on "+ra.name)
	addonUID := addonUID(t, ctx, env, uid, addonName)
	health := func(r *dlReplica) (healthpb.HealthCheckResponse_ServingStatus, error) {
		hc, err := healthpb.NewHealthClient(r.admin).Check(ctx, &healthpb.HealthCheckRequest{})
		return hc.GetStatus(), err
	}
	ready := func(r *dlReplica) (healthpb.HealthCheckResponse_ServingStatus, int) {
		st, _ := health(r)
		return st, httpStatus(t, r.srv.URL+"/readyz")
	}
	if st, code := ready(ra); st != healthpb.HealthCheckResponse_SERVING || code != http.StatusOK {
		t.Fatalf("%s before the cut: health %v, /readyz %d", ra.name, st, code)
	}

	// b's SDK traffic, from before the cut until after the heal, not
	// retried: every error counts.
	traffic := startSDKTraffic(ctx, rb.srv.EKS(t, func(o *eks.Options) { o.Retryer = aws.NopRetryer{} }), cluster, addonName)
	partitionRev, err := env.rev(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent.holdAfterStream()
	cutAt := time.Now()
	cut(proxy)
	t.Logf("%s: %s cut off from etcd", cutAt.Format("15:04:05.000"), ra.name)
	// What i-1 observes during the cut, on the stream the cut dooms.
	failed := agent.inject(&deliveryv1.Report{Epoch: 1, Addon: addonName, AddonUid: addonUID, Generation: 1, Phase: deliveryv1.Phase_PHASE_FAILED})
	// a's own answer to a request it cannot serve, asked once a's read
	// view may no longer answer from memory (store.ViewFreshness after the
	// cut: until then a read on a is as stale as that at most).
	aAnswer := make(chan error, 1)
	aAt := make(chan time.Time, 1)
	once := ra.srv.EKS(t, func(o *eks.Options) { o.Retryer = aws.NopRetryer{} })
	go func() {
		freshness := time.NewTimer(store.ViewFreshness + 100*time.Millisecond)
		defer freshness.Stop()
		select {
		case <-freshness.C:
		case <-ctx.Done():
		}
		_, err := once.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
		aAt <- time.Now()
		aAnswer <- err
	}()
	// An update made on b while a is cut off.
	if _, err := rb.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
		ConfigurationValues: aws.String(dlConfig(addonName, 2))}); err != nil {
		t.Fatalf("UpdateAddon on %s during the cut: %v", rb.name, err)
	}

	// a turns not ready: gRPC health follows its readiness probe (every
	// 100ms here, each bounded by 2s), /readyz answers from its own probe.
	notServing := firstTime(ctx, func() bool { st, _ := health(ra); return st == healthpb.HealthCheckResponse_NOT_SERVING })
	sessionGone := firstTime(ctx, func() bool { s, err := env.sessions(ctx, uid); return err == nil && s["i-1"] == "" })
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) { return !notServing().IsZero(), nil }); err != nil {
		st, _ := health(ra)
		t.Fatalf("%s cut off from etcd: gRPC health still %v: %v", ra.name, st, err)
	}
	if code := httpStatus(t, ra.srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("%s cut off from etcd: /readyz %d, want 503", ra.name, code)
	}
	if code := httpStatus(t, ra.srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("%s /healthz %d while only etcd is unreachable", ra.name, code)
	}

	// a fences i-1's stream, within the session's bounds.
	var fenceAt, lastHeard, endAt time.Time
	var endErr error
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		fenceAt, lastHeard, endAt, endErr = agent.fencedStream(ra.srv.GRPCAddr(), cutAt)
		return !endAt.IsZero(), nil
	}); err != nil {
		t.Fatalf("i-1's stream on %s was not ended after the cut: %v\n%s", ra.name, err, agent.describe())
	}
	switch {
	case fenceAt.IsZero():
		t.Errorf("i-1's stream on %s ended (%v) without a Fence saying its session could not be renewed\n%s", ra.name, endErr, agent.describe())
	case status.Code(endErr) != codes.Unavailable || !strings.Contains(status.Convert(endErr).Message(), "not renewed"):
		t.Errorf("i-1's stream on %s ended with %v, want Unavailable: delivery session not renewed", ra.name, endErr)
	}
	// The agent stops fence-after past the last message it heard; the
	// session lasts a TTL past the lease's last renewal, which preceded
	// the cut (so the bound is lenient by up to one renewal interval).
	if bound := cutAt.Add(dlSessionTTL - dlFenceAfter); lastHeard.After(bound) {
		t.Errorf("i-1 last heard %s on the doomed stream %s after the cut: fence-after later it stops after its session may have expired (%s after the cut)",
			ra.name, lastHeard.Sub(cutAt).Round(time.Millisecond), dlSessionTTL)
	}
	if !fenceAt.IsZero() && fenceAt.After(cutAt.Add(dlSessionTTL)) {
		t.Errorf("the Fence came %s after the cut, later than the session TTL %s", fenceAt.Sub(cutAt).Round(time.Millisecond), dlSessionTTL)
	}

	// Who carries on, on b, at epoch 2: i-1's session runs out first.
	executor, epoch, staleReason := "i-1", int64(2), "stale_epoch"
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) { return !sessionGone().IsZero(), nil }); err != nil {
		t.Fatalf("i-1's session on %s did not run out: %v", ra.name, err)
	}
	var carriedOn time.Time
	if standby {
		executor, staleReason = "i-2", "not_executor"
		if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
			carriedOn = other.assigned(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_EXECUTOR, 2)
			return !carriedOn.IsZero(), nil
		}); err != nil {
			t.Fatalf("i-2 was not assigned EXECUTOR epoch 2 on %s: %v\n%s", rb.name, err, other.describe())
		}
	}
	agent.release()
	var back time.Time
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		if standby {
			back = agent.assigned(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_STANDBY, 2)
		} else {
			back = agent.assignedAny(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_EXECUTOR)
			carriedOn = back
		}
		return !back.IsZero(), nil
	}); err != nil {
		t.Fatalf("i-1's link did not take it to %s: %v\n%s", rb.name, err, agent.describe())
	}
	if !standby {
		// Nobody saw the gap (a was cut off, b had no stream of the
		// cluster) and nobody else could take over: b finds the executor
		// record naming i-1 at epoch 1 and i-1's session a new one. The
		// first role b tells i-1 is the one at the next epoch.
		if first := agent.firstAssignment(rb.srv.GRPCAddr()); first.GetRole() != deliveryv1.Role_ROLE_EXECUTOR || first.GetEpoch() != 2 {
			t.Errorf("i-1's first assignment on %s after its session lapsed: %v; want EXECUTOR at epoch 2\n%s", rb.name, first, agent.describe())
		}
	}
	waitAddon(t, ctx, env, uid, addonName, 2, fmt.Sprintf("the update made during the cut ACTIVE through %s on %s", executor, rb.name))
	if e, err := env.executor(ctx, uid); err != nil || e.GetInstanceId() != executor || e.GetEpoch() != epoch {
		t.Errorf("executor %v (%v), want %s at epoch %d", e, err, executor, epoch)
	}
	// A report at the fenced epoch changes nothing.
	stale := agent.inject(&deliveryv1.Report{Epoch: 1, Addon: addonName, AddonUid: addonUID, Generation: 2, Phase: deliveryv1.Phase_PHASE_READY})
	select {
	case res := <-stale:
		if res.GetAccepted() || res.GetReason() != staleReason {
			t.Errorf("i-1's report at the fenced epoch 1 on %s: %v; want refused, %s", rb.name, res, staleReason)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no result for i-1's report at epoch 1 on %s\n%s", rb.name, agent.describe())
	}
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		return agent.fenceAfter(rb.srv.GRPCAddr(), 1, back), nil
	}); err != nil {
		t.Errorf("i-1's stale report was not answered with a Fence for epoch 1: %v", err)
	}
	select {
	case res := <-failed:
		if res.GetAccepted() {
			t.Errorf("the FAILED report sent on the fenced stream was accepted: %v", res)
		}
	default: // the stream ended before it was answered
	}

	proxy.Heal()
	healAt := time.Now()
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		st, code := ready(ra)
		return st == healthpb.HealthCheckResponse_SERVING && code == http.StatusOK, fmt.Errorf("health %v, /readyz %d", st, code)
	}); err != nil {
		t.Fatalf("%s healed: %v", ra.name, err)
	}
	readyAgain := time.Since(healAt)
	requests, errs, slowest := traffic.stop()
	for _, e := range errs {
		t.Errorf("%s during the cut: %v", rb.name, e)
	}
	if requests < 10 {
		t.Errorf("only %d SDK requests made on %s during the cut", requests, rb.name)
	}
	// a answers nothing it cannot confirm: the request made during the
	// cut, past the read view's freshness bound, fails at its etcd
	// deadline, or succeeds once healed.
	answeredAt, aErr := <-aAt, <-aAnswer
	if aErr == nil && answeredAt.Before(healAt) {
		t.Errorf("DescribeCluster on %s succeeded %s after it was cut off from etcd, before the heal", ra.name, answeredAt.Sub(cutAt))
	}
	agent.stop()
	if other != nil {
		other.stop()
	}

	h, _ := env.checkHistorySince(t, ctx, cluster, uid, from)
	var prev *storagev1.AddonObserved
	observedAfter := 0
	for _, ev := range h.keys[store.AddonKey(uid, addonName)] {
		rec := &storagev1.AddonRecord{}
		if ev.deleted || store.Decode(ev.value, rec) != nil {
			continue
		}
		o := rec.GetObserved()
		if o.GetPhase() == storagev1.AddonPhase_ADDON_PHASE_FAILED {
			t.Errorf("revision %d: the add-on observed FAILED (epoch %d): the report sent on the fenced stream counted", ev.rev, o.GetExecutorEpoch())
		}
		if o != nil && !sameObserved(prev, o) && ev.rev > partitionRev {
			observedAfter++
			if o.GetExecutorEpoch() != epoch || o.GetInstanceId() != executor {
				t.Errorf("revision %d, after the cut: an observation by %s at epoch %d (%v); only %s's at epoch %d may count",
					ev.rev, o.GetInstanceId(), o.GetExecutorEpoch(), o, executor, epoch)
			}
		}
		prev = o
	}
	if observedAfter == 0 {
		t.Errorf("no observation of %s recorded after the cut", addonName)
	}
	since := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return at.Sub(cutAt).Round(time.Millisecond).String()
	}
	t.Logf("after the cut: %s NOT_SERVING at %s; i-1 last heard its stream at %s, fenced at %s, stream ended at %s; i-1's session gone at %s; "+
		"%s EXECUTOR epoch %d on %s at %s; i-1 back on %s at %s; healed at %s, ready again %s later; %d SDK requests on %s, slowest %s; "+
		"DescribeCluster on %s answered at %s: %v",
		ra.name, since(notServing()), since(lastHeard), since(fenceAt), since(endAt), since(sessionGone()),
		executor, epoch, rb.name, since(carriedOn), rb.name, since(back), since(healAt), readyAgain.Round(time.Millisecond),
		requests, rb.name, slowest.Round(time.Millisecond), ra.name, since(answeredAt), aErr)
}

// firstTime polls cond every 20ms in the background until it first
// holds (or ctx ends); the returned function says when (zero: not yet).
func firstTime(ctx context.Context, cond func() bool) func() time.Time {
	var mu sync.Mutex
	var at time.Time
	go func() {
		for ctx.Err() == nil {
			if cond() {
				mu.Lock()
				at = time.Now()
				mu.Unlock()
				return
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// waitAddon waits for an add-on to be ACTIVE at generation gen with a
// READY report for it.
func waitAddon(t *testing.T, ctx context.Context, env *dlEnv, uid, name string, gen int64, what string) {
	t.Helper()
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		a, err := env.addon(ctx, uid, name)
		return settled(a, 0) && a.GetGeneration() == gen, fmt.Errorf("%v (record %v)", err, a)
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func addonUID(t *testing.T, ctx context.Context, env *dlEnv, uid, name string) string {
	t.Helper()
	a, err := env.addon(ctx, uid, name)
	if err != nil || a == nil {
		t.Fatalf("add-on %s: %v", name, err)
	}
	return a.GetUid()
}

// httpStatus is the status code of a GET of url (a loopback address of a
// replica the test started).
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// sdkTraffic is a loop of SDK reads on one replica (DescribeCluster,
// ListAddons, DescribeAddon), recording every error and the slowest
// answer.
type sdkTraffic struct {
	cancel   context.CancelFunc
	done     chan struct{}
	requests atomic.Int64
	mu       sync.Mutex
	errs     []string
	slowest  time.Duration
}

func startSDKTraffic(ctx context.Context, c *eks.Client, cluster, addon string) *sdkTraffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &sdkTraffic{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for ctx.Err() == nil {
			for i, call := range []func() error{
				func() error {
					_, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
					return err
				},
				func() error {
					_, err := c.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cluster)})
					return err
				},
				func() error {
					_, err := c.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
					return err
				},
			} {
				start := time.Now()
				err := call()
				if ctx.Err() != nil {
					return
				}
				took := time.Since(start)
				tr.requests.Add(1)
				tr.mu.Lock()
				tr.slowest = max(tr.slowest, took)
				if err != nil {
					tr.errs = append(tr.errs, fmt.Sprintf("request %d (call %d): %v", tr.requests.Load(), i, err))
				}
				tr.mu.Unlock()
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}()
	return tr
}

// stop ends the loop and returns the requests made, their errors and the
// slowest one's time.
func (tr *sdkTraffic) stop() (int64, []string, time.Duration) {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.requests.Load(), tr.errs, tr.slowest
}

// --- an agent on the real agent's link ---------------------------------------

// linkAgent is a guest agent whose connection is the real agent's
// (guest/hostlink: the replicas' addresses tried in turn, same endpoint
// first after a stream that worked, jittered backoff, an open timeout,
// the host's silence ended after fence-after), speaking the protocol as
// fakeagent.Session does: it acknowledges the sets it applies and, as an
// unfenced executor, reports every add-on READY. It records every host
// message with the endpoint and its local receive time, and every
// stream's end. The test can make it stay away once a stream ends (as an
// agent whose backoff outlasts its session), and make it send a report of
// its own.
type linkAgent struct {
	t       *testing.T
	link    *hostlink.Link
	hello   *deliveryv1.Hello
	applied *fakeagent.Applied
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	session  *fakeagent.Session
	endpoint string
	events   []linkEvent
	// gate, when set, is what a new stream waits for before its Hello.
	gate     chan struct{}
	holdNext bool
	// waiting are the results the test waits for, by report.
	waiting map[*deliveryv1.Report]chan *deliveryv1.ReportResult
}

// linkEvent is one host message, or a stream's end (msg nil).
type linkEvent struct {
	at       time.Time
	endpoint string
	msg      *deliveryv1.HostMessage
	err      error
}

func startLinkAgent(t *testing.T, env *dlEnv, uid, cluster, instance string, openTimeout time.Duration, endpoints ...string) *linkAgent {
	return startLinkAgentFrom(t, env, uid, cluster, instance, &fakeagent.Applied{}, openTimeout, endpoints...)
}

// startLinkAgentFrom starts an agent that has applied what applied holds
// (an earlier agent's, so this one resumes from it).
func startLinkAgentFrom(t *testing.T, env *dlEnv, uid, cluster, instance string, applied *fakeagent.Applied, openTimeout time.Duration, endpoints ...string) *linkAgent {
	t.Helper()
	r := env.replica(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	certPEM, keyPEM, _, err := r.srv.Authority().IssueLocal(ctx, identity.AgentID(uid, instance), time.Hour)
	if err != nil {
		t.Fatalf("agent certificate for %s: %v", instance, err)
	}
	bundle, _ := r.srv.Authority().Bundle()
	tlsCfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	a := &linkAgent{
		t: t,
		link: hostlink.New(hostlink.Config{Endpoints: endpoints, TLS: tlsCfg,
			BackoffInitial: 100 * time.Millisecond, BackoffMax: 500 * time.Millisecond, OpenTimeout: openTimeout,
			Log: slog.New(slog.DiscardHandler)}),
		hello:   &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: env.account, Name: cluster}, InstanceId: instance, BootId: "boot-1", AgentVersion: "fault-test"},
		applied: applied,
		done:    make(chan struct{}),
		waiting: map[*deliveryv1.Report]chan *deliveryv1.ReportResult{},
	}
	runCtx, stop := context.WithCancel(context.Background())
	a.cancel = stop
	go func() {
		defer close(a.done)
		_ = a.link.Run(runCtx, a)
	}()
	t.Cleanup(a.stop)
	return a
}

func (a *linkAgent) stop() {
	a.release()
	a.cancel()
	<-a.done
}

// holdAfterStream keeps the agent away once its current stream ends,
// until release.
func (a *linkAgent) holdAfterStream() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holdNext = true
}

func (a *linkAgent) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holdNext = false
	if a.gate != nil {
		close(a.gate)
		a.gate = nil
	}
}

// Hello is the link's Handler: the Hello of a new stream, resuming from
// the set applied.
func (a *linkAgent) Hello() *deliveryv1.Hello {
	a.mu.Lock()
	gate := a.gate
	a.mu.Unlock()
	if gate != nil {
		<-gate
	}
	h := &deliveryv1.Hello{Cluster: a.hello.GetCluster(), InstanceId: a.hello.GetInstanceId(), BootId: a.hello.GetBootId(), AgentVersion: a.hello.GetAgentVersion()}
	return a.applied.Resume(h)
}

// Opened is the link's Handler: a stream the host answered.
func (a *linkAgent) Opened(endpoint string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endpoint = endpoint
	a.session = fakeagent.NewSession(a.hello.GetInstanceId(), a.applied, fakeagent.SessionOptions{})
}

// Received is the link's Handler: one host message, taken in by the
// stream's session; its answers and the reports it owes are sent.
func (a *linkAgent) Received(m *deliveryv1.HostMessage) {
	ctx := context.Background()
	if as := m.GetAssignment(); as != nil {
		a.link.SetTiming(as.GetTiming())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, linkEvent{at: time.Now(), endpoint: a.endpoint, msg: m})
	taken, err := a.session.Take(m)
	if err != nil {
		a.t.Errorf("%s: %v", a.hello.GetInstanceId(), err)
	}
	if r := taken.Answered; r != nil {
		if ch, ok := a.waiting[r]; ok {
			ch <- m.GetReportResult()
			delete(a.waiting, r)
		}
	}
	for _, reply := range taken.Replies {
		a.link.Send(ctx, reply)
	}
	for _, r := range a.session.Due() {
		a.link.Send(ctx, a.session.Track(r, true))
	}
}

// Closed is the link's Handler: the stream ended.
func (a *linkAgent) Closed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, linkEvent{at: time.Now(), endpoint: a.endpoint, err: err})
	if a.holdNext && a.gate == nil {
		a.gate = make(chan struct{})
	}
}

// inject sends r on the current stream (not to be retried); its result
// comes on the channel if the host answers it.
func (a *linkAgent) inject(r *deliveryv1.Report) <-chan *deliveryv1.ReportResult {
	ch := make(chan *deliveryv1.ReportResult, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session == nil {
		return ch
	}
	a.waiting[r] = ch
	a.link.Send(context.Background(), a.session.Track(r, false))
	return ch
}

// fencedStream returns, for the stream on endpoint that ended after
// since: when its Fence came (zero: none), when the last message before
// the Fence came, and when and how the stream ended (zero: not yet).
func (a *linkAgent) fencedStream(endpoint string, since time.Time) (fence, last, end time.Time, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		switch {
		case ev.endpoint != endpoint:
		case ev.msg == nil:
			if ev.at.After(since) {
				return fence, last, ev.at, ev.err
			}
			fence, last = time.Time{}, time.Time{}
		case ev.msg.GetFence() != nil:
			if fence.IsZero() && strings.Contains(ev.msg.GetFence().GetReason(), "could not renew") {
				fence = ev.at
			}
		case fence.IsZero():
			last = ev.at
		}
	}
	return fence, last, time.Time{}, nil
}

// assigned returns when the agent was assigned role at epoch on endpoint
// (zero: not yet).
func (a *linkAgent) assigned(endpoint string, role deliveryv1.Role, epoch int64) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		if as := ev.msg.GetAssignment(); ev.endpoint == endpoint && as.GetRole() == role && as.GetEpoch() == epoch {
			return ev.at
		}
	}
	return time.Time{}
}

// heard counts the host messages that came on endpoint after t.
func (a *linkAgent) heard(endpoint string, t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, ev := range a.events {
		if ev.msg != nil && ev.endpoint == endpoint && ev.at.After(t) {
			n++
		}
	}
	return n
}

// firstSetAfter waits for the first desired set that came after t.
func (a *linkAgent) firstSetAfter(t *testing.T, ctx context.Context, after time.Time) *deliveryv1.DesiredSet {
	t.Helper()
	var set *deliveryv1.DesiredSet
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, ev := range a.events {
			if s := ev.msg.GetDesiredSet(); s != nil && ev.at.After(after) {
				set = s
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no desired set came: %v\n%s", err, a.describe())
	}
	return set
}

// streamEnds counts the streams that ended.
func (a *linkAgent) streamEnds() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, ev := range a.events {
		if ev.msg == nil {
			n++
		}
	}
	return n
}

// lastSet is the desired set the agent applied last.
func (a *linkAgent) lastSet() *deliveryv1.DesiredSet { return a.applied.Set() }

// assignedAny returns when the agent was first assigned role, at any
// epoch, on endpoint (zero: not yet).
func (a *linkAgent) assignedAny(endpoint string, role deliveryv1.Role) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		if as := ev.msg.GetAssignment(); ev.endpoint == endpoint && as != nil && as.GetRole() == role {
			return ev.at
		}
	}
	return time.Time{}
}

// firstAssignment is the first Assignment the agent got on endpoint (nil:
// none yet).
func (a *linkAgent) firstAssignment(endpoint string) *deliveryv1.Assignment {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		if as := ev.msg.GetAssignment(); ev.endpoint == endpoint && as != nil {
			return as
		}
	}
	return nil
}

// fenceAfter reports whether a Fence for epoch came on endpoint after t.
func (a *linkAgent) fenceAfter(endpoint string, epoch int64, t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		if f := ev.msg.GetFence(); ev.endpoint == endpoint && f != nil && f.GetEpoch() == epoch && ev.at.After(t) {
			return true
		}
	}
	return false
}

// describe lists what the agent heard, for a failure message.
func (a *linkAgent) describe() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, ev := range a.events {
		if ev.msg.GetHeartbeat() != nil {
			continue
		}
		fmt.Fprintf(&b, "  %s %s: ", ev.at.Format("15:04:05.000"), ev.endpoint)
		switch m := ev.msg; {
		case m == nil:
			fmt.Fprintf(&b, "stream ended: %v", ev.err)
		case m.GetAssignment() != nil:
			fmt.Fprintf(&b, "assignment %s epoch %d", m.GetAssignment().GetRole(), m.GetAssignment().GetEpoch())
		case m.GetFence() != nil:
			fmt.Fprintf(&b, "fence epoch %d: %s", m.GetFence().GetEpoch(), m.GetFence().GetReason())
		case m.GetDesiredSet() != nil:
			fmt.Fprintf(&b, "desired set version %d, %d add-ons", m.GetDesiredSet().GetVersion(), len(m.GetDesiredSet().GetAddons()))
		case m.GetReportResult() != nil:
			fmt.Fprintf(&b, "report result %v", m.GetReportResult())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestEtcdSlowForOneReplica: replica a reaches etcd through a proxy that
// adds latency to each direction; b reaches it directly. i-1, the one
// member, is the executor with its stream on a (the real agent's link,
// given both addresses). A grant or renewal of a's session lease may take
// as long as the freshness window (session TTL − fence-after − margin)
// and still keep its sessions fresh. In each phase, in order:
//   - well below a heartbeat interval (20ms each way): SDK requests on a
//     succeed, slower by at least a round trip, a stays ready, and an
//     update converges through i-1;
//   - beyond a heartbeat interval, within the window (150ms each way): the
//     same — a renewal answered in more than an interval still counts;
//   - beyond the window (600ms each way: a renewal's round trip exceeds
//     it): SDK reads on a still succeed and a stays ready, but a cannot
//     keep sessions fresh, so i-1's stream there is fenced
//     (session_not_renewed) and a refuses it again; the agent must get
//     served all the same — by b — and an update (sent through b: a's
//     writes need several round trips, each past the window) converges;
//   - latency gone: a is ready and serves requests as before.
func TestEtcdSlowForOneReplica(t *testing.T) {
	// The agent's open timeout, in the ratio the real agent's default
	// (10s) has to the default freshness window (session TTL − fence-after
	// − margin, 4s): long enough for a slow replica to answer a Hello.
	slowOpenTimeout := (dlSessionTTL - dlFenceAfter - dlMargin) * 5 / 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	proxy := netproxy.Start(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	env := newDLEnvVia(t, etcd.Endpoints(), [][]string{{"http://" + proxy.Addr()}, nil},
		servertest.WithReadinessInterval(100*time.Millisecond))
	ra, rb := env.replica(0), env.replica(1)
	const cluster, addonName = "slow", "coredns"
	uid, from, err := env.createCluster(ctx, cluster, []string{"i-1"})
	if err != nil {
		t.Fatal(err)
	}
	agent := startLinkAgent(t, env, uid, cluster, "i-1", slowOpenTimeout, ra.srv.GRPCAddr(), rb.srv.GRPCAddr())
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		e, eerr := env.executor(ctx, uid)
		return s["i-1"] == ra.name && e.GetInstanceId() == "i-1", errors.Join(err, eerr)
	}); err != nil {
		t.Fatalf("i-1 is not the executor with its stream on %s: %v", ra.name, err)
	}
	if _, err := rb.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
		ConfigurationValues: aws.String(dlConfig(addonName, 1))}); err != nil {
		t.Fatalf("CreateAddon %s: %v", addonName, err)
	}
	waitAddon(t, ctx, env, uid, addonName, 1, "the add-on ACTIVE through i-1 on "+ra.name)
	once := ra.srv.EKS(t, func(o *eks.Options) { o.Retryer = aws.NopRetryer{} })

	window := dlSessionTTL - dlFenceAfter - dlMargin
	phases := []struct {
		name    string
		latency time.Duration
		// beyond: a renewal's round trip exceeds the freshness window.
		beyond bool
	}{
		{"below a heartbeat interval", 20 * time.Millisecond, false},
		{"beyond a heartbeat interval, within the window", 150 * time.Millisecond, false},
		{"beyond the window", 600 * time.Millisecond, true},
		{"latency gone", 0, false},
	}
	gen := int64(1)
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			if ph.beyond != (2*ph.latency > window) {
				t.Fatalf("phase %q: a round trip of %s against the window %s", ph.name, 2*ph.latency, window)
			}
			// Beyond the window a's writes (several round trips) would
			// run into the store's request deadline: the update goes
			// through b.
			writer, updateName := once, "UpdateAddon"
			if ph.beyond {
				writer, updateName = rb.eks, "UpdateAddon through "+rb.name
			}
			proxy.SetLatency(ph.latency)
			start := time.Now()
			// SDK requests on a: reads are answered by a's read view
			// (which its watch keeps current through the slow link), the
			// write needs at least one etcd round trip.
			var took []string
			for _, call := range []struct {
				name  string
				write bool
				do    func() error
			}{
				{"DescribeCluster", false, func() error {
					_, err := once.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
					return err
				}},
				{"ListAddons", false, func() error {
					_, err := once.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cluster)})
					return err
				}},
				{updateName, !ph.beyond, func() error {
					_, err := writer.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
						ConfigurationValues: aws.String(dlConfig(addonName, int(gen+1)))})
					return err
				}},
			} {
				callStart := time.Now()
				err := call.do()
				d := time.Since(callStart)
				took = append(took, fmt.Sprintf("%s %s", call.name, d.Round(time.Millisecond)))
				if err != nil {
					t.Fatalf("%s with %s latency each way on %s: %v (after %s)", call.name, ph.latency, ra.name, err, d)
				}
				if call.write && d < 2*ph.latency {
					t.Errorf("%s on %s took %s, less than one etcd round trip (%s)", call.name, ra.name, d, 2*ph.latency)
				}
			}
			gen++
			if code := httpStatus(t, ra.srv.URL+"/readyz"); code != http.StatusOK {
				t.Errorf("%s /readyz %d with %s latency each way", ra.name, code, ph.latency)
			}
			if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
				a, err := env.addon(ctx, uid, addonName)
				return settled(a, 0) && a.GetGeneration() == gen, err
			}); err != nil {
				t.Fatalf("the update at %s latency each way did not converge: %v; i-1 heard:\n%s", ph.latency, err, agent.describe())
			}
			converged := time.Since(start)
			fenced, _, _, endErr := agent.fencedStream(ra.srv.GRPCAddr(), start)
			switch {
			case ph.beyond && fenced.IsZero():
				t.Errorf("with renewals beyond the freshness window, i-1's stream on %s was not fenced for not renewing (ended: %v)\n%s", ra.name, endErr, agent.describe())
			case ph.beyond && agent.heard(ra.srv.GRPCAddr(), fenced) > 0:
				// A replica that cannot keep a session fresh refuses a
				// stream before saying a word; admitted, the agent would
				// take it for working and keep coming back.
				t.Errorf("after the fence, %s admitted i-1 again although it cannot keep its session fresh\n%s", ra.name, agent.describe())
			case !ph.beyond && !fenced.IsZero():
				t.Logf("at %s latency i-1's stream on %s was fenced %s in (not renewed in time, under load)", ph.latency, ra.name, fenced.Sub(start).Round(time.Millisecond))
			}
			s, _ := env.sessions(ctx, uid)
			e, _ := env.executor(ctx, uid)
			fencedIn := "never"
			if !fenced.IsZero() {
				fencedIn = fenced.Sub(start).Round(time.Millisecond).String() + " in"
			}
			t.Logf("latency %s each way: on %s %s; the update converged %s in; i-1's stream on %s fenced %s; i-1 now on %s, executor %s epoch %d",
				ph.latency, ra.name, strings.Join(took, ", "), converged.Round(time.Millisecond), ra.name, fencedIn, s["i-1"], e.GetInstanceId(), e.GetEpoch())
		})
	}
	agent.stop()
	env.checkHistorySince(t, ctx, cluster, uid, from)
}
