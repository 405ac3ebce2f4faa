// Package health tells whether an add-on's objects are what they should
// be: every object of the generation present and Current by kstatus (the
// readiness rule of cli-utils, which Flux and kubectl's wait share), made
// stricter where kstatus calls an object Current that does not work yet
// (rules.go: an APIService the aggregator cannot reach, a webhook whose
// Service has no ready endpoint), and, when a workload is not, why — a pod
// in image-pull or crash-loop back-off, a ReplicaSet that cannot create
// pods.
//
// It keeps informer caches (watches, no polling) of every object the
// add-ons applied, selected by their add-on label, of the pods in the
// namespaces their workloads run in, and of the EndpointSlices in the
// namespaces of the Services their webhooks call, trimmed to what these
// checks read so that an idle agent holds little. Every change is passed
// on, so the agent re-applies an object someone changed (drift) and
// re-evaluates health.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/inventory"
)

// Change is what happened to a watched object.
type Change int

const (
	// Status means only what the cluster reports about the object changed (or
	// it was first seen): evaluate health again.
	Status Change = iota
	// Spec means the object itself changed (a new generation, other labels,
	// or, for kinds without generations, any change): re-apply.
	Spec
	// Gone means the object was deleted.
	Gone
)

// Notify is told of changes; addon is the object's add-on label ("" for
// pods and EndpointSlices, which may matter to any add-on). It is called
// from informer goroutines and must not block.
type Notify func(addon string, c Change)

// Watcher holds the caches. Its methods are safe for concurrent use.
type Watcher struct {
	dyn    dynamic.Interface
	kube   kubernetes.Interface
	mapper meta.RESTMapper
	label  string
	notify Notify
	log    *slog.Logger

	mu        sync.Mutex
	stop      chan struct{}
	objects   dynamicinformer.DynamicSharedInformerFactory
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	pods      map[string]cache.SharedIndexInformer
	slices    map[string]cache.SharedIndexInformer // EndpointSlices, by namespace
}

// New returns a watcher of objects carrying label (any value). Start
// nothing until Ensure names what to watch.
func New(dyn dynamic.Interface, kube kubernetes.Interface, mapper meta.RESTMapper, label string, notify Notify, log *slog.Logger) *Watcher {
	w := &Watcher{dyn: dyn, kube: kube, mapper: mapper, label: label, notify: notify, log: log,
		stop: make(chan struct{}), informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		pods: map[string]cache.SharedIndexInformer{}, slices: map[string]cache.SharedIndexInformer{}}
	w.objects = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = label
	})
	return w
}

// Stop ends every watch.
func (w *Watcher) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.objects.Shutdown()
}

// Ensure watches every kind refs name (and the pods of the namespaces of
// their workloads, and the EndpointSlices of the namespaces of the
// Services their webhook configurations call) and waits, bounded by ctx,
// until those caches have listed. A kind the cluster does not serve is
// skipped (its objects then read as missing).
func (w *Watcher) Ensure(ctx context.Context, refs []inventory.Ref) error {
	var waits []cache.InformerSynced
	w.mu.Lock()
	for _, r := range refs {
		m, err := w.mapper.RESTMapping(r.GVK().GroupKind(), r.Version)
		if err != nil {
			continue
		}
		if _, ok := w.informers[m.Resource]; !ok {
			inf := w.objects.ForResource(m.Resource).Informer()
			_ = inf.SetTransform(trim)
			_, _ = inf.AddEventHandler(w.handler())
			w.informers[m.Resource] = inf
			go inf.Run(w.stop)
		}
		waits = append(waits, w.informers[m.Resource].HasSynced)
		if workload(r.GVK().GroupKind()) && r.Namespace != "" {
			if _, ok := w.pods[r.Namespace]; !ok {
				f := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithNamespace(r.Namespace),
					informers.WithTransform(trimPod))
				inf := f.Core().V1().Pods().Informer()
				_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
					AddFunc:    func(any) { w.notify("", Status) },
					UpdateFunc: func(any, any) { w.notify("", Status) },
					DeleteFunc: func(any) { w.notify("", Status) },
				})
				w.pods[r.Namespace] = inf
				go inf.Run(w.stop)
			}
			waits = append(waits, w.pods[r.Namespace].HasSynced)
		}
	}
	w.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), waits...) {
		return fmt.Errorf("health: watches did not list before %w", ctx.Err())
	}
	// Which Services a webhook configuration calls is in the configuration
	// itself, readable only now that its cache has listed. One not applied
	// yet is read on a later Ensure: its creation is a change the agent is
	// told of, and its webhooks read as not watched until then.
	waits = nil
	for _, r := range refs {
		if !webhookConfiguration(r.GVK().GroupKind()) {
			continue
		}
		u, _ := w.get(r)
		if u == nil {
			continue
		}
		for _, h := range webhooks(u) {
			if h.URL == "" && h.Service.Namespace != "" {
				waits = append(waits, w.watchSlices(h.Service.Namespace))
			}
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), waits...) {
		return fmt.Errorf("health: EndpointSlice watches did not list before %w", ctx.Err())
	}
	return nil
}

