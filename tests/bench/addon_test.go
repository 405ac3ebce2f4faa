package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/kubetest"
)

// The add-on benchmarks: CreateAddon, DescribeAddon and a 10-page
// ListAddons, each through raw etcd (the same etcd work, measured in the same
// run), direct gRPC and the façade. See README.md, "Add-on benchmarks".

// benchAddon is the add-on every benchmark creates: the hidden no-op test
// add-on, whose schema takes the configuration below.
const (
	benchAddon  = "saltbush-noop"
	benchConfig = `{"replicaCount": 2, "message": "benchmark"}`
)

var benchTags = map[string]string{"team": "platform", "env": "bench"}

// addonBench is one in-process saltbush with the clients every add-on
// benchmark uses.
type addonBench struct {
	srv     *servertest.Server
	mode    string
	account string
	etcd    *clientv3.Client
	st      *store.Store
	grpc    eksv1.AddonServiceClient
	sdk     *eks.Client
	// http and signer are facade-http's bare client (presign_test.go).
	http   *http.Client
	signer *requestSigner
	// clusterSvc and control set clusters up (untimed).
	clusterSvc eksv1.ClusterServiceClient
	control    controlv1.ClusterControlServiceClient
	addonCtl   controlv1.AddonControlServiceClient
}

func newAddonBench(b *testing.B) *addonBench {
	opt, mode := fsyncMode()
	srv := servertest.Start(b, opt)
	fmt.Printf("fsync: %s\n", mode)
	conn := srv.GRPC(b)
	pool := func() *http.Transport {
		return &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	}
	return &addonBench{
		srv:     srv,
		mode:    mode,
		account: srv.Config.DevAccount,
		etcd:    srv.Etcd(b),
		st:      srv.Store(b),
		grpc:    eksv1.NewAddonServiceClient(conn),
		sdk: srv.EKS(b, func(o *eks.Options) {
			// As in BenchmarkCreate: one keep-alive connection per client, no retries.
			o.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: pool()}
			o.Retryer = aws.NopRetryer{}
		}),
		http:       &http.Client{Timeout: 30 * time.Second, Transport: pool()},
		signer:     newRequestSigner(b, srv),
		clusterSvc: eksv1.NewClusterServiceClient(conn),
		control:    controlv1.NewClusterControlServiceClient(conn),
		addonCtl:   controlv1.NewAddonControlServiceClient(conn),
	}
}

// activeCluster creates cluster name and makes it ACTIVE, as the
// provisioner would. It returns the cluster's uid.
func (ab *addonBench) activeCluster(ctx context.Context, name string) (string, error) {
	// The service range is the benchmarks' control plane's: add-ons that
	// place a Service in it (coredns at its .10) are valid there.
	if _, err := ab.clusterSvc.CreateCluster(ctx, &eksv1.CreateClusterRequest{
		Name: name, RoleArn: roleARN, ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: subnets},
		KubernetesNetworkConfig: &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: kubetest.ServiceClusterIPRange},
	}); err != nil {
		return "", fmt.Errorf("create cluster %s: %w", name, err)
	}
	ca, err := clustertest.GenerateCertificateAuthorityData()
	if err != nil {
		return "", err
	}
	out, err := ab.control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: ab.account, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: ca,
	})
	if err != nil {
		return "", fmt.Errorf("cluster %s ACTIVE: %w", name, err)
	}
	return out.GetCluster().GetUid(), nil
}

// createRequest is the CreateAddon request every create path sends (the
// façade paths send the same members as JSON).
func createRequest(cluster string) *eksv1.CreateAddonRequest {
	return &eksv1.CreateAddonRequest{
		ClusterName:         cluster,
		AddonName:           benchAddon,
		ConfigurationValues: benchConfig,
		Tags:                benchTags,
		ClientRequestToken:  uuid.NewString(), // as the AWS SDK auto-fills it
	}
}

