package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/store"
)

// BenchmarkServerProcess separates the server's CPU from the clients':
// `saltbush serve` (built from cmd/saltbush, or $SALTBUSH_BENCH_SERVER_BINARY)
// runs as a child process with its embedded etcd (fsync off unless
// SALTBUSH_BENCH_FSYNC=1, as in the other benchmarks), and every load
// generator runs in this process. Each sub-benchmark reads the child's
// CPU time (/proc/PID/stat) before and after its measurement, so
// server-cpu-us/op is saltbush and its etcd alone; client-cpu-us/op is
// this process's.
//
// Every family measures its server paths beside its raw etcd paths: the
// same etcd work sent straight to the child's embedded etcd (its client
// URL is in DATA_DIR/etcd-endpoints) from this process, so the child's
// CPU is then etcd's, plus, for the raw writes, the server's read view
// following them (it watches every record under its prefix, whoever
// wrote it; docs/architecture.md, "Read view"). The raw paths are
// BenchmarkAddonCreate's, BenchmarkAddonDescribe's and BenchmarkAddonList's
// (addon_test.go), and for DescribeCluster and DescribeAccessEntry the Gets
// those services make of etcd when the read view cannot answer
// (server/cluster/read.go, server/access/read.go); a Describe or List the
// view answers reads no etcd at all, so its ratios may exceed 1:
//
//	create                 CreateAddon: raw-etcd-txn, raw-etcd-get-txn, grpc, facade-http
//	describe-addon         DescribeAddon: raw-etcd, raw-etcd-serializable, grpc, facade-http
//	describe-cluster       DescribeCluster: raw-etcd (the linearizable Get Describe
//	                       makes), raw-etcd-serializable, grpc, facade-http
//	describe-access-entry  DescribeAccessEntry: raw-etcd (linearizable Gets of the
//	                       cluster record and the entry), raw-etcd-serializable, grpc,
//	                       facade-http
//	list-addons            ListAddons of 100 add-ons in pages of 10: raw-etcd,
//	                       raw-etcd-cluster, grpc, facade-http
//
// each at 1 and 64 concurrent clients (measure, create_test.go). grpc is
// one mTLS connection with the admin CLI's certificate acting for the
// development account; facade-http is a bare net/http client replaying
// requests signed with SigV4 as the development administrator before the
// clock starts (presign_test.go). Both credentials are the ones serve
// writes into its data directory. Each family prints its table and the
// ratios server path / raw etcd of throughput and of server CPU per op;
// the parent prints them all at the end. No timing is asserted.
//
// Minutes of set-up and a child process: only when -bench names it.
func BenchmarkServerProcess(b *testing.B) {
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "ServerProcess") {
		b.Skip("run it by name: -bench ServerProcess -benchtime 2000x")
	}
	fsync := os.Getenv(FsyncEnv) == "1"
	mode := "off"
	if fsync {
		mode = "on"
	}
	// A benchstat configuration line, as in the other families.
	fmt.Printf("fsync: %s\n", mode)
	child := startServerChild(b, serverBinary(b), fsync)
	pb := newProcBench(b, child, mode)
	idle := pb.idleCPU(b)
	load0 := loadAverage()

	families := []struct {
		name  string
		setup func(b *testing.B) procFamily
	}{
		{"create", pb.createFamily},
		{"describe-addon", pb.describeAddonFamily},
		{"describe-cluster", pb.describeClusterFamily},
		{"describe-access-entry", pb.describeAccessEntryFamily},
		{"list-addons", pb.listFamily},
	}
	var done []familyResult
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			start := loadAverage()
			fam := f.setup(b)
			runs := pb.run(b, fam)
			fr := familyResult{procFamily: fam, results: medians(runs), load: [2]string{start, loadAverage()}}
			done = append(done, fr)
			fmt.Print("\n" + fr.table(mode) + "\n")
		})
	}
	if len(done) == 0 {
		return
	}
	summary := overall(mode, child.pid, idle, load0, loadAverage(), done)
	fmt.Print("\n" + summary)
	// The file keeps the families' tables too.
	var all strings.Builder
	for _, fr := range done {
		all.WriteString(fr.table(mode) + "\n")
	}
	saveProcessSummary(mode, all.String()+summary)
}

