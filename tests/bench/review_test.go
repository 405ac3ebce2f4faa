package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
)

const (
	reviewCluster  = "bench-review"
	reviewInstance = "i-bench-review-0"
	reviewRole     = "bench-deployer"
	editPolicyARN  = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"
	// reviewSessions × reviewTokensPerSession tokens are made before the
	// clock starts: every session is its own access key, and a session's
	// tokens differ in X-Amz-Date (one second apart, so they are distinct
	// URLs; all stay valid for 15 minutes).
	reviewSessions         = 8
	reviewTokensPerSession = 8
	// reviewGoal is the goal for a cached decision.
	reviewGoal = 2 * time.Millisecond
)

// reviewCase is one kind of call measured by BenchmarkAccessReview. op
// makes call number i (the token pool is cycled by i).
type reviewCase struct {
	name string
	op   func(ctx context.Context, i int) error
}

// reviewRun is what one run of a case (one sub-benchmark run) measured.
type reviewRun struct {
	lat     []time.Duration // every call's latency, sorted
	elapsed time.Duration   // wall time of the calls
	cpu     time.Duration   // process CPU over them (server, etcd and client)
}

// reviewResult is a case over all its runs: percentiles of every call,
// throughput and CPU per op of all of them together, and the spread of the
// runs' own p99s.
type reviewResult struct {
	result
	cpu            time.Duration // per op
	p99Min, p99Max time.Duration // of the single runs
}

