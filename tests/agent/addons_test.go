package agent_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/tests/poll"
)

// Bounds of the waits (never timings under test: a busy machine may be
// slow, the outcome must be the same).
//
// waitDeleted is longer: an add-on with CRDs is gone only when the
// kube-apiserver's CRD finalizer has emptied them, and on a saturated
// machine the first attempts can find the new CRD's watch cache still
// initializing ("could not list instances: storage is (re)initializing").
// The finalizer's work queue then backs off exponentially (5 ms doubling,
// up to 1000 s), so a deletion that hit a few such attempts completes
// minutes later, not never.
const (
	waitActive  = 3 * time.Minute
	waitChange  = 3 * time.Minute
	waitDeleted = 8 * time.Minute
)

// createAddon creates an add-on through the SDK.
func (e *env) createAddon(in eks.CreateAddonInput) *types.Addon {
	e.t.Helper()
	in.ClusterName = aws.String(e.cluster)
	out, err := e.eks.CreateAddon(e.ctx(30*time.Second), &in)
	if err != nil {
		e.t.Fatalf("CreateAddon %s: %v", aws.ToString(in.AddonName), err)
	}
	return out.Addon
}

// updateAddon updates an add-on and returns the update's id.
func (e *env) updateAddon(in eks.UpdateAddonInput) string {
	e.t.Helper()
	in.ClusterName = aws.String(e.cluster)
	out, err := e.eks.UpdateAddon(e.ctx(30*time.Second), &in)
	if err != nil {
		e.t.Fatalf("UpdateAddon %s: %v", aws.ToString(in.AddonName), err)
	}
	return aws.ToString(out.Update.Id)
}

// waitActive waits with the SDK's AddonActive waiter.
func (e *env) waitActive(name string) *types.Addon {
	e.t.Helper()
	w := eks.NewAddonActiveWaiter(e.eks, func(o *eks.AddonActiveWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second
	})
	out, err := w.WaitForOutput(context.Background(), &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)}, waitActive)
	if err != nil {
		e.t.Fatalf("add-on %s not ACTIVE: %v (last: %s)", name, err, e.describe(name))
	}
	return out.Addon
}

// waitDeleted waits with the SDK's AddonDeleted waiter.
func (e *env) waitDeleted(name string) {
	e.t.Helper()
	w := eks.NewAddonDeletedWaiter(e.eks, func(o *eks.AddonDeletedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second
	})
	if err := w.Wait(context.Background(), &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)}, waitDeleted); err != nil {
		e.t.Fatalf("add-on %s not deleted: %v (last: %s)\nstill being deleted in the cluster:\n%s", name, err, e.describe(name), e.terminating())
	}
}

// terminating describes the add-on objects the cluster is still deleting
// (their finalizers say who holds them) and the controller manager's
// garbage collector lines, which a foreground deletion waits on: what a
// stuck deletion needs to be understood.
func (e *env) terminating() string {
	var b strings.Builder
	dyn := dynamic.NewForConfigOrDie(e.adminConfig())
	for _, gvr := range e.deletable() {
		l, err := dyn.Resource(gvr).List(e.ctx(time.Minute), metav1.ListOptions{LabelSelector: apply.AddonLabel})
		if err != nil {
			continue
		}
		for _, u := range l.Items {
			if u.GetDeletionTimestamp() != nil {
				fmt.Fprintf(&b, "  %s %s/%s%s\n", gvr.Resource, u.GetNamespace(), u.GetName(), stuck(&u))
			}
		}
	}
	log, err := os.ReadFile(e.kube.ControllerManagerLog())
	if err != nil {
		fmt.Fprintf(&b, "  controller manager log: %v\n", err)
		return b.String()
	}
	var gc []string
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "garbage") || strings.Contains(line, "garbagecollector") {
			gc = append(gc, line)
		}
	}
	if len(gc) > 30 {
		gc = gc[len(gc)-30:]
	}
	b.WriteString("  controller manager, garbage collector lines (end):\n")
	for _, line := range gc {
		b.WriteString("    " + line)
	}
	return b.String()
}

