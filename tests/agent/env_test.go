// Package agent_test runs the real guest agent (the saltbush-agent binary,
// built once per test binary) against real saltbush servers and a real
// Kubernetes control plane (tests/kubetest: kube-apiserver,
// kube-controller-manager, kube-scheduler; only the kubelets are a double)
// and drives add-ons through the unmodified AWS SDK.
package agent_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/kubetest"
)

// agentBinary is the saltbush-agent built for this test binary.
var agentBinary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	bin, remove, err := agentproc.BuildTemp(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	agentBinary = bin
	return kubetest.RunTests(m, kubetest.Options{})
}

// Delivery timing of these tests: short, so that failovers take seconds,
// and still fence-after + margin + heartbeat < session TTL.
func timing(c *server.Config) {
	c.Delivery.SessionTTL = 8 * time.Second
	c.Delivery.HeartbeatInterval = time.Second
	c.Delivery.FenceAfter = 4 * time.Second
	c.Delivery.SafetyMargin = 2 * time.Second
}

// fenceAfter is timing's fence-after.
const fenceAfter = 4 * time.Second

// env is one test's world: saltbush replicas, one cluster on the shared
// Kubernetes control plane, and its agents.
type env struct {
	t        *testing.T
	kube     *kubetest.Cluster
	k8s      kubernetes.Interface
	replicas []*servertest.Server
	eks      *eks.Client
	admin    *grpc.ClientConn
	account  string
	cluster  string
	uid      string

	mu     sync.Mutex
	agents []*agentProc
}

type envOptions struct {
	// replicas is the number of saltbush replicas (over one etcd); 1 when 0.
	replicas int
	// kubernetesVersion of the cluster; saltbush's default when "".
	kubernetesVersion string
}

// newEnv starts saltbush and makes an ACTIVE cluster named after the test
// with the given members.
func newEnv(t *testing.T, o envOptions, members ...string) *env {
	t.Helper()
	kc := kubetest.Shared(t)
	e := &env{t: t, kube: kc}
	e.k8s = kubernetes.NewForConfigOrDie(e.adminConfig())
	n := max(o.replicas, 1)
	opts := []servertest.Option{servertest.WithConfig(timing)}
	if n > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true, ElectionTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("etcd: %v", err)
		}
		t.Cleanup(etcd.Close)
		opts = append(opts, servertest.WithEtcdEndpoints(etcd.Endpoints()))
	}
	for i := range n {
		name := fmt.Sprintf("replica-%d", i)
		e.replicas = append(e.replicas, servertest.Start(t, append(opts, servertest.WithConfig(func(c *server.Config) { c.ReplicaName = name }))...))
	}
	r := e.replicas[0]
	e.eks, e.admin, e.account = r.EKS(t), r.GRPC(t), r.Config.DevAccount
	e.cluster = strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(t.Name())
	if len(e.cluster) > 90 {
		e.cluster = e.cluster[:90]
	}
	// Unique per run (go test -count): agents' users in the shared
	// apiserver's audit log are named after it.
	e.cluster += fmt.Sprintf("-%04x", rand.IntN(1<<16))
	ctx := e.ctx(30 * time.Second)
	if _, err := e.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(e.cluster), RoleArn: aws.String("arn:aws:iam::" + e.account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
		Version:            optional(o.kubernetesVersion),
		// The apiserver's service range, as a provisioner configures K3s:
		// coredns's kube-dns Service takes its .10.
		KubernetesNetworkConfig: &types.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: aws.String(kubetest.ServiceClusterIPRange)},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	cc := controlv1.NewClusterControlServiceClient(e.admin)
	ref := &controlv1.ClusterRef{AccountId: e.account, Name: e.cluster}
	for _, m := range members {
		out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: m})
		if err != nil {
			t.Fatalf("AddMember %s: %v", m, err)
		}
		e.uid = out.GetCluster().GetUid()
	}
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: kc.Host(), PlatformVersion: "eks.1", CertificateAuthorityData: base64.StdEncoding.EncodeToString(kc.CACert())}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	t.Cleanup(e.cleanupKube) // after the agents stopped (cleanups run last first)
	t.Cleanup(e.stopAgents)
	return e
}

// in is the env for a subtest: failures stop the subtest, not its parent.
func (e *env) in(t *testing.T) *env {
	se := &env{t: t, kube: e.kube, k8s: e.k8s, replicas: e.replicas, eks: e.eks, admin: e.admin,
		account: e.account, cluster: e.cluster, uid: e.uid}
	return se
}

// ctx is a context for one step of the test, cancelled when it ends.
func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// endpoints are the replicas' gRPC addresses.
func (e *env) endpoints() []string {
	var eps []string
	for _, r := range e.replicas {
		eps = append(eps, r.GRPCAddr())
	}
	return eps
}

// agentOptions adjust one agent.
type agentOptions struct {
	// endpoints override the replicas' addresses (e.g. a proxy's).
	endpoints []string
	// kubeUser is the agent's user on the apiserver (default
	// agent-INSTANCE in system:masters); kubeGroups its groups.
	kubeUser   string
	kubeGroups []string
	// args are extra flags.
	args []string
	// stateDir reuses a state directory (a restart).
	stateDir string
}

// agentProc is one running saltbush-agent process and its apiserver user.
type agentProc struct {
	*agentproc.Process
	instance string
	user     string
	stateDir string
}

// startAgent runs a saltbush-agent for a member of the env's cluster.
func (e *env) startAgent(instance string, o agentOptions) *agentProc {
	e.t.Helper()
	if o.kubeUser == "" {
		o.kubeUser, o.kubeGroups = "agent:"+e.cluster+":"+instance, []string{"system:masters"}
	}
	if len(o.endpoints) == 0 {
		o.endpoints = e.endpoints()
	}
	p, err := agentproc.Start(e.ctx(10*time.Second), agentproc.Options{
		Binary: agentBinary, Dir: e.t.TempDir(), Server: e.replicas[0],
		Account: e.account, Cluster: e.cluster, UID: e.uid, Instance: instance, Endpoints: o.endpoints,
		Kubeconfig: e.kube.UserKubeconfig(o.kubeUser, o.kubeGroups...), StateDir: o.stateDir, Args: o.args,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	a := &agentProc{Process: p, instance: instance, user: o.kubeUser, stateDir: p.StateDir}
	e.mu.Lock()
	e.agents = append(e.agents, a)
	e.mu.Unlock()
	return a
}

// kill ends an agent with SIGKILL (no cleanup of any kind).
func (a *agentProc) kill(t *testing.T) { a.Kill() }

func (e *env) stopAgents() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.agents {
		a.Stop()
	}
	if e.t.Failed() || os.Getenv("SALTBUSH_TEST_AGENT_LOG") != "" {
		for _, a := range e.agents {
			b := a.Log()
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			e.t.Logf("agent %s log (end):\n%s", a.instance, b)
		}
	}
}

// log is the agent's log so far.
func (a *agentProc) log() string { return a.Log() }

// optional is nil for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
