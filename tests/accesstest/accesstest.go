// Package accesstest starts the whole access chain for tests and
// benchmarks: a saltbush server, one ACTIVE cluster, its guest agent
// (the real saltbush-agent binary) serving the authentication and
// authorization webhooks, and a real kube-apiserver (tests/kubetest)
// configured with those webhooks exactly as images/k3s configures K3s's,
// so that a token from `aws eks get-token` or the Go SDK presigner reaches
// kubectl's apiserver and is decided by the cluster's access entries.
package accesstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/guest/agent"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/netproxy"
)

// Instance is the cluster's one control-plane member.
const Instance = "i-0acce55000000000a"

// StaticToken, StaticUser and StaticGroup are a user of the apiserver's
// static token file: the same request made with a token the apiserver
// checks itself is the baseline the webhooks' cost is measured against.
const (
	StaticToken = "saltbush-static-token-for-benchmarks"
	StaticUser  = "static-user"
	StaticGroup = "static-readers"
)

// Options configure Start.
type Options struct {
	// AgentBinary is agentproc.Build's result.
	AgentBinary string
	// AuthenticationMode of the cluster at creation; API when "".
	AuthenticationMode string
	// CacheTTL and NegativeCacheTTL are the agent's review caches.
	CacheTTL, NegativeCacheTTL time.Duration
	// ReviewTimeout bounds one review in the agent; 2 s when zero.
	ReviewTimeout time.Duration
	// APIServerUncached turns the apiserver's own authorization cache off
	// (kubetest.WebhookAPIServerArgsUncached), so every request reaches the
	// agent; otherwise the apiserver is configured as images/k3s ships it.
	APIServerUncached bool
	// Standby makes the webhook-serving agent a standby: another member,
	// ExecutorInstance, connects first (with its webhooks off) and is the
	// cluster's executor.
	Standby bool
	// HostedIssuer makes saltbush the cluster's OIDC issuer, as a
	// provisioner sets it up (docs/pod-credentials.md): the apiserver issues
	// service-account tokens as https://{façade}/id/{cluster uid}, the
	// cluster records that issuer, and the agent sends the apiserver's keys
	// every KeysInterval (1 s when zero).
	HostedIssuer bool
	KeysInterval time.Duration
	// PodIdentityWebhook turns the agent's pod identity webhook on (on a
	// free loopback port), pointing pods at saltbush's façade.
	PodIdentityWebhook bool
	// Server is a saltbush already running (started with
	// servertest.WithConfig(Timing)) that the cluster joins; a new one
	// when nil.
	Server *servertest.Server
}

// ExecutorInstance is the member that holds the executor role when
// Options.Standby is set.
const ExecutorInstance = "i-0e8ec070000000001"

// World is a running access chain. Stop it when done.
type World struct {
	Server  *servertest.Server
	EKS     *eks.Client
	Account string
	Cluster string
	UID     string
	Region  string
	Kube    *kubetest.Cluster
	Agent   *agentproc.Process
	// Proxy carries the agent's gRPC to saltbush: Partition makes saltbush
	// unreachable for the agent.
	Proxy *netproxy.Proxy
	// Kubectl is the real kubectl's path.
	Kubectl string
	// Dir is a scratch directory for kubeconfigs.
	Dir string
	// Issuer is the cluster's OIDC issuer with Options.HostedIssuer.
	Issuer string
}

// HostedIssuer is the issuer saltbush hosts for the cluster uid behind the
// façade at url (http://host:port in tests; a load balancer terminates
// TLS in front of it in an installation, so the issuer is https).
func HostedIssuer(url, uid string) string {
	return "https://" + strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://") + "/id/" + uid
}

// Timing keeps delivery short, as the agent tests do.
func Timing(c *server.Config) {
	c.Delivery.SessionTTL = 8 * time.Second
	c.Delivery.HeartbeatInterval = time.Second
	c.Delivery.FenceAfter = 4 * time.Second
	c.Delivery.SafetyMargin = 2 * time.Second
}

