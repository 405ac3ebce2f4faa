package bench

// Add-ons on a real node (tests/nodetest: a real kubelet, containerd,
// runc and CNI, images built from the add-ons' Go modules): how long the
// node and its control plane take to start, and how long CreateAddon
// takes to reach ACTIVE and DeleteAddon to be gone when the pods really
// run, with the real agent applying and judging readiness.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/guest/agent"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/nodetest"
)

// nodeWorld is a control plane and one real node with its own kube-proxy
// (so add-ons reach the apiserver through the kubernetes Service), made
// once per benchmark binary when a benchmark needs it.
var nodeWorld = sync.OnceValues(func() (*nodetest.Env, error) {
	nodeWorldStarted = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return nodetest.StartEnv(ctx, nodetest.MainOptions{KubeProxy: true})
})

// nodeWorldStarted: a benchmark asked for nodeWorld (read by TestMain).
var nodeWorldStarted bool

// requireNode skips a benchmark, saying why, where the machine cannot run
// a node.
func requireNode(b *testing.B) {
	b.Helper()
	if err := nodetest.Require(); err != nil {
		b.Skipf("no real node here: %v", err)
	}
}

// BenchmarkNodeStart starts a control plane and a real node (network
// namespace, kube-apiserver and friends on its host end, the catalogue's
// images built and served, containerd and the kubelet started, the node
// Ready) and stops it again; each op is one start and one stop. It
// reports the start's stages.
func BenchmarkNodeStart(b *testing.B) {
	requireNode(b)
	var starts, stops []time.Duration
	stages := map[string][]time.Duration{}
	var order []string
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		t0 := time.Now()
		env, err := nodetest.StartEnv(ctx, nodetest.MainOptions{KubeProxy: true})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(t0))
		for _, st := range env.Stages {
			if _, ok := stages[st.Name]; !ok {
				order = append(order, st.Name)
			}
			stages[st.Name] = append(stages[st.Name], st.Took)
		}
		t1 := time.Now()
		env.Stop()
		stops = append(stops, time.Since(t1))
	}
	ds, dp := distOf(starts), distOf(stops)
	b.ReportMetric(ds.p50.Seconds(), "start-p50-s")
	b.ReportMetric(dp.p50.Seconds(), "stop-p50-s")
	var s strings.Builder
	fmt.Fprintf(&s, "control plane + real node, %d starts: start p50 %.1f s (min %.1f, max %.1f), stop p50 %.1f s\n",
		ds.n, ds.p50.Seconds(), ds.min.Seconds(), ds.max.Seconds(), dp.p50.Seconds())
	for _, name := range order {
		d := distOf(stages[name])
		fmt.Fprintf(&s, "  %-50s p50 %6.1f s  (%4.1f %% of the start)\n", name, d.p50.Seconds(), 100*ratio(d.p50, ds.p50))
	}
	fmt.Print("\n" + saveSummary("node-start", s.String()))
}

// nodeAddon is an add-on measured on the real node.
type nodeAddon struct {
	name string
	// deployment is its Deployment in kube-system, selector its pods.
	deployment, selector string
}

// nodeAddons are the add-ons whose pods do real work before the add-on
// is ACTIVE: coredns serves DNS (its readiness: the kubernetes plugin
// synced with the apiserver); metrics-server serves the metrics API
// (ACTIVE once the aggregator finds v1beta1.metrics.k8s.io Available,
// which needs metrics-server's first scrape of the kubelet).
var nodeAddons = []nodeAddon{
	{name: "coredns", deployment: "coredns", selector: "k8s-app=kube-dns"},
	{name: "metrics-server", deployment: "metrics-server", selector: "k8s-app=metrics-server"},
}

// nodeCycle is one create → ACTIVE → delete → gone cycle on the node,
// each time from the CreateAddon or DeleteAddon call.
type nodeCycle struct {
	// active: DescribeAddon first said ACTIVE; podsReady: the Deployment
	// first had all its replicas ready and updated (seen by a watch).
	active, podsReady time.Duration
	// gone: DescribeAddon first said not found; podsGone: the last of the
	// add-on's pods was deleted (seen by a watch).
	gone, podsGone time.Duration
}

