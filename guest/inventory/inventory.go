// Package inventory records, in the cluster itself, which objects an
// add-on's applied generation consists of: one ConfigMap per add-on in
// kube-system (as cli-utils' inventory ConfigMaps do). Every control-plane
// member reads the same apiserver, so an executor on another VM that takes
// over finds what its predecessor applied, prunes what a new generation
// dropped and deletes what a deleted add-on left.
//
// The record is written before objects are applied (listing every object
// the apply may create, on top of what was there) and again after (listing
// only the generation's objects), so a crash between the two leaves a
// record that still covers everything that may exist.
package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespace holds the inventory ConfigMaps.
const Namespace = "kube-system"

// Label marks an inventory ConfigMap; its value is the add-on name.
const Label = "addons.saltbush.io/inventory"

// dataKey is the ConfigMap key holding the record.
const dataKey = "inventory.json"

// Ref names one object.
type Ref struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// RefOf is the Ref of an object.
func RefOf(u *unstructured.Unstructured) Ref {
	gvk := u.GroupVersionKind()
	return Ref{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// GVK is the object's group, version and kind.
func (r Ref) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// Key identifies the object whatever its version.
func (r Ref) Key() string {
	return r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
}

// String is the object as issues name it: Kind namespace/name.
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Object is an empty object of the ref, for gets and deletes.
func (r Ref) Object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.GVK())
	u.SetNamespace(r.Namespace)
	u.SetName(r.Name)
	return u
}

// Record is one add-on's inventory.
type Record struct {
	Addon string `json:"addon"`
	// UID and Generation are the add-on incarnation and generation the
	// objects belong to; Epoch is the executor epoch that wrote it.
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	Epoch      int64  `json:"epoch"`
	// Objects is every object that may exist on the add-on's account.
	Objects []Ref `json:"objects"`
	// Complete says Objects is exactly the generation's set (the apply
	// finished and pruned); otherwise it may also hold objects of an
	// earlier generation.
	Complete bool `json:"complete"`
	// CreatedNamespaces are namespaces the add-on created (they did not
	// exist before it first applied them): only those are ever deleted
	// with it.
	CreatedNamespaces []string `json:"createdNamespaces,omitempty"`
	// ReadyGeneration is the last generation seen ready: a generation
	// that was ready and then is not is degraded, not failed.
	ReadyGeneration int64 `json:"readyGeneration,omitempty"`
}

// Has reports whether the record lists ref (any version).
func (r *Record) Has(ref Ref) bool {
	return slices.ContainsFunc(r.Objects, func(o Ref) bool { return o.Key() == ref.Key() })
}

// Store reads and writes inventory records through a client (the
// agent's grant-guarded one, so a fenced agent cannot write them).
type Store struct {
	Client client.Client
	// FieldManager owns the record's fields.
	FieldManager string
}

// Name is the ConfigMap name of an add-on's record.
func Name(addon string) string { return "saltbush-addon-" + addon }

// Get returns the add-on's record, nil when there is none.
func (s *Store) Get(ctx context.Context, addon string) (*Record, error) {
	cm := &corev1.ConfigMap{}
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: Name(addon)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inventory of %s: %w", addon, err)
	}
	rec := &Record{}
	if err := json.Unmarshal([]byte(cm.Data[dataKey]), rec); err != nil {
		return nil, fmt.Errorf("inventory of %s: ConfigMap %s/%s: %w", addon, Namespace, cm.Name, err)
	}
	return rec, nil
}

// Put writes the record (server-side apply, forced: the record is the
// agent's alone).
func (s *Store) Put(ctx context.Context, rec *Record) error {
	sorted := *rec
	sorted.Objects = slices.Clone(rec.Objects)
	slices.SortFunc(sorted.Objects, func(a, b Ref) int { return strings.Compare(a.Key(), b.Key()) })
	sorted.Objects = slices.CompactFunc(sorted.Objects, func(a, b Ref) bool { return a.Key() == b.Key() })
	b, err := json.Marshal(&sorted)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name(rec.Addon), Labels: map[string]string{Label: rec.Addon}},
		Data:       map[string]string{dataKey: string(b)},
	}
	//nolint:staticcheck // SA1019: client.Apply with a typed object; Client.Apply takes apply configurations, a change of its own
	if err := s.Client.Patch(ctx, cm, client.Apply, client.ForceOwnership, client.FieldOwner(s.FieldManager)); err != nil {
		return fmt.Errorf("inventory of %s: write ConfigMap %s/%s: %w", rec.Addon, Namespace, cm.Name, err)
	}
	return nil
}

// Delete removes the add-on's record.
func (s *Store) Delete(ctx context.Context, addon string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name(addon)}}
	if err := s.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("inventory of %s: delete ConfigMap %s/%s: %w", addon, Namespace, cm.Name, err)
	}
	return nil
}

// List returns every record in the cluster, by add-on name.
func (s *Store) List(ctx context.Context) (map[string]*Record, error) {
	var cms corev1.ConfigMapList
	if err := s.Client.List(ctx, &cms, client.InNamespace(Namespace), client.HasLabels{Label}); err != nil {
		return nil, fmt.Errorf("inventories: %w", err)
	}
	out := map[string]*Record{}
	for _, cm := range cms.Items {
		rec := &Record{}
		if err := json.Unmarshal([]byte(cm.Data[dataKey]), rec); err != nil {
			return nil, fmt.Errorf("inventory ConfigMap %s/%s: %w", Namespace, cm.Name, err)
		}
		out[rec.Addon] = rec
	}
	return out, nil
}