// shape is a cluster with one real add-on, created through gRPC, and the
// records CreateAddon stored for it (the add-on, its idempotency record and
// its deadline index hint): the raw paths write copies of these, so they
// write what the service writes, byte for byte in size.
type shape struct {
	cluster    string
	clusterUID string
	clusterRev int64
	addon      *storagev1.AddonRecord
	idem       *storagev1.IdempotencyRecord
	hint       *storagev1.AddonDeadlineHint
	addonBytes int
	idemBytes  int
	hintBytes  int
}

func (ab *addonBench) shape(ctx context.Context, cluster string) (*shape, error) {
	uid, err := ab.activeCluster(ctx, cluster)
	if err != nil {
		return nil, err
	}
	req := createRequest(cluster)
	if _, err := ab.grpc.CreateAddon(ctx, req); err != nil {
		return nil, fmt.Errorf("create the shape add-on: %w", err)
	}
	sh := &shape{cluster: cluster, clusterUID: uid, addon: &storagev1.AddonRecord{}, idem: &storagev1.IdempotencyRecord{},
		hint: &storagev1.AddonDeadlineHint{}}
	if sh.clusterRev, err = ab.st.Get(ctx, store.ClusterKey(ab.account, cluster), &storagev1.ClusterRecord{}); err != nil {
		return nil, err
	}
	read := func(key string, into proto.Message, size *int) error {
		resp, err := ab.etcd.Get(ctx, ab.st.Key(key))
		if err != nil || len(resp.Kvs) != 1 {
			return fmt.Errorf("read %s: %v (%d keys)", key, err, len(resp.Kvs))
		}
		*size = len(resp.Kvs[0].Value)
		return store.Decode(resp.Kvs[0].Value, into)
	}
	if err := read(store.AddonKey(uid, benchAddon), sh.addon, &sh.addonBytes); err != nil {
		return nil, err
	}
	if err := read(store.IdempotencyKey(ab.account, "CreateAddon", req.ClientRequestToken), sh.idem, &sh.idemBytes); err != nil {
		return nil, err
	}
	// The deadline index hint is keyed by the deadline the record carries.
	if sh.addon.GetDeadline() == nil {
		return nil, fmt.Errorf("the shape add-on has no deadline, so CreateAddon wrote no deadline hint")
	}
	if err := read(store.AddonDeadlineKey(sh.addon.GetDeadline().AsTime(), uid, benchAddon), sh.hint, &sh.hintBytes); err != nil {
		return nil, err
	}
	return sh, nil
}

// addonCopy is the shape's add-on record as CreateAddon would store it for
// another add-on name (new incarnation uid, ARN and timestamps).
func (sh *shape) addonCopy(name string) *storagev1.AddonRecord {
	rec := proto.Clone(sh.addon).(*storagev1.AddonRecord)
	now := time.Now()
	rec.Name = name
	rec.Uid = uuid.NewString()
	rec.Arn = strings.TrimSuffix(sh.addon.GetArn(), sh.addon.GetName()+"/"+sh.addon.GetUid()) + name + "/" + rec.Uid
	rec.CreatedAt, rec.ModifiedAt = timestamppb.New(now), timestamppb.New(now)
	rec.Deadline = timestamppb.New(now.Add(30 * time.Minute))
	rec.ClientRequestToken = uuid.NewString()
	return rec
}

// clusterPool hands out ACTIVE clusters that have no add-on yet, one per
// create: the catalogue has a handful of add-on names, so every create
// needs a fresh (cluster, add-on) pair. Clusters are made before each
// sub-benchmark's clock starts (fill), enough for its warm-ups and b.N ops.
type clusterPool struct {
	ab    *addonBench
	mu    sync.Mutex
	names []string
	next  atomic.Int64
}

