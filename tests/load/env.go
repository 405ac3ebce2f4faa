package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tlsclient"
)

// env is one run's world: a 3-member embedded etcd, the saltbush replicas
// over it, and the tenants the clients act as. The etcd members and the
// replicas run in this process (built as `saltbush serve` builds them) or,
// with -apart, each in a process of its own (apart.go).
type env struct {
	dir           string
	region        string // the replicas' (server.DefaultConfig's)
	etcdEndpoints []string
	// stopEtcd stops the members (their process, with -apart).
	stopEtcd func()
	etcdCli  *clientv3.Client
	replicas []*replica
	admin    *grpc.ClientConn
	control  controlv1.ClusterControlServiceClient
	identity controlv1.IdentityControlServiceClient
	tenants  []*tenant
	clusters []*clusterInfo
	logs     *logCounter
	// procs are the processes apart from this one (-apart): the etcd
	// members' and each replica's, which the sampler reads.
	procs *system
	// rolling says the replicas are upgraded during the run
	// (-saltbush-from): the SDK clients go through front, and the agents
	// have every replica as an endpoint.
	rolling bool
	front   *front

	closeOnce sync.Once
}

// replica is one running saltbush.
type replica struct {
	name     string
	url      string // the façade's base URL
	grpcAddr string
	// tlsDir holds the gRPC port's CA and the admin CLI's certificate
	// (server.Config.TLSDir).
	tlsDir string
	// stop ends the replica and waits until it has.
	stop func()
}

// tenant is an account, the IAM user its clients sign as (an EKS policy
// attached, so every call is authorized by policy evaluation as a real
// user's is), and the roles its access entries name.
type tenant struct {
	account   string
	userARN   string
	akid      string
	secret    string
	roles     []string // principals of access entries
	clusterRA string   // the cluster service role
}

// clusterInfo is an ACTIVE cluster and the members its agents are.
type clusterInfo struct {
	tenant  *tenant
	name    string
	uid     string
	members []string
}

// tenantPolicy is what each tenant's user may do: the EKS API and passing
// its account's roles, as an operator's CI user would have.
const tenantPolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:*","iam:PassRole"],"Resource":"*"}]}`

// rolesPerTenant is how many IAM roles each tenant has for access entries;
// a cluster has at most this many entries besides its creator's.
const rolesPerTenant = 12

var subnets = []string{"subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"}

