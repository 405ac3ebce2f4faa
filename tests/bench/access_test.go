package bench

// Cluster access through the guest agent's webhooks: the same
// kubectl-equivalent request to a real kube-apiserver, authenticated and
// authorized by the apiserver itself (a static token and RBAC) or by the
// agent's TokenReview and SubjectAccessReview webhooks (tests/accesstest),
// with the agent's review caches warm or off.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/saltbush/saltbush/guest/config"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
	"github.com/saltbush/saltbush/tests/kubetest"
)

const (
	// accessNamespace is where the request lists pods.
	accessNamespace = "dev"
	// accessWarmTTL is the warm world's positive review cache: longer than
	// the benchmark, so no cached answer expires during it.
	accessWarmTTL = 10 * time.Minute
	// apiserverTokenCache is how long the kube-apiserver keeps a token it
	// authenticated (a fixed 10 s, whatever its webhook cache TTL): a
	// token must not have been presented for that long before a request
	// with it reaches the token webhook again.
	apiserverTokenCache = 10 * time.Second
	// tokenMaxAge: a pool token older than this is dropped (tokens live
	// 15 minutes after their X-Amz-Date; the warm world's cached answers
	// accessWarmTTL).
	tokenMaxAge = 9 * time.Minute
	// tokensPerKey distinct tokens are signed with one access key, one
	// X-Amz-Date second each.
	tokensPerKey = 120
	// warmChunk is the least number of tokens a warm pool warms at once
	// (each refill waits out the apiserver's token cache once).
	warmChunk = 1024
	// agentTokenCacheSize is the agent's review cache bound (entries, per
	// review kind): a warm pool never warms more tokens than fit.
	agentTokenCacheSize = 4096
	// accessGoal is the goal for the warm webhooks' overhead at p99.
	accessGoal = time.Millisecond
)

