package bench

// The real guest agent (the saltbush-agent binary) against a real
// Kubernetes control plane (tests/kubetest: kube-apiserver,
// kube-controller-manager, kube-scheduler, and the kubelet double, whose
// pods start at once): how long an add-on takes to become ACTIVE through
// it, beside the protocol-level instant executor in the same run; what an
// idle agent costs; how long a standby takes to succeed a cut executor.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/netproxy"
)

// agentWorld is a Kubernetes control plane and the built agent, made once
// per benchmark binary (about 10 s plus the build).
var agentWorld = sync.OnceValues(func() (*agentRig, error) {
	worldStarted = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kc, err := kubetest.Start(ctx, kubetest.Options{})
	if err != nil {
		return nil, err
	}
	bin, err := agentBinary()
	if err != nil {
		return nil, err
	}
	return &agentRig{kube: kc, binary: bin}, nil
})

// agentBinary is the saltbush-agent binary (without the race detector),
// built once per benchmark binary when a benchmark needs it.
var agentBinary = sync.OnceValues(func() (string, error) {
	bin, remove, err := agentproc.BuildTemp(false)
	if err != nil {
		return "", err
	}
	removeAgentBuild = remove
	return bin, nil
})

// removeAgentBuild removes the agent's build once agentBinary ran.
var removeAgentBuild func()

// TestMain stops the control plane and the real node if a benchmark
// started them and removes the agent's build.
func TestMain(m *testing.M) {
	code := m.Run()
	if worldStarted {
		if r, err := agentWorld(); err == nil {
			r.kube.Stop()
		}
	}
	if nodeWorldStarted {
		if env, err := nodeWorld(); err == nil {
			env.Stop()
		}
	}
	if removeAgentBuild != nil {
		removeAgentBuild()
	}
	os.Exit(code)
}

// worldStarted: a benchmark asked for agentWorld (set inside it, read
// after the benchmarks ran).
var worldStarted bool

type agentRig struct {
	kube   *kubetest.Cluster
	binary string
}

