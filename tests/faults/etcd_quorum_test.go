package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// storeRequestTimeout is the store's deadline for each etcd request
// (store.Options.RequestTimeout's default, which the server keeps;
// docs/operations.md, "Limits and timeouts"): until the replica knows the
// quorum is lost, a request waits for it and answers 503.
const storeRequestTimeout = 5 * time.Second

// TestEtcdQuorumLoss runs saltbush on a 3-member etcd cluster and stops
// two members, the leader among them (from the time the second is cut
// off, quorum is lost). While quorum is lost: the agent holding the
// cluster's executor grant is fenced (session_not_renewed) and its streams
// get no new grant; /readyz answers 503 and gRPC health NOT_SERVING; once
// the replica's probes have failed for longer than an election takes, it
// refuses requests at once (saltbush_etcd_requests_refused 1), and a burst
// of concurrent requests, reads and writes, each answers
// ServiceUnavailableException (503) and nothing hangs; the goroutines the
// burst took are given back. Once the members are back: ready again
// without anyone's help, writes succeed, what was written before is
// intact, and the agent is assigned again.
//
// Refusing at once is a choice kube-apiserver does not make (its requests
// wait out their etcd deadline): a request that cannot be served should
// not hold a client, a connection and a goroutine for seconds, nor make a
// retrying client wait that long per attempt. The grace before it (longer
// than an election) keeps a change of leader in a healthy cluster from
// refusing anything, and the probes every quarter second while etcd fails
// see the quorum come back.
func TestEtcdQuorumLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	members := startProxiedMembers(ctx, t)
	srv := servertest.Start(t, servertest.WithEtcdEndpoints(members.proxiedEndpoints()),
		servertest.WithReadinessInterval(100*time.Millisecond), servertest.WithConfig(dlTiming))
	client := srv.EKS(t)
	conn := srv.GRPC(t)
	health := healthpb.NewHealthClient(conn)

	// What is written before the loss must be intact after it.
	c := setupLoadClusters(ctx, t, srv, "quorum", 1)[0]
	identity := controlv1.NewIdentityControlServiceClient(conn)
	principals := []string{"arn:aws:iam::000000000000:role/quorum-before", "arn:aws:iam::000000000000:role/quorum-during",
		"arn:aws:iam::000000000000:role/quorum-after"}
	for _, arn := range principals {
		if _, err := identity.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	addon, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String("saltbush-pod-identity"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{
			{ServiceAccount: aws.String("saltbush-pod-identity-controller"), RoleArn: aws.String("arn:aws:iam::000000000000:role/controller")},
			{ServiceAccount: aws.String("saltbush-pod-identity-node"), RoleArn: aws.String("arn:aws:iam::000000000000:role/node")},
		}})
	if err != nil {
		t.Fatalf("CreateAddon before the loss: %v", err)
	}
	if _, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(c.name),
		PrincipalArn: aws.String(principals[0]), KubernetesGroups: []string{"before"}}); err != nil {
		t.Fatalf("CreateAccessEntry before the loss: %v", err)
	}

	// A guest agent, the cluster's only member, holds the executor grant.
	if _, err := controlv1.NewClusterControlServiceClient(conn).AddMember(ctx, &controlv1.AddMemberRequest{
		Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: c.name}, InstanceId: "i-quorum"}); err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	agent := startReconnectingAgent(t, srv.AgentConn(t, c.uid, "i-quorum"),
		&deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: srv.Config.DevAccount, Name: c.name}, InstanceId: "i-quorum", BootId: "boot-1"})
	before := agent.waitAssigned(t, time.Time{}, 30*time.Second)
	waitReady(ctx, t, srv, health, healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	keyspace := srv.Etcd(t) // made now, so its connections are in the baseline
	baseline := settledGoroutines()

	// Lose quorum: a follower, then the leader, each cut off at once.
	// (Stopped together, the leader may hand its leadership to the other
	// member that is stopping, and wait etcd's request timeout for it.)
	lead := members.leader(ctx, t)
	lost := []int{(lead + 1) % members.Size(), lead}
	members.cut(lost[0])
	cutAt := time.Now()
	members.cut(lost[1])
	t.Logf("quorum lost: members %v cut off and stopped, the leader in %s; %d goroutines before",
		lost, time.Since(cutAt).Round(time.Millisecond), baseline)

	waitReady(ctx, t, srv, health, healthpb.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable)
	t.Logf("/readyz 503 and health NOT_SERVING %s after the cut", time.Since(cutAt).Round(time.Millisecond))

	// The executor's stream is fenced once its session cannot be renewed,
	// and then ended: no grant outlives what the session promises.
	fenced := agent.waitFenced(t, before, 30*time.Second)
	if got, want := fenced.fence.GetReason(), "saltbush could not renew the session"; got != want {
		t.Errorf("Fence reason %q, want %q", got, want)
	}
	if status.Code(fenced.end) != codes.Unavailable {
		t.Errorf("fenced stream ended with %v, want Unavailable (session not renewed)", fenced.end)
	}
	if since := fenced.fencedAt.Sub(cutAt); since > 3*dlSessionTTL {
		t.Errorf("fenced %s after the cut, want within 3× the session TTL (%s)", since, dlSessionTTL)
	}
	t.Logf("executor fenced %s after the cut (session TTL %s)", fenced.fencedAt.Sub(cutAt).Round(time.Millisecond), dlSessionTTL)
	waitRefusing(ctx, t, srv, 1)
	t.Logf("requests refused at once from %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	lossBaseline := settledGoroutines()

	burst := quorumBurst(ctx, t, srv, c, principals[1], addon)
	t.Logf("burst of %d requests under quorum loss: every one 503, the slowest after %s, the median after %s (the store's request timeout is %s); goroutines %d before, %d at most during, %d after",
		burst.requests, burst.slowest.Round(time.Microsecond), burst.median.Round(time.Microsecond), storeRequestTimeout, lossBaseline, burst.peak,
		settleGoroutines(t, lossBaseline, "after the burst"))
	if burst.peak <= lossBaseline {
		t.Errorf("goroutines during the burst %d, not above the %d before: the requests were not in flight together", burst.peak, lossBaseline)
	}

	if *long {
		// The SDK's default retryer gives up too, with the same answer.
		start := time.Now()
		_, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(c.name)})
		wanterr.AWS(t, err, "ServiceUnavailableException", http.StatusServiceUnavailable)
		t.Logf("with the SDK's retries, DescribeCluster answered 503 after %s", time.Since(start).Round(time.Millisecond))
	}

	// Recovery: with the first member back, quorum is (not before the
	// restart begins).
	recoveredAt := time.Now()
	if err := members.restart(ctx, lost[0]); err != nil {
		t.Fatal(err)
	}
	quorumAt := time.Now()
	if err := members.restart(ctx, lost[1]); err != nil {
		t.Fatal(err)
	}
	t.Logf("quorum lost for %s; both members back %s after the cut", quorumAt.Sub(cutAt).Round(time.Millisecond),
		time.Since(cutAt).Round(time.Millisecond))
	waitReady(ctx, t, srv, health, healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	waitRefusing(ctx, t, srv, 0)
	if _, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(c.name),
		PrincipalArn: aws.String(principals[2]), KubernetesGroups: []string{"after"}}); err != nil {
		t.Fatalf("CreateAccessEntry after recovery: %v", err)
	}
	got, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String("saltbush-pod-identity")})
	if err != nil {
		t.Fatalf("DescribeAddon after recovery: %v", err)
	}
	if aws.ToString(got.Addon.AddonArn) != aws.ToString(addon.Addon.AddonArn) || len(got.Addon.PodIdentityAssociations) != 2 {
		t.Errorf("add-on after recovery: %s with %d associations, want %s with 2", aws.ToString(got.Addon.AddonArn),
			len(got.Addon.PodIdentityAssociations), aws.ToString(addon.Addon.AddonArn))
	}
	entry, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principals[0])})
	if err != nil || len(entry.AccessEntry.KubernetesGroups) != 1 || entry.AccessEntry.KubernetesGroups[0] != "before" {
		t.Errorf("access entry written before the loss: %v, %v", entry, err)
	}
	// Nothing the burst tried was half made.
	if _, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principals[1])}); err == nil {
		t.Errorf("the access entry of %s, refused under quorum loss, exists", principals[1])
	}
	checkKeyspace(ctx, t, keyspace)

	// The agent is a grant holder again, and got no grant while the
	// session could not be renewed.
	after := agent.waitAssigned(t, recoveredAt, 30*time.Second)
	t.Logf("agent assigned again %s after the first member's restart began (%s, epoch %d; before: epoch %d)",
		after.assignedAt.Sub(recoveredAt).Round(time.Millisecond), after.assignment.GetRole(), after.assignment.GetEpoch(), before.assignment.GetEpoch())
	if after.assignment.GetRole() != deliveryv1.Role_ROLE_EXECUTOR {
		t.Errorf("after recovery the only member is %s, want EXECUTOR", after.assignment.GetRole())
	}
	for _, s := range agent.log() {
		if s.assignment != nil && s.assignedAt.After(fenced.fencedAt) && s.assignedAt.Before(recoveredAt) {
			t.Errorf("assigned %s at epoch %d %s after the fence, while quorum was lost", s.assignment.GetRole(),
				s.assignment.GetEpoch(), s.assignedAt.Sub(fenced.fencedAt))
		}
	}
	t.Logf("goroutines after recovery: %d (%d before the loss)", settleGoroutines(t, baseline, "after recovery"), baseline)
}

