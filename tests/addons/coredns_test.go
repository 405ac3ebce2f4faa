package addons_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/nodetest"
)

// The catalogue's coredns versions, both compatible with the cluster's
// Kubernetes version and both served to the node.
const (
	corednsOld = "v1.11.4-eksbuild.2"
	corednsNew = "v1.12.1-eksbuild.2"
)

// corednsSelector selects the coredns pods (the bundle's pod label).
const corednsSelector = "k8s-app=kube-dns"

// TestCoreDNSResolvesOnRealPods: the coredns add-on's Service sits at the
// cluster DNS address every kubelet gives its pods, so a pod resolves
// the kubernetes Service and a Service of its own namespace by name;
// UpdateAddon to the other version rolls the pods while a pod keeps
// resolving (the failed lookups are counted and reported); and
// configurationValues (replicas, a Corefile with a hosts entry) take
// effect on the running pods.
func TestCoreDNSResolvesOnRealPods(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx(12 * time.Minute)
	ns := e.node.Namespace(t)

	e.createAddon(ctx, "kube-proxy", "", kubeProxyConfig)
	e.createAddon(ctx, "coredns", corednsOld, "")
	e.waitActive(ctx, "kube-proxy")
	e.waitActive(ctx, "coredns")

	svc, err := e.k8s.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != nodetest.ClusterDNS.String() {
		t.Fatalf("kube-dns Service at %s, want the cluster DNS address %s", svc.Spec.ClusterIP, nodetest.ClusterDNS)
	}
	webIP := e.node.WebService(ctx, t, ns)

	// The first lookups may meet kube-proxy's first sync: retried, bounded.
	e.resolves(ctx, ns, "kubernetes.default.svc.cluster.local", kubetest.KubernetesServiceIP)
	e.resolves(ctx, ns, "web", webIP)

	t.Run("update rolls the pods and names keep resolving", func(t *testing.T) {
		loop, err := e.k8s.CoreV1().Pods(ns).Create(ctx, nodetest.ProbePod("lookups", "lookup-loop", "web"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.waitPodRunning(ctx, ns, loop.Name)
		before := podNames(e.pods(ctx, "kube-system", corednsSelector))
		if _, err := e.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("coredns"),
			AddonVersion: aws.String(corednsNew)}); err != nil {
			t.Fatalf("UpdateAddon: %v", err)
		}
		a := e.waitActive(ctx, "coredns")
		if *a.AddonVersion != corednsNew {
			t.Fatalf("ACTIVE at %s, want %s", *a.AddonVersion, corednsNew)
		}
		// ACTIVE: the new pods are ready; the old ones may still be
		// terminating (coredns's lameduck keeps them answering a while).
		after := e.pods(ctx, "kube-system", corednsSelector)
		for _, p := range after {
			if p.DeletionTimestamp != nil {
				continue
			}
			if before[p.Name] {
				t.Errorf("pod %s of the old version is still there after the update", p.Name)
			}
			if img := p.Spec.Containers[0].Image; img != "coredns/coredns:1.12.1" {
				t.Errorf("pod %s runs %s, want coredns/coredns:1.12.1", p.Name, img)
			}
		}
		// Ten more lookups against the new pods, then the count.
		activeAt := time.Now().UTC()
		var logs string
		err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			b, err := e.k8s.CoreV1().Pods(ns).GetLogs(loop.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			logs = string(b)
			return lookupsSince(logs, activeAt) >= 10, nil
		})
		if err != nil {
			t.Fatalf("the lookup loop did not go on after the update: %v\n%s", err, logs)
		}
		if err := e.k8s.CoreV1().Pods(ns).Delete(ctx, loop.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ok, failed := countLookups(logs, webIP)
		t.Logf("lookups of web during the coredns roll %s -> %s: %d answered, %d failed", corednsOld, corednsNew, ok, failed)
		if ok == 0 {
			t.Fatalf("no lookup answered during the roll:\n%s", logs)
		}
	})

	t.Run("configurationValues reach the running pods", func(t *testing.T) {
		corefile := `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    hosts {
        10.96.200.200 saltbush-config.test
        fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
`
		cfg, _ := json.Marshal(map[string]any{"replicaCount": 3, "corefile": corefile})
		if _, err := e.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("coredns"),
			ConfigurationValues: aws.String(string(cfg))}); err != nil {
			t.Fatalf("UpdateAddon configurationValues: %v", err)
		}
		e.waitActive(ctx, "coredns")
		ready := 0
		for _, p := range e.pods(ctx, "kube-system", corednsSelector) {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
		}
		if ready != 3 {
			t.Errorf("%d coredns pods ready, want replicaCount 3", ready)
		}
		// The Corefile is a ConfigMap the pods read; coredns's reload
		// plugin picks the change up within its interval.
		e.resolves(ctx, ns, "saltbush-config.test", "10.96.200.200")
	})
}

// resolves runs lookup pods until one resolves name to want (bounded by
// ctx): the first answers may follow a change by a moment.
func (e *env) resolves(ctx context.Context, ns, name, want string) {
	e.t.Helper()
	var last string
	n := 0
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n++
		pod := nodetest.ProbePod(podName("lookup", n), "lookup", name)
		phase, out := e.node.RunPod(ctx, e.t, ns, pod)
		last = string(phase) + ": " + strings.TrimSpace(out)
		return phase == corev1.PodSucceeded && strings.Contains(out, want), nil
	})
	if err != nil {
		e.t.Fatalf("%s never resolved to %s from a pod (last %s): %v%s", name, want, last, err, e.describe("coredns"))
	}
}

// podName is a pod name unique within a test.
func podName(prefix string, n int) string {
	return prefix + "-" + strings.ReplaceAll(time.Now().Format("150405.000"), ".", "") + "-" + string(rune('a'+n%26))
}

func podNames(pods []corev1.Pod) map[string]bool {
	m := map[string]bool{}
	for _, p := range pods {
		m[p.Name] = true
	}
	return m
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPodRunning waits until the pod's containers run.
func (e *env) waitPodRunning(ctx context.Context, ns, name string) {
	e.t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := e.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s/%s not running: %v", ns, name, err)
	}
}

// countLookups counts the lookup-loop's answered and failed lookups; an
// answer with another address than want counts as failed.
func countLookups(logs, want string) (ok, failed int) {
	for line := range strings.Lines(logs) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		switch {
		case f[1] == "ok" && strings.Contains(f[2], want):
			ok++
		default:
			failed++
		}
	}
	return ok, failed
}

// lookupsSince counts the lookup-loop's lines stamped after t.
func lookupsSince(logs string, t time.Time) int {
	n := 0
	for line := range strings.Lines(logs) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, f[0]); err == nil && at.After(t) {
			n++
		}
	}
	return n
}
