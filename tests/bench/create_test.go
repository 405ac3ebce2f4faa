// Package bench is saltbush's foundation benchmark: the cost of creating a
// cluster through each layer, measured in one run against one embedded etcd
// so the ratios between the layers are meaningful. See README.md.
package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
)

// FsyncEnv turns real fsync on for the embedded etcd when set to 1.
const FsyncEnv = "SALTBUSH_BENCH_FSYNC"

// concurrencies are the client counts every path is measured at.
var concurrencies = []int{1, 64}

const (
	roleARN        = "arn:aws:iam::000000000000:role/eks"
	idempotencyTTL = 8 * time.Hour // what cluster.DefaultConfig remembers tokens for
)

var subnets = []string{"subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"}

// fsyncMode returns the option selecting etcd's fsync mode from the
// environment, and the mode's name. servertest turns fsync off; with
// SALTBUSH_BENCH_FSYNC=1 etcd fsyncs its WAL and backend as in production.
func fsyncMode() (servertest.Option, string) {
	on := os.Getenv(FsyncEnv) == "1"
	mode := "off"
	if on {
		mode = "on"
	}
	return func(c *server.Config) { c.EtcdUnsafeNoFsync = !on }, mode
}

// path is one way of creating a cluster. op performs create number seq,
// which is unique across the whole benchmark run.
type path struct {
	name string
	op   func(ctx context.Context, seq int64) error
}

// result is what one sub-benchmark measured (its final, largest b.N).
type result struct {
	n        int
	opsPerS  float64
	p50, p99 time.Duration
}

