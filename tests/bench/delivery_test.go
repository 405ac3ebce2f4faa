package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/fakeagent"
)

// The delivery benchmarks: how fast a CreateAddon converges to
// ACTIVE through an agent stream, how many idle agent streams one saltbush
// holds and how fast it pushes one change to all of them, and how fast it
// ingests an executor's reports. Timing is the production default
// (delivery.DefaultConfig). See README.md, "Delivery benchmarks".

// Stream-count settings of BenchmarkDeliveryStreams: a flag, else the
// environment, else the default.
var (
	deliveryStreamsFlag     = flag.Int("delivery-streams", 0, "BenchmarkDeliveryStreams: agent streams to hold (default 10000; or env "+StreamsEnv+")")
	deliveryClusterSizeFlag = flag.Int("delivery-cluster-size", 0, "BenchmarkDeliveryStreams: streams (members) per cluster (default 1000; or env "+StreamsPerClusterEnv+")")
)

const (
	// StreamsEnv sets BenchmarkDeliveryStreams' stream count.
	StreamsEnv = "SALTBUSH_BENCH_STREAMS"
	// StreamsPerClusterEnv sets how many of those streams share a cluster.
	StreamsPerClusterEnv = "SALTBUSH_BENCH_STREAMS_PER_CLUSTER"
	// DeliveryProfileEnv names a directory where BenchmarkDeliveryStreams
	// writes profiles of the server process (the agents run in a child):
	// CPU while the streams connect, idle and take the pushes, and heap
	// and goroutines while they are idle. Do not combine it with
	// -cpuprofile.
	DeliveryProfileEnv = "SALTBUSH_BENCH_DELIVERY_PROFILE_DIR"
	// fleetEnv makes the test binary the agent fleet of a
	// BenchmarkDeliveryStreams run (a child process); it names the spec.
	fleetEnv = "SALTBUSH_BENCH_DELIVERY_FLEET"

	defaultStreams           = 10000
	defaultStreamsPerCluster = 1000
)

// ---------------------------------------------------------------------
// An in-process agent (BenchmarkDeliveryConvergence, -ReportIngestion).

// benchAgent is a guest agent's stream with its own agent certificate,
// over real gRPC (a fakeagent.Stream); host messages other than
// heartbeats land in msgs. Like the real agent it sends a Heartbeat
// whenever it has sent nothing for a heartbeat interval (the
// Assignment's): saltbush ends the stream of an agent silent for
// fence-after. session is its protocol state, for instantExecutor.
type benchAgent struct {
	stream  *fakeagent.Stream
	msgs    <-chan fakeagent.Received
	session *fakeagent.Session
}

func dialBenchAgent(b *testing.B, srv *servertest.Server, uid, account, cluster, instance string) *benchAgent {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	stream, err := fakeagent.Connect(ctx, srv.AgentConn(b, uid, instance), fakeagent.Options{Hello: &deliveryv1.Hello{
		Cluster: &deliveryv1.ClusterName{AccountId: account, Name: cluster}, InstanceId: instance, BootId: "boot-1", AgentVersion: "bench",
	}})
	if err != nil {
		b.Fatal(err)
	}
	return &benchAgent{stream: stream, msgs: stream.Receive(1024),
		session: fakeagent.NewSession(instance, &fakeagent.Applied{}, fakeagent.SessionOptions{})}
}

func (a *benchAgent) send(m *deliveryv1.AgentMessage) error { return a.stream.Send(m) }

// next returns the next host message, or an error after within.
func (a *benchAgent) next(within time.Duration) (*deliveryv1.HostMessage, error) {
	select {
	case r, ok := <-a.msgs:
		if !ok || r.Err != nil {
			return nil, fmt.Errorf("stream ended: %v", r.Err)
		}
		return r.Msg, nil
	case <-time.After(within):
		return nil, fmt.Errorf("no host message within %s", within)
	}
}

// executorEpoch waits for the agent's EXECUTOR assignment (which its
// session takes in).
func (a *benchAgent) executorEpoch(b *testing.B) int64 {
	b.Helper()
	for {
		m, err := a.next(30 * time.Second)
		if err != nil {
			b.Fatalf("waiting for the executor assignment: %v", err)
		}
		if as := m.GetAssignment(); as != nil {
			if as.GetRole() != deliveryv1.Role_ROLE_EXECUTOR {
				b.Fatalf("assigned %s, want EXECUTOR", as.GetRole())
			}
			if _, err := a.session.Take(m); err != nil {
				b.Fatal(err)
			}
			return as.GetEpoch()
		}
	}
}

// memberCluster makes an ACTIVE cluster with the given members and
// returns its uid.
func (ab *addonBench) memberCluster(ctx context.Context, name string, members []string) (string, error) {
	uid, err := ab.activeCluster(ctx, name)
	if err != nil {
		return "", err
	}
	ref := &controlv1.ClusterRef{AccountId: ab.account, Name: name}
	for _, m := range members {
		if _, err := ab.control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: m}); err != nil {
			return "", fmt.Errorf("add member %s to %s: %w", m, name, err)
		}
	}
	return uid, nil
}

// dist is the nearest-rank summary of a set of durations.
type dist struct {
	n                  int
	p50, p99, max, min time.Duration
}

func distOf(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return dist{}
	}
	return dist{n: len(s), p50: percentile(s, 0.50), p99: percentile(s, 0.99), max: s[len(s)-1], min: s[0]}
}

// saveSummary writes a summary under results/ (gitignored) and says where.
func saveSummary(file, summary string) string {
	if err := os.MkdirAll("results", 0o755); err != nil {
		return summary
	}
	f := filepath.Join("results", fmt.Sprintf("%s-%s.txt", file, time.Now().Format("20060102-150405")))
	if err := os.WriteFile(f, []byte(summary), 0o644); err != nil {
		return summary
	}
	return summary + fmt.Sprintf("summary written to %s\n", filepath.Join("tests/bench", f))
}

// ---------------------------------------------------------------------
// (a) Convergence.

// convEvent is what the instantly-ready executor saw, when.
type convEvent struct {
	kind string // "pushed" (a new generation arrived), "ready", "removed" (its report was accepted)
	name string
	at   time.Time
}

// instantExecutor is an executor that applies nothing and waits for
// nothing: its session acknowledges every desired set and at once it
// reports READY for every add-on (REMOVED for a tombstone) it has not yet
// reported at that generation. A fence or a report not accepted fails the
// run. It runs until the stream ends.
func instantExecutor(a *benchAgent, events chan<- convEvent, fail func(error)) {
	for in := range a.msgs {
		if in.Err != nil {
			return
		}
		m, at := in.Msg, in.At
		if m.GetFence() != nil {
			fail(fmt.Errorf("the executor was fenced: %v", m.GetFence()))
			return
		}
		taken, err := a.session.Take(m)
		if err != nil {
			fail(err)
			return
		}
		for _, reply := range taken.Replies {
			if err := a.send(reply); err != nil {
				fail(fmt.Errorf("send Ack: %w", err))
				return
			}
		}
		if rep := taken.Answered; rep != nil {
			r := m.GetReportResult()
			if !r.GetAccepted() {
				fail(fmt.Errorf("%s report for %s not accepted: %s", rep.GetPhase(), r.GetAddon(), r.GetReason()))
				return
			}
			kind := "ready"
			if rep.GetPhase() == deliveryv1.Phase_PHASE_REMOVED {
				kind = "removed"
			}
			events <- convEvent{kind: kind, name: r.GetAddon(), at: at}
		}
		for _, rep := range a.session.Due() {
			if rep.GetPhase() == deliveryv1.Phase_PHASE_READY {
				events <- convEvent{kind: "pushed", name: rep.GetAddon(), at: at}
			}
			if err := a.send(a.session.Track(rep, true)); err != nil {
				fail(fmt.Errorf("send Report: %w", err))
				return
			}
		}
	}
}