// watchSlices watches the EndpointSlices of a namespace, if nothing does
// yet, and tells of every change to them (a webhook's endpoint became
// ready or went).
func (w *Watcher) watchSlices(namespace string) cache.InformerSynced {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inf, ok := w.slices[namespace]; ok {
		return inf.HasSynced
	}
	// Only slices that belong to a Service: no other can be a webhook's.
	f := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithNamespace(namespace),
		informers.WithTransform(trimEndpointSlice), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName
		}))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify("", Status) },
		UpdateFunc: func(any, any) { w.notify("", Status) },
		DeleteFunc: func(any) { w.notify("", Status) },
	})
	w.slices[namespace] = inf
	go inf.Run(w.stop)
	return inf.HasSynced
}

// endpointsReady is the endpointLookup of the watched EndpointSlices.
func (w *Watcher) endpointsReady(namespace, name string) (ready, watched bool) {
	w.mu.Lock()
	inf := w.slices[namespace]
	w.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return false, false
	}
	return hasReadyEndpoint(inf.GetStore().List(), name), true
}

func (w *Watcher) handler() cache.ResourceEventHandler {
	addonOf := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return u.GetLabels()[w.label]
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.notify(addonOf(obj), Status) },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*unstructured.Unstructured), newObj.(*unstructured.Unstructured)
			change := Status
			if specChanged(o, n) {
				change = Spec
			}
			w.notify(addonOf(n), change)
		},
		DeleteFunc: func(obj any) { w.notify(addonOf(obj), Gone) },
	}
}

// specChanged reports whether an update changed the object rather than
// only its status: a new generation, or other labels or annotations. A
// kind without generations (ConfigMaps, RBAC) changed unless only its
// status did: what the cache trimmed away (data, rules) may be what moved.
func specChanged(o, n *unstructured.Unstructured) bool {
	if n.GetGeneration() != 0 {
		return o.GetGeneration() != n.GetGeneration() || !maps(o.GetLabels(), n.GetLabels()) ||
			!maps(o.GetAnnotations(), n.GetAnnotations())
	}
	if o.GetResourceVersion() == n.GetResourceVersion() {
		return false // a resync
	}
	statusOnly := !reflect.DeepEqual(o.Object["status"], n.Object["status"])
	if statusOnly {
		oc, nc := o.DeepCopy(), n.DeepCopy()
		for _, u := range []*unstructured.Unstructured{oc, nc} {
			delete(u.Object, "status")
			unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
		}
		statusOnly = reflect.DeepEqual(oc.Object, nc.Object)
	}
	return !statusOnly
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// Result is an add-on's health now.
type Result struct {
	// Ready: every object is there and Current.
	Ready bool
	// Missing are objects that are not there.
	Missing []inventory.Ref
	// Failing are definite failures: an object kstatus (or rules.go) calls
	// Failed, a pod in back-off, a workload that cannot create its pods.
	Failing []*deliveryv1.Issue
	// Waiting says what is not ready yet, and why.
	Waiting []*deliveryv1.Issue
}

// Evaluate judges the objects refs name from the caches (Ensure them
// first). An object whose kind is not watched or not listed yet counts as
// not ready, and so does one whose cached generation is older than
// atLeast says (by Ref.Key: the generation an apply left it at; the cache
// has not caught up, and the previous spec's pods must not be judged).
func (w *Watcher) Evaluate(refs []inventory.Ref, atLeast map[string]int64) Result {
	res := Result{Ready: true}
	for _, r := range refs {
		u, known := w.get(r)
		if !known {
			res.Ready = false
			res.Waiting = append(res.Waiting, issue("InternalFailure", fmt.Sprintf("%s is not watched yet.", r), r))
			continue
		}
		if u != nil && u.GetGeneration() < atLeast[r.Key()] {
			res.Ready = false
			res.Waiting = append(res.Waiting, issue(codeFor(r), fmt.Sprintf("%s: its watch has not seen the apply yet.", r), r))
			continue
		}
		if u == nil {
			res.Ready = false
			res.Missing = append(res.Missing, r)
			continue
		}
		st, err := objectStatus(u, w.endpointsReady)
		if err != nil {
			res.Ready = false
			res.Waiting = append(res.Waiting, issue("InternalFailure", fmt.Sprintf("%s: status: %v", r, err), r))
			continue
		}
		switch st.Status {
		case status.CurrentStatus:
			continue
		case status.FailedStatus:
			res.Ready = false
			res.Failing = append(res.Failing, issue(codeFor(r), fmt.Sprintf("%s failed: %s", r, st.Message), r))
			continue
		}
		res.Ready = false
		why := fmt.Sprintf("%s is not ready (%s): %s", r, st.Status, st.Message)
		if workload(r.GVK().GroupKind()) {
			if pods := w.podTrouble(u); pods != "" {
				res.Failing = append(res.Failing, issue("InsufficientNumberOfReplicas", why+"; "+pods, r))
				continue
			}
			if c := replicaFailure(u); c != "" {
				res.Failing = append(res.Failing, issue("InsufficientNumberOfReplicas", why+"; "+c, r))
				continue
			}
		}
		res.Waiting = append(res.Waiting, issue(codeFor(r), why, r))
	}
	return res
}

// codeFor is the issue code of an object that is not ready: workloads
// lack replicas; anything else is a resource that is not there yet.
func codeFor(r inventory.Ref) string {
	if workload(r.GVK().GroupKind()) {
		return "InsufficientNumberOfReplicas"
	}
	return "K8sResourceNotFound"
}

func issue(code, msg string, r inventory.Ref) *deliveryv1.Issue {
	id := r.Kind + "/" + r.Name
	if r.Namespace != "" {
		id = r.Kind + "/" + r.Namespace + "/" + r.Name
	}
	return &deliveryv1.Issue{Code: code, Message: msg, ResourceIds: []string{id}}
}

// get returns the cached object (nil: not there); known is false when its
// kind is not watched or not listed yet.
func (w *Watcher) get(r inventory.Ref) (u *unstructured.Unstructured, known bool) {
	m, err := w.mapper.RESTMapping(r.GVK().GroupKind(), r.Version)
	if err != nil {
		return nil, meta.IsNoMatchError(err) // a kind no longer served: the object is gone
	}
	w.mu.Lock()
	inf := w.informers[m.Resource]
	w.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return nil, false
	}
	key := r.Name
	if r.Namespace != "" {
		key = r.Namespace + "/" + r.Name
	}
	obj, exists, err := inf.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, true
	}
	return obj.(*unstructured.Unstructured), true
}

