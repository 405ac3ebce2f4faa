// Package apply puts an add-on generation onto the cluster and takes it
// off again, as EKS does: server-side apply under the field manager "eks",
// CRDs and namespaces first, in the add-on's conflict mode (conflict.go),
// with an inventory of what each generation applied (package inventory)
// so that objects a new generation dropped are pruned and a deleted
// add-on's objects are deleted, by whichever member is executor then. The
// applying and waiting is fluxcd/pkg/ssa's (Flux's engine); this package
// decides what to apply, in which mode, and what the outcome means in
// AWS's terms (issues.go).
package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/inventory"
)

// FieldManager is the field manager add-ons are applied under: EKS's own,
// so the fields an add-on sets show `manager: eks` in managedFields.
const FieldManager = "eks"

// InventoryManager owns the inventory records' fields.
const InventoryManager = "saltbush-agent"

// AddonLabel is set on every object an add-on applies; its value is the
// add-on name. The agent watches objects by it.
const AddonLabel = "addons.saltbush.io/name"

// crdWait bounds waiting for an add-on's CRDs to be served before its
// other objects (which may be of those kinds) are applied.
const crdWait = 2 * time.Minute

// Applier applies and deletes add-ons.
type Applier struct {
	client    client.Client
	mapper    meta.RESTMapper
	manager   *ssa.ResourceManager
	inventory *inventory.Store
	log       *slog.Logger
}

// New returns an applier over c (the agent's grant-guarded client).
func New(c client.WithWatch, mapper meta.RESTMapper, log *slog.Logger) *Applier {
	policy := conflictPolicy(c, FieldManager)
	poller := polling.NewStatusPoller(policy, mapper, polling.Options{})
	m := ssa.NewResourceManager(policy, poller, ssa.Owner{Field: FieldManager, Group: "addons.saltbush.io"})
	return &Applier{client: c, mapper: mapper, manager: m,
		inventory: &inventory.Store{Client: c, FieldManager: InventoryManager}, log: log}
}

// Inventory is the store of inventory records.
func (a *Applier) Inventory() *inventory.Store { return a.inventory }

// Outcome is what applying or deleting one generation came to.
type Outcome struct {
	// Record is the add-on's inventory afterwards (nil once removed).
	Record *inventory.Record
	// Issues, when not empty, are why the generation failed.
	Issues []*deliveryv1.Issue
	// Changed counts the objects written (created, configured, deleted).
	Changed int
	// Pending lists objects still being deleted (Delete only): the
	// removal is not finished until it is empty.
	Pending []inventory.Ref
	// Generations are the workloads' metadata.generation right after the
	// apply (by Ref.Key): a watch cache holding an older one has not seen
	// the apply yet, and its view of them must not be judged.
	Generations map[string]int64
}