// convergence is what one cycle measured: create an add-on, watch it
// become ACTIVE, delete it, watch it go.
type convergence struct {
	create, pushed, accepted, active, total time.Duration
	deleteCall, removed, gone               time.Duration
}

// BenchmarkDeliveryConvergence measures, cycle after cycle on one add-on
// of one ACTIVE cluster whose one member runs an instantly-ready executor
// (instantExecutor): CreateAddon through the AWS SDK, then DescribeAddon in
// a tight loop until it shows ACTIVE; then DeleteAddon and DescribeAddon
// until the add-on is gone. The baseline is the CreateAddon call itself.
func BenchmarkDeliveryConvergence(b *testing.B) {
	ab := newAddonBench(b)
	ctx := context.Background()
	const cluster, instance = "bench-converge", "i-executor"
	uid, err := ab.memberCluster(ctx, cluster, []string{instance})
	if err != nil {
		b.Fatal(err)
	}
	agent := dialBenchAgent(b, ab.srv, uid, ab.account, cluster, instance)
	agent.executorEpoch(b)
	events := make(chan convEvent, 64)
	var (
		failOnce sync.Once
		failed   = make(chan error, 1)
	)
	fail := func(err error) { failOnce.Do(func() { failed <- err }) }
	go instantExecutor(agent, events, fail)
	wait := func(kind string) (time.Time, error) {
		select {
		case ev := <-events:
			if ev.kind != kind || ev.name != benchAddon {
				return time.Time{}, fmt.Errorf("executor saw %s %s, want %s %s", ev.kind, ev.name, kind, benchAddon)
			}
			return ev.at, nil
		case err := <-failed:
			return time.Time{}, err
		case <-time.After(30 * time.Second):
			return time.Time{}, fmt.Errorf("no %s event within 30s", kind)
		}
	}
	describe := &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon)}
	cycle := func() (convergence, error) {
		var c convergence
		t0 := time.Now()
		if _, err := ab.sdk.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon)}); err != nil {
			return c, fmt.Errorf("CreateAddon: %w", err)
		}
		t1 := time.Now()
		for {
			out, err := ab.sdk.DescribeAddon(ctx, describe)
			if err != nil {
				return c, fmt.Errorf("DescribeAddon: %w", err)
			}
			if out.Addon.Status == ekstypes.AddonStatusActive {
				break
			}
			if out.Addon.Status != ekstypes.AddonStatusCreating {
				return c, fmt.Errorf("add-on is %s", out.Addon.Status)
			}
		}
		t3 := time.Now()
		pushedAt, err := wait("pushed")
		if err != nil {
			return c, err
		}
		readyAt, err := wait("ready")
		if err != nil {
			return c, err
		}
		c.create, c.pushed, c.accepted, c.active, c.total = t1.Sub(t0), pushedAt.Sub(t1), readyAt.Sub(t1), t3.Sub(t1), t3.Sub(t0)

		d0 := time.Now()
		if _, err := ab.sdk.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon)}); err != nil {
			return c, fmt.Errorf("DeleteAddon: %w", err)
		}
		d1 := time.Now()
		for {
			_, err := ab.sdk.DescribeAddon(ctx, describe)
			var nf *ekstypes.ResourceNotFoundException
			if errors.As(err, &nf) {
				break
			}
			if err != nil {
				return c, fmt.Errorf("DescribeAddon while deleting: %w", err)
			}
		}
		d3 := time.Now()
		removedAt, err := wait("removed")
		if err != nil {
			return c, err
		}
		c.deleteCall, c.removed, c.gone = d1.Sub(d0), removedAt.Sub(d1), d3.Sub(d1)
		return c, nil
	}
	// One untimed cycle: connections warm, the agent's first set behind it.
	if _, err := cycle(); err != nil {
		b.Fatalf("warm-up cycle: %v", err)
	}

	var (
		final []convergence
		cpu   time.Duration
	)
	b.Run("cycle", func(b *testing.B) {
		runs := make([]convergence, 0, b.N)
		stop := profileTimed(b)
		cpu0 := processCPU()
		b.ResetTimer()
		for range b.N {
			c, err := cycle()
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, c)
		}
		b.StopTimer()
		cpu = (processCPU() - cpu0) / time.Duration(b.N)
		stop()
		col := func(f func(convergence) time.Duration) dist {
			ds := make([]time.Duration, len(runs))
			for i, c := range runs {
				ds[i] = f(c)
			}
			return distOf(ds)
		}
		cr, ac, tot := col(func(c convergence) time.Duration { return c.create }), col(func(c convergence) time.Duration { return c.active }),
			col(func(c convergence) time.Duration { return c.total })
		b.ReportMetric(ms(cr.p50), "create-p50-ms")
		b.ReportMetric(ms(cr.p99), "create-p99-ms")
		b.ReportMetric(ms(ac.p50), "active-p50-ms")
		b.ReportMetric(ms(ac.p99), "active-p99-ms")
		b.ReportMetric(ms(tot.p99), "total-p99-ms")
		b.ReportMetric(float64(cpu)/float64(time.Microsecond), "cpu-us/cycle")
		final = runs
	})
	if len(final) == 0 {
		return
	}
	fmt.Print("\n" + saveSummary("delivery-convergence-fsync-"+ab.mode, summarizeConvergence(ab.mode, final, cpu)))
}

func summarizeConvergence(mode string, runs []convergence, cpu time.Duration) string {
	col := func(f func(convergence) time.Duration) dist {
		ds := make([]time.Duration, len(runs))
		for i, c := range runs {
			ds[i] = f(c)
		}
		return distOf(ds)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Delivery convergence, fsync=%s, GOMAXPROCS=%d, %d create→ACTIVE→delete→gone cycles of %s, process CPU %.0f µs/cycle\n\n",
		mode, runtime.GOMAXPROCS(0), len(runs), benchAddon, float64(cpu)/float64(time.Microsecond))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "interval\tp50 ms\tp99 ms\tmax ms\t")
	rows := []struct {
		name string
		f    func(convergence) time.Duration
	}{
		{"CreateAddon call (baseline)", func(c convergence) time.Duration { return c.create }},
		{"CreateAddon returned → executor has the set", func(c convergence) time.Duration { return c.pushed }},
		{"CreateAddon returned → READY accepted", func(c convergence) time.Duration { return c.accepted }},
		{"CreateAddon returned → DescribeAddon ACTIVE", func(c convergence) time.Duration { return c.active }},
		{"CreateAddon called → DescribeAddon ACTIVE", func(c convergence) time.Duration { return c.total }},
		{"DeleteAddon call", func(c convergence) time.Duration { return c.deleteCall }},
		{"DeleteAddon returned → REMOVED accepted", func(c convergence) time.Duration { return c.removed }},
		{"DeleteAddon returned → DescribeAddon not found", func(c convergence) time.Duration { return c.gone }},
	}
	for _, r := range rows {
		d := col(r.f)
		_, _ = fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t\n", r.name, ms(d.p50), ms(d.p99), ms(d.max))
	}
	_ = tw.Flush()
	cr, ac, tot := col(rows[0].f), col(rows[3].f), col(rows[4].f)
	fmt.Fprintf(&sb, "\nratios (same run): called→ACTIVE / CreateAddon call: p50 %.2f, p99 %.2f; returned→ACTIVE / CreateAddon call: p50 %.2f, p99 %.2f\n",
		float64(tot.p50)/float64(cr.p50), float64(tot.p99)/float64(cr.p99), float64(ac.p50)/float64(cr.p50), float64(ac.p99)/float64(cr.p99))
	verdict := "met"
	if ac.p99 >= 100*time.Millisecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "goal p99 (CreateAddon returned → ACTIVE) < 100 ms: %s (%.3f ms)\n", verdict, ms(ac.p99))
	return sb.String()
}