// startEnv starts etcd and the replicas and makes the tenants and the
// ACTIVE clusters with their members (agents connect later).
func startEnv(ctx context.Context, o *options, nReplicas int, dir string, progress io.Writer) (_ *env, err error) {
	e := &env{dir: dir, region: server.DefaultConfig().Cluster.Region, logs: newLogCounter(o.verbose, progress)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	step := stepper(progress)

	if o.apart {
		e.procs = &system{bin: o.saltbushBin, dir: dir, logs: e.logs, godebug: o.childGODEBUG, pprof: o.childPprof}
	}
	done := step("3-member etcd")
	if e.procs != nil {
		err = e.procs.startEtcd(ctx, o.fsync)
		e.etcdEndpoints, e.stopEtcd = e.procs.etcdEndpoints, e.procs.stopEtcd
	} else {
		var cl *embedetcd.Cluster
		cl, err = embedetcd.StartCluster(ctx, embedetcd.ClusterConfig{Dir: filepath.Join(dir, "etcd"), Size: 3, UnsafeNoFsync: !o.fsync})
		if err == nil {
			e.etcdEndpoints, e.stopEtcd = cl.Endpoints(), cl.Close
		}
	}
	if err != nil {
		return nil, err
	}
	if e.etcdCli, err = clientv3.New(clientv3.Config{Endpoints: e.etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	done()

	done = step(fmt.Sprintf("%d saltbush replica(s)", nReplicas))
	masterKey := make([]byte, iam.MasterKeySize)
	if _, err := rand.Read(masterKey); err != nil {
		return nil, err
	}
	var cat *catalog.Catalog
	if e.procs == nil {
		if cat, err = catalog.Load(); err != nil {
			return nil, fmt.Errorf("load the add-on catalogue: %w", err)
		}
	}
	// One after the other: the first bootstraps the empty store, the
	// others find it bootstrapped (as production replicas may).
	for i := range nReplicas {
		var r *replica
		if e.procs != nil {
			r, err = e.procs.startReplica(ctx, o, i, masterKey)
		} else {
			r, err = startReplica(ctx, o, i, e.etcdEndpoints, filepath.Join(dir, fmt.Sprintf("replica-%d", i)), masterKey, cat, e.logs)
		}
		if err != nil {
			return nil, err
		}
		e.replicas = append(e.replicas, r)
	}
	if o.saltbushFrom != "" {
		e.rolling = true
		var addrs []string
		for _, r := range e.replicas {
			addrs = append(addrs, strings.TrimPrefix(r.url, "http://"))
		}
		if e.front, err = startFront(addrs); err != nil {
			return nil, err
		}
	}
	done()

	r0 := e.replicas[0]
	tlsCfg, err := tlsclient.Load(filepath.Join(r0.tlsDir, "ca.crt"), filepath.Join(r0.tlsDir, "admin.crt"),
		filepath.Join(r0.tlsDir, "admin.key"), "127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}
	if e.admin, err = grpc.NewClient(r0.grpcAddr, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg))); err != nil {
		return nil, fmt.Errorf("dial gRPC: %w", err)
	}
	e.control = controlv1.NewClusterControlServiceClient(e.admin)
	e.identity = controlv1.NewIdentityControlServiceClient(e.admin)

	done = step(fmt.Sprintf("%d accounts, their users and %d roles each", o.accounts, rolesPerTenant))
	for a := range o.accounts {
		t, err := e.makeTenant(ctx, fmt.Sprintf("%012d", 100000000000+a))
		if err != nil {
			return nil, err
		}
		e.tenants = append(e.tenants, t)
	}
	done()

	done = step(fmt.Sprintf("%d ACTIVE clusters with %d members", o.clusters, o.agents))
	e.clusters = make([]*clusterInfo, o.clusters)
	for c := range e.clusters {
		e.clusters[c] = &clusterInfo{tenant: e.tenants[c%len(e.tenants)], name: fmt.Sprintf("load-%04d", c)}
	}
	// Agent i is a member of cluster i mod clusters: with agents a multiple
	// of clusters every control plane has the same number of members.
	for i := range o.agents {
		c := e.clusters[i%len(e.clusters)]
		c.members = append(c.members, fmt.Sprintf("i-%05d", i))
	}
	err = parallel(ctx, len(e.clusters), 8, func(c int) error { return e.makeCluster(ctx, e.clusters[c]) })
	if err != nil {
		return nil, err
	}
	done()
	return e, nil
}

func startReplica(ctx context.Context, o *options, i int, endpoints []string, dir string, masterKey []byte, cat *catalog.Catalog, logs *logCounter) (*replica, error) {
	cfg := server.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.EtcdEndpoints = endpoints
	cfg.MasterKey = masterKey
	cfg.ThrottleRate = o.throttleRate
	cfg.ThrottleBurst = o.throttleBurst
	cfg.ShutdownTimeout = 10 * time.Second
	cfg.ReplicaName = fmt.Sprintf("load-%d", i)
	cfg.Catalog = cat
	cfg.Logger = slog.New(logs.handler(fmt.Sprintf("replica-%d", i)))
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start replica %d: %w", i, err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(serveCtx) }()
	r := &replica{name: cfg.ReplicaName, url: "http://" + srv.HTTPAddr(), grpcAddr: srv.GRPCAddr(), tlsDir: cfg.TLSDir()}
	r.stop = func() {
		stop()
		if err := <-done; err != nil {
			_, _ = fmt.Fprintf(os.Stderr, "load: replica %s: serve: %v\n", r.name, err)
		}
		srv.Close()
	}
	return r, nil
}

// makeTenant makes an account, its operator user with an access key and
// its roles, through the identity RPCs (as `saltbush admin` does).
func (e *env) makeTenant(ctx context.Context, account string) (*tenant, error) {
	if _, err := e.identity.CreateAccount(ctx, &controlv1.CreateAccountRequest{AccountId: account, Name: "load-" + account}); err != nil {
		return nil, fmt.Errorf("create account %s: %w", account, err)
	}
	t := &tenant{account: account, userARN: "arn:aws:iam::" + account + ":user/load-operator", clusterRA: "arn:aws:iam::" + account + ":role/eks-cluster"}
	for _, arn := range []string{t.userARN, t.clusterRA} {
		if _, err := e.identity.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			return nil, fmt.Errorf("create principal %s: %w", arn, err)
		}
	}
	for r := range rolesPerTenant {
		arn := fmt.Sprintf("arn:aws:iam::%s:role/team-%02d", account, r)
		if _, err := e.identity.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			return nil, fmt.Errorf("create principal %s: %w", arn, err)
		}
		t.roles = append(t.roles, arn)
	}
	if _, err := e.identity.PutPolicy(ctx, &controlv1.PutPolicyRequest{AccountId: account, Name: "load-operator", Document: tenantPolicy}); err != nil {
		return nil, fmt.Errorf("put policy in %s: %w", account, err)
	}
	if _, err := e.identity.AttachPolicy(ctx, &controlv1.AttachPolicyRequest{PrincipalArn: t.userARN, PolicyName: "load-operator"}); err != nil {
		return nil, fmt.Errorf("attach policy to %s: %w", t.userARN, err)
	}
	key, err := e.identity.CreateAccessKey(ctx, &controlv1.CreateAccessKeyRequest{PrincipalArn: t.userARN})
	if err != nil {
		return nil, fmt.Errorf("create access key for %s: %w", t.userARN, err)
	}
	t.akid, t.secret = key.GetAccessKeyId(), key.GetSecretAccessKey()
	return t, nil
}