// Objects parses a rendered bundle into the objects to apply, each
// labelled with the add-on's name. A bundle may not hold an inventory
// record (any add-on's, by its name or its label): those are the agent's
// alone, and what they list is what the agent prunes and deletes.
func Objects(addon string, manifest []byte) ([]*unstructured.Unstructured, error) {
	objs, err := ssautils.ReadObjects(bytes.NewReader(manifest))
	if err != nil {
		return nil, fmt.Errorf("add-on %s: bundle: %w", addon, err)
	}
	for _, o := range objs {
		if _, labelled := o.GetLabels()[inventory.Label]; labelled || (o.GroupVersionKind().GroupKind().String() == "ConfigMap" &&
			o.GetNamespace() == inventory.Namespace && strings.HasPrefix(o.GetName(), inventory.Name(""))) {
			return nil, fmt.Errorf("add-on %s: bundle: %s is an inventory record, which only the agent writes", addon, inventory.RefOf(o))
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[AddonLabel] = addon
		o.SetLabels(labels)
	}
	return objs, nil
}

// Apply applies one generation of an add-on at epoch. An error means no
// verdict: the grant ended (stop), or a transient failure (retry later,
// Transient(err)); a verdict on the generation is in the Outcome.
func (a *Applier) Apply(ctx context.Context, d *deliveryv1.DesiredAddon, epoch int64) (Outcome, error) {
	mode, err := ModeOf(d.GetResolveConflicts())
	if err != nil {
		return Outcome{Issues: []*deliveryv1.Issue{NewIssue(CodeInternalFailure, err.Error())}}, nil
	}
	objs, err := Objects(d.GetName(), d.GetManifest())
	if err != nil {
		return Outcome{Issues: []*deliveryv1.Issue{NewIssue(CodeInternalFailure, err.Error())}}, nil
	}
	if err := a.fillCertificates(ctx, objs); err != nil {
		if Transient(err) {
			return Outcome{}, err
		}
		return Outcome{Issues: []*deliveryv1.Issue{NewIssue(CodeInternalFailure, err.Error())}}, nil
	}
	prev, err := a.inventory.Get(ctx, d.GetName())
	if err != nil {
		return Outcome{}, errTransient{err}
	}
	rec, refs, grows, err := a.recordAhead(ctx, d, epoch, prev, objs)
	if err != nil {
		return Outcome{}, err
	}
	if grows {
		rec.Complete = false
		if err := a.inventory.Put(ctx, rec); err != nil {
			return a.failed(Outcome{}, err, inventoryRef(d.GetName()))
		}
	}

	ctx = withMode(ctx, mode)
	out := Outcome{Record: rec}
	verdict, err := a.applyStaged(ctx, d.GetName(), objs, &out)
	if err != nil {
		return Outcome{}, err
	}
	if verdict != nil {
		return *verdict, nil // the apply failed
	}
	kept, err := a.prune(ctx, d.GetName(), rec, refs, &out)
	if err != nil {
		return Outcome{}, err
	}
	if out.Generations, err = a.generations(ctx, objs); err != nil {
		return Outcome{}, err
	}
	rec.Objects = append(slices.Clone(refs), kept...)
	rec.Complete = len(kept) == 0
	if !grows && sameRecord(prev, rec) {
		return out, nil // in place already: nothing to record
	}
	if err := a.inventory.Put(ctx, rec); err != nil {
		return a.failed(out, err, inventoryRef(d.GetName()))
	}
	if out.Changed > 0 {
		a.log.Info("add-on applied", "addon", d.GetName(), "generation", d.GetGeneration(), "mode", mode, "changed", out.Changed)
	}
	return out, nil
}

// recordAhead is the inventory record for this generation before it is
// applied: the previous record's objects and the namespaces the add-on
// created (a namespace the cluster did not have yet is noted as created),
// plus every object of objs. grows says the record lists something the
// stored one does not: it must be written before the apply, so that
// whatever the apply gets to, the record covers it.
func (a *Applier) recordAhead(ctx context.Context, d *deliveryv1.DesiredAddon, epoch int64, prev *inventory.Record,
	objs []*unstructured.Unstructured) (rec *inventory.Record, refs []inventory.Ref, grows bool, err error) {
	rec = &inventory.Record{Addon: d.GetName(), UID: d.GetUid(), Generation: d.GetGeneration(), Epoch: epoch}
	if prev != nil {
		rec.Objects = slices.Clone(prev.Objects)
		rec.CreatedNamespaces = slices.Clone(prev.CreatedNamespaces)
		if prev.UID == d.GetUid() {
			rec.ReadyGeneration = prev.ReadyGeneration
		}
	}
	refs = make([]inventory.Ref, 0, len(objs))
	for _, o := range objs {
		ref := inventory.RefOf(o)
		refs = append(refs, ref)
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" && !rec.Has(ref) {
			created, err := a.absent(ctx, ref)
			if err != nil {
				return nil, nil, false, err
			}
			if created && !slices.Contains(rec.CreatedNamespaces, o.GetName()) {
				rec.CreatedNamespaces = append(rec.CreatedNamespaces, o.GetName())
			}
		}
	}
	grows = prev == nil || prev.UID != rec.UID || prev.Generation != rec.Generation ||
		!slices.Equal(prev.CreatedNamespaces, rec.CreatedNamespaces)
	for _, r := range refs {
		if !rec.Has(r) {
			rec.Objects = append(rec.Objects, r)
			grows = true
		}
	}
	return rec, refs, grows, nil
}

// applyStaged server-side applies objs in two stages: namespaces and CRDs
// first, waiting until the CRDs are established, then the rest, which may
// be of their kinds. It counts the changes in out. A verdict (the apply
// failed: out with the issue) or an error (no verdict) is Apply's answer.
func (a *Applier) applyStaged(ctx context.Context, addon string, objs []*unstructured.Unstructured, out *Outcome) (verdict *Outcome, err error) {
	opts := ssa.ApplyOptions{WaitInterval: 500 * time.Millisecond, WaitTimeout: crdWait}
	var definitions, rest []*unstructured.Unstructured
	for _, o := range objs {
		if ssautils.IsCRD(o) || ssautils.IsNamespace(o) {
			definitions = append(definitions, o)
		} else {
			rest = append(rest, o)
		}
	}
	for i, stage := range [][]*unstructured.Unstructured{definitions, rest} {
		if len(stage) == 0 {
			continue
		}
		cs, err := a.manager.ApplyAll(ctx, stage, opts)
		if err != nil {
			o, ferr := a.failed(*out, err, involved(err, stage))
			if ferr != nil {
				return nil, ferr
			}
			return &o, nil
		}
		out.Changed += changed(cs)
		if i > 0 {
			continue
		}
		var crds object.ObjMetadataSet
		for _, e := range cs.Entries {
			if e.ObjMetadata.GroupKind.Kind == "CustomResourceDefinition" {
				crds = append(crds, e.ObjMetadata)
			}
		}
		if len(crds) == 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, crdWait)
		err = a.manager.WaitForSetWithContext(wctx, crds, ssa.WaitOptions{Interval: opts.WaitInterval, Timeout: crdWait})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errTransient{fmt.Errorf("add-on %s: CRDs not established: %w", addon, err)}
		}
	}
	return nil, nil
}