// ---------------------------------------------------------------------
// (c) Report ingestion.

// ingestAddons are the add-ons the ingestion benchmark's cluster runs (the
// usual EKS set plus the no-op add-on): every report also makes the
// cluster's watch re-read and re-render all of them.
var ingestAddons = []string{benchAddon, "coredns", "kube-proxy", "vpc-cni", "metrics-server"}

// ingestDepths are the report paths' in-flight windows and the raw paths'
// worker counts.
var ingestDepths = []int{1, 8}

// BenchmarkDeliveryReportIngestion measures how fast the host applies an
// executor's reports (each a real write: every add-on's reports alternate
// APPLIED and READY), sequentially and with 8 in flight on the one stream,
// against raw etcd transactions of the same size through the server's own
// etcd client, in the same run:
//
//	report            a Report on the executor's stream, until its ReportResult
//	raw-etcd-txn      If(ModRevision(k)==rev) Then(Put(k, v)), v a copy of a stored AddonRecord
//	raw-etcd-get-txn  the etcd work of one report: a linearizable Get of the record, then
//	                  If(ModRevision(k)==rev, ModRevision(executor)==erev) Then(Put(k, v))
func BenchmarkDeliveryReportIngestion(b *testing.B) {
	ab := newAddonBench(b)
	ctx := context.Background()
	const cluster, instance = "bench-ingest", "i-executor"
	uid, err := ab.memberCluster(ctx, cluster, []string{instance})
	if err != nil {
		b.Fatal(err)
	}
	agent := dialBenchAgent(b, ab.srv, uid, ab.account, cluster, instance)
	epoch := agent.executorEpoch(b)
	for _, name := range ingestAddons {
		req := &eksv1.CreateAddonRequest{ClusterName: cluster, AddonName: name}
		if name == benchAddon {
			req.ConfigurationValues = benchConfig
		}
		if _, err := ab.grpc.CreateAddon(ctx, req); err != nil {
			b.Fatalf("create %s: %v", name, err)
		}
	}
	// The executor gets the set, acknowledges it and reports every add-on
	// READY (untimed).
	uids := map[string]string{}
	for len(uids) < len(ingestAddons) {
		m, err := agent.next(30 * time.Second)
		if err != nil {
			b.Fatalf("waiting for the desired set: %v", err)
		}
		if set := m.GetDesiredSet(); set != nil && len(set.GetAddons()) == len(ingestAddons) {
			if err := agent.send(fakeagent.AckMsg(set)); err != nil {
				b.Fatal(err)
			}
			for _, d := range set.GetAddons() {
				uids[d.GetName()] = d.GetUid()
			}
		}
	}
	// seq numbers every report of the run: report seq is for add-on
	// seq%len, and an add-on's reports alternate phases, starting from the
	// READY below.
	var seq int64
	phaseOf := func(s int64) deliveryv1.Phase {
		if (s/int64(len(ingestAddons)))%2 == 0 {
			return deliveryv1.Phase_PHASE_APPLIED
		}
		return deliveryv1.Phase_PHASE_READY
	}
	send := func(phase func(int64) deliveryv1.Phase) (string, error) {
		name := ingestAddons[seq%int64(len(ingestAddons))]
		p := phase(seq)
		seq++
		return name, agent.send(fakeagent.ReportMsg(epoch, name, uids[name], 1, p))
	}
	// reports sends n reports with up to window in flight and returns each
	// one's latency and the wall time.
	reports := func(n, window int, phase func(int64) deliveryv1.Phase) ([]time.Duration, time.Duration, error) {
		type inflight struct {
			name string
			at   time.Time
		}
		q := make([]inflight, 0, window)
		lat := make([]time.Duration, 0, n)
		sent := 0
		t0 := time.Now()
		for len(lat) < n {
			for len(q) < window && sent < n {
				at := time.Now()
				name, err := send(phase)
				if err != nil {
					return nil, 0, fmt.Errorf("send Report: %w", err)
				}
				q = append(q, inflight{name, at})
				sent++
			}
			m, err := agent.next(30 * time.Second)
			if err != nil {
				return nil, 0, err
			}
			r := m.GetReportResult()
			switch {
			case m.GetFence() != nil:
				return nil, 0, fmt.Errorf("fenced: %v", m.GetFence())
			case r == nil:
				continue // a desired set or an assignment
			case r.GetAddon() != q[0].name:
				return nil, 0, fmt.Errorf("result for %s, expected %s", r.GetAddon(), q[0].name)
			case !r.GetAccepted():
				return nil, 0, fmt.Errorf("report for %s not accepted: %s", r.GetAddon(), r.GetReason())
			}
			lat = append(lat, time.Since(q[0].at))
			q = q[1:]
		}
		return lat, time.Since(t0), nil
	}
	if _, _, err := reports(len(ingestAddons), 1, func(int64) deliveryv1.Phase { return deliveryv1.Phase_PHASE_READY }); err != nil {
		b.Fatalf("initial READY reports: %v", err)
	}
	seq = 0

	// The raw paths write a copy of a stored add-on record (as a report
	// leaves it) under keys outside every cluster, so no delivery watch
	// sees them.
	stored, err := ab.etcd.Get(ctx, ab.st.Key(store.AddonKey(uid, benchAddon)))
	if err != nil || len(stored.Kvs) != 1 {
		b.Fatalf("read the add-on record: %v", err)
	}
	value := string(stored.Kvs[0].Value)
	rawKey := func(w int) string { return ab.st.Key(fmt.Sprintf("bench/delivery-report-raw/%d", w)) }
	execKey := ab.st.Key("bench/delivery-report-raw/executor")
	execRec, err := ab.etcd.Get(ctx, ab.st.Key(store.ExecutorKey(uid)))
	if err != nil || len(execRec.Kvs) != 1 {
		b.Fatalf("read the executor record: %v", err)
	}
	put, err := ab.etcd.Put(ctx, execKey, string(execRec.Kvs[0].Value))
	if err != nil {
		b.Fatal(err)
	}
	execRev := put.Header.Revision
	// Each raw op takes one of max(ingestDepths) keys (one per worker, as
	// the reports of different add-ons touch different records).
	slots := make(chan int, slices.Max(ingestDepths))
	revs := make([]int64, cap(slots))
	for w := range cap(slots) {
		resp, err := ab.etcd.Put(ctx, rawKey(w), value)
		if err != nil {
			b.Fatal(err)
		}
		revs[w] = resp.Header.Revision
		slots <- w
	}
	rawTxn := func(ctx context.Context, withGet bool) error {
		w := <-slots
		defer func() { slots <- w }()
		k, rev := rawKey(w), revs[w]
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", rev)}
		if withGet {
			got, err := ab.etcd.Get(ctx, k)
			if err != nil {
				return err
			}
			if len(got.Kvs) != 1 {
				return fmt.Errorf("%s: not found", k)
			}
			cmps = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", got.Kvs[0].ModRevision),
				clientv3.Compare(clientv3.ModRevision(execKey), "=", execRev)}
		}
		resp, err := ab.etcd.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, value)).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("%s: compare failed", k)
		}
		revs[w] = resp.Header.Revision
		return nil
	}

	results := map[string]map[int]addonResult{}
	record := func(name string, c int, r addonResult) {
		if results[name] == nil {
			results[name] = map[int]addonResult{}
		}
		results[name][c] = r
	}
	for _, d := range ingestDepths {
		b.Run(fmt.Sprintf("report/inflight=%d", d), func(b *testing.B) {
			// Warm-up, untimed.
			if _, _, err := reports(2*len(ingestAddons), d, phaseOf); err != nil {
				b.Fatal(err)
			}
			stop := profileTimed(b)
			cpu0 := processCPU()
			b.ResetTimer()
			lat, elapsed, err := reports(b.N, d, phaseOf)
			b.StopTimer()
			cpu := (processCPU() - cpu0) / time.Duration(b.N)
			stop()
			if err != nil {
				b.Fatal(err)
			}
			ds := distOf(lat)
			r := addonResult{result{n: ds.n, opsPerS: float64(ds.n) / elapsed.Seconds(), p50: ds.p50, p99: ds.p99}, cpu}
			b.ReportMetric(r.opsPerS, "ops/s")
			b.ReportMetric(ms(r.p50), "p50-ms")
			b.ReportMetric(ms(r.p99), "p99-ms")
			b.ReportMetric(float64(cpu)/float64(time.Microsecond), "cpu-us/op")
			record("report", d, r)
		})
	}
	for _, raw := range []struct {
		name    string
		withGet bool
	}{{"raw-etcd-txn", false}, {"raw-etcd-get-txn", true}} {
		for _, c := range ingestDepths {
			b.Run(fmt.Sprintf("%s/c=%d", raw.name, c), func(b *testing.B) {
				stop := profileTimed(b)
				cpu0 := processCPU()
				r := measure(b, c, func(ctx context.Context) error { return rawTxn(ctx, raw.withGet) })
				cpu := (processCPU() - cpu0) / time.Duration(b.N+c)
				stop()
				b.ReportMetric(float64(cpu)/float64(time.Microsecond), "cpu-us/op")
				record(raw.name, c, addonResult{r, cpu})
			})
		}
	}
	if len(results["report"]) == 0 {
		return
	}
	fmt.Print("\n" + saveSummary("delivery-reports-fsync-"+ab.mode, summarizeIngestion(ab.mode, len(value), results)))
}

