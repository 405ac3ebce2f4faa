package faults

// Shared by the delivery fault tests (delivery_replicas_test.go,
// delivery_history_test.go): saltbush replicas over one etcd that can be
// killed and restarted, simulated guest agents that record what they are
// told (with local receive times) and what their reports did, and the
// history of a cluster's delivery keys read back from etcd.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tlsclient"
)

// Delivery timing for the fault tests (fastDelivery of the conformance
// tests): fence-after + margin < session TTL still holds.
const (
	dlSessionTTL = 3 * time.Second
	dlHeartbeat  = 200 * time.Millisecond
	dlFenceAfter = 1500 * time.Millisecond
	dlMargin     = 500 * time.Millisecond
)

func dlTiming(c *server.Config) {
	c.Delivery.SessionTTL = dlSessionTTL
	c.Delivery.HeartbeatInterval = dlHeartbeat
	c.Delivery.FenceAfter = dlFenceAfter
	c.Delivery.SafetyMargin = dlMargin
}

// dlReplica is one saltbush process of a dlEnv.
type dlReplica struct {
	slot  int
	name  string
	srv   *servertest.Server
	eks   *eks.Client
	admin *grpc.ClientConn
	up    atomic.Bool
}

// dlEnv is saltbush replicas over one etcd, with the test's own etcd
// client for reading history. API calls hold mu for reading, so a replica
// is killed only between calls (a killed call would leave it unknown
// whether the change was made); agent streams are not protected: killing a
// replica cuts them.
type dlEnv struct {
	t         *testing.T
	endpoints []string
	// slotEndpoints, when set, are the etcd endpoints of each replica
	// slot (a replica may reach etcd through a proxy).
	slotEndpoints [][]string
	cli           *clientv3.Client
	prefix        string
	account       string
	opts          []servertest.Option

	// fenceAfter is the agents' fence-after (the replicas' timing).
	fenceAfter time.Duration

	mu       sync.RWMutex
	replicas []*dlReplica
	gens     []int
	restarts atomic.Int64
}

func newDLEnv(t *testing.T, endpoints []string, n int, opts ...servertest.Option) *dlEnv {
	t.Helper()
	return newDLEnvVia(t, endpoints, make([][]string, n), opts...)
}

// newDLEnvVia starts one replica per element of slots, each reaching etcd
// at its endpoints (endpoints when empty); the test reads etcd directly.
func newDLEnvVia(t *testing.T, endpoints []string, slots [][]string, opts ...servertest.Option) *dlEnv {
	t.Helper()
	n := len(slots)
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	e := &dlEnv{t: t, endpoints: endpoints, cli: cli, opts: opts, gens: make([]int, n), fenceAfter: dlFenceAfter}
	for _, eps := range slots {
		if len(eps) == 0 {
			eps = endpoints
		}
		e.slotEndpoints = append(e.slotEndpoints, eps)
	}
	for i := range n {
		e.replicas = append(e.replicas, e.start(i))
	}
	e.prefix = e.replicas[0].srv.Store(t).Prefix()
	e.account = e.replicas[0].srv.Config.DevAccount
	return e
}

func (e *dlEnv) start(slot int) *dlReplica {
	e.t.Helper()
	name := fmt.Sprintf("replica-%c%d", 'a'+slot, e.gens[slot])
	e.gens[slot]++
	eps := e.endpoints
	if slot < len(e.slotEndpoints) {
		eps = e.slotEndpoints[slot]
	}
	opts := append([]servertest.Option{
		servertest.WithEtcdEndpoints(eps),
		servertest.WithConfig(dlTiming),
		servertest.WithConfig(func(c *server.Config) { c.ReplicaName = name }),
	}, e.opts...)
	srv := servertest.Start(e.t, opts...)
	r := &dlReplica{slot: slot, name: name, srv: srv, eks: srv.EKS(e.t), admin: srv.GRPC(e.t)}
	r.up.Store(true)
	return r
}

// kill stops replica slot abruptly: every connection and stream is cut
// and its etcd client closed (its sessions' keepalives stop), as a crash
// would, once the API calls in flight have returned.
func (e *dlEnv) kill(slot int) *dlReplica {
	e.mu.Lock()
	r := e.replicas[slot]
	wasUp := r.up.Swap(false)
	e.mu.Unlock()
	if !wasUp {
		return r
	}
	e.t.Logf("%s: killing %s", time.Now().Format("15:04:05.000"), r.name)
	r.srv.Close()
	if err := r.srv.Stop(); err != nil {
		e.t.Errorf("stop %s: %v", r.name, err)
	}
	return r
}

// restart kills replica slot and starts a new process in its place (new
// ports, same etcd). Only the test goroutine may call it.
func (e *dlEnv) restart(slot int) {
	e.kill(slot)
	r := e.start(slot)
	e.mu.Lock()
	e.replicas[slot] = r
	e.mu.Unlock()
	e.restarts.Add(1)
}

func (e *dlEnv) replica(slot int) *dlReplica {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.replicas[slot]
}

