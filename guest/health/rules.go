package health

import (
	"fmt"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What kstatus decides for each kind the catalogue ships, and what the
// agent adds. kstatus looks first, for every kind, at a deletion in
// progress (Terminating), a status.observedGeneration behind
// metadata.generation (InProgress) and Reconciling/Stalled conditions;
// then at the kind's own rule:
//
//   - Deployment, DaemonSet, StatefulSet: replicas updated, ready and
//     available, the controller's conditions. Kept as they are; Evaluate
//     only adds why (pods in back-off, ReplicaFailure).
//   - Service: Current at once, except a LoadBalancer Service without a
//     cluster IP, which the apiserver always allocates for that type; a
//     LoadBalancer Service waiting for its ingress is therefore Current.
//     Kept: a saltbush cluster may have nothing that provisions load
//     balancers (the aws-load-balancer-controller add-on may come later or
//     never), and the add-on (Argo CD's server, when configured so) serves
//     in the cluster whether or not one exists; requiring an ingress would
//     fail it at the ready timeout for what is not the add-on's doing.
//   - PodDisruptionBudget: Current once its status.observedGeneration is
//     current. Kept: its DisruptionAllowed condition is False whenever no
//     pod may be evicted (one of CoreDNS's two pods down, under its
//     maxUnavailable of one; or, for good, replicas equal to a
//     minAvailable), which is the policy at work, not an add-on failing.
//   - ConfigMap, Secret: always Current. Namespace: Current (Terminating
//     while it is deleted). ServiceAccount, ClusterRole(Binding),
//     Role(Binding), CSIDriver, IngressClass have no status: Current.
//   - CustomResourceDefinition: Current on Established=True, Failed on
//     NamesAccepted=False or Established=False for any reason but
//     Installing, else InProgress. But it returns at the first of those
//     conditions it meets, so an established CRD whose new names conflict
//     (the apiextensions server never resets Established) is Current when
//     Established comes first in the list: crdStatus.
//   - APIService: no rule, and no Ready condition, so always Current, even
//     while the aggregator cannot reach the add-on's server:
//     apiServiceStatus.
//   - Mutating/ValidatingWebhookConfiguration: no status, so always
//     Current, even while the apiserver has nowhere to send a request and
//     every write the webhook intercepts fails: webhookStatus.

// endpointLookup tells whether the Service namespace/name has a ready
// endpoint; watched is false while the EndpointSlices of its namespace are
// not watched or not listed yet.
type endpointLookup func(namespace, name string) (ready, watched bool)

var (
	apiServiceKind = schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}
	crdKind        = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// webhookConfiguration reports whether gk is a kind of admission webhook
// configuration.
func webhookConfiguration(gk schema.GroupKind) bool {
	return gk == schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"} ||
		gk == schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}
}

// objectStatus is an object's readiness: kstatus's, made stricter for the
// kinds above that kstatus calls Current too early. The agent's rules only
// look at what kstatus calls Current, so kstatus's own verdicts (deletion,
// stale generations, Failed) stand, and nothing is ever less strict than
// kstatus.
func objectStatus(u *unstructured.Unstructured, endpoints endpointLookup) (*status.Result, error) {
	res, err := status.Compute(u)
	if err != nil || res.Status != status.CurrentStatus {
		return res, err
	}
	gk := u.GroupVersionKind().GroupKind()
	switch {
	case gk == apiServiceKind:
		return apiServiceStatus(u), nil
	case gk == crdKind:
		return crdStatus(u), nil
	case webhookConfiguration(gk):
		return webhookStatus(u, endpoints), nil
	}
	return res, nil
}

// apiServiceStatus: an APIService serves only while the aggregator's
// availability check passes, its Available condition True. A local
// APIService (no spec.service: a built-in group) is made Available by the
// apiserver on create, so it needs no rule of its own.
//
// Not Available is InProgress (Waiting), whatever the reason and however
// long it lasts. Every reason the aggregator gives (ServiceNotFound,
// ServicePortError, EndpointsNotFound, MissingEndpoints,
// FailedDiscoveryCheck, and Unknown for errors of its own) describes the
// moment: the Service, its pods or the network may still come, and it
// checks again. What is definite lies in the add-on's workload (pods in
// back-off, which Evaluate reports as Failing for the Deployment itself),
// and an APIService that stays unavailable fails a new generation at the
// ready timeout, or makes a ready one DEGRADED, without a rule here.
func apiServiceStatus(u *unstructured.Unstructured) *status.Result {
	c, found := condition(u, "Available")
	switch {
	case !found:
		return inProgress("the aggregator has not checked it yet (no Available condition)")
	case c.Status != "True":
		return inProgress(describe(c))
	}
	return &status.Result{Status: status.CurrentStatus, Message: describe(c)}
}