func summarizeIngestion(mode string, valueBytes int, results map[string]map[int]addonResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Delivery report ingestion, fsync=%s, GOMAXPROCS=%d, %d add-ons on the cluster, raw value %d bytes (a stored AddonRecord)\n",
		mode, runtime.GOMAXPROCS(0), len(ingestAddons), valueBytes)
	sb.WriteString("c is the reports in flight on the one executor stream, or the raw paths' concurrent workers\n\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "path\tc\tops\tops/s\tp50 ms\tp99 ms\tcpu us/op\t")
	for _, p := range []string{"report", "raw-etcd-txn", "raw-etcd-get-txn"} {
		for _, c := range ingestDepths {
			if r, ok := results[p][c]; ok {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t\n", p, c, r.n, r.opsPerS, ms(r.p50), ms(r.p99),
					float64(r.cpu)/float64(time.Microsecond))
			}
		}
	}
	_ = tw.Flush()
	sb.WriteString("\nratios (same run): throughput report/base and CPU base/report (higher is better), p50 report/base (lower is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tc\tthroughput\tcpu\tp50\t")
	for _, base := range []string{"raw-etcd-txn", "raw-etcd-get-txn"} {
		for _, c := range ingestDepths {
			a, okA := results[base][c]
			r, okR := results["report"][c]
			if !okA || !okR || a.opsPerS == 0 || a.p50 == 0 || r.cpu == 0 {
				continue
			}
			_, _ = fmt.Fprintf(tw, "report/%s\t%d\t%.2f\t%.2f\t%.2f\t\n", base, c, r.opsPerS/a.opsPerS, float64(a.cpu)/float64(r.cpu),
				float64(r.p50)/float64(a.p50))
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// ---------------------------------------------------------------------
// (b) Many idle streams, one push to all of them.
//
// The agents run in a child process (this test binary again, with
// fleetEnv set), so the server process's memory is the server's: saltbush,
// its embedded etcd and the benchmark's few admin clients, no agent-side
// gRPC. They share the machine's cores with the server, as in-process
// clients would.

// fleetSpec is what the child needs: where to connect, whom to trust, and
// every agent's cluster, instance and certificate.
type fleetSpec struct {
	Addr     string
	CABundle []byte
	Clusters []fleetCluster
	Members  []fleetMember
}

type fleetCluster struct {
	Account, Name, UID string
}

type fleetMember struct {
	Cluster         int
	Instance        string
	CertPEM, KeyPEM []byte
}

// memSample is one process's memory.
type memSample struct {
	rssRaw, rss           int64 // VmRSS before and after a forced GC + scavenge, bytes
	heapInuse, stackInuse int64 // bytes
	goroutines            int
}

func vmRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func sampleMemory() memSample {
	s := memSample{rssRaw: vmRSS()}
	debug.FreeOSMemory() // a GC, then returns free pages to the OS
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.rss, s.goroutines = vmRSS(), runtime.NumGoroutine()
	s.heapInuse, s.stackInuse = int64(ms.HeapInuse), int64(ms.StackInuse) //nolint:gosec // G115: a test process's heap and stacks, far below 2^63 bytes
	return s
}

func (s memSample) String() string {
	return fmt.Sprintf("%d %d %d %d %d", s.rssRaw, s.rss, s.heapInuse, s.stackInuse, s.goroutines)
}

func parseMemSample(f []string) (memSample, error) {
	if len(f) != 5 {
		return memSample{}, fmt.Errorf("memory sample %q", f)
	}
	var v [5]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return memSample{}, err
		}
		v[i] = n
	}
	return memSample{rssRaw: v[0], rss: v[1], heapInuse: v[2], stackInuse: v[3], goroutines: int(v[4])}, nil
}

// perStream is (after - before) / n in KiB, and goroutines per stream.
type perStream struct {
	rssRaw, rss, heap, stack, goroutines float64
}