func (p *clusterPool) fill(b *testing.B, n int) {
	b.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	have := len(p.names) - int(p.next.Load())
	if have >= n {
		return
	}
	start := len(p.names)
	add := make([]string, n-have)
	for i := range add {
		add[i] = fmt.Sprintf("pool-%07d", start+i)
	}
	var (
		wg      sync.WaitGroup
		next    atomic.Int64
		errOnce sync.Once
		first   error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(add); i = int(next.Add(1)) - 1 {
				if _, err := p.ab.activeCluster(context.Background(), add[i]); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("fill the cluster pool: %v", first)
	}
	p.names = append(p.names, add...)
}

func (p *clusterPool) take() (string, error) {
	i := int(p.next.Add(1)) - 1
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.names) {
		return "", fmt.Errorf("cluster pool exhausted at %d", i)
	}
	return p.names[i], nil
}

// isFacadeHTTP reports whether b is a facade-http sub-benchmark.
func isFacadeHTTP(b *testing.B) bool { return strings.Contains(b.Name(), "/facade-http/") }

// addonResult is what one sub-benchmark measured: measure's result and the
// process CPU time per op.
type addonResult struct {
	result
	cpu time.Duration
}

// processCPU is the CPU time (user + system) this process has used: etcd,
// saltbush and the clients together.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runPaths measures every path at every concurrency and returns the
// results. before, when set, runs before each sub-benchmark's measurement
// with its b.N and concurrency (untimed: measure resets the timer); the
// function it returns, when not nil, runs after the measurement (to report
// metrics: measure's ResetTimer deletes those reported before it).
//
// Besides measure's metrics each sub-benchmark reports cpu-us/op: the
// process's CPU time over the measurement (warm-ups included) divided by
// the ops done. On a 2-core machine shared with other jobs, wall-clock
// throughput at c=64 depends on what else runs; CPU per op does not much,
// and at c=64 throughput on a dedicated machine is its inverse.
func runPaths(b *testing.B, paths []path, before func(b *testing.B, c int) (after func())) map[string]map[int]addonResult {
	var seq atomic.Int64
	results := map[string]map[int]addonResult{}
	for _, p := range paths {
		results[p.name] = map[int]addonResult{}
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
				var after func()
				if before != nil {
					after = before(b, c)
				}
				stop := profileTimed(b)
				cpu0 := processCPU()
				r := measure(b, c, func(ctx context.Context) error {
					return p.op(ctx, seq.Add(1))
				})
				cpu := (processCPU() - cpu0) / time.Duration(b.N+c)
				stop()
				b.ReportMetric(float64(cpu)/float64(time.Microsecond), "cpu-us/op")
				results[p.name][c] = addonResult{r, cpu}
				if after != nil {
					after()
				}
			})
		}
	}
	return results
}

// ProfileDirEnv names a directory to write one CPU profile per add-on
// sub-benchmark into, covering only its measurement (go test -cpuprofile
// would also cover the untimed set-up, which for BenchmarkAddonCreate is
// making thousands of clusters). Do not combine it with -cpuprofile.
const ProfileDirEnv = "SALTBUSH_BENCH_CPUPROFILE_DIR"