// backOff are container waiting reasons that mean the kubelet tried and
// failed, and will keep failing until something changes.
var backOff = []string{"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CrashLoopBackOff",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// podTrouble describes the first pod of a workload that is in back-off,
// or "".
func (w *Watcher) podTrouble(u *unstructured.Unstructured) string {
	selMap, found, _ := unstructured.NestedMap(u.Object, "spec", "selector")
	if !found {
		return ""
	}
	var ls metav1.LabelSelector
	if err := runtimeConvert(selMap, &ls); err != nil {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || sel.Empty() {
		return ""
	}
	w.mu.Lock()
	inf := w.pods[u.GetNamespace()]
	w.mu.Unlock()
	if inf == nil {
		return ""
	}
	want := map[string]string{}
	for _, c := range templateImages(u) {
		m := c.(map[string]any)
		want[fmt.Sprint(m["name"])] = fmt.Sprint(m["image"])
	}
	var troubles []string
	for _, obj := range inf.GetStore().List() {
		p := obj.(*corev1.Pod)
		if !sel.Matches(labels.Set(p.Labels)) || p.DeletionTimestamp != nil || !currentTemplate(p, want) {
			continue
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if wt := cs.State.Waiting; wt != nil && slices.Contains(backOff, wt.Reason) {
				t := fmt.Sprintf("pod %s container %s is waiting: %s", p.Name, cs.Name, wt.Reason)
				if wt.Message != "" {
					t += " (" + wt.Message + ")"
				}
				troubles = append(troubles, t)
			}
		}
	}
	slices.Sort(troubles)
	if len(troubles) > 3 {
		troubles = append(troubles[:3], fmt.Sprintf("and %d more", len(troubles)-3))
	}
	return strings.Join(troubles, "; ")
}

// currentTemplate reports whether a pod runs the workload's current
// images: during a rollout the previous template's pods (whose failures
// the new generation may be fixing) are still there under the same
// selector. A change that keeps every image leaves old and new pods
// alike here; their failures then count, which errs towards reporting.
func currentTemplate(p *corev1.Pod, want map[string]string) bool {
	if len(want) == 0 {
		return true
	}
	for _, c := range p.Spec.Containers {
		if img, ok := want[c.Name]; ok && img != c.Image {
			return false
		}
	}
	return true
}

// replicaFailure is the message of a workload's ReplicaFailure condition
// (its pods cannot even be created: a missing service account, a quota).
func replicaFailure(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "ReplicaFailure" && m["status"] == "True" {
			return fmt.Sprint(m["message"])
		}
	}
	return ""
}

// workload reports whether objects of gk run pods.
func workload(gk schema.GroupKind) bool {
	switch gk {
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}, schema.GroupKind{Group: "apps", Kind: "DaemonSet"},
		schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, schema.GroupKind{Group: "apps", Kind: "ReplicaSet"},
		schema.GroupKind{Group: "batch", Kind: "Job"}:
		return true
	}
	return false
}