func rig(b *testing.B) *agentRig {
	b.Helper()
	r, err := agentWorld()
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// startAgent runs the real agent for a member.
func (r *agentRig) startAgent(b *testing.B, ab *addonBench, cluster, uid, instance string, endpoints []string) *agentproc.Process {
	b.Helper()
	if len(endpoints) == 0 {
		endpoints = []string{ab.srv.GRPCAddr()}
	}
	p, err := agentproc.Start(context.Background(), agentproc.Options{Binary: r.binary, Dir: b.TempDir(), Server: ab.srv,
		Account: ab.account, Cluster: cluster, UID: uid, Instance: instance, Endpoints: endpoints,
		Kubeconfig: r.kube.UserKubeconfig("agent:"+cluster+":"+instance, "system:masters"),
		Args:       []string{"--log-level", "info"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	return p
}

// toActive is one create → ACTIVE → delete → gone cycle of an add-on,
// polling DescribeAddon; it returns the create-to-ACTIVE and
// delete-to-gone times.
func toActive(ctx context.Context, ab *addonBench, cluster string, in eks.CreateAddonInput) (active, gone time.Duration, err error) {
	in.ClusterName = aws.String(cluster)
	describe := &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: in.AddonName}
	t0 := time.Now()
	if _, err := ab.sdk.CreateAddon(ctx, &in); err != nil {
		return 0, 0, fmt.Errorf("CreateAddon: %w", err)
	}
	for {
		out, err := ab.sdk.DescribeAddon(ctx, describe)
		if err != nil {
			return 0, 0, fmt.Errorf("DescribeAddon: %w", err)
		}
		if out.Addon.Status == ekstypes.AddonStatusActive {
			break
		}
		if out.Addon.Status != ekstypes.AddonStatusCreating {
			return 0, 0, fmt.Errorf("add-on %s is %s", aws.ToString(in.AddonName), out.Addon.Status)
		}
		time.Sleep(time.Millisecond)
	}
	active = time.Since(t0)
	t1 := time.Now()
	if _, err := ab.sdk.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName}); err != nil {
		return 0, 0, fmt.Errorf("DeleteAddon: %w", err)
	}
	for {
		_, err := ab.sdk.DescribeAddon(ctx, describe)
		var nf *ekstypes.ResourceNotFoundException
		if errors.As(err, &nf) {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("DescribeAddon while deleting: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	return active, time.Since(t1), nil
}

// BenchmarkAgentToActive measures CreateAddon → ACTIVE (and DeleteAddon →
// gone) of the no-op add-on, polled with DescribeAddon through the SDK,
// on two clusters of one saltbush in the same run: one whose member is
// the real agent applying to the real control plane, one whose member is
// the protocol-level instant executor (it acknowledges and reports READY
// at once, applying nothing). The difference is what applying, watching
// and judging readiness on a real apiserver costs.
func BenchmarkAgentToActive(b *testing.B) {
	ab := newAddonBench(b)
	r := rig(b)
	ctx := context.Background()
	simUID, err := ab.memberCluster(ctx, "bench-sim", []string{"i-sim"})
	if err != nil {
		b.Fatal(err)
	}
	sim := dialBenchAgent(b, ab.srv, simUID, ab.account, "bench-sim", "i-sim")
	events := make(chan convEvent, 64)
	go func() {
		for range events { // the instant executor's events are not needed here
		}
	}()
	sim.executorEpoch(b)
	go instantExecutor(sim, events, func(err error) { b.Error(err) })
	realUID, err := ab.memberCluster(ctx, "bench-real", []string{"i-real"})
	if err != nil {
		b.Fatal(err)
	}
	r.startAgent(b, ab, "bench-real", realUID, "i-real", nil)

	in := eks.CreateAddonInput{AddonName: aws.String(benchAddon)}
	results := map[string][2]dist{}
	for _, c := range []struct{ name, cluster string }{{"instant-executor", "bench-sim"}, {"real-agent", "bench-real"}} {
		// One untimed cycle: watches started, connections warm.
		if _, _, err := toActive(ctx, ab, c.cluster, in); err != nil {
			b.Fatalf("%s warm-up: %v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			var act, gone []time.Duration
			for range b.N {
				a, g, err := toActive(ctx, ab, c.cluster, in)
				if err != nil {
					b.Fatal(err)
				}
				act, gone = append(act, a), append(gone, g)
			}
			da, dg := distOf(act), distOf(gone)
			b.ReportMetric(ms(da.p50), "active-p50-ms")
			b.ReportMetric(ms(da.p99), "active-p99-ms")
			b.ReportMetric(ms(dg.p50), "gone-p50-ms")
			results[c.name] = [2]dist{da, dg}
		})
	}
	sim2, real2 := results["instant-executor"], results["real-agent"]
	if sim2[0].n == 0 || real2[0].n == 0 {
		return
	}
	var s strings.Builder
	fmt.Fprintf(&s, "CreateAddon → ACTIVE of %s, DescribeAddon polled (fsync %s), %d cycles each, one run:\n", benchAddon, ab.mode, real2[0].n)
	fmt.Fprintf(&s, "  instant executor: p50 %6.1f ms  p99 %6.1f ms   delete → gone p50 %6.1f ms\n", ms(sim2[0].p50), ms(sim2[0].p99), ms(sim2[1].p50))
	fmt.Fprintf(&s, "  real agent:       p50 %6.1f ms  p99 %6.1f ms   delete → gone p50 %6.1f ms\n", ms(real2[0].p50), ms(real2[0].p99), ms(real2[1].p50))
	fmt.Fprintf(&s, "  real / instant:   p50 %.1fx  p99 %.1fx; goal p99 < 1000 ms: %s\n", ratio(real2[0].p50, sim2[0].p50),
		ratio(real2[0].p99, sim2[0].p99), verdict(real2[0].p99 < time.Second))
	fmt.Print("\n" + saveSummary("agent-to-active-fsync-"+ab.mode, s.String()))
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// realPodsOnly are add-ons that cannot be ACTIVE on the kubelet double:
// what their readiness waits for is served by their pods themselves
// (BenchmarkNodeAddons runs them on a real node).
var realPodsOnly = map[string]string{
	"metrics-server": "ACTIVE waits for its APIService v1beta1.metrics.k8s.io to be Available, which only a running metrics-server makes it",
}

// BenchmarkAgentIdle installs every add-on of the catalogue (its default
// version; the no-op one configured) on one cluster through the real
// agent, waits until all are ACTIVE, then samples the agent process over
// idle windows: resident memory and CPU. Each op is a one-second window.
// Add-ons that need real pods to be ACTIVE are left out.
func BenchmarkAgentIdle(b *testing.B) {
	ab := newAddonBench(b)
	r := rig(b)
	ctx := context.Background()
	uid, err := ab.memberCluster(ctx, "bench-idle", []string{"i-idle"})
	if err != nil {
		b.Fatal(err)
	}
	agent := r.startAgent(b, ab, "bench-idle", uid, "i-idle", nil)
	cat, err := catalog.Load()
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, a := range cat.Addons() {
		in := eks.CreateAddonInput{ClusterName: aws.String("bench-idle"), AddonName: aws.String(a.Name)}
		if _, ok := a.DefaultVersion("1.36"); !ok {
			continue
		}
		if why := realPodsOnly[a.Name]; why != "" {
			fmt.Printf("%s left out: %s\n", a.Name, why)
			continue
		}
		if _, err := ab.sdk.CreateAddon(ctx, &in); err != nil {
			b.Fatalf("CreateAddon %s: %v", a.Name, err)
		}
		names = append(names, a.Name)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, n := range names {
		for {
			out, err := ab.sdk.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String("bench-idle"), AddonName: aws.String(n)})
			if err == nil && out.Addon.Status == ekstypes.AddonStatusActive {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("add-on %s not ACTIVE: %v", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	applied := map[string]bool{} // the objects the agent applied (not its inventories)
	evs, _ := r.kube.AuditEvents()
	for _, ev := range evs {
		if ev.User == "agent:bench-idle:i-idle" && ev.Verb == "patch" && !strings.Contains(ev.RequestURI, "dryRun") &&
			!strings.HasPrefix(ev.ObjectRef.Name, "saltbush-addon-") {
			applied[ev.ObjectRef.Resource+"/"+ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name] = true
		}
	}
	objects := len(applied)
	time.Sleep(5 * time.Second) // the last reports and watch events settle
	var rss []float64
	var cpu time.Duration
	b.ResetTimer()
	_, cpu0, _ := agent.Usage()
	t0 := time.Now()
	for range b.N {
		time.Sleep(time.Second)
		m, _, err := agent.Usage()
		if err != nil {
			b.Fatal(err)
		}
		rss = append(rss, float64(m)/(1<<20))
	}
	_, cpu1, _ := agent.Usage()
	wall := time.Since(t0)
	b.StopTimer()
	cpu = cpu1 - cpu0
	slices.Sort(rss)
	core := float64(cpu) / float64(wall) * 100
	if dir := os.Getenv(ProfileDirEnv); dir != "" {
		saveAgentHeap(b, agent, dir)
	}
	_, anon, file, _ := agent.Memory()
	b.ReportMetric(rss[len(rss)/2], "rss-MiB")
	b.ReportMetric(core, "cpu-%core")
	fmt.Print("\n" + saveSummary("agent-idle", fmt.Sprintf(
		"idle agent with %d add-ons ACTIVE (%d objects applied): RSS median %.1f MiB (max %.1f; at the end %.1f MiB anonymous, %.1f MiB the binary's pages), CPU %.2f %% of a core over %s; goals < 40 MiB: %s, < 1 %%: %s\n",
		len(names), objects, rss[len(rss)/2], rss[len(rss)-1], float64(anon)/(1<<20), float64(file)/(1<<20), core, wall.Round(time.Second),
		verdict(rss[len(rss)/2] < 40), verdict(core < 1))))
}

// BenchmarkAgentFailover cuts the executor's stream (a partition between
// it and saltbush) and times how long until the standby is the executor
// and until an update made at the cut is applied by it (Successful), with
// the default delivery timing (session TTL 15 s: a successor can be
// assigned no sooner than the cut executor's session runs out). Each op
// is one failover; the cut agent is healed (it comes back a standby) and
// the next op cuts the new executor.
func BenchmarkAgentFailover(b *testing.B) {
	ab := newAddonBench(b)
	r := rig(b)
	ctx := context.Background()
	const cluster = "bench-failover"
	uid, err := ab.memberCluster(ctx, cluster, []string{"i-a", "i-b"})
	if err != nil {
		b.Fatal(err)
	}
	proxies := map[string]*netproxy.Proxy{}
	for _, i := range []string{"i-a", "i-b"} {
		proxies[i] = netproxy.Start(b, ab.srv.GRPCAddr())
		r.startAgent(b, ab, cluster, uid, i, []string{proxies[i].Addr()})
	}
	executor := func() *controlv1.DeliveryExecutor {
		out, err := controlv1.NewDeliveryControlServiceClient(ab.srv.GRPC(b)).GetDeliveryStatus(ctx,
			&controlv1.GetDeliveryStatusRequest{Cluster: &controlv1.ClusterRef{AccountId: ab.account, Name: cluster}})
		if err != nil {
			b.Fatal(err)
		}
		return out.GetExecutor()
	}
	in := eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon),
		AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: aws.String(`{"message": "0"}`)}
	if _, err := ab.sdk.CreateAddon(ctx, &in); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err := ab.sdk.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon)})
		if err == nil && out.Addon.Status == ekstypes.AddonStatusActive {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not ACTIVE: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitUpdate := func(id string) {
		for deadline := time.Now().Add(2 * time.Minute); ; {
			out, err := ab.sdk.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(cluster), AddonName: aws.String(benchAddon), UpdateId: aws.String(id)})
			if err == nil && out.Update.Status == ekstypes.UpdateStatusSuccessful {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("update %s not Successful: %v", id, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); executor().GetInstanceId() == ""; {
		if time.Now().After(deadline) {
			b.Fatal("no executor")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var takeover, converged []time.Duration
	b.ResetTimer()
	for i := range b.N {
		old := executor()
		cut := time.Now()
		proxies[old.GetInstanceId()].Partition()
		up, err := ab.sdk.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(benchAddon),
			ConfigurationValues: aws.String(fmt.Sprintf(`{"message": "%d"}`, i+1))})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if e := executor(); e.GetEpoch() > old.GetEpoch() && e.GetInstanceId() != old.GetInstanceId() {
				takeover = append(takeover, time.Since(cut))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitUpdate(aws.ToString(up.Update.Id))
		converged = append(converged, time.Since(cut))
		proxies[old.GetInstanceId()].Heal()
	}
	b.StopTimer()
	dt, dc := distOf(takeover), distOf(converged)
	b.ReportMetric(ms(dt.p50), "takeover-p50-ms")
	b.ReportMetric(ms(dc.p50), "converged-p50-ms")
	ttl := ab.srv.Config.Delivery.SessionTTL
	fmt.Print("\n" + saveSummary("agent-failover", fmt.Sprintf(
		"executor cut (%d failovers, session TTL %s, fence-after %s): standby assigned p50 %.2f s (max %.2f s, %.2f of the TTL); update made at the cut Successful p50 %.2f s (max %.2f s)\n",
		dt.n, ttl, ab.srv.Config.Delivery.FenceAfter, dt.p50.Seconds(), dt.max.Seconds(), float64(dt.p50)/float64(ttl), dc.p50.Seconds(), dc.max.Seconds())))
}

// saveAgentHeap writes the idle agent's heap profile into dir.
func saveAgentHeap(b *testing.B, p *agentproc.Process, dir string) {
	resp, err := http.Get("http://" + p.StatusAddr + "/debug/pprof/heap")
	if err != nil {
		b.Logf("agent heap profile: %v", err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(filepath.Join(dir, "agent-idle-heap.pprof"), body, 0o644)
}