// pick returns a live replica at random (nil if none).
func (e *dlEnv) pick() *dlReplica {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var live []*dlReplica
	for _, r := range e.replicas {
		if r.up.Load() {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[rand.IntN(len(live))]
}

// api runs one API call on a live replica; no replica is killed while it
// runs.
func (e *dlEnv) api(fn func(r *dlReplica) error) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var live []*dlReplica
	for _, r := range e.replicas {
		if r.up.Load() {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return errors.New("no live replica")
	}
	return fn(live[rand.IntN(len(live))])
}

// rev is etcd's current revision (a linearizable read).
func (e *dlEnv) rev(ctx context.Context) (int64, error) {
	resp, err := e.cli.Get(ctx, e.prefix+"delivery-fault-test/probe")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (e *dlEnv) get(ctx context.Context, key string, into proto.Message) (bool, int64, error) {
	resp, err := e.cli.Get(ctx, e.prefix+key)
	if err != nil {
		return false, 0, err
	}
	if len(resp.Kvs) == 0 {
		return false, resp.Header.Revision, nil
	}
	return true, resp.Header.Revision, store.Decode(resp.Kvs[0].Value, into)
}

// createCluster makes an ACTIVE cluster with members and returns its uid
// and the revision its record was created at.
func (e *dlEnv) createCluster(ctx context.Context, name string, members []string) (string, int64, error) {
	err := e.api(func(r *dlReplica) error {
		_, err := r.eks.CreateCluster(ctx, &eks.CreateClusterInput{
			Name:               aws.String(name),
			RoleArn:            aws.String("arn:aws:iam::000000000000:role/eks-cluster"),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
		})
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("CreateCluster %s: %w", name, err)
	}
	ref := &controlv1.ClusterRef{AccountId: e.account, Name: name}
	ca, err := clustertest.GenerateCertificateAuthorityData()
	if err != nil {
		return "", 0, err
	}
	err = e.api(func(r *dlReplica) error {
		_, err := controlv1.NewClusterControlServiceClient(r.admin).SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: ca,
		})
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("SetStatus %s: %w", name, err)
	}
	var uid string
	for _, m := range members {
		if uid, err = e.addMember(ctx, name, m); err != nil {
			return "", 0, err
		}
	}
	resp, err := e.cli.Get(ctx, e.prefix+store.ClusterKey(e.account, name))
	if err != nil || len(resp.Kvs) != 1 {
		return "", 0, fmt.Errorf("cluster record %s: %v", name, err)
	}
	return uid, resp.Kvs[0].CreateRevision, nil
}

func (e *dlEnv) addMember(ctx context.Context, cluster, instance string) (string, error) {
	var uid string
	err := e.api(func(r *dlReplica) error {
		out, err := controlv1.NewClusterControlServiceClient(r.admin).AddMember(ctx, &controlv1.AddMemberRequest{
			Cluster: &controlv1.ClusterRef{AccountId: e.account, Name: cluster}, InstanceId: instance})
		uid = out.GetCluster().GetUid()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("AddMember %s/%s: %w", cluster, instance, err)
	}
	return uid, nil
}

func (e *dlEnv) removeMember(ctx context.Context, cluster, instance string) error {
	return e.api(func(r *dlReplica) error {
		_, err := controlv1.NewClusterControlServiceClient(r.admin).RemoveMember(ctx, &controlv1.RemoveMemberRequest{
			Cluster: &controlv1.ClusterRef{AccountId: e.account, Name: cluster}, InstanceId: instance})
		return err
	})
}

func (e *dlEnv) drain(ctx context.Context, cluster string) error {
	return e.api(func(r *dlReplica) error {
		_, err := controlv1.NewDeliveryControlServiceClient(r.admin).DrainExecutor(ctx, &controlv1.DrainExecutorRequest{
			Cluster: &controlv1.ClusterRef{AccountId: e.account, Name: cluster}})
		return err
	})
}

// executor reads a cluster's executor record (nil when there is none).
func (e *dlEnv) executor(ctx context.Context, uid string) (*storagev1.ExecutorRecord, error) {
	rec := &storagev1.ExecutorRecord{}
	ok, _, err := e.get(ctx, store.ExecutorKey(uid), rec)
	if err != nil || !ok {
		return nil, err
	}
	return rec, nil
}

// addon reads an add-on record (nil when there is none).
func (e *dlEnv) addon(ctx context.Context, uid, name string) (*storagev1.AddonRecord, error) {
	rec := &storagev1.AddonRecord{}
	ok, _, err := e.get(ctx, store.AddonKey(uid, name), rec)
	if err != nil || !ok {
		return nil, err
	}
	return rec, nil
}

// sessions lists the instances with a live session, with the replica
// holding each.
func (e *dlEnv) sessions(ctx context.Context, uid string) (map[string]string, error) {
	resp, err := e.cli.Get(ctx, e.prefix+store.SessionsPrefix(uid), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		r := &storagev1.AgentSessionRecord{}
		if err := store.Decode(kv.Value, r); err != nil {
			return nil, err
		}
		out[r.GetInstanceId()] = r.GetReplica()
	}
	return out, nil
}

// --- recording ---------------------------------------------------------

// dlReport is one Report an agent sent, with the etcd revisions read just
// before sending it and just after its result arrived: a report is
// applied (or its fence checked) at a revision in between.
type dlReport struct {
	instance   string
	stream     int64
	epoch      int64
	addon, uid string
	gen        int64
	phase      deliveryv1.Phase
	kind       string // "" for the agent's own reports, else the stale kind injected
	revBefore  int64
	revAfter   int64
	result     *deliveryv1.ReportResult
}

func (r *dlReport) String() string {
	res := "no result"
	if r.result != nil {
		res = fmt.Sprintf("accepted=%v reason=%s", r.result.GetAccepted(), r.result.GetReason())
	}
	k := ""
	if r.kind != "" {
		k = " (" + r.kind + ")"
	}
	return fmt.Sprintf("%s stream %d: report%s epoch %d %s uid %.8s gen %d %s, revisions [%d, %d]: %s",
		r.instance, r.stream, k, r.epoch, r.addon, r.uid, r.gen, r.phase, r.revBefore, r.revAfter, res)
}

// dlInterval is a time an agent was an unfenced executor by the agent's
// own rule (docs/delivery-protocol.md, rule 13): from an Assignment{EXECUTOR, epoch} until a
// Fence for that epoch or a later one, another Assignment, or fence-after
// past the last message it heard (it stops by itself then, whether or not
// the stream still exists).
type dlInterval struct {
	instance   string
	stream     int64
	replica    string
	epoch      int64
	start, end time.Time
	why        string
}

// dlAssignment is one Assignment an agent received.
type dlAssignment struct {
	instance string
	stream   int64
	replica  string
	at       time.Time
	role     deliveryv1.Role
	epoch    int64
	executor string
}

// dlRecorder collects what a cluster's agents saw.
type dlRecorder struct {
	mu          sync.Mutex
	reports     []*dlReport
	intervals   []dlInterval
	assignments []dlAssignment
	fences      int
	staleSets   int
	errs        []string
	// ends counts why streams the test did not cut ended, by the host's
	// status (or the connect error): a schedule that does not converge
	// says what kept its agents off.
	ends map[string]int
	// endsOf counts those ends by instance.
	endsOf map[string]int
}

// ended counts a stream's end the test did not cause.
func (rc *dlRecorder) ended(instance string, err error) {
	why := "ended cleanly"
	if st, ok := status.FromError(err); ok && err != nil {
		why = st.Code().String() + ": " + st.Message()
	} else if err != nil {
		why = err.Error()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.ends == nil {
		rc.ends, rc.endsOf = map[string]int{}, map[string]int{}
	}
	rc.ends[why]++
	rc.endsOf[instance]++
}

// endedStreams is how many streams of instance ended without the test
// causing it.
func (rc *dlRecorder) endedStreams(instance string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.endsOf[instance]
}

// endedByInstance is endedStreams of every instance.
func (rc *dlRecorder) endedByInstance() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.endsOf)
}

// toldExecutor reports whether instance received an Assignment as the
// executor, at epoch (at any epoch when 0).
func (rc *dlRecorder) toldExecutor(instance string, epoch int64) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, a := range rc.assignments {
		if a.instance == instance && a.role == deliveryv1.Role_ROLE_EXECUTOR && (epoch == 0 || a.epoch == epoch) {
			return true
		}
	}
	return false
}

func (rc *dlRecorder) errorf(format string, args ...any) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.errs = append(rc.errs, fmt.Sprintf(format, args...))
}

// --- the simulated agent ---------------------------------------------------

// dlAgent is a guest agent as the protocol describes it, minus the K3s
// side: it applies (records) every desired set not older than the one it
// applied, acknowledges it, and while it is an unfenced executor reports
// READY (REMOVED for tombstones) for every add-on of it, level triggered;
// it acknowledges fences and reconnects when a stream ends. Tests steer
// it: cut its stream, keep it away for a while, send it to a replica, or
// make it send a stale report.
type dlAgent struct {
	env      *dlEnv
	rec      *dlRecorder
	uid      string
	cluster  *deliveryv1.ClusterName
	instance string
	tlsCfg   *tls.Config
	// after is how long the agent waits to reconnect after a stream ended
	// that the test did not cut.
	after func() time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	conns     map[*dlReplica]*grpc.ClientConn
	cur       *dlStream
	awayUntil time.Time
	held      bool
	target    *dlReplica
	applied   fakeagent.Applied
	streams   int64
	uids      map[string][]string

	// Whether the agent (not one stream: a new stream's Assignment or
	// Fence supersedes what an old one said) is an unfenced executor,
	// and when it last heard from the host on any stream. Only the
	// processor of the current stream and stop touch them.
	ivOpen    bool
	ivStart   time.Time
	ivEpoch   int64
	ivStream  int64
	ivReplica string
	lastHeard time.Time
}

func newDLAgent(t *testing.T, env *dlEnv, rec *dlRecorder, uid, cluster, instance string, target *dlReplica, after func() time.Duration) (*dlAgent, error) {
	var certPEM, keyPEM, bundle []byte
	err := env.api(func(r *dlReplica) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		certPEM, keyPEM, _, err = r.srv.Authority().IssueLocal(ctx, identity.AgentID(uid, instance), time.Hour)
		bundle, _ = r.srv.Authority().Bundle()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("agent certificate for %s: %w", instance, err)
	}
	cfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	if after == nil {
		after = func() time.Duration { return time.Duration(50+rand.IntN(450)) * time.Millisecond }
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &dlAgent{
		env: env, rec: rec, uid: uid, cluster: &deliveryv1.ClusterName{AccountId: env.account, Name: cluster},
		instance: instance, tlsCfg: cfg, after: after, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		conns: map[*dlReplica]*grpc.ClientConn{}, target: target, uids: map[string][]string{},
	}
	go a.loop()
	t.Cleanup(a.stop)
	return a, nil
}

func (a *dlAgent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// stop ends the agent for good; its last stream's records are complete
// when it returns.
func (a *dlAgent) stop() {
	a.cancel()
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	// It stops by itself fence-after past the last message it heard.
	a.closeInterval(a.lastHeard.Add(a.env.fenceAfter), "stopped fence-after past the last message heard")
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.conns = map[*dlReplica]*grpc.ClientConn{}
}

// cut ends the agent's stream (as a network cut would, from the agent's
// side) and keeps it away for away; it then connects to target (any live
// replica when nil).
func (a *dlAgent) cut(away time.Duration, target *dlReplica) {
	a.mu.Lock()
	a.awayUntil = time.Now().Add(away)
	a.target = target
	s := a.cur
	a.mu.Unlock()
	if s != nil {
		s.cutByTest.Store(true)
		s.cancel()
	}
	a.poke()
}

// hold cuts the stream and keeps the agent away until release.
func (a *dlAgent) hold() {
	a.mu.Lock()
	a.held = true
	a.mu.Unlock()
	a.cut(0, nil)
}

func (a *dlAgent) release(target *dlReplica) {
	a.mu.Lock()
	a.held = false
	a.awayUntil = time.Time{}
	a.target = target
	a.mu.Unlock()
	a.poke()
}

func (a *dlAgent) current() *dlStream {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

func (a *dlAgent) loop() {
	defer close(a.done)
	for a.ctx.Err() == nil {
		a.mu.Lock()
		held, until, target := a.held, a.awayUntil, a.target
		a.mu.Unlock()
		if held || time.Now().Before(until) {
			var timer <-chan time.Time
			if !held {
				timer = time.After(time.Until(until))
			}
			select {
			case <-a.wake:
			case <-timer:
			case <-a.ctx.Done():
				return
			}
			continue
		}
		r := target
		if r == nil || !r.up.Load() {
			r = a.env.pick()
		}
		if r == nil {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-a.ctx.Done():
				return
			}
			continue
		}
		s := a.open(r, target)
		if s == nil {
			continue // cut or held while it was about to connect
		}
		<-s.done
		a.mu.Lock()
		if a.cur == s {
			a.cur = nil
		}
		if !s.cutByTest.Load() && !time.Now().Before(a.awayUntil) {
			a.awayUntil = time.Now().Add(a.after())
		}
		a.mu.Unlock()
	}
}

func (a *dlAgent) conn(r *dlReplica) (*grpc.ClientConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.conns[r]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(grpccreds.NewTLS(a.tlsCfg)))
	if err != nil {
		return nil, err
	}
	a.conns[r] = c
	return c, nil
}

// dlStream is one Connect stream of an agent (a fakeagent.Stream, whose
// reader only receives and timestamps); the processor owns everything
// else, the protocol state in its fakeagent.Session included.
type dlStream struct {
	a         *dlAgent
	id        int64
	replica   string
	fs        *fakeagent.Stream
	session   *fakeagent.Session
	cancel    context.CancelFunc
	done      chan struct{}
	in        <-chan fakeagent.Received
	inject    chan string
	cutByTest atomic.Bool

	// The processor's record of each report its session tracks.
	reports map[*deliveryv1.Report]*dlReport
}

// open starts a stream to r, chosen for target, unless the agent was cut
// or held since the loop decided to connect (nil): cut and hold end the
// stream that is current, and one that became current after they looked
// would escape them, and live on while the test waits for its session to
// expire.
func (a *dlAgent) open(r, target *dlReplica) *dlStream {
	ctx, cancel := context.WithCancel(a.ctx)
	s := &dlStream{a: a, replica: r.name, cancel: cancel, done: make(chan struct{}), inject: make(chan string),
		session: fakeagent.NewSession(a.instance, &a.applied, fakeagent.SessionOptions{}), reports: map[*deliveryv1.Report]*dlReport{}}
	a.mu.Lock()
	if a.held || time.Now().Before(a.awayUntil) || a.target != target {
		a.mu.Unlock()
		cancel()
		return nil
	}
	a.streams++
	s.id = a.streams
	a.cur = s
	a.mu.Unlock()
	hello := a.applied.Resume(&deliveryv1.Hello{Cluster: a.cluster, InstanceId: a.instance, BootId: "boot-1", AgentVersion: "fault-test"})
	conn, err := a.conn(r)
	if err == nil {
		// The processor's tick sends the heartbeats; the host's count as
		// hearing from it.
		s.fs, err = fakeagent.Connect(ctx, conn, fakeagent.Options{Hello: hello, Heartbeats: fakeagent.ByCaller, HostHeartbeats: true})
	}
	if err != nil {
		if a.ctx.Err() == nil {
			a.rec.ended(a.instance, err)
		}
		cancel()
		close(s.done)
		return s
	}
	s.in = s.fs.Receive(8192)
	go s.process()
	return s
}

func (s *dlStream) process() {
	defer close(s.done)
	defer s.cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case in := <-s.in:
			if in.Msg == nil {
				// The agent keeps applying until fence-after past the
				// last message it heard, stream or no stream (or until
				// a later stream tells it otherwise).
				if !s.cutByTest.Load() && s.a.ctx.Err() == nil {
					s.a.rec.ended(s.a.instance, in.Err)
				}
				return
			}
			s.handle(in.At, in.Msg)
		case <-tick.C:
			// Agents send heartbeats: saltbush ends the stream of one
			// that is silent for fence-after.
			s.send(fakeagent.HeartbeatMsg())
			s.reportAll()
		case kind := <-s.inject:
			s.injectStale(kind)
		}
	}
}