// waitReady waits until gRPC health and /readyz both say want (30 s).
// Health is asked first: it answers at once, while /readyz may take its
// 2 s ping to answer 503.
func waitReady(ctx context.Context, t *testing.T, srv *servertest.Server, health healthpb.HealthClient,
	want healthpb.HealthCheckResponse_ServingStatus, readyz int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hc, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		code := 0
		if err == nil && hc.GetStatus() == want {
			if resp, herr := http.Get(srv.URL + "/readyz"); herr == nil {
				code = resp.StatusCode
				_ = resp.Body.Close()
			}
			if code == readyz {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v (%v), /readyz %d; want %v and %d", hc.GetStatus(), err, code, want, readyz)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRefusing waits (30 s) until the replica's
// saltbush_etcd_requests_refused is want.
func waitRefusing(ctx context.Context, t *testing.T, srv *servertest.Server, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := metricValue(ctx, srv.URL+"/metrics", "saltbush_etcd_requests_refused")
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("saltbush_etcd_requests_refused = %v (%v), want %v", got, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricValue reads one unlabelled sample of a Prometheus text page.
func metricValue(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// settledGoroutines counts the process's goroutines once idle HTTP
// connections are closed (their goroutines belong to no request).
func settledGoroutines() int {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return runtime.NumGoroutine()
}

// settleGoroutines waits (30 s) until the process runs no more goroutines
// than baseline plus a margin for what comes and goes by itself (etcd's
// own peer pipelines and streams, timers); it returns the count.
func settleGoroutines(t *testing.T, baseline int, when string) int {
	t.Helper()
	limit := baseline + 20 + baseline/10
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := settledGoroutines()
		if n <= limit {
			return n
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutines, want at most %d (%d before): a pile-up", when, n, limit, baseline)
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// burstResult is what quorumBurst saw.
type burstResult struct {
	requests        int
	slowest, median time.Duration
	peak            int
}

// quorumBurst sends concurrent requests of every kind, without the SDK's
// retries, while quorum is lost: each must answer 503
// ServiceUnavailableException, and none may hang (3× the store's request
// timeout). It counts the process's goroutines while they are in flight.
func quorumBurst(ctx context.Context, t *testing.T, srv *servertest.Server, c loadCluster, principal string, addon *eks.CreateAddonOutput) burstResult {
	t.Helper()
	const perKind = 5
	transport := &http.Transport{MaxIdleConnsPerHost: 100}
	defer transport.CloseIdleConnections()
	once := srv.EKS(t, func(o *eks.Options) {
		o.RetryMaxAttempts = 1
		o.HTTPClient = &http.Client{Timeout: 60 * time.Second, Transport: transport}
	})
	cn := aws.String(c.name)
	kinds := []struct {
		name string
		call func(ctx context.Context, i int) error
	}{
		{"CreateCluster", func(ctx context.Context, i int) error {
			_, err := once.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(fmt.Sprintf("during-%d", i)),
				RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"), ResourcesVpcConfig: &types.VpcConfigRequest{}})
			return err
		}},
		{"CreateAddon", func(ctx context.Context, _ int) error {
			_, err := once.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: cn, AddonName: aws.String("coredns")})
			return err
		}},
		{"UpdateAddon", func(ctx context.Context, i int) error {
			_, err := once.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: cn, AddonName: addon.Addon.AddonName,
				ConfigurationValues: aws.String(fmt.Sprintf(`{"message": "during %d"}`, i))})
			return err
		}},
		{"CreateAccessEntry", func(ctx context.Context, _ int) error {
			_, err := once.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principal)})
			return err
		}},
		{"DescribeCluster", func(ctx context.Context, _ int) error {
			_, err := once.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: cn})
			return err
		}},
		{"ListClusters", func(ctx context.Context, _ int) error {
			_, err := once.ListClusters(ctx, &eks.ListClustersInput{})
			return err
		}},
		{"DescribeAddon", func(ctx context.Context, _ int) error {
			_, err := once.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: cn, AddonName: addon.Addon.AddonName})
			return err
		}},
		{"ListAccessEntries", func(ctx context.Context, _ int) error {
			_, err := once.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: cn})
			return err
		}},
	}
	type answer struct {
		kind    string
		err     error
		elapsed time.Duration
	}
	answers := make(chan answer, len(kinds)*perKind)
	var wg sync.WaitGroup
	for _, k := range kinds {
		for i := range perKind {
			wg.Go(func() {
				start := time.Now()
				err := k.call(ctx, i)
				answers <- answer{k.name, err, time.Since(start)}
			})
		}
	}
	// Counted at once as well: refused at once, the requests may all be
	// answered before the first tick.
	res := burstResult{requests: len(kinds) * perKind, peak: runtime.NumGoroutine()}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(3*storeRequestTimeout + 5*time.Second)
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			res.peak = max(res.peak, runtime.NumGoroutine())
		case <-bound:
			t.Fatalf("burst under quorum loss: requests still unanswered after %s: a hang", 3*storeRequestTimeout+5*time.Second)
		}
	}
	close(answers)
	var elapsed []time.Duration
	for a := range answers {
		res.slowest = max(res.slowest, a.elapsed)
		elapsed = append(elapsed, a.elapsed)
		if a.elapsed > 3*storeRequestTimeout {
			t.Errorf("%s answered after %s, want within 3× the store's request timeout (%s)", a.kind, a.elapsed, 3*storeRequestTimeout)
		}
		var unavailable *types.ServiceUnavailableException
		if !errors.As(a.err, &unavailable) {
			t.Errorf("%s under quorum loss: %v, want ServiceUnavailableException", a.kind, a.err)
			continue
		}
		wanterr.AWS(t, a.err, "ServiceUnavailableException", http.StatusServiceUnavailable)
	}
	slices.Sort(elapsed)
	res.median = elapsed[len(elapsed)/2]
	return res
}

