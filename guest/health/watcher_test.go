package health

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/saltbush/saltbush/guest/inventory"
)

// TestEvaluateFollowsEndpointsAndAvailability runs the watcher on client-go's
// fake clients: Ensure watches the EndpointSlices of the namespace a
// webhook's Service lives in, their change is told, and Evaluate judges the
// webhook configuration and the APIService by the rules (rules_test.go has
// the cases), with the issues' codes and resource ids.
func TestEvaluateFollowsEndpointsAndAvailability(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const label = "addons.saltbush.io/name"
	hooks := parse(t, mutatingWebhooks("webhooks:\n"+serviceHook("mpod.elbv2.k8s.aws", "kube-system", "aws-load-balancer-webhook-service")))
	apis := parse(t, apiService+`status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: endpointslices for service/metrics-server in "kube-system" have no addresses with port name "https"
    reason: MissingEndpoints
    status: "False"
    type: Available
`)
	hooksGVR := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	apisGVR := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.AddSpecific(hooks.GroupVersionKind(), hooksGVR, hooksGVR, meta.RESTScopeRoot)
	mapper.AddSpecific(apis.GroupVersionKind(), apisGVR, apisGVR, meta.RESTScopeRoot)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		hooksGVR: "MutatingWebhookConfigurationList", apisGVR: "APIServiceList"}, hooks.DeepCopy(), apis.DeepCopy())
	kube := kubefake.NewClientset()

	// told receives the add-on of every change; the informers must not
	// block on it, and the test only waits for changes it caused.
	told := make(chan string, 64)
	w := New(dyn, kube, mapper, label, func(addon string, _ Change) {
		select {
		case told <- addon:
		default:
		}
	}, slog.New(slog.DiscardHandler))
	defer w.Stop()
	refs := []inventory.Ref{inventory.RefOf(hooks), inventory.RefOf(apis)}
	if err := w.Ensure(ctx, refs); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-told:
			case <-ctx.Done():
				t.Fatalf("%s: not told before %v", what, ctx.Err())
			}
		}
	}

	res := w.Evaluate(refs, nil)
	wantIssues(t, res, false, map[string]string{
		"MutatingWebhookConfiguration/aws-load-balancer-webhook": "Service kube-system/aws-load-balancer-webhook-service has no ready endpoint",
		"APIService/v1beta1.metrics.k8s.io":                      "Available=False (MissingEndpoints)",
	})

	slice := &discoveryv1.EndpointSlice{}
	if err := yaml.Unmarshal([]byte(endpointSlice("aws-load-balancer-webhook-service", "{ready: true}")), slice); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the EndpointSlice", func() bool { return len(w.Evaluate(refs, nil).Waiting) == 1 })
	wantIssues(t, w.Evaluate(refs, nil), false, map[string]string{
		"APIService/v1beta1.metrics.k8s.io": "Available=False (MissingEndpoints)",
	})

	// The aggregator's check passes.
	if err := unstructured.SetNestedSlice(apis.Object, []any{map[string]any{"type": "Available", "status": "True",
		"reason": "Passed", "message": "all checks passed", "lastTransitionTime": "2025-06-01T10:01:10Z"}},
		"status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(apisGVR).Update(ctx, apis, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the APIService's availability", func() bool { return w.Evaluate(refs, nil).Ready })
	wantIssues(t, w.Evaluate(refs, nil), true, nil)
}

// wantIssues checks an evaluation: ready, nothing missing or failing, and
// one Waiting issue per resource id, coded K8sResourceNotFound, whose
// message holds the text given.
func wantIssues(t *testing.T, res Result, ready bool, waiting map[string]string) {
	t.Helper()
	if res.Ready != ready || len(res.Missing) > 0 || len(res.Failing) > 0 {
		t.Fatalf("Evaluate = ready %v, missing %v, failing %v; want ready %v and nothing missing or failing",
			res.Ready, res.Missing, res.Failing, ready)
	}
	if len(res.Waiting) != len(waiting) {
		t.Fatalf("waiting on %v, want %d issues", res.Waiting, len(waiting))
	}
	for _, is := range res.Waiting {
		want, ok := waiting[strings.Join(is.GetResourceIds(), ",")]
		if !ok || is.GetCode() != "K8sResourceNotFound" || !strings.Contains(is.GetMessage(), want) {
			t.Errorf("issue %s %v %q; want K8sResourceNotFound with %q", is.GetCode(), is.GetResourceIds(), is.GetMessage(), want)
		}
	}
}