// procBench is the child and this process's clients of it.
type procBench struct {
	child *serverChild
	// ab drives the add-on families: addon_test.go's set-up helpers
	// (activeCluster, shape, clusterPool) over clients of the child.
	ab     *addonBench
	access eksv1.AccessEntryServiceClient
	dev    string // the development administrator's ARN
}

func newProcBench(b *testing.B, child *serverChild, mode string) *procBench {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The raw paths' client: like the server's own (clientv3 over one
	// loopback connection to the same etcd).
	etcd, err := clientv3.New(clientv3.Config{Endpoints: child.etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatalf("connect to the child's etcd %v: %v", child.etcd, err)
	}
	b.Cleanup(func() { _ = etcd.Close() })
	st, err := store.New(ctx, etcd, store.Options{Prefix: child.cfg.EtcdPrefix})
	if err != nil {
		b.Fatalf("open the child's store: %v", err)
	}
	account := child.cfg.DevAccount
	conn, err := grpc.NewClient(child.grpcAddr, grpc.WithTransportCredentials(grpccreds.NewTLS(child.tls)),
		grpc.WithUnaryInterceptor(server.ActForAccount(account)))
	if err != nil {
		b.Fatalf("dial the child's gRPC port: %v", err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	// As in the other families: a keep-alive pool big enough for 64
	// clients (http.DefaultTransport keeps 2 idle connections per host).
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
	}}
	return &procBench{
		child: child,
		ab: &addonBench{
			mode:       mode,
			account:    account,
			etcd:       etcd,
			st:         st,
			grpc:       eksv1.NewAddonServiceClient(conn),
			http:       httpClient,
			signer:     &requestSigner{baseURL: child.url, region: child.cfg.Cluster.Region, creds: child.creds, signer: v4.NewSigner()},
			clusterSvc: eksv1.NewClusterServiceClient(conn),
			control:    controlv1.NewClusterControlServiceClient(conn),
			addonCtl:   controlv1.NewAddonControlServiceClient(conn),
		},
		access: eksv1.NewAccessEntryServiceClient(conn),
		dev:    "arn:aws:iam::" + account + ":user/" + server.DevUserName,
	}
}

// idleWindow is how long the child's idle CPU is sampled: a measurement
// window (the readiness watch runs every 5 s), not a wait for anything.
const idleWindow = 5 * time.Second

// idleCPU is the child's CPU use while nothing calls it (readiness
// checks, certificate pruning, the sweeper), as a fraction of one core:
// the part of every per-op figure that is not the ops'.
func (pb *procBench) idleCPU(b *testing.B) float64 {
	b.Helper()
	cpu0, t0 := pb.child.cpu(b), time.Now()
	t := time.NewTimer(idleWindow)
	defer t.Stop()
	select {
	case <-t.C:
	case <-pb.child.exited:
	}
	return float64(pb.child.cpu(b)-cpu0) / float64(time.Since(t0))
}

// procPath is one way of doing a family's op; op does op number seq
// (unique over the run).
type procPath struct {
	name string
	op   func(ctx context.Context, seq int64) error
}

// procFamily is one operation measured through its raw etcd paths and
// its server paths.
type procFamily struct {
	name, title, note string
	paths             []procPath
	// bases are the raw etcd paths (the first is the one the overall
	// summary compares with), servers the server paths.
	bases, servers []string
	// before, when set, runs before a sub-benchmark's measurement
	// (untimed, outside the CPU window); the function it returns, when
	// not nil, runs after it.
	before func(b *testing.B, path string, c int) (after func())
}

// procRun is one sub-benchmark run: measure's figures and the CPU time
// per op of the child (saltbush and its etcd) and of this process.
type procRun struct {
	result
	server, client time.Duration
	// runs is how many runs a median (medians) is of.
	runs int
}

// runDeadline bounds one sub-benchmark's ops: a pre-signed request is
// valid for 15 minutes (presign_test.go), so no run may take longer.
const runDeadline = 15 * time.Minute

// run measures every path of fam at every concurrency.
func (pb *procBench) run(b *testing.B, fam procFamily) map[string]map[int][]procRun {
	var seq atomic.Int64
	runs := map[string]map[int][]procRun{}
	for _, p := range fam.paths {
		runs[p.name] = map[int][]procRun{}
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
				var after func()
				if fam.before != nil {
					after = fam.before(b, p.name, c)
				}
				ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
				defer cancel()
				srv0, cli0 := pb.child.cpu(b), processCPU()
				r := measure(b, c, func(context.Context) error { return p.op(ctx, seq.Add(1)) })
				// Warm-ups included, as in runPaths (addon_test.go).
				ops := time.Duration(b.N + c)
				run := procRun{result: r, server: (pb.child.cpu(b) - srv0) / ops, client: (processCPU() - cli0) / ops}
				b.ReportMetric(us(run.server), "server-cpu-us/op")
				b.ReportMetric(us(run.client), "client-cpu-us/op")
				runs[p.name][c] = append(runs[p.name][c], run)
				if after != nil {
					after()
				}
			})
		}
	}
	return runs
}

