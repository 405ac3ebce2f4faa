// Package addons_test proves the catalogue's add-ons on a real node
// (tests/nodetest: a real kubelet, containerd, runc and CNI; images built
// from the add-ons' Go modules): saltbush renders and delivers each
// add-on, the real agent applies it to the real control plane, the pods
// really run, and what they are for is checked from inside pods (names
// resolve, Services route, the metrics API answers). The AWS SDK for Go
// drives every add-on; nothing is faked.
//
// The node runs without a kube-proxy of its own, as a K3s server whose
// kube-proxy is disabled for the add-on: Services route only once the
// kube-proxy add-on runs. Tests share the node and run one after another;
// each deletes its add-ons through DeleteAddon and waits until they are
// gone.
package addons_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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
	"github.com/saltbush/saltbush/guest/podwebhook"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/nodetest"
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
	return nodetest.RunTests(m, nodetest.MainOptions{KubeProxy: false, PodCredentials: true})
}

// kubernetesVersion is the saltbush cluster's version: the node's and the
// control plane's (tools/kube pins Kubernetes v1.37.2).
const kubernetesVersion = "1.37"

// failureGrace is the agent's --failure-grace here: how long a new
// generation's pods may be in back-off before the add-on fails (2 minutes
// by default; shorter so a failing add-on fails within the test).
const failureGrace = 15 * time.Second

// kubeProxyConfig is the kube-proxy add-on's configuration on the test
// node: conntrack limits left as they are. The kernel lets only its
// initial network namespace change them, and the node has a namespace of
// its own (kind configures its kube-proxy the same way).
const kubeProxyConfig = `{"conntrack": {"maxPerCore": 0}}`

// env is one test's saltbush: a server, an ACTIVE cluster whose endpoint
// and CA are the real control plane's and whose service range is the
// node's, and its agent.
type env struct {
	t       *testing.T
	node    *nodetest.Env
	k8s     kubernetes.Interface
	srv     *servertest.Server
	eks     *eks.Client
	cluster string
	agent   *agentproc.Process
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, false)
}

// newCredentialsEnv is newEnv whose cluster's service-account issuer
// saltbush hosts (behind the node's front, nodetest.Front), with the
// agent's pod identity webhook pointing pods at saltbush through the
// front.
func newCredentialsEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, true)
}

func newEnvWith(t *testing.T, podCredentials bool) *env {
	t.Helper()
	node := nodetest.Shared(t)
	e := &env{t: t, node: node, k8s: node.Client(t)}
	e.srv = servertest.Start(t)
	e.eks = e.srv.EKS(t)
	e.cluster = fmt.Sprintf("%s-%04x", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), rand.IntN(1<<16))
	if len(e.cluster) > 90 {
		e.cluster = e.cluster[len(e.cluster)-90:]
	}
	account := e.srv.Config.DevAccount
	ctx := e.ctx(30 * time.Second)
	if _, err := e.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(e.cluster), RoleArn: aws.String("arn:aws:iam::" + account + ":role/eks"),
		Version:                 aws.String(kubernetesVersion),
		ResourcesVpcConfig:      &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
		KubernetesNetworkConfig: &types.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: aws.String(nodetest.ServiceCIDR)},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	cc := controlv1.NewClusterControlServiceClient(e.srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: account, Name: e.cluster}
	const instance = "i-0node"
	out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: instance})
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	uid := out.GetCluster().GetUid()
	args := []string{"--failure-grace", failureGrace.String()}
	issuer := ""
	if podCredentials {
		if node.Front == nil {
			t.Fatal("the node has no front: TestMain must set nodetest.MainOptions.PodCredentials")
		}
		if err := node.Front.SetBackend(e.srv.URL); err != nil {
			t.Fatal(err)
		}
		issuer = node.Front.Issuer()
		args = append(args, "--pod-identity-webhook-addr", "127.0.0.1:0", "--pod-credentials-endpoint", node.Front.URL(),
			"--region", e.srv.Config.Cluster.Region, "--service-account-keys-interval", "1s")
		t.Cleanup(e.removePodWebhook)
	}
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: node.Cluster.Host(), PlatformVersion: "eks.1", OidcIssuer: issuer,
		CertificateAuthorityData: base64.StdEncoding.EncodeToString(node.Cluster.CACert())}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	e.agent, err = agentproc.Start(e.ctx(10*time.Second), agentproc.Options{
		Binary: agentBinary, Dir: t.TempDir(), Server: e.srv,
		Account: account, Cluster: e.cluster, UID: uid, Instance: instance, Endpoints: []string{e.srv.GRPCAddr()},
		Kubeconfig: node.Cluster.UserKubeconfig("agent:"+e.cluster, "system:masters"),
		Args:       args,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cleanup)
	return e
}