// BenchmarkNodeAddons creates each add-on of nodeAddons through the AWS
// SDK on a saltbush cluster whose endpoint is the node's control plane,
// with the real agent (no race detector) applying it: each op is one
// CreateAddon → ACTIVE (DescribeAddon polled every 100 ms) and one
// DeleteAddon → not found, after which no pod of the add-on may remain.
// One untimed cycle first pulls the images into containerd. It also
// reports how long saltbush, the cluster and its agent took to be ready
// for the first CreateAddon.
func BenchmarkNodeAddons(b *testing.B) {
	requireNode(b)
	env, err := nodeWorld()
	if err != nil {
		b.Fatal(err)
	}
	bin, err := agentBinary()
	if err != nil {
		b.Fatal(err)
	}
	stackStart := time.Now()
	ab := newAddonBench(b)
	ctx := context.Background()
	const cluster, instance = "bench-node", "i-0node"
	if _, err := ab.sdk.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(cluster), RoleArn: aws.String("arn:aws:iam::" + ab.account + ":role/eks"), Version: aws.String(nodeKubernetesVersion),
		ResourcesVpcConfig:      &ekstypes.VpcConfigRequest{SubnetIds: subnets},
		KubernetesNetworkConfig: &ekstypes.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: aws.String(nodetest.ServiceCIDR)},
	}); err != nil {
		b.Fatalf("CreateCluster: %v", err)
	}
	ref := &controlv1.ClusterRef{AccountId: ab.account, Name: cluster}
	out, err := ab.control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: instance})
	if err != nil {
		b.Fatalf("AddMember: %v", err)
	}
	if _, err := ab.control.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: env.Cluster.Host(), PlatformVersion: "eks.1",
		CertificateAuthorityData: base64.StdEncoding.EncodeToString(env.Cluster.CACert())}); err != nil {
		b.Fatalf("SetStatus ACTIVE: %v", err)
	}
	agent := startNodeAgent(b, bin, ab, env, cluster, out.GetCluster().GetUid(), instance)
	if err := waitExecutor(ctx, agent.Status, time.Minute); err != nil {
		b.Fatal(err)
	}
	stackReady := time.Since(stackStart)
	k8s := env.Client(b)

	type result struct {
		first nodeCycle
		// active, podsReady, readyLag (ACTIVE − pods ready), gone,
		// podsGone, goneLag (gone − pods gone).
		d [6]dist
	}
	results := map[string]result{}
	for _, a := range nodeAddons {
		// The untimed first cycle: the images are pulled from the node's
		// registry into containerd, as on a node that never ran the add-on.
		first, err := a.cycle(ctx, ab, k8s, cluster)
		if err != nil {
			b.Fatalf("%s, first cycle: %v\n%s", a.name, err, agent.Log())
		}
		b.Run(a.name, func(b *testing.B) {
			var m [6][]time.Duration
			for range b.N {
				c, err := a.cycle(ctx, ab, k8s, cluster)
				if err != nil {
					b.Fatal(err)
				}
				for i, d := range []time.Duration{c.active, c.podsReady, c.active - c.podsReady, c.gone, c.podsGone, c.gone - c.podsGone} {
					m[i] = append(m[i], d)
				}
			}
			res := result{first: first}
			for i := range m {
				res.d[i] = distOf(m[i])
			}
			b.ReportMetric(res.d[0].p50.Seconds(), "active-p50-s")
			b.ReportMetric(res.d[0].p99.Seconds(), "active-p99-s")
			b.ReportMetric(ms(res.d[2].p50), "lag-p50-ms")
			b.ReportMetric(res.d[3].p50.Seconds(), "gone-p50-s")
			results[a.name] = res
		})
	}
	var s strings.Builder
	fmt.Fprintf(&s, "add-ons on a real node (fsync %s; saltbush, cluster and agent ready for CreateAddon in %.2f s); DescribeAddon polled every 20 ms, pods timed by watches:\n",
		ab.mode, stackReady.Seconds())
	for _, a := range nodeAddons {
		res, ok := results[a.name]
		if !ok || res.d[0].n == 0 {
			continue
		}
		d := res.d
		fmt.Fprintf(&s, "  %s, %d cycles:\n", a.name, d[0].n)
		fmt.Fprintf(&s, "    CreateAddon → ACTIVE       p50 %6.2f s  p99 %6.2f s   pods ready p50 %6.2f s; ACTIVE − pods ready p50 %4.0f ms p99 %4.0f ms (%.3fx of ACTIVE's p50)\n",
			d[0].p50.Seconds(), d[0].p99.Seconds(), d[1].p50.Seconds(), ms(d[2].p50), ms(d[2].p99), ratio(d[2].p50, d[0].p50))
		fmt.Fprintf(&s, "    DeleteAddon → not found    p50 %6.2f s  p99 %6.2f s   last pod gone p50 %6.2f s; gone − last pod p50 %4.0f ms p99 %4.0f ms (%.3fx of gone's p50)\n",
			d[3].p50.Seconds(), d[3].p99.Seconds(), d[4].p50.Seconds(), ms(d[5].p50), ms(d[5].p99), ratio(d[5].p50, d[3].p50))
		fmt.Fprintf(&s, "    first cycle (images pulled into containerd): ACTIVE %.2f s (pods ready %.2f s), gone %.2f s\n",
			res.first.active.Seconds(), res.first.podsReady.Seconds(), res.first.gone.Seconds())
	}
	fmt.Print("\n" + saveSummary("node-addons-fsync-"+ab.mode, s.String()))
}