// medians keeps, per path and concurrency, the runs of the requested
// count (go test first runs a sub-benchmark once with b.N=1) and takes
// the median of each figure separately.
func medians(runs map[string]map[int][]procRun) map[string]map[int]procRun {
	out := map[string]map[int]procRun{}
	for name, byC := range runs {
		out[name] = map[int]procRun{}
		for c, rs := range byC {
			n := 0
			for _, r := range rs {
				n = max(n, r.n)
			}
			rs = slices.DeleteFunc(slices.Clone(rs), func(r procRun) bool { return r.n != n })
			if len(rs) == 0 {
				continue
			}
			pick := func(f func(procRun) float64) float64 {
				v := make([]float64, len(rs))
				for i, r := range rs {
					v[i] = f(r)
				}
				return median(v)
			}
			out[name][c] = procRun{
				runs: len(rs),
				result: result{n: n, opsPerS: pick(func(r procRun) float64 { return r.opsPerS }),
					p50: time.Duration(pick(func(r procRun) float64 { return float64(r.p50) })),
					p99: time.Duration(pick(func(r procRun) float64 { return float64(r.p99) }))},
				server: time.Duration(pick(func(r procRun) float64 { return float64(r.server) })),
				client: time.Duration(pick(func(r procRun) float64 { return float64(r.client) })),
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------
// The families. Their raw paths are the other benchmarks' (named there),
// sent to the child's etcd.

// createFamily is BenchmarkAddonCreate's CreateAddon (addon_test.go): a
// fresh ACTIVE cluster per server op, made before the clock starts.
func (pb *procBench) createFamily(b *testing.B) procFamily {
	ab := pb.ab
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh, err := ab.shape(ctx, "bench-proc-create")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := ab.rawCreate(ctx, sh)
	if err != nil {
		b.Fatal(err)
	}
	pool := &clusterPool{ab: ab}
	var httpReqs signedQueue
	paths := []procPath{
		{"raw-etcd-txn", raw.txn},
		{"raw-etcd-get-txn", raw.getTxn},
		{"grpc", func(ctx context.Context, _ int64) error {
			cluster, err := pool.take()
			if err != nil {
				return err
			}
			_, err = ab.grpc.CreateAddon(ctx, createRequest(cluster))
			return err
		}},
		{"facade-http", func(ctx context.Context, _ int64) error {
			r, err := httpReqs.take()
			if err != nil {
				return err
			}
			return r.send(ctx, ab.http, pb.child.url, nil)
		}},
	}
	return procFamily{
		name: "create", title: "CreateAddon",
		note: fmt.Sprintf("CreateAddon stores a %d-byte add-on record, a %d-byte deadline hint and a %d-byte idempotency record; the raw paths write copies of them",
			sh.addonBytes, sh.hintBytes, sh.idemBytes),
		paths: paths, bases: []string{"raw-etcd-txn", "raw-etcd-get-txn"}, servers: []string{"grpc", "facade-http"},
		before: func(b *testing.B, path string, c int) func() {
			if strings.HasPrefix(path, "raw-") {
				return nil
			}
			pool.fill(b, b.N+c)
			if path != "facade-http" {
				return nil
			}
			// One signed create per op and per warm-up, each on its own
			// cluster, as in BenchmarkAddonCreate.
			return httpReqs.fill(b, ab.signer, b.N+c, func() (string, []byte, error) {
				cluster, err := pool.take()
				if err != nil {
					return "", nil, err
				}
				body, err := json.Marshal(map[string]any{
					"addonName": benchAddon, "configurationValues": benchConfig, "tags": benchTags,
					"clientRequestToken": uuid.NewString(),
				})
				return "/clusters/" + cluster + "/addons", body, err
			})
		},
	}
}

// getOne is a Get of key that must find it.
func getOne(ctx context.Context, etcd *clientv3.Client, key string, opts ...clientv3.OpOption) error {
	resp, err := etcd.Get(ctx, key, opts...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 {
		return fmt.Errorf("%s: not found", key)
	}
	return nil
}

// signedOnce returns the facade-http op replaying one GET of path, signed
// again before each of its sub-benchmarks (the request is the same every
// op), and the before hook that signs it; check verifies the decoded
// answer.
func (pb *procBench) signedOnce(path string, out func() any, check func(any) error) (procPath, func(*testing.B, string, int) func()) {
	var req signedRequest
	op := procPath{"facade-http", func(ctx context.Context, _ int64) error {
		o := out()
		if err := req.send(ctx, pb.ab.http, pb.child.url, o); err != nil {
			return err
		}
		return check(o)
	}}
	before := func(b *testing.B, p string, _ int) func() {
		if p == "facade-http" {
			req = pb.ab.signer.signAll(b, []string{path})[path]
		}
		return nil
	}
	return op, before
}

// describeAddonFamily is BenchmarkAddonDescribe's DescribeAddon of one
// ACTIVE add-on (addon_test.go).
func (pb *procBench) describeAddonFamily(b *testing.B) procFamily {
	ab := pb.ab
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh, err := ab.shape(ctx, "bench-proc-describe")
	if err != nil {
		b.Fatal(err)
	}
	// ACTIVE, as a guest report would make it.
	if _, err := ab.addonCtl.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
		ClusterUid: sh.clusterUID, AddonName: benchAddon, AddonUid: sh.addon.GetUid(),
		Generation: 1, Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "i-0123456789abcdef0",
	}); err != nil {
		b.Fatal(err)
	}
	clusterKey := ab.st.Key(store.ClusterKey(ab.account, sh.cluster))
	addonKey := ab.st.Key(store.AddonKey(sh.clusterUID, benchAddon))
	checkActive := func(status string) error {
		if status != "ACTIVE" {
			return fmt.Errorf("add-on status %q, want ACTIVE", status)
		}
		return nil
	}
	type answer struct{ Addon struct{ Status string } }
	httpPath, before := pb.signedOnce("/clusters/"+sh.cluster+"/addons/"+benchAddon,
		func() any { return &answer{} }, func(o any) error { return checkActive(o.(*answer).Addon.Status) })
	paths := []procPath{
		// What Describe reads: the cluster record serializably
		// (readCluster's fast read), the add-on record linearizably.
		{"raw-etcd", func(ctx context.Context, _ int64) error {
			if err := getOne(ctx, ab.etcd, clusterKey, clientv3.WithSerializable()); err != nil {
				return err
			}
			return getOne(ctx, ab.etcd, addonKey)
		}},
		{"raw-etcd-serializable", func(ctx context.Context, _ int64) error {
			if err := getOne(ctx, ab.etcd, clusterKey, clientv3.WithSerializable()); err != nil {
				return err
			}
			return getOne(ctx, ab.etcd, addonKey, clientv3.WithSerializable())
		}},
		{"grpc", func(ctx context.Context, _ int64) error {
			out, err := ab.grpc.DescribeAddon(ctx, &eksv1.DescribeAddonRequest{ClusterName: sh.cluster, AddonName: benchAddon})
			if err != nil {
				return err
			}
			return checkActive(out.GetAddon().GetStatus())
		}},
		httpPath,
	}
	return procFamily{
		name: "describe-addon", title: "DescribeAddon", note: fmt.Sprintf("the add-on record is %d bytes", sh.addonBytes),
		paths: paths, bases: []string{"raw-etcd-serializable", "raw-etcd"}, servers: []string{"grpc", "facade-http"},
		before: before,
	}
}

// apiCluster creates an ACTIVE cluster in authentication mode API through
// the façade as the development administrator, so the cluster service
// seeds the creator's access entry (a gRPC caller, the admin service, is
// no IAM principal and gets none), and returns its record and size.
func (pb *procBench) apiCluster(ctx context.Context, name string) (*storagev1.ClusterRecord, int, error) {
	ab := pb.ab
	body, err := json.Marshal(map[string]any{
		"name": name, "roleArn": roleARN, "resourcesVpcConfig": map[string]any{"subnetIds": subnets},
		"accessConfig": map[string]any{"authenticationMode": "API"}, "clientRequestToken": uuid.NewString(),
	})
	if err != nil {
		return nil, 0, err
	}
	req, err := ab.signer.sign(http.MethodPost, "/clusters", body)
	if err != nil {
		return nil, 0, err
	}
	if err := req.send(ctx, ab.http, pb.child.url, nil); err != nil {
		return nil, 0, fmt.Errorf("create cluster %s: %w", name, err)
	}
	ca, err := clustertest.GenerateCertificateAuthorityData()
	if err != nil {
		return nil, 0, err
	}
	// ACTIVE, as the provisioner would make it: a DescribeCluster then
	// answers with an endpoint and CA data, as on a real cluster.
	if _, err := ab.control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: ab.account, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: ca,
	}); err != nil {
		return nil, 0, fmt.Errorf("cluster %s ACTIVE: %w", name, err)
	}
	resp, err := ab.etcd.Get(ctx, ab.st.Key(store.ClusterKey(ab.account, name)))
	if err != nil || len(resp.Kvs) != 1 {
		return nil, 0, fmt.Errorf("read cluster %s: %v", name, err)
	}
	rec := &storagev1.ClusterRecord{}
	return rec, len(resp.Kvs[0].Value), store.Decode(resp.Kvs[0].Value, rec)
}

// describeClusterFamily is DescribeCluster of one ACTIVE cluster, what
// BenchmarkDescribeClusterAuth measures through the façade
// (auth_test.go). Without the read view (or when it lags)
// cluster.Describe makes one linearizable Get of the cluster record
// (server/cluster/read.go): raw-etcd.
func (pb *procBench) describeClusterFamily(b *testing.B) procFamily {
	ab := pb.ab
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "bench-proc-describe-cluster"
	rec, size, err := pb.apiCluster(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	key := ab.st.Key(store.ClusterKey(ab.account, name))
	checkActive := func(status string) error {
		if status != "ACTIVE" {
			return fmt.Errorf("cluster status %q, want ACTIVE", status)
		}
		return nil
	}
	type answer struct{ Cluster struct{ Status string } }
	httpPath, before := pb.signedOnce("/clusters/"+name,
		func() any { return &answer{} }, func(o any) error { return checkActive(o.(*answer).Cluster.Status) })
	paths := []procPath{
		{"raw-etcd", func(ctx context.Context, _ int64) error { return getOne(ctx, ab.etcd, key) }},
		{"raw-etcd-serializable", func(ctx context.Context, _ int64) error {
			return getOne(ctx, ab.etcd, key, clientv3.WithSerializable())
		}},
		{"grpc", func(ctx context.Context, _ int64) error {
			out, err := ab.clusterSvc.DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: name})
			if err != nil {
				return err
			}
			return checkActive(out.GetCluster().GetStatus())
		}},
		httpPath,
	}
	return procFamily{
		name: "describe-cluster", title: "DescribeCluster",
		note:  fmt.Sprintf("the cluster record (ACTIVE, uid %s) is %d bytes", rec.GetUid(), size),
		paths: paths, bases: []string{"raw-etcd-serializable", "raw-etcd"}, servers: []string{"grpc", "facade-http"},
		before: before,
	}
}