// reconnectingAgent is a guest agent that keeps a Connect stream open,
// reconnecting (after a pause, as the real agent backs off) whenever one
// ends, and records what each stream heard: its first Assignment, a
// Fence, and how it ended.
type reconnectingAgent struct {
	mu      sync.Mutex
	streams []*agentStreamLog
	changed chan struct{}
}

// agentStreamLog is one stream of a reconnectingAgent.
type agentStreamLog struct {
	assignment *deliveryv1.Assignment
	assignedAt time.Time
	fence      *deliveryv1.Fence
	fencedAt   time.Time
	end        error
	ended      bool
}

func startReconnectingAgent(t *testing.T, conn *grpc.ClientConn, hello *deliveryv1.Hello) *reconnectingAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &reconnectingAgent{changed: make(chan struct{}, 1)}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			a.run(ctx, conn, hello)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return a
}

// run is one stream, until it ends.
func (a *reconnectingAgent) run(ctx context.Context, conn *grpc.ClientConn, hello *deliveryv1.Hello) {
	s := &agentStreamLog{}
	a.update(func() { a.streams = append(a.streams, s) })
	stream, err := fakeagent.Connect(ctx, conn, fakeagent.Options{Hello: hello, Heartbeats: fakeagent.Ticker, HeartbeatEvery: 100 * time.Millisecond})
	if err != nil {
		a.update(func() { s.end, s.ended = err, true })
		return
	}
	defer stream.Close()
	for {
		m, err := stream.Recv()
		if err != nil {
			a.update(func() { s.end, s.ended = err, true })
			return
		}
		switch {
		case m.GetAssignment() != nil && s.assignment == nil:
			a.update(func() { s.assignment, s.assignedAt = m.GetAssignment(), time.Now() })
		case m.GetFence() != nil && s.fence == nil:
			a.update(func() { s.fence, s.fencedAt = m.GetFence(), time.Now() })
		}
	}
}

