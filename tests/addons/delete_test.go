package addons_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
)

// TestDeleteAddonEndsOnceThePodsAreGone: DeleteAddon stops the add-on's
// running pods on the node, and the add-on disappears (REMOVED) only
// after the last of them is gone — the apiserver forgets a pod only once
// its kubelet has stopped it.
func TestDeleteAddonEndsOnceThePodsAreGone(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx(8 * time.Minute)
	e.createAddon(ctx, "kube-proxy", "", kubeProxyConfig)
	e.createAddon(ctx, "coredns", "", "")
	e.waitActive(ctx, "kube-proxy")
	e.waitActive(ctx, "coredns")
	running := 0
	for _, p := range e.pods(ctx, "kube-system", corednsSelector) {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running == 0 {
		t.Fatal("coredns is ACTIVE with no running pod")
	}
	if _, err := e.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("coredns")}); err != nil {
		t.Fatalf("DeleteAddon: %v", err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	deletingWithPods := 0
	for {
		_, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("coredns")})
		pods := e.pods(ctx, "kube-system", corednsSelector)
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			if len(pods) > 0 {
				t.Fatalf("coredns removed while %d of its pods are still there (%s)", len(pods), pods[0].Name)
			}
			break
		}
		if err != nil {
			t.Fatalf("DescribeAddon: %v", err)
		}
		if len(pods) > 0 {
			deletingWithPods++
		}
		select {
		case <-ctx.Done():
			t.Fatalf("coredns never removed: %v%s", ctx.Err(), e.describe("coredns"))
		case <-tick.C:
		}
	}
	t.Logf("coredns was DELETING in %d polls while its pods were still there (of %d running)", deletingWithPods, running)
}
