package health

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// keepSpec are kinds whose readiness kstatus reads from their spec too
// (replica counts, update strategies, a Service's type and cluster IP).
var keepSpec = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "Deployment"}: true, {Group: "apps", Kind: "DaemonSet"}: true,
	{Group: "apps", Kind: "StatefulSet"}: true, {Group: "apps", Kind: "ReplicaSet"}: true,
	{Group: "batch", Kind: "Job"}: true, {Kind: "Service"}: true, {Kind: "PersistentVolumeClaim"}: true,
}

// trim keeps of a watched object what the checks read: its identity,
// labels, annotations, generations, deletion state, owners and status
// (the conditions of APIServices and CRDs among it), the spec only for the
// kinds in keepSpec, and of a webhook configuration whom each webhook
// calls. Managed fields, ConfigMap data, RBAC rules, CRD schemas and CA
// bundles (which can be large) are dropped.
func trim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
	}}
	meta := map[string]any{}
	if m, ok := u.Object["metadata"].(map[string]any); ok {
		for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "generation", "labels",
			"annotations", "deletionTimestamp", "ownerReferences", "finalizers"} {
			if v, ok := m[k]; ok {
				meta[k] = v
			}
		}
	}
	out.Object["metadata"] = meta
	if st, ok := u.Object["status"]; ok {
		out.Object["status"] = st
	}
	if keepSpec[u.GroupVersionKind().GroupKind()] {
		if spec, ok := u.Object["spec"].(map[string]any); ok {
			s := map[string]any{}
			for k, v := range spec {
				if k != "template" { // the pod template is the bulk
					s[k] = v
				}
			}
			// Of the template, only its containers' names and images:
			// they tell the workload's current pods from older ones.
			if images := templateImages(u); len(images) > 0 {
				s["template"] = map[string]any{"spec": map[string]any{"containers": images}}
			}
			out.Object["spec"] = s
		}
	}
	if webhookConfiguration(u.GroupVersionKind().GroupKind()) {
		if hooks := trimWebhooks(u); len(hooks) > 0 {
			out.Object["webhooks"] = hooks
		}
	}
	return out, nil
}

// trimWebhooks keeps of a webhook configuration's webhooks their names and
// what webhookStatus reads of their clientConfig (its URL or Service, not
// its caBundle); rules, selectors and policies are dropped.
func trimWebhooks(u *unstructured.Unstructured) []any {
	hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
	out := make([]any, 0, len(hooks))
	for _, h := range hooks {
		m, _ := h.(map[string]any)
		cc := map[string]any{}
		for _, k := range []string{"url", "service"} {
			if v, ok, _ := unstructured.NestedFieldNoCopy(m, "clientConfig", k); ok {
				cc[k] = v
			}
		}
		out = append(out, map[string]any{"name": m["name"], "clientConfig": cc})
	}
	return out
}

// trimEndpointSlice keeps of an EndpointSlice what hasReadyEndpoint reads:
// its Service label and its endpoints' conditions (not their addresses,
// zones or ports).
func trimEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	endpoints := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
	for _, e := range s.Endpoints {
		endpoints = append(endpoints, discoveryv1.Endpoint{Conditions: e.Conditions})
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Labels: s.Labels, DeletionTimestamp: s.DeletionTimestamp},
		AddressType: s.AddressType,
		Endpoints:   endpoints,
	}, nil
}

// trimPod keeps of a pod what back-off detection reads.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var containers []corev1.Container
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		containers = append(containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp},
		Spec: corev1.PodSpec{Containers: containers},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions,
			InitContainerStatuses: trimStatuses(p.Status.InitContainerStatuses),
			ContainerStatuses:     trimStatuses(p.Status.ContainerStatuses)},
	}, nil
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(in))
	for _, cs := range in {
		out = append(out, corev1.ContainerStatus{Name: cs.Name, Ready: cs.Ready, RestartCount: cs.RestartCount,
			State: cs.State, Image: cs.Image})
	}
	return out
}

func runtimeConvert(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}

// templateImages are a workload's pod template containers (init ones
// too) as {name, image}.
func templateImages(u *unstructured.Unstructured) []any {
	var out []any
	for _, field := range []string{"initContainers", "containers"} {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", field)
		for _, c := range cs {
			m, _ := c.(map[string]any)
			out = append(out, map[string]any{"name": m["name"], "image": m["image"]})
		}
	}
	return out
}