// BenchmarkAccessReview measures the guest agents' review service over
// real gRPC with mTLS, sequential calls from one client, with
// GOMAXPROCS=1 for the measured part (server, etcd and client share that
// one core in-process):
//
//	review-token      ReviewToken of a valid token (authenticated): token
//	                  parse, presigned SigV4 check against the key-store
//	                  mirror, the cluster record and the access entry from
//	                  the review view (loaded during the untimed warm-up),
//	                  username template rendering
//	review-allowed    ReviewAccess allowed by a namespace-scoped
//	                  AmazonEKSEditPolicy: the same two look-ups, policy
//	                  evaluation
//	review-noopinion  ReviewAccess in the same namespace that no rule of the
//	                  policy allows (every rule is scanned)
//	etcd-get          baseline: one serializable etcd Get of the access
//	                  entry's key through the server's own etcd client
//	health            baseline: grpc.health.v1.Health/Check over an agent
//	                  connection like the review calls' (same mTLS, same
//	                  interceptor chain, no etcd)
//
// The cases alternate, three rounds each (with -count N, each sub-benchmark
// runs N times in a row within its round). The summary pools every run of
// a case: p50 and p99 over all its calls (9000 at -benchtime 3000x), the
// range of the single runs' p99s, throughput, process CPU per op, whether
// the p99 meets the goal (< 2 ms), and the ratios review/health
// and review/etcd-get. No timing is asserted.
func BenchmarkAccessReview(b *testing.B) {
	opt, mode := fsyncMode()
	srv := servertest.Start(b, opt)
	fmt.Printf("fsync: %s\n", mode)
	ctx := context.Background()
	account := srv.Config.DevAccount
	sdk := srv.EKS(b, func(o *eks.Options) { o.Retryer = aws.NopRetryer{} })

	// One ACTIVE cluster in authentication mode API, created by the dev
	// user (so the creator's ClusterAdmin entry is seeded), with one member.
	if _, err := sdk.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(reviewCluster), RoleArn: aws.String(roleARN),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: subnets},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApi},
	}); err != nil {
		b.Fatalf("CreateCluster: %v", err)
	}
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(b))
	ref := &controlv1.ClusterRef{AccountId: account, Name: reviewCluster}
	added, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: reviewInstance})
	if err != nil {
		b.Fatalf("AddMember: %v", err)
	}
	uid := added.GetCluster().GetUid()
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(b),
	}); err != nil {
		b.Fatalf("SetStatus ACTIVE: %v", err)
	}
	dev := srv.Dev(b)
	if _, err := sdk.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{
		ClusterName: aws.String(reviewCluster), PrincipalArn: aws.String(dev.PrincipalARN),
	}); err != nil {
		b.Fatalf("the creator's entry was not seeded: %v", err)
	}

	// A STANDARD entry for a role (default username template
	// arn:aws:sts::{account}:assumed-role/{role}/{{SessionName}}) with
	// AmazonEKSEditPolicy on namespace "dev".
	role := "arn:aws:iam::" + account + ":role/" + reviewRole
	if _, err := srv.IAM().CreatePrincipal(ctx, role); err != nil {
		b.Fatalf("CreatePrincipal: %v", err)
	}
	if _, err := sdk.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
		ClusterName: aws.String(reviewCluster), PrincipalArn: aws.String(role), KubernetesGroups: []string{"deployers"},
	}); err != nil {
		b.Fatalf("CreateAccessEntry: %v", err)
	}
	if _, err := sdk.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(reviewCluster), PrincipalArn: aws.String(role), PolicyArn: aws.String(editPolicyARN),
		AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeNamespace, Namespaces: []string{"dev"}},
	}); err != nil {
		b.Fatalf("AssociateAccessPolicy: %v", err)
	}

	agent := srv.AgentConn(b, uid, reviewInstance)
	reviews := deliveryv1.NewAccessReviewServiceClient(agent)
	health := healthpb.NewHealthClient(agent)
	name := &deliveryv1.ClusterName{AccountId: account, Name: reviewCluster}

	// The token pool, each token reviewed once before the clock starts:
	// that checks it authenticates, waits for the key-store mirror to have
	// every new key (a key the mirror lacks would cost an etcd read), and
	// gives the user each ReviewAccess request is about, as the apiserver
	// would send it after the TokenReview.
	var (
		tokens []string
		users  []*deliveryv1.UserInfo
		now    = time.Now()
	)
	for s := range reviewSessions {
		creds := srv.NewKey(b, fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/session-%d", account, reviewRole, s))
		for j := range reviewTokensPerSession {
			tokens = append(tokens, servertest.Token(b, creds, reviewCluster,
				servertest.TokenOptions{At: now.Add(-time.Duration(j) * time.Second)}))
		}
	}
	for _, tok := range tokens {
		var resp *deliveryv1.ReviewTokenResponse
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err = reviews.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: tok})
			if err != nil {
				b.Fatalf("ReviewToken: %v", err)
			}
			if resp.GetAuthenticated() || time.Now().After(deadline) {
				break
			}
		}
		if !resp.GetAuthenticated() {
			b.Fatalf("a pool token does not authenticate: %s", resp.GetError())
		}
		users = append(users, resp.GetUser())
	}
	if u := users[0].GetUsername(); !strings.HasPrefix(u, "arn:aws:sts::"+account+":assumed-role/"+reviewRole+"/session-") {
		b.Fatalf("username %q was not rendered from the role's template", u)
	}

	accessReq := func(u *deliveryv1.UserInfo, attrs *deliveryv1.ResourceAttributes) *deliveryv1.ReviewAccessRequest {
		return &deliveryv1.ReviewAccessRequest{
			Cluster: name, User: u.GetUsername(), Groups: u.GetGroups(), Extra: u.GetExtra(), Uid: u.GetUid(),
			ResourceAttributes: attrs,
		}
	}
	// Allowed: the edit policy writes deployments in its namespace.
	// No opinion: in the same namespace (so the scope matches and every
	// rule of the policy is scanned), RBAC bindings, which edit leaves out.
	allowed := &deliveryv1.ResourceAttributes{Namespace: "dev", Verb: "update", Group: "apps", Version: "v1", Resource: "deployments", Name: "web"}
	refused := &deliveryv1.ResourceAttributes{Namespace: "dev", Verb: "create", Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	allowReqs := make([]*deliveryv1.ReviewAccessRequest, len(users))
	noOpReqs := make([]*deliveryv1.ReviewAccessRequest, len(users))
	for i, u := range users {
		allowReqs[i], noOpReqs[i] = accessReq(u, allowed), accessReq(u, refused)
	}
	tokenReqs := make([]*deliveryv1.ReviewTokenRequest, len(tokens))
	for i, tok := range tokens {
		tokenReqs[i] = &deliveryv1.ReviewTokenRequest{Cluster: name, Token: tok}
	}

	etcd := srv.Etcd(b)
	entryKey := srv.Store(b).Key(store.AccessEntryKey(uid, role))

	cases := []reviewCase{
		{"review-token", func(ctx context.Context, i int) error {
			resp, err := reviews.ReviewToken(ctx, tokenReqs[i%len(tokenReqs)])
			if err == nil && !resp.GetAuthenticated() {
				err = fmt.Errorf("ReviewToken: not authenticated: %s", resp.GetError())
			}
			return err
		}},
		{"review-allowed", func(ctx context.Context, i int) error {
			resp, err := reviews.ReviewAccess(ctx, allowReqs[i%len(allowReqs)])
			if err == nil && !resp.GetAllowed() {
				err = fmt.Errorf("ReviewAccess: not allowed: %s", resp.GetReason())
			}
			return err
		}},
		{"review-noopinion", func(ctx context.Context, i int) error {
			resp, err := reviews.ReviewAccess(ctx, noOpReqs[i%len(noOpReqs)])
			if err == nil && (resp.GetAllowed() || resp.GetDenied()) {
				err = fmt.Errorf("ReviewAccess: want no opinion, got allowed=%v denied=%v: %s", resp.GetAllowed(), resp.GetDenied(), resp.GetReason())
			}
			return err
		}},
		{"etcd-get", func(ctx context.Context, _ int) error {
			resp, err := etcd.Get(ctx, entryKey, clientv3.WithSerializable())
			if err == nil && len(resp.Kvs) != 1 {
				err = fmt.Errorf("etcd get %s: %d keys", entryKey, len(resp.Kvs))
			}
			return err
		}},
		{"health", func(ctx context.Context, _ int) error {
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health: %s", resp.GetStatus())
			}
			return err
		}},
	}
	for _, c := range cases {
		if err := c.op(ctx, 0); err != nil {
			b.Fatalf("%s before the clock: %v", c.name, err)
		}
	}

	const rounds = 3
	runs := map[string][]reviewRun{}
	for range rounds {
		for _, c := range cases {
			// go test runs a sub-benchmark with b.N=1 before the requested
			// count, then -count times with it: keep the runs of the
			// requested count.
			var got []reviewRun
			b.Run(c.name, func(b *testing.B) { got = append(got, measureSequential(b, c.op)) })
			n := 0
			for _, r := range got {
				n = max(n, len(r.lat))
			}
			for _, r := range got {
				if len(r.lat) == n {
					runs[c.name] = append(runs[c.name], r)
				}
			}
		}
	}

	results := map[string]reviewResult{}
	for name, rs := range runs {
		results[name] = poolRuns(rs)
	}
	fmt.Print("\n" + summarizeReview(mode, len(tokens), len(runs[cases[0].name]), cases, results) + "\n")
}