// BenchmarkCreate creates clusters through five paths against one saltbush:
//
//	raw-etcd       the floor: one exclusive-create etcd txn of a ClusterRecord-sized value
//	raw-etcd-idem  the etcd work CreateCluster with a token really does: one txn creating
//	               the cluster record and the idempotency record on a shared lease (the
//	               store grants one lease per reuse window, not one per create)
//	grpc           CreateCluster over gRPC, with a clientRequestToken
//	facade         CreateCluster through the REST-JSON façade with the AWS SDK for Go v2
//	               (SigV4, auto-filled clientRequestToken)
//	facade-http    the same request from a bare net/http client, signed before the clock
//	               starts: the façade's server side, SigV4 verification included
//
// each at 1 and 64 concurrent clients, then logs the ratios to raw-etcd.
func BenchmarkCreate(b *testing.B) {
	opt, mode := fsyncMode()
	srv := servertest.Start(b, opt)
	// A benchstat configuration line: `benchstat -col fsync off.txt on.txt`.
	fmt.Printf("fsync: %s\n", mode)

	account := srv.Config.DevAccount
	region := srv.Config.Cluster.Region
	etcd := srv.Etcd(b)
	st := srv.Store(b)
	grpcClient := eksv1.NewClusterServiceClient(srv.GRPC(b))
	sdk := srv.EKS(b, func(o *eks.Options) {
		// One keep-alive connection per client: http.DefaultTransport keeps
		// only 2 idle per host, so 64 clients would churn TCP connections.
		o.HTTPClient = &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: 256,
				IdleConnTimeout:     90 * time.Second,
			},
		}
		// An error must fail the benchmark, not hide in a retry.
		o.Retryer = aws.NopRetryer{}
	})

	rawHTTP := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
	}}
	signer := newRequestSigner(b, srv)
	var httpReqs signedQueue
	name := func(p string, seq int64) string { return fmt.Sprintf("bench-%s-%08d", p, seq) }
	// The store shares one lease among the idempotency keys of a window;
	// the baseline does the same with one lease for the whole run.
	sharedLease, err := etcd.Grant(context.Background(), int64((idempotencyTTL+time.Minute)/time.Second))
	if err != nil {
		b.Fatalf("grant lease: %v", err)
	}
	paths := []path{
		{"raw-etcd", func(ctx context.Context, seq int64) error {
			n := name("raw", seq)
			val, err := store.Encode(clusterRecord(account, region, n, uuid.NewString()))
			if err != nil {
				return err
			}
			k := st.Key(store.ClusterKey(account, n))
			resp, err := etcd.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, string(val))).
				Commit()
			if err == nil && !resp.Succeeded {
				err = fmt.Errorf("%s: exists", k)
			}
			return err
		}},
		{"raw-etcd-idem", func(ctx context.Context, seq int64) error {
			n := name("idem", seq)
			tok := uuid.NewString()
			rec := clusterRecord(account, region, n, tok)
			val, err := store.Encode(rec)
			if err != nil {
				return err
			}
			rel := store.ClusterKey(account, n)
			idem, err := store.Encode(&storagev1.IdempotencyRecord{
				Operation:          "CreateCluster",
				RequestFingerprint: make([]byte, 32),
				ResourceKey:        rel,
				ResourceUid:        rec.GetUid(),
				CreatedAt:          timestamppb.Now(),
			})
			if err != nil {
				return err
			}
			k, ik := st.Key(rel), st.Key(store.IdempotencyKey(account, "CreateCluster", tok))
			resp, err := etcd.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
					clientv3.Compare(clientv3.CreateRevision(ik), "=", 0)).
				Then(clientv3.OpPut(k, string(val)), clientv3.OpPut(ik, string(idem), clientv3.WithLease(sharedLease.ID))).
				Else(clientv3.OpGet(k, clientv3.WithCountOnly()), clientv3.OpGet(ik, clientv3.WithCountOnly())).
				Commit()
			if err == nil && !resp.Succeeded {
				err = fmt.Errorf("%s: exists", k)
			}
			return err
		}},
		{"grpc", func(ctx context.Context, seq int64) error {
			_, err := grpcClient.CreateCluster(ctx, &eksv1.CreateClusterRequest{
				Name:               name("grpc", seq),
				RoleArn:            roleARN,
				ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: subnets},
				ClientRequestToken: uuid.NewString(), // as the AWS SDK auto-fills it
			})
			return err
		}},
		{"facade", func(ctx context.Context, seq int64) error {
			_, err := sdk.CreateCluster(ctx, &eks.CreateClusterInput{
				Name:               aws.String(name("facade", seq)),
				RoleArn:            aws.String(roleARN),
				ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: subnets},
			})
			return err
		}},
		// The façade's server-side cost alone: the same request body the
		// SDK sends, from a bare net/http client (no SDK middleware), signed
		// before the clock starts (presign_test.go), so the client takes as
		// little of the shared CPU as it can.
		{"facade-http", func(ctx context.Context, _ int64) error {
			r, err := httpReqs.take()
			if err != nil {
				return err
			}
			return r.send(ctx, rawHTTP, srv.URL, nil)
		}},
	}

	var seq atomic.Int64
	results := map[string]map[int]result{}
	for _, p := range paths {
		results[p.name] = map[int]result{}
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
				var report func()
				if p.name == "facade-http" {
					// One signed create per op and per warm-up.
					report = httpReqs.fill(b, signer, b.N+c, func() (string, []byte, error) {
						body := fmt.Sprintf(`{"name":%q,"roleArn":%q,"resourcesVpcConfig":{"subnetIds":[%q,%q]},"clientRequestToken":%q}`,
							name("http", seq.Add(1)), roleARN, subnets[0], subnets[1], uuid.NewString())
						return "/clusters", []byte(body), nil
					})
				}
				results[p.name][c] = measure(b, c, func(ctx context.Context) error {
					return p.op(ctx, seq.Add(1))
				})
				if report != nil {
					report()
				}
			})
		}
	}

	sizes := recordSizes(b, etcd, st, account, region)
	summary := summarize(mode, sizes, paths, results)
	// Stdout, not b.Log: a parent benchmark's log is shown only with -v.
	fmt.Print("\n" + summary + "\n")
	writeResults(mode, summary)
}

// measure runs b.N ops split across c workers and reports throughput and
// latency percentiles. Each worker first does one untimed op, so
// connections are warm.
func measure(b *testing.B, c int, op func(context.Context) error) result {
	ctx := context.Background()
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		failed   atomic.Bool
		lat      = make([][]time.Duration, c)
		ready    sync.WaitGroup
		done     sync.WaitGroup
		start    = make(chan struct{})
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		failed.Store(true)
	}
	for w := range c {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			err := op(ctx) // warm-up, untimed
			ready.Done()
			if err != nil {
				fail(fmt.Errorf("warm-up: %w", err))
				return
			}
			<-start
			mine := make([]time.Duration, 0, b.N/c+1)
			for next.Add(1) <= int64(b.N) && !failed.Load() {
				t := time.Now()
				if err := op(ctx); err != nil {
					fail(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			lat[w] = mine
		}()
	}
	ready.Wait()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}

	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{
		n:       len(all),
		opsPerS: float64(len(all)) / elapsed.Seconds(),
		p50:     percentile(all, 0.50),
		p99:     percentile(all, 0.99),
	}
	b.ReportMetric(r.opsPerS, "ops/s")
	b.ReportMetric(ms(r.p50), "p50-ms")
	b.ReportMetric(ms(r.p99), "p99-ms")
	return r
}

