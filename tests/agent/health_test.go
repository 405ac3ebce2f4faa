package agent_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// corednsImage is configuration values that run coredns with image tag
// tag (and one replica).
func corednsImage(tag string) string {
	return fmt.Sprintf(`{"replicaCount": 1, "image": {"tag": %q}}`, tag)
}

// imageBehavior makes the kubelet double treat image so for this test.
func imageBehavior(t *testing.T, image string, b kubetest.Behavior) {
	k := kubetest.Shared(t).Kubelet()
	k.SetImageBehavior(image, b)
	t.Cleanup(func() { k.SetImageBehavior(image, kubetest.Run) })
}

// TestWorkloadNeverAvailable: a generation whose pods cannot pull their
// image fails with InsufficientNumberOfReplicas naming the Deployment and
// the pod's reason (CREATE_FAILED, then UPDATE_FAILED for an update to
// such an image); a good update in between makes it ACTIVE.
func TestWorkloadNeverAvailable(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	imageBehavior(t, "coredns/coredns:no-such-tag", kubetest.ImagePullBackOff)
	e.startAgent("i-a", agentOptions{args: []string{"--failure-grace", "0s"}})

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(corednsImage("no-such-tag"))})
	a := e.waitStatus("coredns", types.AddonStatusCreateFailed)
	if !hasIssue(a, types.AddonIssueCodeInsufficientNumberOfReplicas, "Deployment kube-system/coredns", "ImagePullBackOff") &&
		!hasIssue(a, types.AddonIssueCodeInsufficientNumberOfReplicas, "Deployment kube-system/coredns", "ErrImagePull") {
		t.Fatalf("CREATE_FAILED with issues %s, want InsufficientNumberOfReplicas naming the Deployment and the pull back-off", issuesOf(a))
	}
	// The issue names the object concerned in resourceIds
	// (Kind/namespace/name, guest/apply/issues.go), through the report and
	// storage to DescribeAddon.
	const deployment = "Deployment/kube-system/coredns"
	if ids := a.Health.Issues[0].ResourceIds; !slices.Equal(ids, []string{deployment}) {
		t.Errorf("issue resource ids %v, want [%s]: %s", ids, deployment, issuesOf(a))
	}

	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(corednsImage("1.12.1"))})
	e.waitUpdate("coredns", id, types.UpdateStatusSuccessful)
	e.waitActive("coredns")

	id = e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(corednsImage("no-such-tag"))})
	u := e.waitUpdate("coredns", id, types.UpdateStatusFailed)
	if len(u.Errors) == 0 || u.Errors[0].ErrorCode != types.ErrorCode(types.AddonIssueCodeInsufficientNumberOfReplicas) ||
		!slices.Equal(u.Errors[0].ResourceIds, []string{deployment}) {
		t.Fatalf("failed update's errors %+v, want InsufficientNumberOfReplicas about %s", u.Errors, deployment)
	}
	e.waitStatus("coredns", types.AddonStatusUpdateFailed)
}

// TestDegradedAndRecovered: an ACTIVE add-on whose pods start crashing is
// DEGRADED with a health issue, and ACTIVE again once they run.
func TestDegradedAndRecovered(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	const image = "coredns/coredns:1.12.1-degrade"
	imageBehavior(t, image, kubetest.Run)
	e.startAgent("i-a", agentOptions{})

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(corednsImage("1.12.1-degrade"))})
	e.waitActive("coredns")

	kubetest.Shared(t).Kubelet().SetImageBehavior(image, kubetest.CrashLoopBackOff)
	a := e.waitStatus("coredns", types.AddonStatusDegraded)
	if !hasIssue(a, types.AddonIssueCodeInsufficientNumberOfReplicas, "Deployment kube-system/coredns") {
		t.Fatalf("DEGRADED with issues %s, want InsufficientNumberOfReplicas naming the Deployment", issuesOf(a))
	}

	kubetest.Shared(t).Kubelet().SetImageBehavior(image, kubetest.Run)
	// (The SDK's AddonActive waiter gives up on DEGRADED: poll instead.)
	a = e.waitStatus("coredns", types.AddonStatusActive)
	if a.Health != nil && len(a.Health.Issues) > 0 {
		t.Fatalf("ACTIVE again but with issues %s", issuesOf(a))
	}
}
