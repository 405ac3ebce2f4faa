package agent_test

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/saltbush/saltbush/guest/inventory"
)

// TestAddonLifecycle walks coredns through create, update and delete with
// the SDK and checks the cluster at each step: the Deployment exists with
// the configured replicas under field manager eks, an update with new
// configuration values changes it and the Update turns Successful, and a
// delete removes every object before the AddonDeleted waiter returns.
func TestAddonLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(`{"replicaCount": 1}`)})
	a := e.waitActive("coredns")
	if a.Health != nil && len(a.Health.Issues) > 0 {
		t.Fatalf("ACTIVE with issues %s", issuesOf(a))
	}
	d := e.object(deployments, "kube-system", "coredns")
	if d == nil {
		t.Fatal("ACTIVE, but no Deployment kube-system/coredns")
	}
	if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 1 {
		t.Fatalf("replicas %d, want the configured 1", n)
	}
	if !slices.Contains(managers(d), "eks/Apply") {
		t.Fatalf("field managers %v: want eks applying", managers(d))
	}
	if e.object(configmaps, inventory.Namespace, inventory.Name("coredns")) == nil {
		t.Fatal("no inventory ConfigMap for coredns")
	}

	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
	e.waitUpdate("coredns", id, types.UpdateStatusSuccessful)
	e.waitActive("coredns")
	d = e.object(deployments, "kube-system", "coredns")
	if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 2 {
		t.Fatalf("after the update replicas %d, want 2", n)
	}
	if ready, _, _ := unstructured.NestedInt64(d.Object, "status", "readyReplicas"); ready != 2 {
		t.Fatalf("Successful with %d ready replicas, want 2", ready)
	}

	if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("coredns")}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted("coredns")
	for _, o := range []struct {
		what string
		u    *unstructured.Unstructured
	}{
		{"Deployment", e.object(deployments, "kube-system", "coredns")},
		{"ServiceAccount", e.object(serviceaccs, "kube-system", "coredns")},
		{"ConfigMap", e.object(configmaps, "kube-system", "coredns")},
		{"inventory", e.object(configmaps, inventory.Namespace, inventory.Name("coredns"))},
	} {
		if o.u != nil {
			t.Errorf("the add-on was deleted but its %s is still there", o.what)
		}
	}
	if e.object(namespaces, "", "kube-system") == nil {
		t.Fatal("kube-system was deleted with the add-on")
	}
}