// makeCluster creates c through the SDK as its tenant (with access
// entries on: API_AND_CONFIG_MAP), makes it ACTIVE as a provisioner would
// and adds its members.
func (e *env) makeCluster(ctx context.Context, c *clusterInfo) error {
	sdk := e.setupSDK(c.tenant, e.facade(0))
	_, err := sdk.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(c.name), RoleArn: aws.String(c.tenant.clusterRA),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: subnets},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApiAndConfigMap},
	})
	var inUse *ekstypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) { // in use: a retry of a create that was applied
		return fmt.Errorf("create cluster %s: %w", c.name, err)
	}
	ca, err := clustertest.GenerateCertificateAuthorityData()
	if err != nil {
		return err
	}
	ref := &controlv1.ClusterRef{AccountId: c.tenant.account, Name: c.name}
	err = unthrottled(ctx, func() error {
		out, err := e.control.SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: clustertest.Endpoint, PlatformVersion: "eks.1", CertificateAuthorityData: ca,
		})
		c.uid = out.GetCluster().GetUid()
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster %s ACTIVE: %w", c.name, err)
	}
	for _, m := range c.members {
		err := unthrottled(ctx, func() error {
			_, err := e.control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: m})
			return err
		})
		if err != nil {
			return fmt.Errorf("add member %s to %s: %w", m, c.name, err)
		}
	}
	return nil
}