func (s *dlStream) send(m *deliveryv1.AgentMessage) {
	// A failed send means the stream is ending: the reader sees why.
	_ = s.fs.Send(m)
}

// openInterval and closeInterval keep the agent's unfenced-executor
// intervals; the caller holds a.mu.
func (a *dlAgent) openInterval(at time.Time, s *dlStream) {
	a.ivOpen, a.ivStart, a.ivEpoch, a.ivStream, a.ivReplica = true, at, s.session.Epoch(), s.id, s.replica
}

func (a *dlAgent) closeInterval(end time.Time, why string) {
	if !a.ivOpen {
		return
	}
	a.ivOpen = false
	rc := a.rec
	rc.mu.Lock()
	rc.intervals = append(rc.intervals, dlInterval{instance: a.instance, stream: a.ivStream, replica: a.ivReplica, epoch: a.ivEpoch,
		start: a.ivStart, end: end, why: why})
	rc.mu.Unlock()
}

// heard updates the agent's executor interval for a message it heard at
// at, after the stream's state took the message in.
func (s *dlStream) heard(at time.Time, m *deliveryv1.HostMessage) {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ivOpen && at.Sub(a.lastHeard) > a.env.fenceAfter {
		a.closeInterval(a.lastHeard.Add(a.env.fenceAfter), "heard nothing for fence-after")
	}
	a.lastHeard = at
	switch {
	case m.GetAssignment() != nil:
		if as := m.GetAssignment(); a.ivOpen && (as.GetRole() != deliveryv1.Role_ROLE_EXECUTOR || as.GetEpoch() != a.ivEpoch) {
			a.closeInterval(at, "assigned "+as.GetRole().String())
		}
	case m.GetFence() != nil:
		if a.ivOpen && m.GetFence().GetEpoch() >= a.ivEpoch {
			a.closeInterval(at, "fence: "+m.GetFence().GetReason())
		}
	}
	if !a.ivOpen && s.session.Assigned() && !s.session.Fenced() && s.session.Role() == deliveryv1.Role_ROLE_EXECUTOR {
		// An executor that heard from the host (its assignment, or again
		// after a lapse) applies.
		a.openInterval(at, s)
	}
}