// BenchmarkAccessWebhooks lists pods in namespace dev with client-go and a
// bearer token (what `kubectl get pods -n dev` sends: one GET over a
// kept-alive HTTP/2 connection), one request at a time, through a real
// kube-apiserver configured with the agent's webhooks and a static token
// file (accesstest), in four ways:
//
//	static            the static token file's user, allowed by an RBAC
//	                  RoleBinding: authentication and authorization inside
//	                  the apiserver, the webhooks are not asked
//	webhook-warm      an access entry's principal (a role session, Edit on
//	                  dev): every request sends a TokenReview and a
//	                  SubjectAccessReview to the agent, which answers both
//	                  from its cache (TTL 10 min)
//	webhook-warm-sar  the same principal with one token for the whole run,
//	                  as a kubectl session reuses its token: the apiserver
//	                  answers the token from its own cache, only the
//	                  SubjectAccessReview reaches the agent (its cache)
//	webhook-cold      as webhook-warm on a second world whose agent caches
//	                  nothing: both reviews go on to saltbush over mTLS gRPC
//	                  on every request
//
// The kube-apiserver keeps every token it authenticated for a fixed 10 s,
// so each webhook-warm and webhook-cold request presents a token it has
// not seen in that time: every token is used once. The warm world's tokens were presented once
// through the apiserver before (so the agent cached them), at least 10 s
// before they are used; the cold world's never were. The agent's
// review counters (its /metrics) are checked after every run: each
// request must have been answered where its variant says, or the
// benchmark fails. Timings are never asserted.
//
// It needs `make kube` and starts two control planes (about a minute of
// set-up), so it runs only when -bench names it (Access...).
func BenchmarkAccessWebhooks(b *testing.B) {
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "Access") {
		b.Skip("run it by name: -bench AccessWebhooks -benchtime 500x (see README.md)")
	}
	if _, err := kubetest.Kubectl(); err != nil {
		b.Skipf("needs the Kubernetes binaries: %v", err)
	}
	bin, err := agentBinary()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// warm and cold measure the agent: the apiserver's own authorization
	// cache is off, so every request reaches it. shipped is configured as
	// images/k3s ships it (the apiserver's 5 s authorization cache, the
	// agent's default TTLs).
	warm := newAccessWorld(ctx, b, "bench-access-warm", accesstest.Options{AgentBinary: bin, CacheTTL: accessWarmTTL, APIServerUncached: true}, true)
	cold := newAccessWorld(ctx, b, "bench-access-cold", accesstest.Options{AgentBinary: bin, APIServerUncached: true}, false)
	shipped := newAccessWorld(ctx, b, "bench-access-shipped", accesstest.Options{AgentBinary: bin,
		CacheTTL: config.Default().ReviewCacheTTL, NegativeCacheTTL: config.Default().ReviewNegativeCacheTTL}, false)

	variants := []struct {
		name  string
		world *accessWorld
		// token is the token of request i (-1: the warm-up); prepare makes
		// n of them before the clock starts.
		prepare func(b *testing.B, n int) (token func(i int) string)
		want    func(ops int) map[string]float64
	}{
		{"static", warm, func(*testing.B, int) func(int) string {
			return func(int) string { return accesstest.StaticToken }
		}, func(int) map[string]float64 { return map[string]float64{} }},
		{"webhook-warm", warm, warm.pool.take, func(ops int) map[string]float64 {
			return map[string]float64{reviewSeries("token", "authenticated", "cache"): float64(ops),
				reviewSeries("access", "allowed", "cache"): float64(ops)}
		}},
		// One token for the whole run: the apiserver answers it from its
		// token cache (the agent is asked again at most once per 10 s).
		{"webhook-warm-sar", warm, func(b *testing.B, _ int) func(int) string {
			tok := warm.pool.take(b, 1)(-1)
			return func(int) string { return tok }
		}, func(ops int) map[string]float64 {
			return map[string]float64{reviewSeries("token", "authenticated", "cache"): anyCount,
				reviewSeries("access", "allowed", "cache"): float64(ops)}
		}},
		{"webhook-cold", cold, cold.pool.take, func(ops int) map[string]float64 {
			return map[string]float64{reviewSeries("token", "authenticated", "saltbush"): float64(ops),
				reviewSeries("access", "allowed", "saltbush"): float64(ops)}
		}},
		// A kubectl session as shipped: one token, the same request again
		// and again; the apiserver answers most of them from its own
		// caches, the agent (or, past its TTL, saltbush) the rest.
		{"webhook-shipped", shipped, func(b *testing.B, _ int) func(int) string {
			tok := shipped.pool.take(b, 1)(-1)
			return func(int) string { return tok }
		}, func(int) map[string]float64 {
			return map[string]float64{
				reviewSeries("token", "authenticated", "cache"): anyCount, reviewSeries("token", "authenticated", "saltbush"): anyCount,
				reviewSeries("access", "allowed", "cache"): anyCount, reviewSeries("access", "allowed", "saltbush"): anyCount}
		}},
	}
	runs := map[string][]accessRun{}
	for _, v := range variants {
		var got []accessRun
		b.Run(v.name, func(b *testing.B) {
			token := v.prepare(b, b.N+1) // measure's warm-up op takes one
			before := v.world.metrics(b)
			stopProfiles := v.world.profileAgent(b)
			stop := profileTimed(b)
			cpu0 := v.world.cpu(b)
			i := -1
			r := measure(b, 1, func(ctx context.Context) error {
				tok := token(i)
				i++
				_, err := v.world.client.CoreV1().Pods(accessNamespace).List(withBearer(ctx, tok), metav1.ListOptions{})
				return err
			})
			cpu := v.world.cpu(b).minus(cpu0, b.N+1)
			stop()
			stopProfiles()
			delta := v.world.metrics(b).minus(before)
			if err := delta.check(v.want(b.N + 1)); err != nil {
				b.Fatalf("%s did not measure what it says: %v", v.name, err)
			}
			b.ReportMetric(us(r.p50), "p50-us")
			b.ReportMetric(us(r.p99), "p99-us")
			b.ReportMetric(us(cpu.apiserver), "apiserver-cpu-us/op")
			b.ReportMetric(us(cpu.agent), "agent-cpu-us/op")
			b.ReportMetric(us(cpu.self), "self-cpu-us/op")
			got = append(got, accessRun{result: r, agent: delta, cpu: cpu})
		})
		// Keep the runs of the requested count (go test first runs a
		// sub-benchmark once with b.N=1).
		n := 0
		for _, r := range got {
			n = max(n, r.n)
		}
		for _, r := range got {
			if r.n == n {
				runs[v.name] = append(runs[v.name], r)
			}
		}
	}
	fmt.Print("\n" + saveSummary("access-webhooks", summarizeAccess(runs)))
}