func memPerStream(before, after memSample, n int) perStream {
	kib := func(a, b int64) float64 { return float64(a-b) / 1024 / float64(n) }
	return perStream{
		rssRaw: kib(after.rssRaw, before.rssRaw), rss: kib(after.rss, before.rss),
		heap:       kib(after.heapInuse, before.heapInuse),
		stack:      kib(after.stackInuse, before.stackInuse),
		goroutines: float64(after.goroutines-before.goroutines) / float64(n),
	}
}

func streamCounts() (n, perCluster int) {
	pick := func(flagValue int, env string, def int) int {
		if flagValue > 0 {
			return flagValue
		}
		if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
			return v
		}
		return def
	}
	n = pick(*deliveryStreamsFlag, StreamsEnv, defaultStreams)
	return n, min(n, pick(*deliveryClusterSizeFlag, StreamsPerClusterEnv, defaultStreamsPerCluster))
}

// fleetProc is the running child.
type fleetProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *tailBuffer
}

// tailBuffer keeps the last 8 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 8<<10 {
		t.buf = t.buf[len(t.buf)-8<<10:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func startFleet(b *testing.B, specPath string) *fleetProc {
	b.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkDeliveryStreams$", "-test.benchtime=1x",
		"-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), fleetEnv+"="+specPath)
	cmd.ExtraFiles = []*os.File{w}
	f := &fleetProc{cmd: cmd, lines: make(chan string, 16), stderr: &tailBuffer{}}
	cmd.Stdout = f.stderr
	cmd.Stderr = f.stderr
	if f.stdin, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the agent fleet: %v", err)
	}
	_ = w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
		_ = r.Close()
	}()
	b.Cleanup(f.stop)
	return f
}