// measureSequential runs b.N ops one after another from the calling
// goroutine, after one untimed warm-up op, with GOMAXPROCS=1, and reports
// throughput, the p50 and p99 latencies in µs and the process CPU per op.
//
// GOMAXPROCS is set here, inside the sub-benchmark, because go test sets
// it to the -cpu value before running each sub-benchmark: a value set
// around b.Run holds only for the first, b.N=1, call.
func measureSequential(b *testing.B, op func(context.Context, int) error) reviewRun {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	ctx := context.Background()
	if err := op(ctx, 0); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	lat := make([]time.Duration, b.N)
	stop := profileTimed(b)
	cpu0 := processCPU()
	b.ResetTimer()
	t0 := time.Now()
	for i := range b.N {
		t := time.Now()
		if err := op(ctx, i+1); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu := processCPU() - cpu0
	stop()

	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(us(percentile(lat, 0.50)), "p50-us")
	b.ReportMetric(us(percentile(lat, 0.99)), "p99-us")
	b.ReportMetric(us(cpu/time.Duration(b.N)), "cpu-us/op")
	return reviewRun{lat: lat, elapsed: elapsed, cpu: cpu}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// poolRuns combines a case's runs: percentiles over all their calls,
// throughput and CPU per op over all of them, and the range of the runs'
// own p99s.
func poolRuns(rs []reviewRun) reviewResult {
	var (
		all            []time.Duration
		elapsed, cpu   time.Duration
		p99Min, p99Max time.Duration
	)
	for i, r := range rs {
		all = append(all, r.lat...)
		elapsed += r.elapsed
		cpu += r.cpu
		p := percentile(r.lat, 0.99)
		if i == 0 || p < p99Min {
			p99Min = p
		}
		p99Max = max(p99Max, p)
	}
	if len(all) == 0 {
		return reviewResult{}
	}
	slices.Sort(all)
	return reviewResult{
		result: result{
			n:       len(all),
			opsPerS: float64(len(all)) / elapsed.Seconds(),
			p50:     percentile(all, 0.50),
			p99:     percentile(all, 0.99),
		},
		cpu:    cpu / time.Duration(len(all)),
		p99Min: p99Min, p99Max: p99Max,
	}
}

// summarizeReview renders the per-case table and the ratios of each
// review to the two baselines measured in this run.
func summarizeReview(mode string, pool, runs int, cases []reviewCase, results map[string]reviewResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "AccessReviewService, one client, sequential calls, GOMAXPROCS=1 (server, etcd and client on one core), fsync %s\n", mode)
	fmt.Fprintf(&sb, "%d tokens (%d access keys); %d runs per case in alternating rounds, percentiles over all their calls\n", pool, reviewSessions, runs)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "case\tops\tops/s\tp50 µs\tp99 µs\trun p99s µs\tcpu µs/op\tp99 < 2 ms\t")
	for _, c := range cases {
		r, ok := results[c.name]
		if !ok || r.n == 0 {
			continue
		}
		goal := "-"
		if strings.HasPrefix(c.name, "review-") {
			goal = "no"
			if r.p99 < reviewGoal {
				goal = "yes"
			}
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f–%.0f\t%.0f\t%s\t\n", c.name, r.n, r.opsPerS, us(r.p50), us(r.p99),
			us(r.p99Min), us(r.p99Max), us(r.cpu), goal)
	}
	_ = tw.Flush()

	sb.WriteString("\nratios (same run): latency x/base (lower is better), throughput x/base (higher is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tp50\tp99\tthroughput\tcpu/op\t")
	for _, base := range []string{"health", "etcd-get"} {
		a, ok := results[base]
		if !ok || a.n == 0 {
			continue
		}
		for _, c := range cases {
			r, ok := results[c.name]
			if !strings.HasPrefix(c.name, "review-") || !ok || r.n == 0 {
				continue
			}
			_, _ = fmt.Fprintf(tw, "%s/%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.name, base,
				float64(r.p50)/float64(a.p50), float64(r.p99)/float64(a.p99), r.opsPerS/a.opsPerS, float64(r.cpu)/float64(a.cpu))
		}
	}
	_ = tw.Flush()
	return sb.String()
}
