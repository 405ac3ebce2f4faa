package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/saltbush/saltbush/guest/inventory"
)

// Mode is an add-on's resolveConflicts: how a field another manager owns
// with a different value is treated when the add-on is applied.
type Mode string

// The modes, as AWS names them.
const (
	// Overwrite applies with force: the add-on's values win and its field
	// manager takes the fields.
	Overwrite Mode = "OVERWRITE"
	// None applies without force: a conflicting field fails the apply and
	// nothing is changed.
	None Mode = "NONE"
	// Preserve leaves every field another manager owns to that manager:
	// those fields are left out of what is applied.
	Preserve Mode = "PRESERVE"
)

// ModeOf parses a desired add-on's resolveConflicts ("" is None).
func ModeOf(s string) (Mode, error) {
	switch Mode(s) {
	case "", None:
		return None, nil
	case Overwrite, Preserve:
		return Mode(s), nil
	}
	return "", fmt.Errorf("resolveConflicts %q is not OVERWRITE, NONE or PRESERVE", s)
}

type modeKey struct{}

// withMode tells the conflict policy client how to apply within ctx.
func withMode(ctx context.Context, m Mode) context.Context {
	return context.WithValue(ctx, modeKey{}, m)
}

func modeFrom(ctx context.Context) Mode {
	if m, ok := ctx.Value(modeKey{}).(Mode); ok {
		return m
	}
	return None
}

// conflictPolicy wraps c so that server-side applies follow the mode in
// their context. The ssa library always asks for force (Flux's policy);
// for None and Preserve the force is taken off, and Preserve first leaves
// out the fields other managers own. Dry runs go through the same path,
// so a conflict shows up at the dry run, before anything is written.
func conflictPolicy(c client.WithWatch, fieldManager string) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patch.Type() != types.ApplyPatchType {
				return c.Patch(ctx, obj, patch, opts...)
			}
			mode := modeFrom(ctx)
			if mode == Overwrite {
				return c.Patch(ctx, obj, patch, opts...)
			}
			opts = slices.DeleteFunc(slices.Clone(opts), func(o client.PatchOption) bool { return o == client.ForceOwnership })
			if mode == Preserve {
				u, ok := obj.(*unstructured.Unstructured)
				if !ok {
					return fmt.Errorf("apply: preserve needs an unstructured object, got %T", obj)
				}
				if err := leaveOthersFields(ctx, c, u, fieldManager); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
}

// leaveOthersFields removes from u every field that, in the live object,
// a manager other than fieldManager owns, so applying u changes none of
// them. List items' key fields stay (an item without its key is not an
// item), and so do the add-on's own label and the object's identity.
func leaveOthersFields(ctx context.Context, c client.Client, u *unstructured.Unstructured, fieldManager string) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(u), live)
	if apierrors.IsNotFound(err) {
		return nil // nothing to preserve: the add-on creates it
	}
	if err != nil {
		return err
	}
	for _, mf := range live.GetManagedFields() {
		if mf.Manager == fieldManager || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		set, err := ssa.FieldsToSet(*mf.FieldsV1)
		if err != nil {
			return fmt.Errorf("apply: managed fields of %s by %s: %w", inventory.RefOf(u), mf.Manager, err)
		}
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if keep(p) {
				return
			}
			removePath(u.Object, p)
		})
	}
	return nil
}

// keep reports whether a path must stay in the applied object whoever
// owns it: identity and the add-on label, and list-item keys.
func keep(p fieldpath.Path) bool {
	if len(p) == 0 {
		return true
	}
	if s := p.String(); s == ".apiVersion" || s == ".kind" || s == ".metadata.name" || s == ".metadata.namespace" ||
		s == ".metadata.labels."+AddonLabel {
		return true
	}
	// A field that is one of its list item's key fields.
	if last := p[len(p)-1]; last.FieldName != nil && len(p) >= 2 && p[len(p)-2].Key != nil {
		for _, k := range *p[len(p)-2].Key {
			if k.Name == *last.FieldName {
				return true
			}
		}
	}
	return false
}

// removePath deletes the field p names from an unstructured object, if
// it is there.
func removePath(obj map[string]any, p fieldpath.Path) {
	without(obj, p)
}

// without returns node with the field p names (relative to node) removed:
// a map is changed in place, a list is replaced by a shorter copy (the
// caller stores what it returns).
func without(node any, p fieldpath.Path) any {
	if len(p) == 0 {
		return node
	}
	pe := p[0]
	if pe.FieldName != nil {
		m, ok := node.(map[string]any)
		if !ok {
			return node
		}
		if len(p) == 1 {
			delete(m, *pe.FieldName)
		} else if child, ok := m[*pe.FieldName]; ok {
			m[*pe.FieldName] = without(child, p[1:])
		}
		return m
	}
	list, ok := node.([]any)
	if !ok {
		return node
	}
	at := slices.IndexFunc(list, func(item any) bool { return matches(item, pe) })
	switch {
	case at < 0:
		return list
	case len(p) == 1:
		return slices.Delete(slices.Clone(list), at, at+1)
	}
	list[at] = without(list[at], p[1:])
	return list
}

// matches reports whether a list item is the one a path element names.
func matches(item any, pe fieldpath.PathElement) bool {
	switch {
	case pe.Index != nil:
		return false // atomic lists are owned whole; their items are never leaves here
	case pe.Value != nil:
		return fmt.Sprint(item) == fmt.Sprint((*pe.Value).Unstructured())
	case pe.Key != nil:
		m, ok := item.(map[string]any)
		if !ok {
			return false
		}
		for _, k := range *pe.Key {
			if fmt.Sprint(m[k.Name]) != fmt.Sprint(k.Value.Unstructured()) {
				return false
			}
		}
		return true
	}
	return false
}

// conflictFields lists, from an apply conflict, each conflicting field
// with the manager that owns it, as the apiserver reports them.
func conflictFields(err error) []string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseTypeFieldManagerConflict {
			out = append(out, c.Field+" ("+c.Message+")")
		}
	}
	return out
}