// describeAccessEntryFamily is DescribeAccessEntry of the creator's entry
// on a cluster in authentication mode API. Without the read view (or
// when it lags) access.Describe reads the cluster record and then the
// entry from etcd, both linearizably (server/access/read.go): raw-etcd.
// BenchmarkAccessReview's etcd-get baseline (review_test.go) is the
// second Get alone, serializable.
func (pb *procBench) describeAccessEntryFamily(b *testing.B) procFamily {
	ab := pb.ab
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "bench-proc-access"
	rec, _, err := pb.apiCluster(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	p, err := access.ParsePrincipal(pb.dev)
	if err != nil {
		b.Fatal(err)
	}
	clusterKey := ab.st.Key(store.ClusterKey(ab.account, name))
	entryKey := ab.st.Key(store.AccessEntryKey(rec.GetUid(), p.Canonical()))
	entry, err := ab.etcd.Get(ctx, entryKey)
	if err != nil || len(entry.Kvs) != 1 {
		b.Fatalf("the creator's access entry %s was not seeded: %v", entryKey, err)
	}
	check := func(arn string) error {
		if arn != pb.dev {
			return fmt.Errorf("access entry of %q, want %q", arn, pb.dev)
		}
		return nil
	}
	type answer struct{ AccessEntry struct{ PrincipalArn string } }
	// The ARN as the AWS SDK puts it in the path (tests/hostile does the
	// same): path-escaped, colons too.
	escaped := strings.ReplaceAll(url.PathEscape(pb.dev), ":", "%3A")
	httpPath, before := pb.signedOnce("/clusters/"+name+"/access-entries/"+escaped,
		func() any { return &answer{} }, func(o any) error { return check(o.(*answer).AccessEntry.PrincipalArn) })
	paths := []procPath{
		{"raw-etcd", func(ctx context.Context, _ int64) error {
			if err := getOne(ctx, ab.etcd, clusterKey); err != nil {
				return err
			}
			return getOne(ctx, ab.etcd, entryKey)
		}},
		{"raw-etcd-serializable", func(ctx context.Context, _ int64) error {
			if err := getOne(ctx, ab.etcd, clusterKey, clientv3.WithSerializable()); err != nil {
				return err
			}
			return getOne(ctx, ab.etcd, entryKey, clientv3.WithSerializable())
		}},
		{"grpc", func(ctx context.Context, _ int64) error {
			out, err := pb.access.DescribeAccessEntry(ctx, &eksv1.DescribeAccessEntryRequest{ClusterName: name, PrincipalArn: pb.dev})
			if err != nil {
				return err
			}
			return check(out.GetAccessEntry().GetPrincipalArn())
		}},
		httpPath,
	}
	return procFamily{
		name: "describe-access-entry", title: "DescribeAccessEntry",
		note:  fmt.Sprintf("the creator's entry (%s) is %d bytes", pb.dev, len(entry.Kvs[0].Value)),
		paths: paths, bases: []string{"raw-etcd-serializable", "raw-etcd"}, servers: []string{"grpc", "facade-http"},
		before: before,
	}
}

// listFamily is BenchmarkAddonList's ListAddons (addon_test.go): 100
// add-ons of one cluster (one created through gRPC, 99 copies of its
// record written straight to etcd) in pages of 10, one op = 10 calls.
func (pb *procBench) listFamily(b *testing.B) procFamily {
	ab := pb.ab
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh, err := ab.shape(ctx, "bench-proc-list")
	if err != nil {
		b.Fatal(err)
	}
	l, err := ab.addonListing(ctx, sh, pb.child.url)
	if err != nil {
		b.Fatal(err)
	}
	var pages map[string]signedRequest
	paths := []procPath{
		{"raw-etcd", func(ctx context.Context, _ int64) error { return l.raw(ctx, false) }},
		{"raw-etcd-cluster", func(ctx context.Context, _ int64) error { return l.raw(ctx, true) }},
		{"grpc", func(ctx context.Context, _ int64) error { return l.grpc(ctx) }},
		{"facade-http", func(ctx context.Context, _ int64) error { return l.facadeHTTP(ctx, pages, pb.child.url) }},
	}
	return procFamily{
		name: "list-addons", title: "ListAddons (100 add-ons, 10 pages of 10 per op)",
		paths: paths, bases: []string{"raw-etcd", "raw-etcd-cluster"}, servers: []string{"grpc", "facade-http"},
		before: func(b *testing.B, path string, _ int) func() {
			if path == "facade-http" {
				pages = ab.signer.signAll(b, l.pagePaths)
			}
			return nil
		},
	}
}

// ---------------------------------------------------------------------
// Summaries.

// familyResult is a family's medians and the load average (1, 5, 15
// minutes) when it started and ended.
type familyResult struct {
	procFamily
	results map[string]map[int]procRun
	load    [2]string
}

// table renders a family's figures and its ratios to each raw path.
func (fr familyResult) table(mode string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s, saltbush serve in a child process, fsync=%s\n", fr.title, mode)
	if fr.note != "" {
		sb.WriteString(fr.note + "\n")
	}
	fmt.Fprintf(&sb, "load average %s at the start, %s at the end; with -count N each figure is the median of its N runs (runs)\n\n", fr.load[0], fr.load[1])
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "path\tc\tops\truns\tops/s\tp50 ms\tp99 ms\tserver cpu µs/op\tclient cpu µs/op\t")
	for _, p := range fr.paths {
		for _, c := range concurrencies {
			if r, ok := fr.results[p.name][c]; ok {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t%.0f\t\n", p.name, c, r.n, r.runs, r.opsPerS, ms(r.p50), ms(r.p99),
					us(r.server), us(r.client))
			}
		}
	}
	_ = tw.Flush()
	sb.WriteString("\nratios (same run), server path / raw etcd: throughput (higher is better), server CPU per op (lower is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tc\tthroughput\tserver cpu/op\t")
	for _, base := range fr.bases {
		for _, x := range fr.servers {
			for _, c := range concurrencies {
				if t, cpu, ok := fr.ratios(x, base, c); ok {
					_, _ = fmt.Fprintf(tw, "%s/%s\t%d\t%.2f\t%.2f\t\n", x, base, c, t, cpu)
				}
			}
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// ratios are x's throughput and server CPU per op over base's.
func (fr familyResult) ratios(x, base string, c int) (throughput, cpu float64, ok bool) {
	a, okA := fr.results[base][c]
	r, okR := fr.results[x][c]
	if !okA || !okR || a.opsPerS == 0 || a.server == 0 {
		return 0, 0, false
	}
	return r.opsPerS / a.opsPerS, float64(r.server) / float64(a.server), true
}

// overall renders every family's server paths against its first raw path.
func overall(mode string, pid int, idle float64, load0, load1 string, frs []familyResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "BenchmarkServerProcess summary: saltbush serve (pid %d, with its embedded etcd, fsync=%s) in a child process, clients in this one\n", pid, mode)
	fmt.Fprintf(&sb, "server CPU from /proc/%d/stat (10 ms ticks) over each measurement, warm-ups included; idle, the server used %.1f ms of CPU per second\n", pid, idle*1000)
	fmt.Fprintf(&sb, "load average %s at the start, %s at the end\n\n", load0, load1)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "family\tpath\traw etcd\tc\tops/s\traw ops/s\tthroughput ratio\tserver cpu µs/op\traw cpu µs/op\tcpu ratio\tclient cpu µs/op\t")
	for _, fr := range frs {
		base := fr.bases[0]
		for _, x := range fr.servers {
			for _, c := range concurrencies {
				t, cpu, ok := fr.ratios(x, base, c)
				if !ok {
					continue
				}
				r, a := fr.results[x][c], fr.results[base][c]
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.0f\t%.0f\t%.2f\t%.0f\t\n", fr.name, x, base, c,
					r.opsPerS, a.opsPerS, t, us(r.server), us(a.server), cpu, us(r.client))
			}
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

// saveProcessSummary writes the summary under results/ (gitignored);
// failing to does not fail the benchmark.
func saveProcessSummary(mode, summary string) {
	if err := os.MkdirAll("results", 0o755); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	f := filepath.Join("results", fmt.Sprintf("process-fsync-%s-%s.txt", mode, time.Now().Format("20060102-150405")))
	if err := os.WriteFile(f, []byte(summary), 0o644); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	fmt.Printf("summary written to %s\n", filepath.Join("tests/bench", f))
}