// percentile is the nearest-rank percentile of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// clusterRecord is the record CreateCluster stores for the benchmark's
// request (name, roleArn, two subnets, a token), built the way the cluster
// service builds it.
func clusterRecord(account, region, name, token string) *storagev1.ClusterRecord {
	now := timestamppb.Now()
	return &storagev1.ClusterRecord{
		Uid:               uuid.NewString(),
		AccountId:         account,
		Name:              name,
		Arn:               fmt.Sprintf("arn:aws:eks:%s:%s:cluster/%s", region, account, name),
		KubernetesVersion: "1.36",
		Status:            storagev1.ClusterStatus_CLUSTER_STATUS_CREATING,
		CreatedAt:         now,
		ModifiedAt:        now,
		AccessConfig: &storagev1.ClusterAccessConfig{
			AuthenticationMode:                      "CONFIG_MAP",
			BootstrapClusterCreatorAdminPermissions: true,
		},
		Spec: &storagev1.ClusterSpec{
			RoleArn: roleARN,
			VpcConfig: &storagev1.ClusterVpcConfig{
				SubnetIds:            subnets,
				EndpointPublicAccess: true,
				PublicAccessCidrs:    []string{"0.0.0.0/0"},
			},
			NetworkConfig: &storagev1.ClusterNetworkConfig{
				ServiceIpv4Cidr: "10.43.0.0/16",
				IpFamily:        "ipv4",
			},
			UpgradeSupportType:         "EXTENDED",
			BootstrapSelfManagedAddons: true,
		},
		ClientRequestToken: token,
	}
}

// recordSizes compares the raw path's value with what CreateCluster really
// stored, so a drift in the record shape shows up in the summary.
func recordSizes(b *testing.B, etcd *clientv3.Client, st *store.Store, account, region string) string {
	raw, err := store.Encode(clusterRecord(account, region, "bench-raw-00000001", uuid.NewString()))
	if err != nil {
		b.Fatal(err)
	}
	out := fmt.Sprintf("raw-etcd value %d bytes", len(raw))
	resp, err := etcd.Get(context.Background(), st.Key(store.ClustersPrefix(account)+"bench-grpc-"),
		clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err == nil && len(resp.Kvs) == 1 {
		rec := &storagev1.ClusterRecord{}
		if store.Decode(resp.Kvs[0].Value, rec) == nil {
			out += fmt.Sprintf("; CreateCluster stored %d bytes (%s)", len(resp.Kvs[0].Value), resp.Kvs[0].Key)
			// Same shape: the raw record must differ only in identity fields.
			want := clusterRecord(account, region, rec.GetName(), rec.GetClientRequestToken())
			want.Uid, want.CreatedAt, want.ModifiedAt = rec.Uid, rec.CreatedAt, rec.ModifiedAt
			want.KubernetesVersion = rec.KubernetesVersion
			if !proto.Equal(want, rec) {
				out += "; WARNING: raw-etcd record shape differs from CreateCluster's"
			}
		}
	}
	return out
}

// summarize renders the per-path table and the ratios to raw-etcd measured
// in this run.
func summarize(mode, sizes string, paths []path, results map[string]map[int]result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "CreateCluster foundation benchmark, fsync=%s, GOMAXPROCS=%d\n%s\n\n", mode, runtime.GOMAXPROCS(0), sizes)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "path\tc\tops\tops/s\tp50 ms\tp99 ms\t")
	for _, p := range paths {
		for _, c := range concurrencies {
			if r, ok := results[p.name][c]; ok {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t\n", p.name, c, r.n, r.opsPerS, ms(r.p50), ms(r.p99))
			}
		}
	}
	_ = tw.Flush()

	sb.WriteString("\nratios (same run): throughput x/raw-etcd (higher is better), p50 latency x/raw-etcd (lower is better)\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tc\tthroughput\tp50\t")
	for _, base := range []string{"raw-etcd", "raw-etcd-idem"} {
		for _, x := range []string{"grpc", "facade", "facade-http"} {
			for _, c := range concurrencies {
				a, okA := results[base][c]
				r, okR := results[x][c]
				if !okA || !okR || a.opsPerS == 0 || a.p50 == 0 {
					continue
				}
				_, _ = fmt.Fprintf(tw, "%s/%s\t%d\t%.2f\t%.2f\t\n", x, base, c, r.opsPerS/a.opsPerS, float64(r.p50)/float64(a.p50))
			}
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// writeResults saves the summary under results/ (gitignored). Failing to
// write it does not fail the benchmark.
func writeResults(mode, summary string) {
	if err := os.MkdirAll("results", 0o755); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	f := filepath.Join("results", fmt.Sprintf("create-fsync-%s-%s.txt", mode, time.Now().Format("20060102-150405")))
	if err := os.WriteFile(f, []byte(summary), 0o644); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	fmt.Printf("summary written to %s\n", filepath.Join("tests/bench", f))
}