func (s *dlStream) handle(at time.Time, m *deliveryv1.HostMessage) {
	defer s.reportAll()
	defer s.heard(at, m)
	a := s.a
	taken, err := s.session.Take(m)
	if err != nil {
		a.rec.errorf("stream %d: %v", s.id, err)
	}
	switch {
	case m.GetAssignment() != nil:
		as := m.GetAssignment()
		a.rec.mu.Lock()
		a.rec.assignments = append(a.rec.assignments, dlAssignment{instance: a.instance, stream: s.id, replica: s.replica, at: at,
			role: as.GetRole(), epoch: as.GetEpoch(), executor: as.GetExecutorInstanceId()})
		a.rec.mu.Unlock()
	case m.GetFence() != nil:
		a.rec.mu.Lock()
		a.rec.fences++
		a.rec.mu.Unlock()
	case taken.Refused:
		// Never apply a set older than one applied (rule 10).
		a.rec.mu.Lock()
		a.rec.staleSets++
		a.rec.mu.Unlock()
	case taken.Applied != nil:
		a.mu.Lock()
		for _, d := range taken.Applied.GetAddons() {
			if u := a.uids[d.GetName()]; len(u) == 0 || u[len(u)-1] != d.GetUid() {
				a.uids[d.GetName()] = append(u, d.GetUid())
			}
		}
		a.mu.Unlock()
	case taken.Answered != nil:
		r := s.reports[taken.Answered]
		delete(s.reports, taken.Answered)
		rev, err := a.env.rev(a.ctx)
		if err != nil && a.ctx.Err() == nil {
			a.rec.errorf("%s: read revision: %v", a.instance, err)
		}
		a.rec.mu.Lock()
		r.result, r.revAfter = m.GetReportResult(), rev
		a.rec.mu.Unlock()
	}
	for _, reply := range taken.Replies {
		s.send(reply)
	}
}

