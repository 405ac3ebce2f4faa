package addons_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAddonPodsThatCannotRunFail: pods that really cannot run make the
// add-on CREATE_FAILED, with the issue code and resource the real
// kubelet's status points to — an image the node cannot pull (a
// catalogue version whose image was not built for the node) and a
// container that crashes at start (a Corefile coredns refuses).
func TestAddonPodsThatCannotRunFail(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, addon, version, config string
		resource                     string
		reasons                      []string
	}{
		{
			name: "image not on the node", addon: "kube-proxy", version: "v1.34.1-eksbuild.1", config: kubeProxyConfig,
			resource: "DaemonSet/kube-system/kube-proxy", reasons: []string{"ErrImagePull", "ImagePullBackOff"},
		},
		{
			name: "crash loop", addon: "coredns", version: corednsNew,
			config:   `{"corefile": ".:53 {\n    nosuchplugin\n}\n"}`,
			resource: "Deployment/kube-system/coredns", reasons: []string{"CrashLoopBackOff"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := e.ctx(failureGrace + 4*time.Minute)
			e.createAddon(ctx, tc.addon, tc.version, tc.config)
			a := e.waitStatus(ctx, tc.addon, types.AddonStatusCreateFailed, types.AddonStatusActive)
			if a.Status != types.AddonStatusCreateFailed {
				t.Fatalf("%s %s is %s, want CREATE_FAILED", tc.addon, tc.version, a.Status)
			}
			var found bool
			for _, is := range a.Health.Issues {
				msg := ""
				if is.Message != nil {
					msg = *is.Message
				}
				t.Logf("issue %s %v: %s", is.Code, is.ResourceIds, msg)
				if is.Code == types.AddonIssueCodeInsufficientNumberOfReplicas && slices.Contains(is.ResourceIds, tc.resource) &&
					slices.ContainsFunc(tc.reasons, func(r string) bool { return strings.Contains(msg, r) }) {
					found = true
				}
			}
			if !found {
				t.Errorf("no issue InsufficientNumberOfReplicas on %s naming %v", tc.resource, tc.reasons)
			}
			e.deleteAddon(ctx, tc.addon)
		})
	}
}

// TestActiveAddonDegradesWhenItsPodCannotRun: the kube-proxy add-on is
// ACTIVE; then the node loses its image (the registry no longer serves
// it, containerd forgets it, as after image garbage collection) and its
// pod is deleted. The DaemonSet's new pod cannot pull, and from the real
// kubelet's ErrImagePull and ImagePullBackOff the add-on turns DEGRADED,
// naming the DaemonSet. Served again, the image is pulled on the
// kubelet's next try, and the add-on is ACTIVE again, without issues.
func TestActiveAddonDegradesWhenItsPodCannotRun(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx(6 * time.Minute)
	const selector = "k8s-app=kube-proxy"
	e.createAddon(ctx, "kube-proxy", "", kubeProxyConfig)
	e.waitActive(ctx, "kube-proxy")

	ds, err := e.k8s.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	if err := e.node.Node.WithdrawImage(ctx, image); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			if err := e.node.Node.RestoreImage(context.Background(), image); err != nil {
				t.Errorf("serve %s again: %v", image, err)
			}
		}
	})
	for _, p := range e.pods(ctx, "kube-system", selector) {
		if err := e.k8s.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// DEGRADED may first show only the missing replica; the pull's
	// failure follows with the kubelet's next status.
	pulling := func(a *types.Addon) bool {
		if a.Health == nil {
			return false
		}
		for _, is := range a.Health.Issues {
			msg := aws.ToString(is.Message)
			if is.Code == types.AddonIssueCodeInsufficientNumberOfReplicas && slices.Contains(is.ResourceIds, "DaemonSet/kube-system/kube-proxy") &&
				(strings.Contains(msg, "ErrImagePull") || strings.Contains(msg, "ImagePullBackOff")) {
				t.Logf("issue %s %v: %s", is.Code, is.ResourceIds, msg)
				return true
			}
		}
		return false
	}
	for a := e.waitStatus(ctx, "kube-proxy", types.AddonStatusDegraded); !pulling(a); a = e.waitStatus(ctx, "kube-proxy", types.AddonStatusDegraded) {
		select {
		case <-ctx.Done():
			t.Fatalf("DEGRADED without an issue InsufficientNumberOfReplicas on DaemonSet/kube-system/kube-proxy naming the failed pull%s",
				e.describe("kube-proxy"))
		case <-time.After(500 * time.Millisecond): // pacing the next DescribeAddon
		}
	}

	if err := e.node.Node.RestoreImage(ctx, image); err != nil {
		t.Fatal(err)
	}
	restored = true
	// (The SDK's AddonActive waiter gives up on DEGRADED: poll instead.)
	a := e.waitStatus(ctx, "kube-proxy", types.AddonStatusActive)
	if a.Health != nil && len(a.Health.Issues) > 0 {
		t.Fatalf("ACTIVE again, with issues %v", a.Health.Issues)
	}
}