// unthrottled calls call again while saltbush's throttle refuses it
// (ResourceExhausted on gRPC) or etcd is too slow to answer (Unavailable,
// DeadlineExceeded; a little while only), as a provisioner would back off.
// The calls it is used for are idempotent.
func unthrottled(ctx context.Context, call func() error) error {
	backoff := 50 * time.Millisecond
	for slow := 0; ; {
		err := call()
		switch status.Code(err) {
		case codes.ResourceExhausted:
		case codes.Unavailable, codes.DeadlineExceeded:
			if slow++; slow > 10 {
				return err
			}
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// facade is the base URL SDK client i calls: replica i mod replicas, or
// in a rolling run the front over them all.
func (e *env) facade(i int) string {
	if e.front != nil {
		return e.front.url()
	}
	return e.replicas[i%len(e.replicas)].url
}

// sdk is an unmodified AWS SDK EKS client of t against the façade at url:
// SigV4 with t's key, its own pool of keep-alive connections, and no
// retries (every failure of the load is counted as the server returned
// it).
func (e *env) sdk(t *tenant, url string, conns int) *eks.Client {
	return e.sdkWith(t, url, conns, aws.NopRetryer{})
}

// setupSDK is sdk with the SDK's standard retries, without its client-side
// retry quota: setup makes calls as fast as it can, and saltbush's
// per-account throttle answers some with ThrottlingException.
func (e *env) setupSDK(t *tenant, url string) *eks.Client {
	return e.sdkWith(t, url, 2, retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 30
		o.MaxBackoff = 2 * time.Second
		o.RateLimiter = ratelimit.None
	}))
}

func (e *env) sdkWith(t *tenant, url string, conns int, retryer aws.Retryer) *eks.Client {
	return eks.New(eks.Options{
		Region:       e.region,
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider(t.akid, t.secret, ""),
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 90 * time.Second,
		}},
		Retryer: retryer,
	})
}