func (a *reconnectingAgent) update(f func()) {
	a.mu.Lock()
	f()
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// log is a copy of what the streams heard so far.
func (a *reconnectingAgent) log() []agentStreamLog {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]agentStreamLog, 0, len(a.streams))
	for _, s := range a.streams {
		out = append(out, *s)
	}
	return out
}

// waitFor waits until some stream's record satisfies ok.
func (a *reconnectingAgent) waitFor(t *testing.T, what string, within time.Duration, ok func(agentStreamLog) bool) agentStreamLog {
	t.Helper()
	deadline := time.After(within)
	for {
		for _, s := range a.log() {
			if ok(s) {
				return s
			}
		}
		select {
		case <-a.changed:
		case <-deadline:
			t.Fatalf("agent: no stream %s within %s; streams: %+v", what, within, a.log())
		}
	}
}

// waitAssigned waits for a stream assigned after since.
func (a *reconnectingAgent) waitAssigned(t *testing.T, since time.Time, within time.Duration) agentStreamLog {
	t.Helper()
	return a.waitFor(t, "assigned after "+since.Format(time.TimeOnly), within, func(s agentStreamLog) bool {
		return s.assignment != nil && s.assignedAt.After(since)
	})
}

// waitFenced waits until the stream assigned as held (its assignment) was
// fenced and ended.
func (a *reconnectingAgent) waitFenced(t *testing.T, held agentStreamLog, within time.Duration) agentStreamLog {
	t.Helper()
	return a.waitFor(t, "fenced and ended", within, func(s agentStreamLog) bool {
		return s.assignment == held.assignment && s.fence != nil && s.ended
	})
}
