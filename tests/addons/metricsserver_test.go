package addons_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/saltbush/saltbush/tests/kubetest"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// metricsAPI is the APIService metrics-server exists to serve.
const metricsAPI = "v1beta1.metrics.k8s.io"

// TestMetricsServerActiveWhenItsAPIAnswers: the metrics-server add-on is
// CREATING until the metrics API it serves is Available (not merely
// until its Deployment is ready), then ACTIVE; kubectl top answers for
// the node and for pods.
func TestMetricsServerActiveWhenItsAPIAnswers(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx(8 * time.Minute)
	dyn := dynamic.NewForConfigOrDie(e.node.Cluster.Admin())

	// metrics-server reaches the apiserver through the kubernetes Service.
	e.createAddon(ctx, "kube-proxy", "", kubeProxyConfig)
	e.waitActive(ctx, "kube-proxy")
	e.createAddon(ctx, "metrics-server", "", "")

	// Every status the add-on shows is compared with the API's condition
	// read right after it: ACTIVE with the API unavailable is the defect.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	creatingWhileUnavailable := 0
	for {
		out, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("metrics-server")})
		if err != nil {
			t.Fatalf("DescribeAddon: %v", err)
		}
		available, why := apiServiceAvailable(ctx, dyn, metricsAPI)
		status := out.Addon.Status
		if status == types.AddonStatusActive {
			if !available {
				t.Fatalf("metrics-server ACTIVE while %s is not Available: %s", metricsAPI, why)
			}
			break
		}
		if status != types.AddonStatusCreating {
			t.Fatalf("metrics-server %s%s", status, e.describe("metrics-server"))
		}
		if !available {
			creatingWhileUnavailable++
		}
		select {
		case <-ctx.Done():
			t.Fatalf("metrics-server never ACTIVE: %v%s", ctx.Err(), e.describe("metrics-server"))
		case <-tick.C:
		}
	}
	t.Logf("metrics-server was CREATING in %d polls while %s was not Available", creatingWhileUnavailable, metricsAPI)

	// kubectl top needs one scrape of the kubelet first: retried, bounded.
	kubectl, err := kubetest.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"top", "nodes"}, {"top", "pods", "-n", "kube-system"}} {
		var last string
		err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", e.node.Cluster.AdminKubeconfig()}, args...)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			last = out.String()
			return err == nil && strings.Contains(last, "CPU"), nil
		})
		if err != nil {
			t.Fatalf("kubectl %s never answered (last %q): %v", strings.Join(args, " "), last, err)
		}
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), last)
		if args[1] == "nodes" && !strings.Contains(last, e.node.Node.Name()) {
			t.Errorf("kubectl top nodes does not list the node %s", e.node.Node.Name())
		}
		if args[1] == "pods" && !strings.Contains(last, "metrics-server") {
			t.Errorf("kubectl top pods does not list metrics-server's own pod")
		}
	}
}

// apiServiceAvailable reads an APIService's Available condition.
func apiServiceAvailable(ctx context.Context, dyn dynamic.Interface, name string) (bool, string) {
	u, err := dyn.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", strings.TrimSpace(stringOf(m["reason"]) + " " + stringOf(m["message"]))
		}
	}
	return false, "no Available condition"
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}