// prune deletes the objects rec lists that this generation (refs) no
// longer has, counting changes and issues in out. It returns those still
// being deleted: they stay listed until they are gone.
func (a *Applier) prune(ctx context.Context, addon string, rec *inventory.Record, refs []inventory.Ref, out *Outcome) ([]inventory.Ref, error) {
	var kept []inventory.Ref
	for _, old := range rec.Objects {
		if slices.ContainsFunc(refs, func(r inventory.Ref) bool { return r.Key() == old.Key() }) {
			continue
		}
		n, pending, issue, err := a.remove(ctx, addon, old, false)
		if err != nil {
			return nil, err
		}
		if issue != nil {
			out.Issues = append(out.Issues, issue)
		}
		if pending {
			kept = append(kept, old)
		}
		out.Changed += n
	}
	return kept, nil
}

// generations reads the live metadata.generation of every object of objs
// that runs pods: readiness is judged against what the controllers saw
// after this apply.
func (a *Applier) generations(ctx context.Context, objs []*unstructured.Unstructured) (map[string]int64, error) {
	gens := map[string]int64{}
	for _, o := range objs {
		if !runsPods(o) {
			continue
		}
		ref := inventory.RefOf(o)
		live := ref.Object()
		if err := a.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, live); err != nil {
			return nil, errTransient{fmt.Errorf("%s: %w", ref, err)}
		}
		gens[ref.Key()] = live.GetGeneration()
	}
	return gens, nil
}

// MarkReady records in the inventory that generation was seen ready, so
// that any executor later tells degraded from failed.
func (a *Applier) MarkReady(ctx context.Context, rec *inventory.Record) error {
	if rec == nil || rec.ReadyGeneration == rec.Generation {
		return nil
	}
	next := *rec
	next.ReadyGeneration = rec.Generation
	if err := a.inventory.Put(ctx, &next); err != nil {
		if _, verr := verdict(err, inventoryRef(rec.Addon)); verr != nil {
			return verr
		}
		return err
	}
	rec.ReadyGeneration = rec.Generation
	return nil
}

// sameRecord reports whether writing b over a would change what the
// record says; the epoch that wrote it is informational, so a new executor
// that finds everything in place writes nothing.
func sameRecord(a, b *inventory.Record) bool {
	return a.UID == b.UID && a.Generation == b.Generation && a.Complete == b.Complete &&
		a.ReadyGeneration == b.ReadyGeneration && slices.Equal(a.Objects, b.Objects) &&
		slices.Equal(a.CreatedNamespaces, b.CreatedNamespaces)
}

// Exists reports whether the object ref names is in the cluster (a live
// read: a watch cache may not have seen it yet).
func (a *Applier) Exists(ctx context.Context, ref inventory.Ref) (bool, error) {
	gone, err := a.absent(ctx, ref)
	return !gone, err
}

// absent reports whether the object ref names does not exist.
func (a *Applier) absent(ctx context.Context, ref inventory.Ref) (bool, error) {
	err := a.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ref.Object())
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, errTransient{fmt.Errorf("%s: %w", ref, err)}
	}
	return false, nil
}

// failed turns an error about ref into the outcome: a verdict (the
// issue), or the error when there is none.
func (a *Applier) failed(out Outcome, err error, ref inventory.Ref) (Outcome, error) {
	issue, verr := verdict(err, ref)
	if verr != nil {
		return Outcome{}, verr
	}
	out.Issues = append(out.Issues, issue)
	return out, nil
}

// involved finds the object an ApplyAll error is about: a dry run names it
// in the error, an apply only in the message.
func involved(err error, stage []*unstructured.Unstructured) inventory.Ref {
	var dry interface {
		InvolvedObject() *unstructured.Unstructured
	}
	if errors.As(err, &dry) && dry.InvolvedObject() != nil {
		return inventory.RefOf(dry.InvolvedObject())
	}
	for _, o := range stage {
		if strings.Contains(err.Error(), ssautils.FmtUnstructured(o)+" ") {
			return inventory.RefOf(o)
		}
	}
	return inventory.Ref{Kind: "Object", Name: "unknown"}
}

// runsPods reports whether o is a workload (its pods' health counts).
func runsPods(o *unstructured.Unstructured) bool {
	switch o.GroupVersionKind().GroupKind().String() {
	case "Deployment.apps", "DaemonSet.apps", "StatefulSet.apps", "ReplicaSet.apps", "Job.batch":
		return true
	}
	return false
}

func changed(cs *ssa.ChangeSet) int {
	n := 0
	for _, e := range cs.Entries {
		if e.Action != ssa.UnchangedAction && e.Action != ssa.SkippedAction {
			n++
		}
	}
	return n
}