// nodeKubernetesVersion is the node's and its control plane's version
// (tools/kube pins Kubernetes v1.37.2).
const nodeKubernetesVersion = "1.37"

// startNodeAgent runs the real agent for the node's cluster.
func startNodeAgent(b *testing.B, binary string, ab *addonBench, env *nodetest.Env, cluster, uid, instance string) *agentproc.Process {
	b.Helper()
	p, err := agentproc.Start(context.Background(), agentproc.Options{Binary: binary, Dir: b.TempDir(), Server: ab.srv,
		Account: ab.account, Cluster: cluster, UID: uid, Instance: instance, Endpoints: []string{ab.srv.GRPCAddr()},
		Kubeconfig: env.Cluster.UserKubeconfig("agent:"+cluster, "system:masters"),
		Args:       []string{"--log-level", "info"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	return p
}

// waitExecutor waits until the agent's status says it is the cluster's
// executor: it holds the grant and applies what saltbush delivers.
func waitExecutor(ctx context.Context, status func(context.Context) (agent.Status, error), within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := status(ctx)
		if err == nil && st.Role == "EXECUTOR" && st.Writable {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent is not the executor (last status %+v, %v): %w", st, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// cycle is one CreateAddon → ACTIVE → DeleteAddon → gone of the add-on.
// DescribeAddon is polled every 20 ms, as a client that wants to know
// at once would; watches time the pods beside it.
func (a nodeAddon) cycle(ctx context.Context, ab *addonBench, k8s kubernetes.Interface, cluster string) (nodeCycle, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var c nodeCycle
	describe := &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(a.name)}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	ready, err := a.watchReady(ctx, k8s)
	if err != nil {
		return c, err
	}
	t0 := time.Now()
	if _, err := ab.sdk.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(a.name)}); err != nil {
		return c, fmt.Errorf("CreateAddon: %w", err)
	}
	for c.active == 0 {
		out, err := ab.sdk.DescribeAddon(ctx, describe)
		switch {
		case err != nil:
			return c, fmt.Errorf("DescribeAddon: %w", err)
		case out.Addon.Status == ekstypes.AddonStatusActive:
			c.active = time.Since(t0)
			continue
		case out.Addon.Status != ekstypes.AddonStatusCreating:
			return c, fmt.Errorf("add-on %s is %s: %s", a.name, out.Addon.Status, issues(out.Addon))
		}
		if err := pace(ctx, tick); err != nil {
			return c, fmt.Errorf("add-on %s not ACTIVE: %w", a.name, err)
		}
	}
	// ACTIVE means the pods are ready: the watch has seen it, or is
	// about to.
	select {
	case at, ok := <-ready:
		if !ok {
			return c, fmt.Errorf("add-on %s ACTIVE: the watch of its Deployment ended before it was ready", a.name)
		}
		c.podsReady = at.Sub(t0)
	case <-ctx.Done():
		return c, fmt.Errorf("add-on %s ACTIVE, its Deployment never ready: %w", a.name, ctx.Err())
	}
	gone, err := a.watchPodsGone(ctx, k8s)
	if err != nil {
		return c, err
	}
	t1 := time.Now()
	if _, err := ab.sdk.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(a.name)}); err != nil {
		return c, fmt.Errorf("DeleteAddon: %w", err)
	}
	for c.gone == 0 {
		_, err := ab.sdk.DescribeAddon(ctx, describe)
		var nf *ekstypes.ResourceNotFoundException
		switch {
		case errors.As(err, &nf):
			c.gone = time.Since(t1)
			continue
		case err != nil:
			return c, fmt.Errorf("DescribeAddon while deleting: %w", err)
		}
		if err := pace(ctx, tick); err != nil {
			return c, fmt.Errorf("add-on %s not gone: %w", a.name, err)
		}
	}
	// Gone means its pods are gone too: DeleteAddon ends only once the
	// agent saw them terminate. The list is the apiserver's word; the
	// watch, which may deliver a moment late, times the last deletion.
	pods, err := k8s.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: a.selector})
	if err != nil {
		return c, err
	}
	if n := len(pods.Items); n > 0 {
		return c, fmt.Errorf("add-on %s gone %v after DeleteAddon with %d pods left (first %s, %s)", a.name, c.gone, n, pods.Items[0].Name, pods.Items[0].Status.Phase)
	}
	select {
	case at, ok := <-gone:
		if !ok {
			return c, fmt.Errorf("add-on %s gone: the watch of its pods ended first", a.name)
		}
		c.podsGone = at.Sub(t1)
	case <-ctx.Done():
		return c, fmt.Errorf("add-on %s gone, the watch never saw its last pod go: %w", a.name, ctx.Err())
	}
	return c, nil
}

