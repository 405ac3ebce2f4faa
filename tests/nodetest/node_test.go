package nodetest_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/nodetest"
)

// The node's own tests run it with its own kube-proxy, as a node whose
// Services work before any add-on. Each test here works in a namespace of
// its own on the shared node and calls t.Parallel: most of a test's time
// is spent waiting for pods. TestKubeletDoubleAgrees stays serial, so it
// runs first: it compares the events of a first pull of the probe image,
// which a test before it would have pulled already.
func TestMain(m *testing.M) { nodetest.Main(m, nodetest.MainOptions{KubeProxy: true}) }

// TestServiceReachableFromPod: a Deployment's pods run on the real node,
// and another pod reaches them through a ClusterIP Service (kube-proxy's
// rules), the kubernetes Service (the apiserver on the host) too.
func TestServiceReachableFromPod(t *testing.T) {
	t.Parallel()
	env := nodetest.Shared(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	ip := env.WebService(ctx, t, ns)
	phase, out := env.RunPod(ctx, t, ns, nodetest.ProbePod("get", "get", "http://"+ip+"/"))
	if phase != corev1.PodSucceeded || !strings.HasPrefix(strings.TrimSpace(out), "web-") {
		t.Fatalf("GET the Service's cluster IP from a pod: phase %s, output %q", phase, out)
	}
	// The kubernetes Service's cluster IP leads to the apiserver on the
	// host: its certificate (of a CA the probe does not trust) is the
	// proof the connection got there.
	phase, out = env.RunPod(ctx, t, ns, nodetest.ProbePod("apiserver", "get", "https://"+kubetest.KubernetesServiceIP+"/"))
	if phase != corev1.PodFailed || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Fatalf("GET the kubernetes Service from a pod: phase %s, output %q", phase, out)
	}
}

// TestImageNotServed: an image the node's registry does not have fails
// to pull at once (the registry answers, nothing leaves the machine), and
// the real kubelet reports ErrImagePull, then ImagePullBackOff.
func TestImageNotServed(t *testing.T) {
	t.Parallel()
	env := nodetest.Shared(t)
	k := env.Client(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := nodetest.ProbePod("absent")
	pod.Spec.Containers[0].Image = "saltbush/absent:1.0"
	if _, err := k.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var reason, message string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := k.CoreV1().Pods(ns).Get(ctx, "absent", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false, nil
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		reason, message = w.Reason, w.Message
		return reason == "ImagePullBackOff", nil
	})
	if err != nil {
		t.Fatalf("pod never in ImagePullBackOff (last %s: %s): %v", reason, message, err)
	}
	if !strings.Contains(message, "saltbush/absent:1.0") {
		t.Errorf("back-off message %q does not name the image", message)
	}
}

// TestKubectlLogsAndExec: the apiserver reaches the kubelet (its client
// certificate, the kubelet's webhook authorization), as kubectl users
// expect.
func TestKubectlLogsAndExec(t *testing.T) {
	t.Parallel()
	env := nodetest.Shared(t)
	k := env.Client(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	phase, out := env.RunPod(ctx, t, ns, nodetest.ProbePod("lookup", "lookup", "localhost"))
	if phase != corev1.PodSucceeded || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("lookup localhost: phase %s, output %q", phase, out)
	}
	kubectl, err := kubetest.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", env.Cluster.AdminKubeconfig(), "-n", ns}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v: %s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	if out := run("logs", "lookup"); !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("kubectl logs: %q", out)
	}
	sleeper := nodetest.ProbePod("sleeper", "sleep")
	if _, err := k.CoreV1().Pods(ns).Create(ctx, sleeper, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=90s")
	if out := run("exec", "sleeper", "--", "/probe", "lookup", "localhost"); !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("kubectl exec: %q", out)
	}
}