// profileTimed starts a CPU profile of b when ProfileDirEnv is set and
// returns the function that stops it.
func profileTimed(b *testing.B) func() {
	dir := os.Getenv(ProfileDirEnv)
	if dir == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "_", "=", "").Replace(b.Name()) + ".cpu"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatalf("cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatalf("cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// rawCreate is the raw etcd work of a CreateAddon on a shape's cluster:
// the raw paths of BenchmarkAddonCreate and of BenchmarkServerProcess's
// create family.
type rawCreate struct {
	ab         *addonBench
	sh         *shape
	clusterKey string
	// lease: the store shares one lease among the idempotency keys of a
	// minute; the raw paths share one for the whole run.
	lease clientv3.LeaseID
}

func (ab *addonBench) rawCreate(ctx context.Context, sh *shape) (*rawCreate, error) {
	lease, err := ab.etcd.Grant(ctx, int64((idempotencyTTL+time.Minute)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	return &rawCreate{ab: ab, sh: sh, clusterKey: ab.st.Key(store.ClusterKey(ab.account, sh.cluster)), lease: lease.ID}, nil
}

// txn is raw-etcd-txn: what store.Commit builds for Create +
// RequireModRevision + hintDeadline's Put + CreateWithTTL, in Create's
// order, with copies of the records the shape's CreateAddon stored,
// guarded on the cluster record's revision when the shape was made.
func (r *rawCreate) txn(ctx context.Context, seq int64) error {
	return r.txnAt(ctx, seq, r.sh.clusterRev)
}

// getTxn is raw-etcd-get-txn: a serializable Get of the cluster record
// (what CreateAddon read of etcd before the read view answered it), then
// txn guarded on the revision it read.
func (r *rawCreate) getTxn(ctx context.Context, seq int64) error {
	resp, err := r.ab.etcd.Get(ctx, r.clusterKey, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 {
		return fmt.Errorf("%s: not found", r.clusterKey)
	}
	return r.txnAt(ctx, seq, resp.Kvs[0].ModRevision)
}

func (r *rawCreate) txnAt(ctx context.Context, seq int64, clusterRev int64) error {
	ab, sh := r.ab, r.sh
	name := fmt.Sprintf("raw-%08d", seq) // the raw paths skip name validation
	rec := sh.addonCopy(name)
	val, err := store.Encode(rec)
	if err != nil {
		return err
	}
	rel := store.AddonKey(sh.clusterUID, name)
	idem := proto.Clone(sh.idem).(*storagev1.IdempotencyRecord)
	idem.ResourceKey, idem.ResourceUid, idem.CreatedAt = rel, rec.Uid, timestamppb.Now()
	ival, err := store.Encode(idem)
	if err != nil {
		return err
	}
	hint := proto.Clone(sh.hint).(*storagev1.AddonDeadlineHint)
	hint.AddonName, hint.Generation = name, rec.GetGeneration()
	hval, err := store.Encode(hint)
	if err != nil {
		return err
	}
	k, ik := ab.st.Key(rel), ab.st.Key(store.IdempotencyKey(ab.account, "CreateAddon", rec.ClientRequestToken))
	hk := ab.st.Key(store.AddonDeadlineKey(rec.GetDeadline().AsTime(), sh.clusterUID, name))
	resp, err := ab.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
			clientv3.Compare(clientv3.ModRevision(r.clusterKey), "=", clusterRev),
			clientv3.Compare(clientv3.CreateRevision(ik), "=", 0)).
		Then(clientv3.OpPut(k, string(val)), clientv3.OpPut(hk, string(hval)),
			clientv3.OpPut(ik, string(ival), clientv3.WithLease(r.lease))).
		Else(clientv3.OpGet(k, clientv3.WithCountOnly()), clientv3.OpGet(ik, clientv3.WithCountOnly())).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%s: compare failed", k)
	}
	return err
}

// BenchmarkAddonCreate creates add-ons through five paths against one
// saltbush, each op a fresh (cluster, add-on) pair:
//
//	raw-etcd-txn      the transaction CreateAddon reduces to: create the add-on
//	                  record (CreateRevision==0), guard the cluster record's mod
//	                  revision, put the deadline index hint, create the
//	                  idempotency record on a shared lease
//	raw-etcd-get-txn  a serializable Get of the cluster record, then that
//	                  transaction guarded on the mod revision it read: the etcd
//	                  work of a CreateAddon before its cluster read came from the
//	                  replica's read view (now it sends raw-etcd-txn's alone)
//	grpc              CreateAddon over gRPC, with a clientRequestToken
//	facade            CreateAddon with the AWS SDK for Go v2 (auto-filled token)
//	facade-http       the same request from a bare net/http client, signed
//	                  before the clock starts (presign_test.go)
//
// each at 1 and 64 concurrent clients, then prints ratios to the raw paths.
func BenchmarkAddonCreate(b *testing.B) {
	ab := newAddonBench(b)
	ctx := context.Background()
	sh, err := ab.shape(ctx, "bench-shape")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := ab.rawCreate(ctx, sh)
	if err != nil {
		b.Fatal(err)
	}
	pool := &clusterPool{ab: ab}
	// facade-http's creates, signed before each of its sub-benchmarks
	// (presign_test.go).
	var httpReqs signedQueue
	paths := []path{
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
		{"facade", func(ctx context.Context, _ int64) error {
			cluster, err := pool.take()
			if err != nil {
				return err
			}
			_, err = ab.sdk.CreateAddon(ctx, &eks.CreateAddonInput{
				ClusterName:         aws.String(cluster),
				AddonName:           aws.String(benchAddon),
				ConfigurationValues: aws.String(benchConfig),
				Tags:                benchTags,
			})
			return err
		}},
		{"facade-http", func(ctx context.Context, _ int64) error {
			r, err := httpReqs.take()
			if err != nil {
				return err
			}
			return r.send(ctx, ab.http, ab.srv.URL, nil)
		}},
	}
	results := runPaths(b, paths, func(b *testing.B, c int) func() {
		if strings.HasPrefix(b.Name(), "BenchmarkAddonCreate/raw-") {
			return nil
		}
		pool.fill(b, b.N+c)
		if !isFacadeHTTP(b) {
			return nil
		}
		// One signed create per op and per warm-up, each on its own cluster.
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
	})
	sizes := fmt.Sprintf("CreateAddon stores a %d-byte add-on record, a %d-byte deadline hint and a %d-byte idempotency record; the raw paths write copies of them",
		sh.addonBytes, sh.hintBytes, sh.idemBytes)
	fmt.Print("\n" + summarizeAddon("create", "CreateAddon", ab.mode, sizes, paths, results,
		[]string{"raw-etcd-txn", "raw-etcd-get-txn"}, []string{"grpc", "facade", "facade-http"}))
}

// BenchmarkAddonDescribe describes one ACTIVE add-on through:
//
//	raw-etcd               what Describe reads: a serializable Get of the cluster
//	                       record (service.readCluster, fast), then a
//	                       linearizable one of the add-on record (store.Get)
//	raw-etcd-serializable  the same two Gets, both serializable (the baseline
//	                       the Describe goal is stated against)
//	grpc, facade, facade-http
func BenchmarkAddonDescribe(b *testing.B) {
	ab := newAddonBench(b)
	ctx := context.Background()
	sh, err := ab.shape(ctx, "bench-describe")
	if err != nil {
		b.Fatal(err)
	}
	// Make it ACTIVE, as a guest report would.
	if _, err := ab.addonCtl.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
		ClusterUid: sh.clusterUID, AddonName: benchAddon, AddonUid: sh.addon.GetUid(),
		Generation: 1, Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "i-0123456789abcdef0",
	}); err != nil {
		b.Fatal(err)
	}
	clusterKey := ab.st.Key(store.ClusterKey(ab.account, sh.cluster))
	addonKey := ab.st.Key(store.AddonKey(sh.clusterUID, benchAddon))
	get := func(ctx context.Context, k string, opts ...clientv3.OpOption) error {
		resp, err := ab.etcd.Get(ctx, k, opts...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return fmt.Errorf("%s: not found", k)
		}
		return nil
	}
	// rawGets reads the cluster record, then the add-on record, the first
	// serializable, the second linearizable unless addonSerializable.
	rawGets := func(ctx context.Context, addonSerializable bool) error {
		if err := get(ctx, clusterKey, clientv3.WithSerializable()); err != nil {
			return err
		}
		if addonSerializable {
			return get(ctx, addonKey, clientv3.WithSerializable())
		}
		return get(ctx, addonKey)
	}
	checkActive := func(status string) error {
		if status != "ACTIVE" {
			return fmt.Errorf("add-on status %q, want ACTIVE", status)
		}
		return nil
	}
	// facade-http replays one DescribeAddon signed before each of its
	// sub-benchmarks (presign_test.go).
	describePath := "/clusters/" + sh.cluster + "/addons/" + benchAddon
	var describe signedRequest
	paths := []path{
		{"raw-etcd", func(ctx context.Context, _ int64) error { return rawGets(ctx, false) }},
		{"raw-etcd-serializable", func(ctx context.Context, _ int64) error { return rawGets(ctx, true) }},
		{"grpc", func(ctx context.Context, _ int64) error {
			out, err := ab.grpc.DescribeAddon(ctx, &eksv1.DescribeAddonRequest{ClusterName: sh.cluster, AddonName: benchAddon})
			if err != nil {
				return err
			}
			return checkActive(out.GetAddon().GetStatus())
		}},
		{"facade", func(ctx context.Context, _ int64) error {
			out, err := ab.sdk.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(sh.cluster), AddonName: aws.String(benchAddon)})
			if err != nil {
				return err
			}
			return checkActive(string(out.Addon.Status))
		}},
		{"facade-http", func(ctx context.Context, _ int64) error {
			var out struct{ Addon struct{ Status string } }
			if err := describe.send(ctx, ab.http, ab.srv.URL, &out); err != nil {
				return err
			}
			return checkActive(out.Addon.Status)
		}},
	}
	results := runPaths(b, paths, func(b *testing.B, _ int) func() {
		if isFacadeHTTP(b) {
			describe = ab.signer.signAll(b, []string{describePath})[describePath]
		}
		return nil
	})
	sizes := fmt.Sprintf("the add-on record is %d bytes", sh.addonBytes)
	fmt.Print("\n" + summarizeAddon("describe", "DescribeAddon", ab.mode, sizes, paths, results,
		[]string{"raw-etcd", "raw-etcd-serializable"}, []string{"grpc", "facade", "facade-http"}))
}