// reportAll reports, as an unfenced executor, every add-on of the applied
// set not yet reported on this stream at this epoch (or whose report was
// not accepted: level triggered, retried on the processor's tick).
func (s *dlStream) reportAll() {
	for _, rep := range s.session.Due() {
		s.report(rep, &dlReport{epoch: rep.GetEpoch(), addon: rep.GetAddon(), uid: rep.GetAddonUid(), gen: rep.GetGeneration(), phase: rep.GetPhase()}, true)
	}
}

// report sends rep, recorded as r; retry says whether the session reports
// it again if it is not accepted (not for a stale report sent on purpose).
func (s *dlStream) report(rep *deliveryv1.Report, r *dlReport, retry bool) {
	a := s.a
	rev, err := a.env.rev(a.ctx)
	if err != nil {
		if a.ctx.Err() == nil {
			a.rec.errorf("%s: read revision: %v", a.instance, err)
		}
		return
	}
	r.instance, r.stream, r.revBefore = a.instance, s.id, rev
	msg := s.session.Track(rep, retry)
	s.reports[rep] = r
	a.rec.mu.Lock()
	a.rec.reports = append(a.rec.reports, r)
	a.rec.mu.Unlock()
	s.send(msg)
}

// Kinds of stale report an agent can be made to send.
const (
	staleEpoch       = "old epoch"
	staleFutureEpoch = "future epoch"
	staleGeneration  = "old generation"
	staleIncarnation = "old incarnation"
	staleStandby     = "from a standby"
)

// sendStale makes the agent's current stream send a stale report of kind
// (if its state allows one); it reports whether one was sent.
func (a *dlAgent) sendStale(kind string) bool {
	s := a.current()
	if s == nil {
		return false
	}
	select {
	case s.inject <- kind:
		return true
	case <-s.done:
		return false
	case <-time.After(5 * time.Second):
		return false
	}
}

func (s *dlStream) injectStale(kind string) {
	a := s.a
	set := a.applied.Set()
	a.mu.Lock()
	uids := map[string][]string{}
	for k, v := range a.uids {
		uids[k] = append([]string(nil), v...)
	}
	a.mu.Unlock()
	if !s.session.Assigned() || len(set.GetAddons()) == 0 {
		return
	}
	epoch := s.session.Epoch()
	d := set.GetAddons()[rand.IntN(len(set.GetAddons()))]
	r := &dlReport{epoch: epoch, addon: d.GetName(), uid: d.GetUid(), gen: d.GetGeneration(), phase: deliveryv1.Phase_PHASE_READY, kind: kind}
	switch kind {
	case staleEpoch:
		if epoch < 2 {
			return
		}
		r.epoch = epoch - 1
	case staleFutureEpoch:
		r.epoch = epoch + 1
	case staleGeneration:
		if d.GetGeneration() < 2 {
			return
		}
		r.gen = d.GetGeneration() - 1
	case staleIncarnation:
		u := uids[d.GetName()]
		if len(u) < 2 {
			return
		}
		r.uid, r.gen = u[len(u)-2], 1
	case staleStandby:
		if s.session.Role() != deliveryv1.Role_ROLE_STANDBY {
			return
		}
	}
	s.report(&deliveryv1.Report{Epoch: r.epoch, Addon: r.addon, AddonUid: r.uid, Generation: r.gen, Phase: r.phase}, r, false)
}

// --- etcd history ------------------------------------------------------------

var historyWatches atomic.Int64

// dlEvent is one change of one key.
type dlEvent struct {
	rev     int64
	value   []byte
	deleted bool
	lease   int64
}

// dlHistory is every change of a cluster's record and of its keys
// (executor, sessions, add-ons) from the cluster's creation to end.
type dlHistory struct {
	prefix string
	uid    string
	keys   map[string][]dlEvent // relative key -> events, oldest first
	from   int64
	end    int64
}