// accessRun is one run of a variant: measure's figures and the agent's
// metrics over it.
type accessRun struct {
	result
	agent promDelta
	cpu   cpuUse // per op
}

// cpuUse is the CPU time of the processes on the path: the
// kube-apiserver, the agent, and this process (saltbush, both control
// planes' etcd and kubelet doubles, the client).
type cpuUse struct{ apiserver, agent, self time.Duration }

func (c cpuUse) minus(before cpuUse, ops int) cpuUse {
	n := time.Duration(ops)
	return cpuUse{(c.apiserver - before.apiserver) / n, (c.agent - before.agent) / n, (c.self - before.self) / n}
}

// cpu reads the processes' CPU time so far (/proc: 10 ms ticks).
func (w *accessWorld) cpu(b *testing.B) cpuUse {
	b.Helper()
	_, agent, err := w.Agent.Usage()
	if err != nil {
		b.Fatalf("agent CPU: %v", err)
	}
	return cpuUse{apiserver: procCPU(b, w.apiserverPID), agent: agent, self: processCPU()}
}

// procCPU is a process's user and system CPU time, from /proc/PID/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatalf("CPU of %d: %v", pid, err)
	}
	// The fields after the command (which may hold spaces) start at ") ".
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// findAPIServer is the pid of the kube-apiserver serving on host's port.
func findAPIServer(b *testing.B, host string) int {
	b.Helper()
	u, err := url.Parse(host)
	if err != nil {
		b.Fatal(err)
	}
	want := "--secure-port=" + u.Port()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		cmd, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, want) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			return pid
		}
	}
	b.Fatalf("no kube-apiserver process with %s", want)
	return 0
}

// accessWorld is an accesstest world with the benchmark's principals and
// one client-go client whose bearer token is per request (withBearer).
type accessWorld struct {
	*accesstest.World
	client       kubernetes.Interface
	pool         *tokenPool
	apiserverPID int
}

func newAccessWorld(ctx context.Context, b *testing.B, name string, o accesstest.Options, warm bool) *accessWorld {
	b.Helper()
	w := accesstest.Start(ctx, b, name, o)
	admin := kubernetes.NewForConfigOrDie(w.Kube.Admin())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: accessNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("namespace: %v", err)
	}
	// The static user may list pods in dev through RBAC alone.
	if _, err := admin.RbacV1().Roles(accessNamespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-lister"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("Role: %v", err)
	}
	if _, err := admin.RbacV1().RoleBindings(accessNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "static-pod-lister"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-lister"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: accesstest.StaticUser}}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("RoleBinding: %v", err)
	}
	// A role with an access entry (username dev:{{SessionName}}) and
	// AmazonEKSEditPolicy on dev; its session alice presents the tokens.
	role := "arn:aws:iam::" + w.Account + ":role/dev-team"
	if _, err := w.Server.IAM().CreatePrincipal(ctx, role); err != nil {
		b.Fatalf("CreatePrincipal: %v", err)
	}
	if _, err := w.EKS.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(w.Cluster), PrincipalArn: aws.String(role),
		Username: aws.String("dev:{{SessionName}}"), KubernetesGroups: []string{"dev-team"}}); err != nil {
		b.Fatalf("CreateAccessEntry: %v", err)
	}
	if _, err := w.EKS.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(w.Cluster), PrincipalArn: aws.String(role),
		PolicyArn:   aws.String(editPolicyARN),
		AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeNamespace, Namespaces: []string{accessNamespace}}}); err != nil {
		b.Fatalf("AssociateAccessPolicy: %v", err)
	}
	cfg := &rest.Config{Host: w.Kube.Host(), TLSClientConfig: rest.TLSClientConfig{CAData: w.Kube.CACert()}, QPS: -1, Timeout: 30 * time.Second,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return bearerTransport{rt} }}
	aw := &accessWorld{World: w, client: kubernetes.NewForConfigOrDie(cfg), apiserverPID: findAPIServer(b, w.Kube.Host())}
	aw.pool = &tokenPool{w: aw, session: "arn:aws:sts::" + w.Account + ":assumed-role/dev-team/alice", warm: warm}
	// Both ways of access work before anything is measured.
	for _, tok := range []string{accesstest.StaticToken, aw.pool.probe(b)} {
		if _, err := aw.client.CoreV1().Pods(accessNamespace).List(withBearer(ctx, tok), metav1.ListOptions{}); err != nil {
			b.Fatalf("%s: list pods in %s: %v", name, accessNamespace, err)
		}
	}
	return aw
}