const (
	listAddons   = 100
	listPageSize = 10
)

// BenchmarkAddonList lists all 100 add-ons of a cluster in pages of 10
// (one op = 10 calls) through:
//
//	raw-etcd          the range reads List makes: per page a linearizable
//	                  keys-only range Get with limit 11
//	raw-etcd-cluster  all the etcd work of a page: a linearizable Get of the
//	                  cluster record (List resolves the cluster on every call),
//	                  then that range Get
//	grpc, facade, facade-http
//
// The catalogue has nine add-on names, so 99 of the 100 add-ons are copies
// of a real CreateAddon record written straight to etcd under other names
// (ListAddons reads keys only).
func BenchmarkAddonList(b *testing.B) {
	ab := newAddonBench(b)
	ctx := context.Background()
	sh, err := ab.shape(ctx, "bench-list")
	if err != nil {
		b.Fatal(err)
	}
	l, err := ab.addonListing(ctx, sh, ab.srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	var listPages map[string]signedRequest
	paths := []path{
		{"raw-etcd", func(ctx context.Context, _ int64) error { return l.raw(ctx, false) }},
		{"raw-etcd-cluster", func(ctx context.Context, _ int64) error { return l.raw(ctx, true) }},
		{"grpc", func(ctx context.Context, _ int64) error { return l.grpc(ctx) }},
		{"facade", func(ctx context.Context, _ int64) error {
			var names []string
			in := &eks.ListAddonsInput{ClusterName: aws.String(sh.cluster), MaxResults: aws.Int32(listPageSize)}
			for pages := 1; ; pages++ {
				out, err := ab.sdk.ListAddons(ctx, in)
				if err != nil {
					return err
				}
				names = append(names, out.Addons...)
				if aws.ToString(out.NextToken) == "" {
					return l.check(names, pages)
				}
				in.NextToken = out.NextToken
			}
		}},
		{"facade-http", func(ctx context.Context, _ int64) error { return l.facadeHTTP(ctx, listPages, ab.srv.URL) }},
	}
	results := runPaths(b, paths, func(b *testing.B, _ int) func() {
		if isFacadeHTTP(b) {
			listPages = ab.signer.signAll(b, l.pagePaths)
		}
		return nil
	})
	fmt.Print("\n" + summarizeAddon("list", "ListAddons (100 add-ons, 10 pages of 10 per op)", ab.mode, "", paths, results,
		[]string{"raw-etcd", "raw-etcd-cluster"}, []string{"grpc", "facade", "facade-http"}))
}

// addonListing is BenchmarkAddonList's listing, shared with
// BenchmarkServerProcess's list-addons family: all 100 add-ons of a shape's
// cluster in pages of 10, by raw range reads, over gRPC, and by pre-signed
// façade requests.
type addonListing struct {
	ab                      *addonBench
	sh                      *shape
	clusterKey, prefix, end string
	// pagePaths are the ten page requests of a listing: the same every
	// time (continuation tokens are deterministic, store/list.go), so
	// facade-http finds them once, untimed, and signs them before each of
	// its sub-benchmarks.
	pagePaths []string
}

// addonListing writes 99 copies of the shape's add-on record under other
// names straight to etcd, then finds the page requests by listing through
// the façade at url. The server answers lists from its read view, which
// has writes of another etcd client only once their watch events arrive:
// the listing is repeated until it holds all 100 (within ctx's deadline,
// a minute at most).
func (ab *addonBench) addonListing(ctx context.Context, sh *shape, url string) (*addonListing, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range listAddons - 1 {
		name := fmt.Sprintf("bench-addon-%03d", i)
		val, err := store.Encode(sh.addonCopy(name))
		if err != nil {
			return nil, err
		}
		if _, err := ab.etcd.Put(ctx, ab.st.Key(store.AddonKey(sh.clusterUID, name)), string(val)); err != nil {
			return nil, err
		}
	}
	prefix := ab.st.Key(store.AddonsPrefix(sh.clusterUID))
	l := &addonListing{ab: ab, sh: sh, clusterKey: ab.st.Key(store.ClusterKey(ab.account, sh.cluster)),
		prefix: prefix, end: clientv3.GetPrefixRangeEnd(prefix)}
	for {
		names, err := l.discover(ctx, url)
		if err != nil {
			return nil, err
		}
		if names == listAddons {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the façade listed %d of the %d add-ons: %w", names, listAddons, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// discover lists once through the façade at url, recording the page
// requests, and returns how many add-ons it listed.
func (l *addonListing) discover(ctx context.Context, url string) (int, error) {
	l.pagePaths = l.pagePaths[:0]
	names := 0
	for next := ""; len(l.pagePaths) <= listAddons; {
		l.pagePaths = append(l.pagePaths, l.pagePath(next))
		r, err := l.ab.signer.sign(http.MethodGet, l.pagePath(next), nil)
		if err != nil {
			return 0, err
		}
		var out struct {
			Addons    []string
			NextToken string
		}
		if err := r.send(ctx, l.ab.http, url, &out); err != nil {
			return 0, err
		}
		names += len(out.Addons)
		if out.NextToken == "" {
			break
		}
		next = out.NextToken
	}
	return names, nil
}

// check verifies one full listing: all 100 names in 10 pages.
func (l *addonListing) check(names []string, pages int) error {
	if len(names) != listAddons || pages != listAddons/listPageSize {
		return fmt.Errorf("listed %d add-ons in %d pages, want %d in %d", len(names), pages, listAddons, listAddons/listPageSize)
	}
	return nil
}

func (l *addonListing) pagePath(next string) string {
	q := url.Values{"maxResults": {fmt.Sprint(listPageSize)}}
	if next != "" {
		q.Set("nextToken", next)
	}
	return "/clusters/" + l.sh.cluster + "/addons?" + q.Encode()
}

// raw is the raw paths: per page a linearizable keys-only range Get with
// limit 11 resuming after the last key (store.List), after a linearizable
// Get of the cluster record when withCluster.
func (l *addonListing) raw(ctx context.Context, withCluster bool) error {
	var names []string
	for start, pages := l.prefix, 1; ; pages++ {
		if withCluster {
			if _, err := l.ab.etcd.Get(ctx, l.clusterKey); err != nil {
				return err
			}
		}
		resp, err := l.ab.etcd.Get(ctx, start, clientv3.WithRange(l.end), clientv3.WithLimit(listPageSize+1), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		kvs := resp.Kvs
		if len(kvs) > listPageSize {
			kvs = kvs[:listPageSize]
		}
		for _, kv := range kvs {
			names = append(names, strings.TrimPrefix(string(kv.Key), l.prefix))
		}
		if len(resp.Kvs) <= listPageSize {
			return l.check(names, pages)
		}
		start = string(kvs[listPageSize-1].Key) + "\x00"
	}
}

// grpc lists over gRPC.
func (l *addonListing) grpc(ctx context.Context) error {
	var names []string
	req := &eksv1.ListAddonsRequest{ClusterName: l.sh.cluster, MaxResults: proto.Int32(listPageSize)}
	for pages := 1; ; pages++ {
		out, err := l.ab.grpc.ListAddons(ctx, req)
		if err != nil {
			return err
		}
		names = append(names, out.GetAddons()...)
		if out.GetNextToken() == "" {
			return l.check(names, pages)
		}
		req.NextToken = out.GetNextToken()
	}
}

// facadeHTTP lists with the bare HTTP client, sending the pages signed
// in advance (signAll of pagePaths) to the façade at url.
func (l *addonListing) facadeHTTP(ctx context.Context, signed map[string]signedRequest, url string) error {
	var names []string
	next := ""
	for pages := 1; ; pages++ {
		r, ok := signed[l.pagePath(next)]
		if !ok {
			return fmt.Errorf("page %s was not signed in advance", l.pagePath(next))
		}
		var out struct {
			Addons    []string
			NextToken string
		}
		if err := r.send(ctx, l.ab.http, url, &out); err != nil {
			return err
		}
		names = append(names, out.Addons...)
		if out.NextToken == "" {
			return l.check(names, pages)
		}
		next = out.NextToken
	}
}

// summarizeAddon renders an add-on benchmark's table and its ratios to each
// base measured in this run, and saves it under results/ (gitignored).
func summarizeAddon(file, op, mode, note string, paths []path, results map[string]map[int]addonResult, bases, xs []string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s benchmark, fsync=%s, GOMAXPROCS=%d\n", op, mode, runtime.GOMAXPROCS(0))
	if note != "" {
		sb.WriteString(note + "\n")
	}
	sb.WriteString("\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "path\tc\tops\tops/s\tp50 ms\tp99 ms\tcpu us/op\t")
	for _, p := range paths {
		for _, c := range concurrencies {
			if r, ok := results[p.name][c]; ok {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t\n", p.name, c, r.n, r.opsPerS, ms(r.p50), ms(r.p99),
					float64(r.cpu)/float64(time.Microsecond))
			}
		}
	}
	_ = tw.Flush()
	sb.WriteString("\nratios (same run): throughput x/base and CPU efficiency base-cpu/x-cpu (higher is better), p50 latency x/base (lower is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tc\tthroughput\tcpu\tp50\t")
	for _, base := range bases {
		for _, x := range xs {
			for _, c := range concurrencies {
				a, okA := results[base][c]
				r, okR := results[x][c]
				if !okA || !okR || a.opsPerS == 0 || a.p50 == 0 || r.cpu == 0 {
					continue
				}
				_, _ = fmt.Fprintf(tw, "%s/%s\t%d\t%.2f\t%.2f\t%.2f\t\n", x, base, c, r.opsPerS/a.opsPerS,
					float64(a.cpu)/float64(r.cpu), float64(r.p50)/float64(a.p50))
			}
		}
	}
	_ = tw.Flush()
	summary := sb.String()
	if err := os.MkdirAll("results", 0o755); err == nil {
		f := filepath.Join("results", fmt.Sprintf("addon-%s-fsync-%s-%s.txt", file, mode, time.Now().Format("20060102-150405")))
		if err := os.WriteFile(f, []byte(summary), 0o644); err == nil {
			summary += fmt.Sprintf("summary written to %s\n", filepath.Join("tests/bench", f))
		}
	}
	return summary
}