// checkHistorySince reads the cluster's history from from to now and
// fails t for every break of break before make and every report accepted
// from a stale epoch or generation (checkExecutorHistory, checkReports).
// It returns the history and its assignments.
func (e *dlEnv) checkHistorySince(t *testing.T, ctx context.Context, cluster, uid string, from int64) (*dlHistory, []dlAssigned) {
	t.Helper()
	end, err := e.rev(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.history(ctx, e.account, cluster, uid, from, end)
	if err != nil {
		t.Fatal(err)
	}
	assigned, herrs := h.checkExecutorHistory(h.membersAt(e.account, cluster))
	_, _, rerrs := h.checkReports(nil)
	for _, err := range append(herrs, rerrs...) {
		t.Error(err)
	}
	return h, assigned
}

// history reads every change under the cluster's keys between from and
// end (inclusive) by watching from from.
func (e *dlEnv) history(ctx context.Context, account, cluster, uid string, from, end int64) (*dlHistory, error) {
	h := &dlHistory{prefix: e.prefix, uid: uid, keys: map[string][]dlEvent{}, from: from, end: end}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, w := range []struct {
		key    string
		prefix bool
	}{{store.ClusterKey(account, cluster), false}, {store.ClusterChildrenPrefix(uid), true}} {
		opts := []clientv3.OpOption{clientv3.WithRev(from), clientv3.WithCreatedNotify()}
		if w.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		// A watch stream of its own (the client shares one per distinct
		// metadata): a progress notification is then sent only once this
		// watcher has caught up, and nobody else's is broadcast to it.
		wctx, wcancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
			"delivery-history", fmt.Sprint(historyWatches.Add(1))))
		ch := e.cli.Watch(wctx, e.prefix+w.key, opts...)
		created, done := false, false
		for !done {
			if created {
				_ = e.cli.RequestProgress(wctx)
			}
			select {
			case resp, ok := <-ch:
				if !ok {
					wcancel()
					return nil, fmt.Errorf("history watch of %s closed", w.key)
				}
				if err := resp.Err(); err != nil {
					wcancel()
					return nil, fmt.Errorf("history watch of %s: %w", w.key, err)
				}
				if resp.Created {
					created = true
					continue
				}
				for _, ev := range resp.Events {
					if ev.Kv.ModRevision > end {
						done = true
						break
					}
					k := string(ev.Kv.Key[len(e.prefix):])
					h.keys[k] = append(h.keys[k], dlEvent{rev: ev.Kv.ModRevision, value: ev.Kv.Value, deleted: ev.Type == clientv3.EventTypeDelete, lease: ev.Kv.Lease})
				}
				if resp.IsProgressNotify() && resp.Header.Revision >= end {
					done = true
				}
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				wcancel()
				return nil, fmt.Errorf("history watch of %s: %w", w.key, ctx.Err())
			}
		}
		wcancel()
	}
	return h, nil
}

// at returns key's value at revision rev (nil when absent).
func (h *dlHistory) at(key string, rev int64) []byte {
	evs := h.keys[key]
	i := sort.Search(len(evs), func(i int) bool { return evs[i].rev > rev })
	if i == 0 || evs[i-1].deleted {
		return nil
	}
	return evs[i-1].value
}

func (h *dlHistory) executorAt(rev int64) *storagev1.ExecutorRecord {
	b := h.at(store.ExecutorKey(h.uid), rev)
	if b == nil {
		return nil
	}
	e := &storagev1.ExecutorRecord{}
	if err := store.Decode(b, e); err != nil {
		return nil
	}
	return e
}

func (h *dlHistory) addonAt(name string, rev int64) *storagev1.AddonRecord {
	b := h.at(store.AddonKey(h.uid, name), rev)
	if b == nil {
		return nil
	}
	a := &storagev1.AddonRecord{}
	if err := store.Decode(b, a); err != nil {
		return nil
	}
	return a
}

func (h *dlHistory) sessionAt(instance string, rev int64) bool {
	return h.at(store.SessionKey(h.uid, instance), rev) != nil
}

// revisions lists the revisions in (from, to] at which any of keys changed.
func (h *dlHistory) revisions(from, to int64, keys ...string) []int64 {
	var out []int64
	for _, k := range keys {
		for _, ev := range h.keys[k] {
			if ev.rev > from && ev.rev <= to {
				out = append(out, ev.rev)
			}
		}
	}
	return out
}

// dlAssigned is one executor assignment (an epoch increment) in etcd.
type dlAssigned struct {
	rev      int64
	instance string
	epoch    int64
	reason   string
}