// bearerKey carries a request's bearer token in its context.
type bearerKey struct{}

func withBearer(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, bearerKey{}, token)
}

// bearerTransport sets each request's bearer token from its context, so
// that one client (one connection pool) presents a different token per
// request, as many kubectl processes would.
type bearerTransport struct{ rt http.RoundTripper }

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, _ := r.Context().Value(bearerKey{}).(string)
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return t.rt.RoundTrip(r)
}

// tokenPool makes the tokens of one role session, each a distinct URL
// (tokensPerKey X-Amz-Date seconds per access key), and hands each out
// once. A warm pool presents every token once through the apiserver when
// it makes it (so the agent caches its review) and hands it out only when
// the apiserver's own cache of it has expired.
type tokenPool struct {
	w       *accessWorld
	session string
	warm    bool
	ready   []pooledToken
	warmed  int // tokens the agent has cached (warm pools)
}

type pooledToken struct {
	token string
	made  time.Time
}

// take returns the tokens of n requests (indexes -1 … n-2: measure's
// warm-up, then the timed ones), none presented to the apiserver within
// its token cache time and, in a warm pool, each cached by the agent.
func (p *tokenPool) take(b *testing.B, n int) func(int) string {
	b.Helper()
	p.ready = slices.DeleteFunc(p.ready, func(t pooledToken) bool { return time.Since(t.made) > tokenMaxAge })
	if len(p.ready) < n {
		p.refill(b, n-len(p.ready))
	}
	toks := p.ready[:n]
	p.ready = p.ready[n:]
	return func(i int) string { return toks[i+1].token }
}

// refill makes at least n tokens; a warm pool presents each once through
// the apiserver and waits until the apiserver has forgotten them all.
func (p *tokenPool) refill(b *testing.B, n int) {
	b.Helper()
	if p.warm {
		n = max(n, warmChunk)
		if p.warmed+n > agentTokenCacheSize-64 {
			b.Skipf("webhook-warm: %d more tokens would not fit the agent's review cache (%d entries, %d used): use a smaller -benchtime or -count",
				n, agentTokenCacheSize, p.warmed)
		}
	}
	ctx := context.Background()
	made := time.Now()
	var fresh []pooledToken
	for len(fresh) < n {
		creds := p.w.Server.NewKey(b, p.session)
		p.wait(b, p.tokenOf(b, creds, made, -tokensPerKey/2-1)) // the key is known to saltbush's key mirror
		for j := range tokensPerKey {
			fresh = append(fresh, pooledToken{token: p.tokenOf(b, creds, made, j-tokensPerKey/2), made: made})
		}
	}
	if p.warm {
		var last time.Time
		for _, t := range fresh {
			if _, err := p.w.client.CoreV1().Pods(accessNamespace).List(withBearer(ctx, t.token), metav1.ListOptions{}); err != nil {
				b.Fatalf("warming a token: %v", err)
			}
			last = time.Now()
		}
		p.warmed += len(fresh)
		time.Sleep(time.Until(last.Add(apiserverTokenCache + time.Second)))
	}
	p.ready = append(p.ready, fresh...)
}

// tokenOf is creds' token signed at base plus offset seconds (tokens may
// be dated up to 15 minutes ahead, so both signs are valid).
func (p *tokenPool) tokenOf(b *testing.B, creds servertest.Creds, base time.Time, offset int) string {
	return servertest.Token(b, creds, p.w.Cluster, servertest.TokenOptions{Region: p.w.Region, At: base.Add(time.Duration(offset) * time.Second)})
}