// removePodWebhook takes the pod identity webhook's configuration and CA
// off the shared control plane once the test's agent is gone (cleanups run
// last-registered first: this one after cleanup).
func (e *env) removePodWebhook() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = e.k8s.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, podwebhook.ConfigurationName, metav1.DeleteOptions{})
	_ = e.k8s.CoreV1().Secrets(podwebhook.CASecretNamespace).Delete(ctx, podwebhook.CASecretName, metav1.DeleteOptions{})
}

// cleanup deletes what add-ons the test left through DeleteAddon, waits
// until they are gone, then stops the agent (logging it if the test
// failed).
func (e *env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	list, err := e.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(e.cluster)})
	if err != nil {
		e.t.Errorf("cleanup: ListAddons: %v", err)
	}
	for _, name := range list.Addons {
		e.deleteAddon(ctx, name)
	}
	e.agent.Stop()
	if e.t.Failed() || os.Getenv("SALTBUSH_TEST_AGENT_LOG") != "" {
		b := e.agent.Log()
		if len(b) > 20000 {
			b = b[len(b)-20000:]
		}
		e.t.Logf("agent log (end):\n%s", b)
	}
}

// ctx is a context for one step of the test, cancelled when it ends.
func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// createAddon creates an add-on (version "" is the cluster's default).
func (e *env) createAddon(ctx context.Context, name, version, config string) {
	e.t.Helper()
	in := &eks.CreateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)}
	if version != "" {
		in.AddonVersion = aws.String(version)
	}
	if config != "" {
		in.ConfigurationValues = aws.String(config)
	}
	if _, err := e.eks.CreateAddon(ctx, in); err != nil {
		e.t.Fatalf("CreateAddon %s: %v", name, err)
	}
}

// waitActive waits with the SDK's waiter until the add-on is ACTIVE (it
// fails on CREATE_FAILED and DEGRADED).
func (e *env) waitActive(ctx context.Context, name string) *types.Addon {
	e.t.Helper()
	w := eks.NewAddonActiveWaiter(e.eks, func(o *eks.AddonActiveWaiterOptions) {
		o.MinDelay, o.MaxDelay = 500*time.Millisecond, 2*time.Second
	})
	deadline, _ := ctx.Deadline()
	out, err := w.WaitForOutput(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)}, time.Until(deadline))
	if err != nil {
		e.t.Fatalf("add-on %s not ACTIVE: %v%s", name, err, e.describe(name))
	}
	return out.Addon
}

// waitStatus polls DescribeAddon until the add-on's status is one of
// want; it returns the add-on.
func (e *env) waitStatus(ctx context.Context, name string, want ...types.AddonStatus) *types.Addon {
	e.t.Helper()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var last *types.Addon
	for {
		out, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
		if err == nil {
			last = out.Addon
			if slices.Contains(want, last.Status) {
				return last
			}
		}
		select {
		case <-ctx.Done():
			status := "unknown"
			if last != nil {
				status = string(last.Status)
			}
			e.t.Fatalf("add-on %s never %v (last %s): %v%s", name, want, status, ctx.Err(), e.describe(name))
		case <-tick.C:
		}
	}
}

// podLogs is the end of the logs of the pods in namespace matching
// selector, for a failure message: what the add-on's programs said.
func (e *env) podLogs(namespace, selector string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.k8s.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "\n(pods " + selector + ": " + err.Error() + ")"
	}
	var b strings.Builder
	tail := int64(40)
	for _, p := range l.Items {
		for _, c := range p.Spec.Containers {
			logs, err := e.k8s.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				logs = []byte(err.Error())
			}
			fmt.Fprintf(&b, "\nlog of %s/%s container %s (%s):\n%s", namespace, p.Name, c.Name, p.Status.Phase, logs)
		}
	}
	return b.String()
}

// describe is the add-on's status and health for a failure message.
func (e *env) describe(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
	if err != nil {
		return "; DescribeAddon: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; status %s", out.Addon.Status)
	if out.Addon.Health != nil {
		for _, is := range out.Addon.Health.Issues {
			fmt.Fprintf(&b, "; issue %s: %s %v", is.Code, aws.ToString(is.Message), is.ResourceIds)
		}
	}
	return b.String()
}

// deleteAddon deletes an add-on and waits until DescribeAddon no longer
// finds it.
func (e *env) deleteAddon(ctx context.Context, name string) {
	e.t.Helper()
	_, err := e.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return
	}
	if err != nil {
		e.t.Errorf("DeleteAddon %s: %v", name, err)
		return
	}
	w := eks.NewAddonDeletedWaiter(e.eks, func(o *eks.AddonDeletedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 500*time.Millisecond, 2*time.Second
	})
	deadline, _ := ctx.Deadline()
	if err := w.Wait(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)}, time.Until(deadline)); err != nil {
		e.t.Errorf("add-on %s not deleted: %v%s", name, err, e.describe(name))
	}
}

// pods are the running or pending pods of namespace matching selector.
func (e *env) pods(ctx context.Context, namespace, selector string) []corev1.Pod {
	e.t.Helper()
	l, err := e.k8s.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		e.t.Fatalf("list pods %s in %s: %v", selector, namespace, err)
	}
	return l.Items
}