// waitStatus polls DescribeAddon until the add-on has status (bounded).
func (e *env) waitStatus(name string, want types.AddonStatus) *types.Addon {
	e.t.Helper()
	ctx := e.ctx(waitChange)
	for {
		out, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
		if err == nil && out.Addon.Status == want {
			return out.Addon
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("add-on %s never %s (last: %s)", name, want, e.describe(name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitUpdate polls DescribeUpdate until the update has status.
func (e *env) waitUpdate(name, id string, want types.UpdateStatus) *types.Update {
	e.t.Helper()
	ctx := e.ctx(waitChange)
	for {
		out, err := e.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(e.cluster), AddonName: aws.String(name), UpdateId: aws.String(id)})
		if err == nil && out.Update.Status == want {
			return out.Update
		}
		if err == nil && out.Update.Status != types.UpdateStatusInProgress {
			e.t.Fatalf("update %s of %s is %s, want %s: %+v (add-on: %s)", id, name, out.Update.Status, want, out.Update.Errors, e.describe(name))
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("update %s of %s never %s (add-on: %s)", id, name, want, e.describe(name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describe is the add-on's status and issues, for failure messages.
func (e *env) describe(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := e.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s gen issues %s", out.Addon.Status, issuesOf(out.Addon))
}

func issuesOf(a *types.Addon) string {
	if a.Health == nil {
		return "[]"
	}
	var s []string
	for _, i := range a.Health.Issues {
		s = append(s, fmt.Sprintf("%s: %s %v", i.Code, aws.ToString(i.Message), i.ResourceIds))
	}
	return "[" + strings.Join(s, "; ") + "]"
}

// hasIssue reports whether the add-on shows an issue with code whose
// message contains every one of words.
func hasIssue(a *types.Addon, code types.AddonIssueCode, words ...string) bool {
	if a.Health == nil {
		return false
	}
	return slices.ContainsFunc(a.Health.Issues, func(i types.AddonIssue) bool {
		if i.Code != code {
			return false
		}
		for _, w := range words {
			if !strings.Contains(aws.ToString(i.Message), w) {
				return false
			}
		}
		return true
	})
}

// object reads an object with the admin's client (nil when absent).
func (e *env) object(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	e.t.Helper()
	dyn := dynamic.NewForConfigOrDie(e.adminConfig())
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if namespace != "" {
		ri = dyn.Resource(gvr).Namespace(namespace)
	}
	u, err := ri.Get(e.ctx(10*time.Second), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get %s %s/%s: %v", gvr.Resource, namespace, name, err)
	}
	return u
}

// admin is the cluster administrator's configuration, without
// client-side throttling (tests list every kind at once).
func (e *env) adminConfig() *rest.Config {
	cfg := e.kube.Admin()
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

// managers lists an object's field managers as manager/operation.
func managers(u *unstructured.Unstructured) []string {
	var out []string
	for _, mf := range u.GetManagedFields() {
		if mf.Subresource == "" {
			out = append(out, mf.Manager+"/"+string(mf.Operation))
		}
	}
	return out
}

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	configmaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	namespaces  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	serviceaccs = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// deleteNamespace deletes a namespace the test made and waits until it
// is gone (with everything in it).
func (e *env) deleteNamespace(name string) {
	e.t.Helper()
	ctx := e.ctx(waitDeleted)
	if err := e.k8s.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("delete namespace %s: %v", name, err)
	}
	poll.Until(e.t, waitDeleted, "namespace "+name+" gone", func() (bool, string) {
		_, err := e.k8s.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// leftovers lists the objects with the add-on label and the inventories
// in the cluster.
func (e *env) leftovers() []string {
	e.t.Helper()
	var left []string
	dyn := dynamic.NewForConfigOrDie(e.adminConfig())
	for _, gvr := range e.deletable() {
		l, err := dyn.Resource(gvr).List(e.ctx(time.Minute), metav1.ListOptions{LabelSelector: apply.AddonLabel})
		if err != nil {
			continue
		}
		for _, u := range l.Items {
			if !slices.Contains([]string{"endpoints", "endpointslices"}, gvr.Resource) { // the endpoints controller's
				left = append(left, gvr.Resource+" "+u.GetNamespace()+"/"+u.GetName()+stuck(&u))
			}
		}
	}
	l, err := dyn.Resource(configmaps).Namespace(inventory.Namespace).List(e.ctx(time.Minute), metav1.ListOptions{LabelSelector: inventory.Label})
	if err == nil {
		for _, u := range l.Items {
			left = append(left, "inventory "+u.GetName())
		}
	}
	return left
}

// stuck says why an object being deleted is still there: its finalizers
// and its conditions (a CRD's or a namespace's say what their
// controllers are waiting for); "" for one not being deleted.
func stuck(u *unstructured.Unstructured) string {
	if u.GetDeletionTimestamp() == nil {
		return ""
	}
	s := fmt.Sprintf(" (deleting since %s, finalizers %v", u.GetDeletionTimestamp().UTC().Format(time.RFC3339), u.GetFinalizers())
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			s += fmt.Sprintf("; %v=%v %v: %v", m["type"], m["status"], m["reason"], m["message"])
		}
	}
	return s + ")"
}

// deletable are the kinds that can be listed and deleted.
func (e *env) deletable() []schema.GroupVersionResource {
	lists, _ := e.k8s.Discovery().ServerPreferredResources()
	var gvrs []schema.GroupVersionResource
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			if slices.Contains(r.Verbs, "delete") && slices.Contains(r.Verbs, "list") && !strings.Contains(r.Name, "/") {
				gvrs = append(gvrs, gv.WithResource(r.Name))
			}
		}
	}
	return gvrs
}

// cleanupKube deletes whatever add-ons left in the shared cluster (every
// object with the add-on label, and the inventories) and waits until it
// is gone, so the next test starts from a clean cluster.
func (e *env) cleanupKube() {
	start := time.Now()
	defer func() { e.t.Logf("cleanup in %s", time.Since(start)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(e.adminConfig())
	gvrs := e.deletable()
	// Listed across namespaces and deleted one by one (a namespaced kind
	// has no cluster-wide delete-collection), until none is left.
	sel := metav1.ListOptions{LabelSelector: apply.AddonLabel}
	fg := metav1.DeletePropagationForeground
	deleteAll := func(gvr schema.GroupVersionResource, opts metav1.ListOptions, namespace string) []string {
		var left []string
		ri := dyn.Resource(gvr)
		l, err := ri.Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil
		}
		for _, u := range l.Items {
			left = append(left, gvr.Resource+" "+u.GetNamespace()+"/"+u.GetName())
			if u.GetDeletionTimestamp() == nil {
				err := ri.Namespace(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg})
				if err != nil && !apierrors.IsNotFound(err) {
					e.t.Logf("cleanup: delete %s %s/%s: %v", gvr.Resource, u.GetNamespace(), u.GetName(), err)
				}
			}
		}
		return left
	}
	for {
		left := deleteAll(configmaps, metav1.ListOptions{LabelSelector: inventory.Label}, inventory.Namespace)
		for _, gvr := range gvrs {
			left = append(left, deleteAll(gvr, sel, metav1.NamespaceAll)...)
		}
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Errorf("cleanup: add-on objects still in the cluster: %v", left)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