// crdStatus: a CRD is served once Established, and serves the names it was
// given only while NamesAccepted is not False. Established is never reset,
// so a CRD whose names a new generation made conflict stays Established;
// its NamesAccepted=False is a definite failure (another CRD holds the
// names) that only a new spec resolves, whatever order the conditions
// come in.
func crdStatus(u *unstructured.Unstructured) *status.Result {
	if c, found := condition(u, "NamesAccepted"); found && c.Status == "False" {
		return &status.Result{Status: status.FailedStatus, Message: describe(c)}
	}
	c, found := condition(u, "Established")
	switch {
	case !found:
		return inProgress("no Established condition yet")
	case c.Status != "True":
		return inProgress(describe(c))
	}
	return &status.Result{Status: status.CurrentStatus, Message: describe(c)}
}

// webhookStatus: the apiserver calls a webhook's Service at one of its
// ready endpoints; with none, every request the webhook intercepts fails
// (failurePolicy Fail) or goes unchecked (Ignore). A webhook called by URL
// has nothing the cluster can tell about, and counts as ready.
//
// Not ready is InProgress (Waiting), as for an APIService: the pods
// behind the Service are the add-on's workload, whose failures Evaluate
// reports on the workload itself.
func webhookStatus(u *unstructured.Unstructured, endpoints endpointLookup) *status.Result {
	var why []string
	for _, h := range webhooks(u) {
		switch {
		case h.URL != "":
			continue
		case h.Service.Name == "":
			why = append(why, fmt.Sprintf("webhook %s names neither a Service nor a URL", h.Name))
		default:
			ready, watched := endpoints(h.Service.Namespace, h.Service.Name)
			if !watched {
				why = append(why, fmt.Sprintf("webhook %s: the endpoints of Service %s/%s are not watched yet",
					h.Name, h.Service.Namespace, h.Service.Name))
			} else if !ready {
				why = append(why, fmt.Sprintf("webhook %s: Service %s/%s has no ready endpoint",
					h.Name, h.Service.Namespace, h.Service.Name))
			}
		}
	}
	if len(why) > 0 {
		return inProgress(strings.Join(why, "; "))
	}
	return &status.Result{Status: status.CurrentStatus, Message: "every webhook has a ready endpoint"}
}

// webhook is what webhookStatus reads of one of a configuration's
// webhooks (the same fields in both kinds).
type webhook struct {
	Name    string
	URL     string
	Service struct{ Namespace, Name string }
}

// webhooks are a webhook configuration's webhooks.
func webhooks(u *unstructured.Unstructured) []webhook {
	list, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
	out := make([]webhook, 0, len(list))
	for _, item := range list {
		m, _ := item.(map[string]any)
		var h webhook
		h.Name, _, _ = unstructured.NestedString(m, "name")
		h.URL, _, _ = unstructured.NestedString(m, "clientConfig", "url")
		h.Service.Namespace, _, _ = unstructured.NestedString(m, "clientConfig", "service", "namespace")
		h.Service.Name, _, _ = unstructured.NestedString(m, "clientConfig", "service", "name")
		out = append(out, h)
	}
	return out
}

// hasReadyEndpoint reports whether any of slices (EndpointSlices of one
// namespace, as the informer store lists them) belongs to service and has
// a ready endpoint. A ready condition that is not set counts as ready: the
// API says consumers should read it so, and kube-proxy and the
// aggregator's availability check do.
func hasReadyEndpoint(slices []any, service string) bool {
	for _, obj := range slices {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true
			}
		}
	}
	return false
}

// cond is a status condition as the rules read it.
type cond struct{ Type, Status, Reason, Message string }

// condition finds the condition of type t in status.conditions.
func condition(u *unstructured.Unstructured, t string) (cond, bool) {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m["type"] != t {
			continue
		}
		c := cond{Type: t}
		c.Status, _, _ = unstructured.NestedString(m, "status")
		c.Reason, _, _ = unstructured.NestedString(m, "reason")
		c.Message, _, _ = unstructured.NestedString(m, "message")
		return c, true
	}
	return cond{}, false
}

// describe is a condition as issue messages show it:
// "Available=False (MissingEndpoints): endpointslices for …".
func describe(c cond) string {
	s := c.Type + "=" + c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

func inProgress(msg string) *status.Result {
	return &status.Result{Status: status.InProgressStatus, Message: msg}
}
