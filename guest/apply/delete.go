package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/inventory"
)

// Delete removes a deleted add-on (without preserve): every object its
// inventory names is deleted in the foreground, namespaces last and only
// those the add-on created and that hold nothing else; the inventory goes
// when all of them are gone. Call it again while Outcome.Pending is not
// empty (deletion takes the garbage collector and the kubelets a while);
// it deletes nothing twice. Removal is finished when Pending is empty and
// there are no Issues.
func (a *Applier) Delete(ctx context.Context, d *deliveryv1.DesiredAddon, disc discovery.DiscoveryInterface) (Outcome, error) {
	rec, err := a.inventory.Get(ctx, d.GetName())
	if err != nil {
		return Outcome{}, errTransient{err}
	}
	if rec == nil {
		return Outcome{}, nil // nothing applied, or already removed
	}
	out := Outcome{Record: rec}
	isNS := func(r inventory.Ref) bool { return r.Group == "" && r.Kind == "Namespace" }
	// Namespaces after everything else: deleting one deletes its content,
	// which must first be the add-on's alone.
	for _, last := range []bool{false, true} {
		for _, ref := range rec.Objects {
			if isNS(ref) != last {
				continue
			}
			if last && !slices.Contains(rec.CreatedNamespaces, ref.Name) {
				continue // the add-on found it there: it stays
			}
			if last {
				others, err := a.namespaceHolds(ctx, disc, ref.Name, d.GetName())
				if err != nil {
					return Outcome{}, err
				}
				if len(others) > 0 {
					a.log.Info("add-on namespace kept: it holds objects that are not the add-on's",
						"addon", d.GetName(), "namespace", ref.Name, "objects", others)
					continue
				}
			}
			n, pending, issue, err := a.remove(ctx, d.GetName(), ref, true)
			if err != nil {
				return Outcome{}, err
			}
			out.Changed += n
			if issue != nil {
				out.Issues = append(out.Issues, issue)
			}
			if pending {
				out.Pending = append(out.Pending, ref)
			}
		}
		if len(out.Pending) > 0 || len(out.Issues) > 0 {
			return out, nil
		}
	}
	if err := a.inventory.Delete(ctx, d.GetName()); err != nil {
		return a.failed(Outcome{}, err, inventoryRef(d.GetName()))
	}
	a.log.Info("add-on removed", "addon", d.GetName(), "generation", d.GetGeneration())
	return Outcome{}, nil
}

// Release stops managing a deleted add-on with preserve: each object keeps
// everything but the add-on's label and the "eks" field manager's
// ownership (so nothing claims its fields any more), and the inventory
// goes. The objects stay.
func (a *Applier) Release(ctx context.Context, d *deliveryv1.DesiredAddon) (Outcome, error) {
	rec, err := a.inventory.Get(ctx, d.GetName())
	if err != nil {
		return Outcome{}, errTransient{err}
	}
	if rec == nil {
		return Outcome{}, nil
	}
	out := Outcome{}
	for _, ref := range rec.Objects {
		u := ref.Object()
		err := a.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return Outcome{}, errTransient{fmt.Errorf("%s: %w", ref, err)}
		}
		if u.GetLabels()[AddonLabel] != d.GetName() {
			continue // another add-on's, or already released
		}
		patches := ssa.PatchRemoveFieldsManagers(u, []ssa.FieldManager{{Name: FieldManager, ExactMatch: true, OperationType: metav1.ManagedFieldsOperationApply}})
		patches = append(patches, ssa.PatchRemoveLabels(u, []string{AddonLabel})...)
		body, err := json.Marshal(patches)
		if err != nil {
			return Outcome{}, err
		}
		if err := a.client.Patch(ctx, u, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(InventoryManager)); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return a.failed(out, err, ref)
		}
		out.Changed++
	}
	if err := a.inventory.Delete(ctx, d.GetName()); err != nil {
		return a.failed(Outcome{}, err, inventoryRef(d.GetName()))
	}
	a.log.Info("add-on released; its objects stay", "addon", d.GetName(), "generation", d.GetGeneration(), "objects", len(rec.Objects))
	return out, nil
}