// checkExecutorHistory checks break before make from etcd alone: epochs
// only grow (by one, also across a removed executor record), an epoch
// keeps its instance, and epoch e+1 is committed only at a revision where
// the epoch-e holder's session key is absent, where the epoch-e record
// says it was drained and acknowledged the fence, or — to the same
// instance — after its session key was deleted since epoch e was
// assigned (its session lapsed and it came back with a new one,
// docs/delivery-protocol.md rule 6); the new holder had a session and was
// a member there. It returns the assignments.
func (h *dlHistory) checkExecutorHistory(members func(rev int64) map[string]bool) ([]dlAssigned, []string) {
	var (
		out     []dlAssigned
		errs    []string
		prev    *storagev1.ExecutorRecord
		maxSeen int64
		// prevRev is the revision prev's epoch was first written at.
		prevRev int64
	)
	for _, ev := range h.keys[store.ExecutorKey(h.uid)] {
		if ev.deleted {
			prev = nil
			continue
		}
		rec := &storagev1.ExecutorRecord{}
		if err := store.Decode(ev.value, rec); err != nil {
			errs = append(errs, fmt.Sprintf("revision %d: executor record: %v", ev.rev, err))
			continue
		}
		switch {
		case rec.GetInstanceId() == "":
			// A vacancy: the cluster turned FAILED or DELETING and its
			// executor was fenced in that transaction; the epoch is kept
			// so the next assignment goes on from it.
			if prev != nil && rec.GetEpoch() != prev.GetEpoch() {
				errs = append(errs, fmt.Sprintf("revision %d: vacancy at epoch %d after epoch %d", ev.rev, rec.GetEpoch(), prev.GetEpoch()))
			}
		case prev != nil && rec.GetEpoch() == prev.GetEpoch():
			if rec.GetInstanceId() != prev.GetInstanceId() {
				errs = append(errs, fmt.Sprintf("revision %d: epoch %d changed hands from %s to %s", ev.rev, rec.GetEpoch(), prev.GetInstanceId(), rec.GetInstanceId()))
			}
		case rec.GetEpoch() <= maxSeen:
			errs = append(errs, fmt.Sprintf("revision %d: epoch %d assigned to %s after epoch %d: epochs must only grow", ev.rev, rec.GetEpoch(), rec.GetInstanceId(), maxSeen))
		default:
			if prev != nil {
				if rec.GetEpoch() != prev.GetEpoch()+1 {
					errs = append(errs, fmt.Sprintf("revision %d: epoch %d follows epoch %d", ev.rev, rec.GetEpoch(), prev.GetEpoch()))
				}
				fenced := prev.GetDraining() && prev.GetFenceAcked() || prev.GetInstanceId() == ""
				cameBack := rec.GetInstanceId() == prev.GetInstanceId() && h.sessionLapsed(prev.GetInstanceId(), prevRev, ev.rev)
				if !fenced && !cameBack && h.sessionAt(prev.GetInstanceId(), ev.rev) {
					errs = append(errs, fmt.Sprintf("revision %d: epoch %d assigned to %s while epoch %d's holder %s still had a session and had not acknowledged a fence (break before make)",
						ev.rev, rec.GetEpoch(), rec.GetInstanceId(), prev.GetEpoch(), prev.GetInstanceId()))
				}
			}
			if !h.sessionAt(rec.GetInstanceId(), ev.rev) {
				errs = append(errs, fmt.Sprintf("revision %d: epoch %d assigned to %s, which had no session", ev.rev, rec.GetEpoch(), rec.GetInstanceId()))
			}
			if members != nil && !members(ev.rev)[rec.GetInstanceId()] {
				errs = append(errs, fmt.Sprintf("revision %d: epoch %d assigned to %s, not a member", ev.rev, rec.GetEpoch(), rec.GetInstanceId()))
			}
			out = append(out, dlAssigned{rev: ev.rev, instance: rec.GetInstanceId(), epoch: rec.GetEpoch(), reason: rec.GetReason()})
		}
		maxSeen = max(maxSeen, rec.GetEpoch())
		if prev == nil || rec.GetEpoch() != prev.GetEpoch() {
			prevRev = ev.rev
		}
		prev = rec
	}
	return out, errs
}

// membersAt returns the members of the cluster record at a revision.
func (h *dlHistory) membersAt(account, cluster string) func(rev int64) map[string]bool {
	return func(rev int64) map[string]bool {
		out := map[string]bool{}
		b := h.at(store.ClusterKey(account, cluster), rev)
		if b == nil {
			return out
		}
		c := &storagev1.ClusterRecord{}
		if store.Decode(b, c) != nil {
			return out
		}
		for _, m := range c.GetMembers() {
			out[m.GetInstanceId()] = true
		}
		return out
	}
}

// checkReports checks every accepted report against etcd's history: (1)
// every commit that changed an add-on's observed state was made while the
// executor record named observed.instance_id at observed.executor_epoch
// (not draining) and the record's generation was the observed one, and
// every add-on erased by a REMOVED report was erased while an executor
// (not draining) was assigned; (2) every report an agent was told was
// accepted was judged at a revision (between the one read before sending
// it and the one read after its result) where the reporter was the
// executor at the report's epoch, not draining, and the add-on's
// incarnation and generation were the report's. It returns the number of
// accepted reports seen by agents and of observed commits.
func (h *dlHistory) checkReports(reports []*dlReport) (accepted, commits int, errs []string) {
	addonsPrefix := store.AddonsPrefix(h.uid)
	for key, evs := range h.keys {
		if len(key) <= len(addonsPrefix) || key[:len(addonsPrefix)] != addonsPrefix {
			continue
		}
		var prev *storagev1.AddonRecord
		for _, ev := range evs {
			if ev.deleted {
				// Only an accepted REMOVED report erases an add-on (the
				// cluster is never purged here).
				commits++
				e := h.executorAt(ev.rev)
				if prev != nil && (prev.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_DELETING || e == nil || e.GetDraining()) {
					errs = append(errs, fmt.Sprintf("revision %d: add-on %s erased while status %s, executor %v", ev.rev, key, prev.GetStatus(), e))
				}
				prev = nil
				continue
			}
			rec := &storagev1.AddonRecord{}
			if err := store.Decode(ev.value, rec); err != nil {
				errs = append(errs, fmt.Sprintf("revision %d: %s: %v", ev.rev, key, err))
				continue
			}
			o := rec.GetObserved()
			if o != nil && (prev == nil || !sameObserved(prev.GetObserved(), o)) {
				commits++
				e := h.executorAt(ev.rev)
				switch {
				case e == nil || e.GetInstanceId() != o.GetInstanceId() || e.GetEpoch() != o.GetExecutorEpoch() || e.GetDraining():
					errs = append(errs, fmt.Sprintf("revision %d: add-on %s observed %s gen %d from %s at epoch %d, but the executor then was %v (stale epoch accepted)",
						ev.rev, rec.GetName(), o.GetPhase(), o.GetGeneration(), o.GetInstanceId(), o.GetExecutorEpoch(), e))
				case rec.GetGeneration() != o.GetGeneration():
					errs = append(errs, fmt.Sprintf("revision %d: add-on %s observed generation %d while at generation %d (stale generation accepted)",
						ev.rev, rec.GetName(), o.GetGeneration(), rec.GetGeneration()))
				}
			}
			prev = rec
		}
	}
	execKey := store.ExecutorKey(h.uid)
	for _, r := range reports {
		if r.result == nil || !r.result.GetAccepted() {
			continue
		}
		accepted++
		addonKey := store.AddonKey(h.uid, r.addon)
		after := r.revAfter
		if after == 0 {
			// The result came as the agent stopped: the history's end
			// bounds it.
			after = h.end
		}
		if r.revBefore < h.from || after > h.end || after < r.revBefore {
			errs = append(errs, fmt.Sprintf("accepted report outside the history read [%d, %d]: %s", h.from, h.end, r))
			continue
		}
		ok := false
		for _, rev := range append([]int64{r.revBefore}, h.revisions(r.revBefore, after, execKey, addonKey)...) {
			e, ad := h.executorAt(rev), h.addonAt(r.addon, rev)
			if e != nil && e.GetInstanceId() == r.instance && e.GetEpoch() == r.epoch && !e.GetDraining() &&
				ad != nil && ad.GetUid() == r.uid && ad.GetGeneration() == r.gen {
				ok = true
				break
			}
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("accepted, but at no revision in between was %s the executor at epoch %d with %s at generation %d: %s (executor then %v, add-on gen %d)",
				r.instance, r.epoch, r.addon, r.gen, r, h.executorAt(r.revBefore), h.addonAt(r.addon, r.revBefore).GetGeneration()))
		}
	}
	return accepted, commits, errs
}