// expect returns the fields of the child's next line, which must start
// with word.
func (f *fleetProc) expect(b *testing.B, word string, within time.Duration) []string {
	b.Helper()
	select {
	case line, ok := <-f.lines:
		if !ok {
			b.Fatalf("agent fleet exited waiting for %q; its output ends:\n%s", word, f.stderr)
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != word {
			b.Fatalf("agent fleet said %.200q, want %q; its output ends:\n%s", line, word, f.stderr)
		}
		return fields[1:]
	case <-time.After(within):
		b.Fatalf("agent fleet: no %q within %s; its output ends:\n%s", word, within, f.stderr)
	}
	return nil
}

func (f *fleetProc) send(b *testing.B, cmd string) {
	b.Helper()
	if _, err := io.WriteString(f.stdin, cmd+"\n"); err != nil {
		b.Fatalf("agent fleet: %v", err)
	}
}

// stop closes the child's stdin (it then closes its streams and exits)
// and kills it if it has not exited within 30s.
func (f *fleetProc) stop() {
	if f.stdin == nil {
		return
	}
	_ = f.stdin.Close()
	f.stdin = nil
	done := make(chan struct{})
	go func() {
		// However the fleet exits (done, or killed below), it has reported
		// its failures on its output already.
		_ = f.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// pushResult is one push: how long until every stream had the change.
type pushResult struct {
	all        time.Duration // first CreateAddon called → the last stream has it
	arrivals   dist          // per stream, from the first CreateAddon called
	fanout     dist          // per cluster: its CreateAddon returned → its last stream has it
	createCall dist          // the CreateAddon calls themselves
	reconnects int64         // streams the host ended during the push and its clean-up
}

// BenchmarkDeliveryStreams holds N idle agent streams (one per member
// instance; N/perCluster ACTIVE clusters) on one saltbush, measures the
// server process's memory and CPU per idle stream, then pushes one change
// to all of them: one CreateAddon per cluster (up to pushClients at once),
// until every stream has received a desired set containing the add-on. Each iteration of the
// "push" sub-benchmark is one such push (followed, untimed, by deleting the
// add-on until every stream has a set without it).
func BenchmarkDeliveryStreams(b *testing.B) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		runFleet(b, spec)
		return
	}
	// Minutes of set-up and one push per b.N: only when asked for by name
	// (`make bench` runs -bench . -benchtime 5000x).
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "DeliveryStreams") {
		b.Skip("run it by name: -bench DeliveryStreams -benchtime 3x (see README.md)")
	}
	n, perCluster := streamCounts()
	nc := (n + perCluster - 1) / perCluster
	ab := newAddonBench(b)
	ctx := context.Background()
	fmt.Printf("delivery streams: %d in %d clusters of up to %d members\n", n, nc, perCluster)

	specPath, clusters := writeFleetSpec(b, ab, n, perCluster, b.TempDir())

	profDir := os.Getenv(DeliveryProfileEnv)
	before := sampleMemory()
	stopProfile := cpuProfile(b, profDir, "connect")
	fleet := startFleet(b, specPath)
	f := fleet.expect(b, "connected", 30*time.Minute)
	stopProfile()
	connectTook, _ := time.ParseDuration(f[0] + "ns")
	// Idle: let the assignments, the sessions and the first heartbeats
	// settle, then measure what the idle streams cost the server's CPU
	// (heartbeats both ways, session keepalives).
	time.Sleep(3 * time.Second)
	stopProfile = cpuProfile(b, profDir, "idle")
	rev0 := etcdRevision(ctx, b, ab.etcd)
	cpu0, idle0 := processCPU(), time.Now()
	time.Sleep(5 * time.Second)
	idleCPU := float64(processCPU()-cpu0) / float64(time.Since(idle0))
	stopProfile()
	fmt.Printf("etcd writes while the streams idled: %d\n", etcdRevision(ctx, b, ab.etcd)-rev0)
	sessions := 0
	for _, c := range clusters {
		resp, err := ab.etcd.Get(ctx, ab.st.Key(store.SessionsPrefix(c.UID)), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		sessions += int(resp.Count)
	}
	if sessions != n {
		b.Fatalf("%d sessions in etcd, want %d: streams ended or their sessions lapsed; the agent fleet's output ends:\n%s", sessions, n, fleet.stderr)
	}
	after := sampleMemory()
	if profDir != "" {
		writeProfiles(b, profDir)
	}
	fleet.send(b, "mem")
	mf := fleet.expect(b, "mem", time.Minute)
	childMem, err := parseMemSample(mf[:5])
	if err != nil {
		b.Fatal(err)
	}
	idleReconnects, _ := strconv.ParseInt(mf[5], 10, 64)
	childBase, err := parseMemSample(f[1:6])
	if err != nil {
		b.Fatal(err)
	}
	server, client := memPerStream(before, after, n), memPerStream(childBase, childMem, n)
	b.Run("idle", func(b *testing.B) {
		b.ReportMetric(server.rss, "server-rss-KiB/stream")
		b.ReportMetric(server.heap+server.stack, "server-heap+stack-KiB/stream")
		b.ReportMetric(server.goroutines, "server-goroutines/stream")
		b.ReportMetric(client.rss, "client-rss-KiB/stream")
		b.ReportMetric(connectTook.Seconds(), "connect-s")
		b.ReportMetric(100*idleCPU, "server-idle-cpu-%")
		b.ReportMetric(float64(idleReconnects), "idle-reconnects")
	})

	var pushes []pushResult
	b.Run("push", func(b *testing.B) {
		b.StopTimer() // pushOnce times the push only
		defer cpuProfile(b, profDir, "push")()
		pushes = pushes[:0]
		for range b.N {
			pushes = append(pushes, pushOnce(b, ab, fleet, clusters, perCluster, n))
		}
		var worst pushResult
		for _, p := range pushes {
			if p.all >= worst.all {
				worst = p
			}
		}
		b.ReportMetric(ms(worst.all), "all-streams-max-ms")
		b.ReportMetric(ms(worst.arrivals.p50), "stream-p50-ms")
		b.ReportMetric(ms(worst.fanout.max), "cluster-fanout-max-ms")
	})
	reasons := ""
	if !b.Failed() {
		fleet.send(b, "reasons")
		reasons = strings.Join(fleet.expect(b, "reasons", time.Minute), " ")
	}
	fmt.Print("\n" + saveSummary(fmt.Sprintf("delivery-streams-%d-fsync-%s", n, ab.mode),
		summarizeStreams(ab.mode, n, nc, perCluster, connectTook, idleCPU, idleReconnects, reasons, before, after, childBase, childMem, server, client, pushes)))
}

// writeFleetSpec makes the clusters and members, issues every agent's
// certificate and writes the fleet's spec into dir (untimed set-up). It
// returns the spec's path and the clusters.
func writeFleetSpec(b *testing.B, ab *addonBench, n, perCluster int, dir string) (string, []fleetCluster) {
	ctx := context.Background()
	nc := (n + perCluster - 1) / perCluster
	// Through the API: one goroutine per cluster, 8 at a time; AddMember
	// rewrites the cluster record, so the members of one cluster are
	// added one after the other.
	setup := time.Now()
	spec := &fleetSpec{Addr: ab.srv.GRPCAddr(), Clusters: make([]fleetCluster, nc), Members: make([]fleetMember, n)}
	spec.CABundle, _ = ab.srv.Authority().Bundle()
	for i := range spec.Members {
		spec.Members[i] = fleetMember{Cluster: i / perCluster, Instance: fmt.Sprintf("i-%06d", i)}
	}
	parallel(b, nc, 8, func(c int) error {
		name := fmt.Sprintf("bench-fleet-%04d", c)
		var members []string
		for i := c * perCluster; i < min(n, (c+1)*perCluster); i++ {
			members = append(members, spec.Members[i].Instance)
		}
		uid, err := ab.memberCluster(ctx, name, members)
		spec.Clusters[c] = fleetCluster{Account: ab.account, Name: name, UID: uid}
		return err
	})
	clustersTook := time.Since(setup)
	setup = time.Now()
	parallel(b, n, runtime.GOMAXPROCS(0), func(i int) error {
		m := &spec.Members[i]
		var err error
		m.CertPEM, m.KeyPEM, _, err = ab.srv.Authority().IssueLocal(ctx, identity.AgentID(spec.Clusters[m.Cluster].UID, m.Instance), 24*time.Hour)
		return err
	})
	fmt.Printf("set-up: clusters and members %s, certificates %s\n", clustersTook.Round(time.Millisecond), time.Since(setup).Round(time.Millisecond))
	path := filepath.Join(dir, "fleet.json")
	raw, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	return path, spec.Clusters
}

// parallel runs do(0..n-1) on workers goroutines and fails b on the first
// error.
func parallel(b *testing.B, n, workers int, do func(i int) error) {
	b.Helper()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := do(i); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// cpuProfile starts a CPU profile of this process (the server: the agents
// are in the child) into dir when dir is set, and returns what stops it.
func cpuProfile(b *testing.B, dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "delivery-streams-"+name+".cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatalf("cpu profile: %v (do not combine %s with -cpuprofile)", err, DeliveryProfileEnv)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// writeProfiles writes the server process's heap and goroutine profiles.
func writeProfiles(b *testing.B, dir string) {
	for _, p := range []string{"heap", "goroutine"} {
		f, err := os.Create(filepath.Join(dir, "delivery-streams-"+p+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup(p).WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

// pushClients bounds the concurrent CreateAddon (and DeleteAddon) calls of
// a push: with a few clusters they all go at once; with thousands of small
// clusters, 64 clients work through them (thousands at once overload the
// 2-core machine, and some calls fail with Unavailable).
const pushClients = 64

// pushOnce creates the add-on in every cluster (pushClients calls at a
// time) and waits until every stream has a desired set containing it;
// then, untimed, deletes it and waits until every stream has a set without
// it.
func pushOnce(b *testing.B, ab *addonBench, fleet *fleetProc, clusters []fleetCluster, perCluster, n int) pushResult {
	b.Helper()
	ctx := context.Background()
	fleet.send(b, "arm "+benchAddon)
	fleet.expect(b, "armed", time.Minute)
	returned := make([]time.Time, len(clusters))
	t0 := time.Now()
	b.StartTimer()
	parallel(b, len(clusters), pushClients, func(c int) error {
		_, err := ab.grpc.CreateAddon(ctx, &eksv1.CreateAddonRequest{ClusterName: clusters[c].Name, AddonName: benchAddon})
		returned[c] = time.Now()
		return err
	})
	f := fleet.expect(b, "pushed", 10*time.Minute)
	b.StopTimer()
	if len(f) != n {
		b.Fatalf("fleet sent %d arrival times, want %d", len(f), n)
	}
	var (
		res      pushResult
		arrivals = make([]time.Duration, n)
		fanout   = make([]time.Duration, len(clusters))
		calls    = make([]time.Duration, len(clusters))
	)
	for i, s := range f {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		at := time.Unix(0, ns)
		arrivals[i] = at.Sub(t0)
		c := i / perCluster
		fanout[c] = max(fanout[c], at.Sub(returned[c]))
	}
	for c := range clusters {
		calls[c] = returned[c].Sub(t0)
	}
	res.arrivals, res.fanout, res.createCall = distOf(arrivals), distOf(fanout), distOf(calls)
	res.all = res.arrivals.max

	fleet.send(b, "arm-gone "+benchAddon)
	fleet.expect(b, "armed", time.Minute)
	parallel(b, len(clusters), pushClients, func(c int) error {
		_, err := ab.grpc.DeleteAddon(ctx, &eksv1.DeleteAddonRequest{ClusterName: clusters[c].Name, AddonName: benchAddon})
		return err
	})
	fleet.expect(b, "gone", 10*time.Minute)
	fleet.send(b, "stats")
	st := fleet.expect(b, "stats", time.Minute)
	res.reconnects, _ = strconv.ParseInt(st[0], 10, 64)
	return res
}

func summarizeStreams(mode string, n, nc, perCluster int, connect time.Duration, idleCPU float64, idleReconnects int64, reasons string, before, after, childBefore, childAfter memSample,
	server, client perStream, pushes []pushResult) string {
	var sb strings.Builder
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	fmt.Fprintf(&sb, "Delivery streams, fsync=%s, GOMAXPROCS=%d: %d idle agent streams in %d clusters of up to %d members, connected in %s (%.0f streams/s)\n",
		mode, runtime.GOMAXPROCS(0), n, nc, perCluster, connect.Round(time.Millisecond), float64(n)/connect.Seconds())
	sb.WriteString("server = this process (saltbush + embedded etcd); client = the agent fleet's own process\n\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "process\tRSS before MiB\tRSS idle MiB\tRSS idle, scavenged MiB\theap in use MiB\tstacks MiB\tgoroutines\t")
	for _, p := range []struct {
		name string
		b, a memSample
	}{{"server", before, after}, {"client", childBefore, childAfter}} {
		_, _ = fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f → %.1f\t%.1f → %.1f\t%d → %d\t\n", p.name, mib(p.b.rss), mib(p.a.rssRaw), mib(p.a.rss),
			mib(p.b.heapInuse), mib(p.a.heapInuse), mib(p.b.stackInuse), mib(p.a.stackInuse), p.b.goroutines, p.a.goroutines)
	}
	_ = tw.Flush()
	sb.WriteString("\nper idle stream (after - before) / N:\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "process\tRSS KiB\tRSS scavenged KiB\theap KiB\tstacks KiB\tgoroutines\t")
	for _, p := range []struct {
		name string
		s    perStream
	}{{"server", server}, {"client", client}} {
		_, _ = fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", p.name, p.s.rssRaw, p.s.rss, p.s.heap, p.s.stack, p.s.goroutines)
	}
	_ = tw.Flush()
	verdict := "met"
	if server.rssRaw >= 100 || server.rss >= 100 {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "goal < 100 KiB per idle stream (server RSS): %s\n", verdict)
	fmt.Fprintf(&sb, "server CPU while the streams idle: %.1f%% of one core (%.1f µs/s per stream)\n", 100*idleCPU, 1e6*idleCPU/float64(n))
	fmt.Fprintf(&sb, "streams the host ended (and the agents opened again) from connecting to the end of the idle measurement: %d\n", idleReconnects)
	if reasons != "" {
		fmt.Fprintf(&sb, "why the host ended streams (whole run): %s\n", reasons)
	}
	if len(pushes) == 0 {
		return sb.String()
	}
	fmt.Fprintf(&sb, "\npushes (one CreateAddon per cluster, %d at a time; times from the first call):\n", min(nc, pushClients))
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "push\tall streams ms\tstream p50 ms\tstream p99 ms\tfirst stream ms\tcluster fan-out p50 ms\tcluster fan-out max ms\tlast CreateAddon returned ms\treconnects so far\t")
	worst := time.Duration(0)
	for i, p := range pushes {
		worst = max(worst, p.all)
		_, _ = fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n", i+1, ms(p.all), ms(p.arrivals.p50), ms(p.arrivals.p99), ms(p.arrivals.min),
			ms(p.fanout.p50), ms(p.fanout.max), ms(p.createCall.max), p.reconnects)
	}
	_ = tw.Flush()
	verdict = "met"
	if worst >= 5*time.Second {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "goal every stream within 5 s: %s (worst %.1f ms)\n", verdict, ms(worst))
	return sb.String()
}

// ---------------------------------------------------------------------
// The agent fleet (the child process of BenchmarkDeliveryStreams).

// fleetAgent is one simulated agent: a fakeagent.Stream whose session
// acknowledges every set and, as the executor, reports every add-on READY
// (REMOVED when deleting) at once, like instantExecutor; standbys only
// receive (fakeagent.SessionOptions.StandbysSilent). Every agent sends a
// Heartbeat every heartbeat interval from its Hello on (one loop for the
// fleet, fleet.heartbeats), as the real agent does when idle.
type fleetAgent struct {
	idx     int
	conn    *grpc.ClientConn
	hello   *deliveryv1.Hello
	applied fakeagent.Applied // the last desired set, across streams
	mu      sync.Mutex        // replacing stream
	stream  *fakeagent.Stream
	// refused is why the host last ended a stream of the agent before
	// its first Assignment (under mu), for a dial that times out.
	refused error
}

func (a *fleetAgent) send(m *deliveryv1.AgentMessage) error {
	a.mu.Lock()
	s := a.stream
	a.mu.Unlock()
	return s.Send(m)
}

// connect opens a stream on the agent's connection and says Hello,
// resuming from the last desired set it received (nothing is resent when
// that is still current).
func (a *fleetAgent) connect(ctx context.Context) error {
	hello := a.applied.Resume(proto.Clone(a.hello).(*deliveryv1.Hello))
	stream, err := fakeagent.Connect(ctx, a.conn, fakeagent.Options{Hello: hello, Heartbeats: fakeagent.ByCaller})
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stream != nil {
		a.stream.Close() // ended already; this frees its context
	}
	a.stream = stream
	return nil
}

// fleet tracks, for the armed add-on, when each stream first got a set
// with it (or, for "gone", without it).
type fleet struct {
	out   io.Writer
	outMu sync.Mutex

	mu       sync.Mutex
	armName  string
	armGone  bool
	arrivals []int64
	got      int
	done     chan struct{}

	rejected, fences, reconnects atomic.Int64
	reasonsMu                    sync.Mutex
	reasons                      map[string]int // why the host ended streams

	hbMu     sync.Mutex
	hbAgents []*fleetAgent // every agent that said Hello
}

// stats is the streams the host ended (each opened again), the fences
// received and the reports not accepted, so far.
func (f *fleet) stats() string {
	return fmt.Sprintf("%d %d %d", f.reconnects.Load(), f.fences.Load(), f.rejected.Load())
}

func (f *fleet) heartbeating(a *fleetAgent) {
	f.hbMu.Lock()
	defer f.hbMu.Unlock()
	f.hbAgents = append(f.hbAgents, a)
}

func (f *fleet) say(format string, args ...any) {
	f.outMu.Lock()
	defer f.outMu.Unlock()
	// A write fails only once the parent is gone; then stdin closes too,
	// and the fleet ends.
	_, _ = fmt.Fprintf(f.out, format+"\n", args...)
}

func (f *fleet) arm(name string, gone bool) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armName, f.armGone, f.got, f.done = name, gone, 0, make(chan struct{})
	clear(f.arrivals)
	return f.done
}

func (f *fleet) desired(i int, set *deliveryv1.DesiredSet, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armName == "" || f.arrivals[i] != 0 {
		return
	}
	present, live := false, false
	for _, d := range set.GetAddons() {
		if d.GetName() == f.armName {
			present, live = true, !d.GetDeleting()
		}
	}
	if (f.armGone && !present) || (!f.armGone && live) {
		f.arrivals[i] = at.UnixNano()
		f.got++
		if f.got == len(f.arrivals) {
			close(f.done)
		}
	}
}

// runFleet is the child: it connects every agent of the spec, says
// "connected <ns> <memory before>", and then answers the parent's
// commands on stdin (arm NAME, arm-gone NAME, mem) on fd 3 until stdin
// closes.
func runFleet(b *testing.B, specPath string) {
	out := os.NewFile(3, "fleet-out")
	f := &fleet{out: out, reasons: map[string]int{}}
	fail := func(err error) {
		f.say("error %v", err)
		b.Fatal(err)
	}
	base := sampleMemory()
	var spec fleetSpec
	if raw, err := os.ReadFile(specPath); err != nil {
		fail(err)
	} else if err := json.Unmarshal(raw, &spec); err != nil {
		fail(err)
	}
	f.arrivals = make([]int64, len(spec.Members))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(spec.CABundle) {
		fail(errors.New("no CA in the bundle"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var heartbeat atomic.Int64
	go f.heartbeats(ctx, &heartbeat)
	start := time.Now()
	dial := func(i int) error {
		m := spec.Members[i]
		c := spec.Clusters[m.Cluster]
		cert, err := tls.X509KeyPair(m.CertPEM, m.KeyPEM)
		if err != nil {
			return err
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
		// The agent's link's flow control (guest/hostlink: static
		// windows, no pings after every data frame it receives).
		conn, err := grpc.NewClient(spec.Addr, grpc.WithTransportCredentials(grpccreds.NewTLS(cfg)),
			grpc.WithStaticStreamWindowSize(1<<20), grpc.WithStaticConnWindowSize(1<<20))
		if err != nil {
			return err
		}
		a := &fleetAgent{idx: i, conn: conn, hello: &deliveryv1.Hello{
			Cluster: &deliveryv1.ClusterName{AccountId: c.Account, Name: c.Name}, InstanceId: m.Instance, BootId: "boot-1", AgentVersion: "bench",
		}}
		if err := a.connect(ctx); err != nil {
			return err
		}
		f.heartbeating(a)
		assigned := make(chan error, 1)
		go a.run(ctx, f, assigned, &heartbeat)
		select {
		case err := <-assigned:
			if err != nil {
				return fmt.Errorf("%s: %w", m.Instance, err)
			}
		case <-time.After(2 * time.Minute):
			a.mu.Lock()
			refused := a.refused
			a.mu.Unlock()
			return fmt.Errorf("%s: no assignment within 2m (last refusal: %v)", m.Instance, refused)
		}
		return nil
	}
	// The fleet's own profile of connecting (the agents' side of the
	// storm), beside the server's.
	stopProfile := cpuProfile(b, os.Getenv(DeliveryProfileEnv), "fleet-connect")
	parallel(b, len(spec.Members), 64, dial)
	stopProfile()
	spec.Members = nil
	f.say("connected %d %s", time.Since(start).Nanoseconds(), base)

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd := strings.Fields(sc.Text())
		if len(cmd) == 0 {
			continue
		}
		switch cmd[0] {
		case "mem":
			f.say("mem %s %s", sampleMemory(), f.stats())
		case "stats":
			f.say("stats %s", f.stats())
		case "reasons":
			f.reasonsMu.Lock()
			var rs []string
			for r, c := range f.reasons {
				rs = append(rs, fmt.Sprintf("%d × %q", c, r))
			}
			f.reasonsMu.Unlock()
			slices.Sort(rs)
			f.say("reasons %s", strings.Join(rs, ", "))
		case "arm", "arm-gone":
			done := f.arm(cmd[1], cmd[0] == "arm-gone")
			f.say("armed")
			go func() {
				<-done
				f.mu.Lock()
				times := make([]string, len(f.arrivals))
				for i, t := range f.arrivals {
					times[i] = strconv.FormatInt(t, 10)
				}
				f.mu.Unlock()
				if cmd[0] == "arm" {
					f.say("pushed %s", strings.Join(times, " "))
				} else {
					f.say("gone")
				}
			}()
		}
	}
	fmt.Fprintf(os.Stderr, "fleet: reconnects, fences, rejected reports: %s\n", f.stats())
}

// run reads the agent's stream; the first Assignment (or the stream's
// end before it) is signalled on assigned. A stream the host ends later
// is opened again, as the real agent does ("connect again"), after 100ms.
func (a *fleetAgent) run(ctx context.Context, f *fleet, assigned chan<- error, heartbeat *atomic.Int64) {
	first := true
	// healthy: the current stream got an Assignment; failures counts the
	// attempts since the last healthy stream (fleetBackoff).
	healthy, failures := false, 0
	opts := fakeagent.SessionOptions{StandbysSilent: true}
	session := fakeagent.NewSession(a.hello.GetInstanceId(), &a.applied, opts)
	for {
		a.mu.Lock()
		stream := a.stream
		a.mu.Unlock()
		m, err := stream.Recv()
		if err != nil {
			// A replica that cannot serve the stream yet (its session
			// could not be kept fresh, the cluster changed during
			// admission) refuses it before the first Assignment: the
			// agent tries again, as the real agent's link does.
			if code := status.Code(err); first && code != codes.Unavailable && code != codes.Aborted {
				assigned <- err
				return
			}
			if first {
				a.mu.Lock()
				a.refused = err
				a.mu.Unlock()
			}
			if ctx.Err() != nil || status.Code(err) == codes.Canceled {
				return
			}
			f.reconnects.Add(1)
			f.reasonsMu.Lock()
			f.reasons[status.Code(err).String()+": "+status.Convert(err).Message()]++
			f.reasonsMu.Unlock()
			if healthy {
				failures = 0
			} else {
				failures++
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(fleetBackoff(failures)):
				}
				if err := a.connect(ctx); err == nil {
					break
				}
				failures++
			}
			healthy = false
			session = fakeagent.NewSession(a.hello.GetInstanceId(), &a.applied, opts)
			continue
		}
		at := time.Now()
		switch {
		case m.GetAssignment() != nil:
			healthy = true
			heartbeat.CompareAndSwap(0, int64(m.GetAssignment().GetTiming().GetHeartbeatInterval().AsDuration()))
			if first {
				first = false
				assigned <- nil
			}
		case m.GetDesiredSet() != nil:
			f.desired(a.idx, m.GetDesiredSet(), at)
		case m.GetReportResult() != nil:
			if !m.GetReportResult().GetAccepted() {
				f.rejected.Add(1)
			}
		case m.GetFence() != nil:
			f.fences.Add(1)
		}
		taken, err := session.Take(m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		}
		// A failed send means the stream is ending: Recv says why.
		for _, reply := range taken.Replies {
			_ = a.send(reply)
		}
		for _, r := range session.Due() {
			_ = a.send(session.Track(r, true))
		}
	}
}

// fleetBackoff is the real agent's delay before its next connection
// attempt (guest/hostlink, with guest/config's defaults of 500 ms and
// 30 s): equal-jitter exponential in the attempts that failed since its
// last stream that worked. A fixed short delay made thousands of agents,
// whose streams a replica ended at once (its session lease not renewed
// in time under the connect storm), retry in step every 100 ms: the
// replica, busy with their TLS handshakes, could then not renew its lease
// either, and never recovered.
func fleetBackoff(failures int) time.Duration {
	const initial, maxDelay = 500 * time.Millisecond, 30 * time.Second
	d := initial
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter spreads retries; nothing depends on it being unpredictable
}

// heartbeats sends every agent that said Hello a Heartbeat every
// heartbeat interval (known from the first Assignment), spread evenly
// over the interval.
func (f *fleet) heartbeats(ctx context.Context, interval *atomic.Int64) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	hb := &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}}
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		iv := interval.Load()
		f.hbMu.Lock()
		agents := f.hbAgents
		f.hbMu.Unlock()
		if iv <= 0 || len(agents) == 0 {
			continue
		}
		perTick := int((int64(len(agents))*int64(tick) + iv - 1) / iv)
		for range perTick {
			i %= len(agents)
			_ = agents[i].send(hb)
			i++
		}
	}
}

// etcdRevision is the store's current revision (writes between two
// readings are their difference).
func etcdRevision(ctx context.Context, b *testing.B, cli *clientv3.Client) int64 {
	b.Helper()
	resp, err := cli.Get(ctx, "saltbush-bench-revision-probe", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	return resp.Header.Revision
}