// remove deletes one object on the add-on's account. wait: the object
// counts as pending until it is gone (foreground: with what it owns);
// otherwise an accepted delete is the end of it. An object that no longer
// carries the add-on's label is not the add-on's any more and is left.
func (a *Applier) remove(ctx context.Context, addon string, ref inventory.Ref, wait bool) (changed int, pending bool, issue *deliveryv1.Issue, err error) {
	u := ref.Object()
	err = a.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return 0, false, nil, nil
	case err != nil:
		return 0, false, nil, errTransient{fmt.Errorf("%s: %w", ref, err)}
	case u.GetLabels()[AddonLabel] != addon:
		return 0, false, nil, nil
	case u.GetDeletionTimestamp() != nil:
		return 0, wait, nil, nil
	}
	policy := metav1.DeletePropagationBackground
	if wait && !definesResources(ref) {
		policy = metav1.DeletePropagationForeground
	}
	// Preconditioned on the object read, so a same-named object created
	// since (by someone else) is not deleted.
	uid := u.GetUID()
	err = a.client.Delete(ctx, u, client.PropagationPolicy(policy), client.Preconditions{UID: &uid})
	switch {
	case apierrors.IsNotFound(err):
		return 0, false, nil, nil
	case apierrors.IsConflict(err):
		return 0, false, nil, errTransient{fmt.Errorf("%s changed while being deleted: %w", ref, err)}
	case err != nil:
		issue, err := verdict(err, ref)
		return 0, false, issue, err
	}
	return 1, wait, nil, nil
}

// definesResources says ref is a CustomResourceDefinition. One is deleted
// in the background even when the deletion is waited on (it still counts
// as pending until it is gone): nothing depends on a CRD through owner
// references, and the apiextensions server deletes its custom resources
// itself, behind its own finalizer. A foreground deletion would add the
// garbage collector's finalizer, and with it a second writer racing that
// finalizer's updates: a CRD was seen to stay terminating for minutes,
// held by the cleanup finalizer alone, after the collector had let go.
func definesResources(ref inventory.Ref) bool {
	return ref.Group == "apiextensions.k8s.io" && ref.Kind == "CustomResourceDefinition"
}

// ignoredInNamespace are kinds whose objects do not make a namespace the
// user's: the cluster and the add-on's own workloads create them.
var ignoredInNamespace = []schema.GroupResource{
	{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"},
	{Resource: "endpoints"}, {Group: "discovery.k8s.io", Resource: "endpointslices"},
	{Group: "coordination.k8s.io", Resource: "leases"},
}

// namespaceHolds lists objects in namespace that are neither the add-on's
// nor made by the cluster (the default service account, the root CA
// ConfigMap, events, endpoints, leases, anything owned by another object).
func (a *Applier) namespaceHolds(ctx context.Context, disc discovery.DiscoveryInterface, namespace, addon string) ([]string, error) {
	lists, err := disc.ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		return nil, errTransient{fmt.Errorf("namespace %s: discovery: %w", namespace, err)}
	}
	if err != nil {
		// Some groups did not answer (an aggregated API that is down):
		// what cannot be listed cannot be proven empty.
		return nil, errTransient{fmt.Errorf("namespace %s: discovery incomplete: %w", namespace, err)}
	}
	var others []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") ||
				slices.Contains(ignoredInNamespace, schema.GroupResource{Group: gv.Group, Resource: r.Name}) {
				continue
			}
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gv.WithKind(r.Kind + "List"))
			if err := a.client.List(ctx, list, client.InNamespace(namespace), client.Limit(100)); err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				return nil, errTransient{fmt.Errorf("namespace %s: list %s: %w", namespace, r.Name, err)}
			}
			for _, o := range list.Items {
				switch {
				case o.Labels[AddonLabel] == addon, len(o.OwnerReferences) > 0,
					r.Kind == "ServiceAccount" && o.Name == "default",
					r.Kind == "ConfigMap" && o.Name == "kube-root-ca.crt":
					continue
				}
				others = append(others, r.Kind+" "+o.Name)
			}
		}
	}
	return others, nil
}

func inventoryRef(addon string) inventory.Ref {
	return inventory.Ref{Version: "v1", Kind: "ConfigMap", Namespace: inventory.Namespace, Name: inventory.Name(addon)}
}
