package addons_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saltbush/saltbush/tests/nodetest"
)

// TestKubeProxyAddonRoutesServices: on a node without a kube-proxy of its
// own, a ClusterIP Service leads nowhere; once the kube-proxy add-on is
// ACTIVE (its pods reach the apiserver at the cluster's real endpoint,
// not through the Service they are to set up), a pod reaches the Service.
func TestKubeProxyAddonRoutesServices(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx(4 * time.Minute)
	ns := e.node.Namespace(t)
	ip := e.node.WebService(ctx, t, ns)

	phase, out := e.node.RunPod(ctx, t, ns, nodetest.ProbePod("before", "get", "http://"+ip+"/"))
	if phase != corev1.PodFailed {
		t.Fatalf("without kube-proxy the Service %s answered: phase %s, %q", ip, phase, out)
	}

	e.createAddon(ctx, "kube-proxy", "", kubeProxyConfig)
	a := e.waitActive(ctx, "kube-proxy")
	t.Logf("kube-proxy %s ACTIVE", *a.AddonVersion)
	// ACTIVE means the DaemonSet's pod runs; its first sync of the rules
	// may follow a moment later, so the pod retries (bounded).
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last string
	n := 0
	err := wait.PollUntilContextCancel(pctx, time.Second, true, func(context.Context) (bool, error) {
		n++
		phase, out := e.node.RunPod(ctx, t, ns, nodetest.ProbePod(podName("after", n), "get", "http://"+ip+"/"))
		last = string(phase) + " " + out
		return phase == corev1.PodSucceeded && strings.HasPrefix(strings.TrimSpace(out), "web-"), nil
	})
	if err != nil {
		t.Fatalf("the Service %s never answered through the kube-proxy add-on (last: %s): %v%s%s", ip, last, err, e.describe("kube-proxy"),
			e.podLogs("kube-system", "k8s-app=kube-proxy"))
	}
}