// probe is a token of a new key, not one the pool hands out.
func (p *tokenPool) probe(b *testing.B) string {
	creds := p.w.Server.NewKey(b, p.session)
	tok := p.tokenOf(b, creds, time.Now(), 0)
	p.wait(b, tok)
	return tok
}

// wait presents tok until it is accepted (a new key reaches saltbush's
// key mirror within milliseconds; no world caches refusals long).
func (p *tokenPool) wait(b *testing.B, tok string) {
	b.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := p.w.client.CoreV1().Pods(accessNamespace).List(withBearer(ctx, tok), metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("a new key's token is not accepted: %v", err)
		}
	}
}

// ---------------------------------------------------------------------
// The agent's webhook metrics.

// promDelta is a set of Prometheus series (name{labels} → value).
type promDelta map[string]float64

func reviewSeries(review, result, source string) string {
	return fmt.Sprintf(`saltbush_agent_webhook_reviews_total{result=%q,review=%q,source=%q}`, result, review, source)
}

// metrics reads the agent's saltbush_agent_webhook_* series.
func (w *accessWorld) metrics(b *testing.B) promDelta {
	b.Helper()
	resp, err := http.Get("http://" + w.Agent.StatusAddr + "/metrics")
	if err != nil {
		b.Fatalf("agent metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	m := promDelta{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "saltbush_agent_webhook_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			b.Fatalf("agent metrics: %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		b.Fatalf("agent metrics: %v", err)
	}
	return m
}

func (m promDelta) minus(before promDelta) promDelta {
	d := promDelta{}
	for k, v := range m {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// anyCount in check's want: the series may move by any amount.
const anyCount = -1

// check compares the review counters moved with want (every other counter
// must not have moved).
func (m promDelta) check(want map[string]float64) error {
	var bad []string
	for k, v := range m {
		if strings.HasPrefix(k, "saltbush_agent_webhook_reviews_total") && want[k] != v && want[k] != anyCount {
			bad = append(bad, fmt.Sprintf("%s moved by %v, want %v", k, v, want[k]))
		}
	}
	for k, v := range want {
		if _, ok := m[k]; !ok && v != 0 && v != anyCount {
			bad = append(bad, fmt.Sprintf("%s did not move, want %v", k, v))
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		return fmt.Errorf("agent reviews: %s", strings.Join(bad, "; "))
	}
	return nil
}

// agentMean is the agent's mean time to answer a review of that kind from
// that source over the delta (its duration histogram), and the count.
func (m promDelta) agentMean(review, source string) (time.Duration, int) {
	labels := fmt.Sprintf(`{review=%q,source=%q}`, review, source)
	n := m["saltbush_agent_webhook_duration_seconds_count"+labels]
	if n == 0 {
		return 0, 0
	}
	return time.Duration(m["saltbush_agent_webhook_duration_seconds_sum"+labels] / n * float64(time.Second)), int(n)
}

// profileAgent fetches the agent's CPU profile over the timed part of a
// run into ProfileDirEnv, when set; the returned function waits for it.
// The profile covers a fixed window from the start (idle time after the
// run adds almost no samples). The kube-apiserver cannot be profiled:
// tests/kubetest starts it with --profiling=false.
func (w *accessWorld) profileAgent(b *testing.B) func() {
	dir := os.Getenv(ProfileDirEnv)
	if dir == "" || b.N < 10 {
		return func() {}
	}
	secs := 2 + b.N/200 // ~5 ms per request at most
	name := strings.NewReplacer("/", "_", "=", "").Replace(b.Name()) + ".pprof"
	var wg sync.WaitGroup
	fetch := func(client *http.Client, url, file string) {
		defer wg.Done()
		resp, err := client.Get(url)
		if err != nil {
			fmt.Printf("profile %s: %v\n", file, err)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			fmt.Printf("profile %s: %s: %s\n", file, resp.Status, body)
			return
		}
		_ = os.WriteFile(filepath.Join(dir, file), body, 0o644)
	}
	wg.Add(1)
	go fetch(http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.Agent.StatusAddr, secs), "agent-"+name)
	time.Sleep(100 * time.Millisecond) // the profile has started
	return wg.Wait
}

// summarizeAccess renders every run's figures, the medians over the runs,
// the ratios to static and the warm overhead against the goal.
func summarizeAccess(runs map[string][]accessRun) string {
	names := []string{"static", "webhook-warm", "webhook-warm-sar", "webhook-cold", "webhook-shipped"}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Pods(%q).List through the kube-apiserver, one client, sequential, a bearer token per request (fsync off)\n", accessNamespace)
	fmt.Fprintf(&sb, "agent review caches: webhook-warm TTL %s; webhook-cold off (both: the apiserver's authorization cache off); webhook-shipped as images/k3s ships it\n", accessWarmTTL)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "variant\trun\tops\tops/s\tp50 µs\tp99 µs\tapiserver cpu µs/op\tagent cpu µs/op\tself cpu µs/op\t")
	med := map[string]result{}
	for _, name := range names {
		rs := runs[name]
		for i, r := range rs {
			_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", name, i+1, r.n, r.opsPerS, us(r.p50), us(r.p99),
				us(r.cpu.apiserver), us(r.cpu.agent), us(r.cpu.self))
		}
		if len(rs) > 0 {
			med[name] = medianOf(rs)
			m := med[name]
			c := medianCPU(rs)
			_, _ = fmt.Fprintf(tw, "%s\tmedian\t\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", name, m.opsPerS, us(m.p50), us(m.p99),
				us(c.apiserver), us(c.agent), us(c.self))
		}
	}
	_ = tw.Flush()

	s, ok := med["static"]
	if !ok || s.p50 == 0 {
		return sb.String()
	}
	sb.WriteString("\nratios to static (same run, medians of the runs): latency x/static (lower is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tp50\tp99\tthroughput\tp50 − static µs\tp99 − static µs\t")
	for _, name := range names[1:] {
		r, ok := med[name]
		if !ok {
			continue
		}
		_, _ = fmt.Fprintf(tw, "%s/static\t%.2f\t%.2f\t%.2f\t%+.0f\t%+.0f\t\n", name, ratio(r.p50, s.p50), ratio(r.p99, s.p99), r.opsPerS/s.opsPerS,
			us(r.p50-s.p50), us(r.p99-s.p99))
	}
	_ = tw.Flush()
	if w, ok := med["webhook-warm"]; ok {
		fmt.Fprintf(&sb, "warm webhooks' overhead at p99, every request reaching the agent: %.0f µs (goal ≤ %.0f µs: %s)\n", us(w.p99-s.p99), us(accessGoal), verdict(w.p99-s.p99 <= accessGoal))
	}
	if w, ok := med["webhook-shipped"]; ok {
		fmt.Fprintf(&sb, "warm overhead at p99 as shipped (a session; the apiserver's caches too): %.0f µs (goal ≤ %.0f µs: %s)\n", us(w.p99-s.p99), us(accessGoal), verdict(w.p99-s.p99 <= accessGoal))
	}

	sb.WriteString("\nthe agent's own time per review (its duration histogram, mean over the runs)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "variant\treview\tsource\treviews\tmean µs\t")
	for _, name := range names[1:] {
		sum := promDelta{}
		for _, r := range runs[name] {
			for k, v := range r.agent {
				sum[k] += v
			}
		}
		for _, review := range []string{"token", "access"} {
			for _, source := range []string{"cache", "saltbush"} {
				if mean, n := sum.agentMean(review, source); n > 0 {
					_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t\n", name, review, source, n, us(mean))
				}
			}
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// medianCPU is the median of the runs' CPU per op, each process apart.
func medianCPU(rs []accessRun) cpuUse {
	pick := func(f func(accessRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return cpuUse{apiserver: pick(func(r accessRun) time.Duration { return r.cpu.apiserver }),
		agent: pick(func(r accessRun) time.Duration { return r.cpu.agent }),
		self:  pick(func(r accessRun) time.Duration { return r.cpu.self })}
}

// medianOf is the median of the runs' throughputs and percentiles, each
// taken separately.
func medianOf(rs []accessRun) result {
	pick := func(f func(accessRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{n: rs[0].n,
		opsPerS: pick(func(r accessRun) float64 { return r.opsPerS }),
		p50:     time.Duration(pick(func(r accessRun) float64 { return float64(r.p50) })),
		p99:     time.Duration(pick(func(r accessRun) float64 { return float64(r.p99) })),
	}
}