// agentTLS is the mTLS configuration of an agent of cluster uid, instance,
// with a key of its own and a certificate from saltbush's CA, issued as
// `saltbush admin cert issue --agent` has it issued.
func (e *env) agentTLS(ctx context.Context, uid, instance string, ttl time.Duration) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	out, err := e.identity.IssueCertificate(ctx, &controlv1.IssueCertificateRequest{
		CsrPem:     string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
		Subject:    &controlv1.IssueCertificateRequest_Agent{Agent: &controlv1.AgentSubject{ClusterUid: uid, Instance: instance}},
		TtlSeconds: int64(ttl / time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("issue the certificate of %s: %w", instance, err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	return tlsclient.Config([]byte(out.GetCaBundlePem()), []byte(out.GetCertificatePem()), keyPEM, "127.0.0.1")
}

// close stops everything startEnv started, in reverse; later calls do
// nothing.
func (e *env) close() { e.closeOnce.Do(e.stopAll) }

func (e *env) stopAll() {
	if e.admin != nil {
		_ = e.admin.Close()
	}
	if e.front != nil {
		e.front.close()
	}
	var wg sync.WaitGroup
	for _, r := range e.replicas {
		wg.Go(r.stop)
	}
	wg.Wait()
	if e.etcdCli != nil {
		_ = e.etcdCli.Close()
	}
	if e.stopEtcd != nil {
		// About a second per member: each waits up to a second for its
		// peers' connections to end.
		e.stopEtcd()
	}
}

// stepper prints each setup step and how long it took.
func stepper(w io.Writer) func(what string) func() {
	return func(what string) func() {
		t0 := time.Now()
		_, _ = fmt.Fprintf(w, "setup: %s ...", what)
		return func() { _, _ = fmt.Fprintf(w, " %.1fs\n", time.Since(t0).Seconds()) }
	}
}

// parallel runs do(0..n-1) on workers goroutines and returns the first
// error (the rest are skipped).
func parallel(ctx context.Context, n, workers int, do func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// logCounter is the replicas' log handler: it counts warnings and errors
// by replica and message (printed with the results: a run that logged
// "session not renewed in time" was not healthy whatever its latencies),
// and writes them out with -v.
type logCounter struct {
	mu      sync.Mutex
	counts  map[string]int64
	verbose bool
	out     io.Writer
}

func newLogCounter(verbose bool, out io.Writer) *logCounter {
	return &logCounter{counts: map[string]int64{}, verbose: verbose, out: out}
}

func (l *logCounter) handler(replica string) slog.Handler {
	return &countingHandler{l: l, replica: replica}
}

// top is every message counted, most frequent first.
func (l *logCounter) top() []errCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []errCount
	for k, n := range l.counts {
		out = append(out, errCount{Kind: k, N: n})
	}
	slices.SortFunc(out, func(a, b errCount) int {
		if a.N != b.N {
			return int(b.N - a.N)
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out
}

type countingHandler struct {
	l       *logCounter
	replica string
	attrs   []slog.Attr
}

func (h *countingHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	var errText string
	var sb strings.Builder
	for _, a := range h.attrs {
		sb.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && errText == "" {
			errText = a.Value.String()
		}
		sb.WriteString(" " + a.String())
		return true
	})
	h.l.count(r.Level.String(), r.Message, errText,
		fmt.Sprintf("%s %s %s %s%s", r.Time.Format("15:04:05.000"), h.replica, r.Level, r.Message, sb.String()))
	return nil
}

// count counts one record at level WARN or above by its level, message
// and the kind of its error; with -v it prints line.
func (l *logCounter) count(level, msg, errText, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := level + " " + msg
	if errText != "" {
		key += " (" + errClass(errText) + ")"
	}
	l.counts[key]++
	if l.verbose {
		_, _ = fmt.Fprintln(l.out, line)
	}
}

// errClass sorts a logged error into a few kinds, so counts stay
// readable (the error text names clusters and keys).
func errClass(err string) string {
	for _, k := range []string{"context deadline exceeded", "context canceled", "request timed out", "leader changed",
		"too many requests", "store unavailable", "conflict"} {
		if strings.Contains(err, k) {
			return k
		}
	}
	return "other error"
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{l: h.l, replica: h.replica, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *countingHandler) WithGroup(string) slog.Handler { return h }

// reassignedExecutors describes every cluster whose delivery executor is
// past its first epoch, with the reason its record gives, or whose
// executor record was written more than once at it: under a steady load
// no executor should change, and a report refused for a stale epoch (an
// unexpected error) is explained by it.
func (e *env) reassignedExecutors(ctx context.Context) ([]string, error) {
	var out []string
	for _, c := range e.clusters {
		resp, err := e.etcdCli.Get(ctx, store.DefaultPrefix+store.ExecutorKey(c.uid))
		if err != nil {
			return nil, fmt.Errorf("executor of cluster %s: %w", c.name, err)
		}
		if len(resp.Kvs) != 1 {
			out = append(out, c.name+": no executor")
			continue
		}
		ex := &storagev1.ExecutorRecord{}
		if err := store.Decode(resp.Kvs[0].Value, ex); err != nil {
			return nil, fmt.Errorf("executor of cluster %s: %w", c.name, err)
		}
		switch kv := resp.Kvs[0]; {
		case ex.GetEpoch() != 1:
			out = append(out, fmt.Sprintf("%s: %s at epoch %d since %s (%s)", c.name, ex.GetInstanceId(), ex.GetEpoch(),
				ex.GetSince().AsTime().Format("15:04:05.000"), ex.GetReason()))
		case kv.Version > 1:
			// Still the first epoch, yet written again: a report judged
			// against the first write fails its fence. Named, so such a
			// writer shows.
			out = append(out, fmt.Sprintf("%s: %s at epoch 1, its record written %d times (created at revision %d, last at %d; draining %v, fence acknowledged %v, reason %q)",
				c.name, ex.GetInstanceId(), kv.Version, kv.CreateRevision, kv.ModRevision, ex.GetDraining(), ex.GetFenceAcked(), ex.GetReason()))
		}
	}
	return out, nil
}