func sameObserved(a, b *storagev1.AddonObserved) bool {
	return proto.Equal(a, b)
}

// checkIntervals checks, by the agents' own clocks and rules, that no two
// agents were unfenced executors at the same instant. It returns the
// number of intervals, the overlaps, and the closest approach of two
// agents' intervals (negative: the longest overlap).
func checkIntervals(ivs []dlInterval) (int, []string, time.Duration) {
	sorted := append([]dlInterval(nil), ivs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start.Before(sorted[j].start) })
	var errs []string
	closest := time.Duration(1<<63 - 1)
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if a.instance != b.instance && !b.start.Before(a.end) {
				// b starts after a ended: the gap between them.
				closest = min(closest, b.start.Sub(a.end))
			}
			if !b.start.Before(a.end) {
				break
			}
			if a.instance != b.instance && a.end.After(b.start) && b.end.After(a.start) {
				end := a.end
				if b.end.Before(end) {
					end = b.end
				}
				overlap := end.Sub(b.start)
				closest = min(closest, -overlap)
				errs = append(errs, fmt.Sprintf("two unfenced executors for %s: %s epoch %d (stream %d on %s, %s .. %s, ended by %q) and %s epoch %d (stream %d on %s, %s .. %s, ended by %q)",
					overlap,
					a.instance, a.epoch, a.stream, a.replica, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"), a.why,
					b.instance, b.epoch, b.stream, b.replica, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"), b.why))
			}
		}
	}
	return len(sorted), errs, closest
}

// waitFor polls cond every 50ms until it holds or within passes.
func waitFor(ctx context.Context, within time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("condition not met")
			}
			return fmt.Errorf("after %s: %w", within, err)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// --- add-ons -------------------------------------------------------------------

// dlAddons are the catalogue add-ons the tests use; each takes a
// replicaCount.
var dlAddons = []string{"saltbush-noop", "coredns", "metrics-server"}

func dlConfig(addon string, n int) string {
	if addon == "saltbush-noop" {
		return fmt.Sprintf(`{"message": "delivery fault test %d", "replicaCount": %d}`, n, n)
	}
	return fmt.Sprintf(`{"replicaCount": %d}`, n)
}

func (e *dlEnv) createAddon(ctx context.Context, cluster, addon string, n int) error {
	return e.api(func(r *dlReplica) error {
		_, err := r.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon),
			ConfigurationValues: aws.String(dlConfig(addon, n))})
		return err
	})
}

func (e *dlEnv) updateAddon(ctx context.Context, cluster, addon string, n int) error {
	return e.api(func(r *dlReplica) error {
		_, err := r.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon),
			ConfigurationValues: aws.String(dlConfig(addon, n))})
		return err
	})
}

func (e *dlEnv) deleteAddon(ctx context.Context, cluster, addon string) error {
	return e.api(func(r *dlReplica) error {
		_, err := r.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
		return err
	})
}

// settled reports whether an add-on record is ACTIVE with a READY report
// for its current generation (and, when epoch is not 0, reported at that
// epoch).
func settled(a *storagev1.AddonRecord, epoch int64) bool {
	o := a.GetObserved()
	return a != nil && a.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_ACTIVE && o.GetGeneration() == a.GetGeneration() &&
		o.GetPhase() == storagev1.AddonPhase_ADDON_PHASE_READY && (epoch == 0 || o.GetExecutorEpoch() == epoch)
}

// describe lists the history of the executor and session keys, for a
// failure message.
func (h *dlHistory) describe() string {
	var b strings.Builder
	var keys []string
	for k := range h.keys {
		if k == store.ExecutorKey(h.uid) || strings.HasPrefix(k, store.SessionsPrefix(h.uid)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s:", strings.TrimPrefix(k, store.ClusterChildrenPrefix(h.uid)))
		for _, ev := range h.keys[k] {
			switch {
			case ev.deleted:
				fmt.Fprintf(&b, " %d:deleted", ev.rev)
			case k == store.ExecutorKey(h.uid):
				e := &storagev1.ExecutorRecord{}
				_ = store.Decode(ev.value, e)
				fmt.Fprintf(&b, " %d:%s@%d", ev.rev, e.GetInstanceId(), e.GetEpoch())
				if e.GetDraining() {
					fmt.Fprintf(&b, "(draining,acked=%v)", e.GetFenceAcked())
				}
			default:
				r := &storagev1.AgentSessionRecord{}
				_ = store.Decode(ev.value, r)
				fmt.Fprintf(&b, " %d:%s/lease %x", ev.rev, r.GetReplica(), ev.lease)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