// watchReady watches the add-on's Deployment from now on and sends the
// time it first has all its replicas ready and of its latest generation.
// The channel is closed if the watch ends first.
func (a nodeAddon) watchReady(ctx context.Context, k8s kubernetes.Interface) (<-chan time.Time, error) {
	w, err := k8s.AppsV1().Deployments("kube-system").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", a.deployment).String()})
	if err != nil {
		return nil, fmt.Errorf("watch deployment %s: %w", a.deployment, err)
	}
	ch := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		defer close(ch)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && deploymentReady(d) {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch, nil
}

// deploymentReady says whether d has all its replicas ready and of its
// latest generation, and no others.
func deploymentReady(d *appsv1.Deployment) bool {
	if d.Spec.Replicas == nil || d.DeletionTimestamp != nil {
		return false
	}
	want := *d.Spec.Replicas
	return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.ReadyReplicas == want && d.Status.Replicas == want
}

// watchPodsGone lists the add-on's pods and watches them from there; it
// sends the time the last one is deleted. The channel is closed if the
// watch ends first.
func (a nodeAddon) watchPodsGone(ctx context.Context, k8s kubernetes.Interface) (<-chan time.Time, error) {
	opts := metav1.ListOptions{LabelSelector: a.selector}
	l, err := k8s.CoreV1().Pods("kube-system").List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list pods %s: %w", a.selector, err)
	}
	left := map[string]bool{}
	for _, p := range l.Items {
		left[p.Name] = true
	}
	ch := make(chan time.Time, 1)
	if len(left) == 0 {
		ch <- time.Now()
		close(ch)
		return ch, nil
	}
	opts.ResourceVersion = l.ResourceVersion
	w, err := k8s.CoreV1().Pods("kube-system").Watch(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("watch pods %s: %w", a.selector, err)
	}
	go func() {
		defer w.Stop()
		defer close(ch)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(left, p.Name)
			} else {
				left[p.Name] = true
			}
			if len(left) == 0 {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch, nil
}

// pace waits for the next tick, or fails when ctx ends.
func pace(ctx context.Context, tick *time.Ticker) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tick.C:
		return nil
	}
}

// issues is an add-on's health issues, for an error.
func issues(a *ekstypes.Addon) string {
	if a.Health == nil {
		return "no issues"
	}
	var parts []string
	for _, is := range a.Health.Issues {
		parts = append(parts, fmt.Sprintf("%s: %s %v", is.Code, aws.ToString(is.Message), is.ResourceIds))
	}
	return strings.Join(parts, "; ")
}