// Start starts a world named cluster; ctx bounds the start.
func Start(ctx context.Context, tb testing.TB, cluster string, o Options) *World {
	tb.Helper()
	kubectl, err := kubetest.Kubectl()
	if err != nil {
		tb.Fatal(err)
	}
	if o.ReviewTimeout == 0 {
		o.ReviewTimeout = 2 * time.Second
	}
	if o.AuthenticationMode == "" {
		o.AuthenticationMode = "API"
	}
	if o.KeysInterval == 0 {
		o.KeysInterval = time.Second
	}
	w := &World{Server: o.Server, Cluster: cluster, Kubectl: kubectl, Dir: tb.TempDir()}
	if w.Server == nil {
		w.Server = servertest.Start(tb, servertest.WithConfig(Timing))
	}
	w.EKS, w.Account, w.Region = w.Server.EKS(tb), w.Server.Config.DevAccount, w.Server.Config.Cluster.Region
	if _, err := w.EKS.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(cluster), RoleArn: aws.String("arn:aws:iam::" + w.Account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationMode(o.AuthenticationMode)},
	}); err != nil {
		tb.Fatalf("CreateCluster: %v", err)
	}
	cc := controlv1.NewClusterControlServiceClient(w.Server.GRPC(tb))
	ref := &controlv1.ClusterRef{AccountId: w.Account, Name: cluster}
	out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: Instance})
	if err != nil {
		tb.Fatalf("AddMember: %v", err)
	}
	w.UID = out.GetCluster().GetUid()
	if o.Standby {
		if _, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: ExecutorInstance}); err != nil {
			tb.Fatalf("AddMember %s: %v", ExecutorInstance, err)
		}
	}
	w.Proxy = netproxy.Start(tb, w.Server.GRPCAddr())

	// The webhooks' kubeconfigs exist before the apiserver starts, as
	// K3s's ExecStartPre makes them (images/k3s).
	agentDir := tb.TempDir()
	webhookAddr, webhookDir := loopport.Addr(tb), filepath.Join(agentDir, "webhook")
	cmd := exec.CommandContext(ctx, o.AgentBinary, "webhook-config", "--config", filepath.Join(agentDir, "none.yaml"),
		"--state-dir", filepath.Join(agentDir, "state"), "--webhook-addr", webhookAddr, "--webhook-dir", webhookDir)
	if err := os.WriteFile(filepath.Join(agentDir, "none.yaml"), nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	paths, err := cmd.Output()
	if err != nil {
		tb.Fatalf("saltbush-agent webhook-config: %v", err)
	}
	files := strings.Fields(string(paths))
	if len(files) != 2 {
		tb.Fatalf("saltbush-agent webhook-config printed %q, want two paths", paths)
	}
	tokens := filepath.Join(w.Dir, "static-tokens.csv")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("%s,%s,%s,%q\n", StaticToken, StaticUser, "static-uid", StaticGroup)), 0o600); err != nil {
		tb.Fatal(err)
	}
	apiserverArgs := kubetest.WebhookAPIServerArgs
	if o.APIServerUncached {
		apiserverArgs = kubetest.WebhookAPIServerArgsUncached
	}
	kopts := kubetest.Options{ExtraAPIServerArgs: append(apiserverArgs(files[0], files[1]), "--token-auth-file="+tokens)}
	if o.HostedIssuer {
		w.Issuer = HostedIssuer(w.Server.URL, w.UID)
		kopts.ServiceAccountIssuer = w.Issuer
	}
	w.Kube, err = kubetest.Start(ctx, kopts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Kube.Stop)
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: w.Kube.Host(), PlatformVersion: "eks.1", CertificateAuthorityData: base64.StdEncoding.EncodeToString(w.Kube.CACert()),
		OidcIssuer: w.Issuer}); err != nil {
		tb.Fatalf("SetStatus ACTIVE: %v", err)
	}
	if o.Standby {
		executor, err := agentproc.Start(ctx, agentproc.Options{
			Binary: o.AgentBinary, Dir: tb.TempDir(), Server: w.Server,
			Account: w.Account, Cluster: cluster, UID: w.UID, Instance: ExecutorInstance, Endpoints: []string{w.Server.GRPCAddr()},
			Kubeconfig: w.Kube.UserKubeconfig("saltbush-agent-executor", "system:masters"),
		})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(executor.Stop)
		waitStatus(ctx, tb, executor, func(st agent.Status) bool { return st.Role == "EXECUTOR" })
	}
	w.Agent, err = agentproc.Start(ctx, agentproc.Options{
		Binary: o.AgentBinary, Dir: agentDir, Server: w.Server,
		Account: w.Account, Cluster: cluster, UID: w.UID, Instance: Instance, Endpoints: []string{w.Proxy.Addr()},
		Kubeconfig: w.Kube.UserKubeconfig("saltbush-agent", "system:masters"),
		Args: append([]string{"--webhook-addr", webhookAddr, "--webhook-dir", webhookDir,
			"--review-cache-ttl", o.CacheTTL.String(), "--review-negative-cache-ttl", o.NegativeCacheTTL.String(),
			"--review-timeout", o.ReviewTimeout.String(), "--service-account-keys-interval", o.KeysInterval.String()}, podWebhookArgs(o, w)...),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.Agent.Stop()
		if tb.Failed() {
			log := w.Agent.Log()
			if len(log) > 20000 {
				log = log[len(log)-20000:]
			}
			tb.Logf("agent log (end):\n%s", log)
		}
	})
	w.WaitConnected(ctx, tb)
	return w
}

// podWebhookArgs are the agent's pod identity webhook flags.
func podWebhookArgs(o Options, w *World) []string {
	if !o.PodIdentityWebhook {
		return nil
	}
	return []string{"--pod-identity-webhook-addr", "127.0.0.1:0", "--pod-credentials-endpoint", w.Server.URL, "--region", w.Region}
}

// WaitConnected waits until the agent holds a stream to saltbush.
func (w *World) WaitConnected(ctx context.Context, tb testing.TB) {
	tb.Helper()
	waitStatus(ctx, tb, w.Agent, func(st agent.Status) bool { return st.Connected })
}

// waitStatus polls an agent's status until ok holds.
func waitStatus(ctx context.Context, tb testing.TB, p *agentproc.Process, ok func(agent.Status) bool) {
	tb.Helper()
	for {
		st, err := p.Status(ctx)
		if err == nil && ok(st) {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("agent %s: %v (status %+v, error %v)\n%s", p.Instance, ctx.Err(), st, err, p.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TokenKubeconfig writes a kubeconfig for the cluster's apiserver whose
// user presents token, and returns its path.
func (w *World) TokenKubeconfig(tb testing.TB, name, token string) string {
	tb.Helper()
	path := filepath.Join(w.Dir, name+".kubeconfig")
	ca := base64.StdEncoding.EncodeToString(w.Kube.CACert())
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: u
  user:
    token: %s
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, w.Kube.Host(), ca, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Result is one kubectl run.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// Forbidden reports whether kubectl was refused by authorization.
func (r Result) Forbidden() bool {
	return r.Err != nil && strings.Contains(strings.ToLower(r.Stderr), "forbidden")
}

// Unauthorized reports whether kubectl was refused by authentication.
func (r Result) Unauthorized() bool {
	return r.Err != nil && (strings.Contains(r.Stderr, "Unauthorized") || strings.Contains(r.Stderr, "provide credentials"))
}

// Run runs kubectl with kubeconfig; env is added to the test's own.
func (w *World) Run(ctx context.Context, kubeconfig string, env []string, args ...string) Result {
	cmd := exec.CommandContext(ctx, w.Kubectl, append([]string{"--kubeconfig", kubeconfig, "--request-timeout", "30s"}, args...)...)
	cmd.Env = Env(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// Env is the test's environment without AWS_ variables or KUBECONFIG
// (a developer's own must not leak into a test), plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// WaitPodWebhook waits until the executor has configured the pod identity
// webhook and the apiserver's calls reach it: a pod of probeSA (a service
// account annotated for IRSA) comes out mutated. Pods made before are
// admitted unmutated (the failure policy is Ignore), so each try deletes
// its pod.
func WaitPodWebhook(ctx context.Context, tb testing.TB, kube kubernetes.Interface, ns, probeSA string) {
	tb.Helper()
	for i := 0; ; i++ {
		p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-probe-"},
			Spec:       corev1.PodSpec{ServiceAccountName: probeSA, Containers: []corev1.Container{{Name: "c", Image: "saltbush/probe:test"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		_ = kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if slices.ContainsFunc(p.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "AWS_ROLE_ARN" }) {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("the pod identity webhook never mutated a pod (%d tries)", i+1)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
