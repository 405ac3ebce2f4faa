package podidentity

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/inventory"
)

// Reconciler makes the cluster's service accounts carry the desired
// associations. Its client is the agent's grant-guarded one: a standby or
// a fenced executor writes nothing.
type Reconciler struct {
	Client client.Client
	Log    *slog.Logger
}

// Outcome is what one reconciliation came to.
type Outcome struct {
	// Changed counts the service accounts written.
	Changed int
	// Recorded counts the service accounts that carry their association.
	Recorded int
	// Pending are the service accounts associations name that do not
	// exist (yet).
	Pending []Key
	// Issues are the writes the cluster refused, by the owning add-on's
	// name ("" for associations made directly).
	Issues map[string][]*deliveryv1.Issue
}

// Reconcile records every association on its service account and takes
// the records off the service accounts no association names any more. An
// error is no verdict: the grant ended (grant.Refused) or a write may
// succeed later (apply.Transient); what the cluster refused is in the
// Outcome's issues.
func (r *Reconciler) Reconcile(ctx context.Context, associations []*deliveryv1.DesiredPodIdentityAssociation) (Outcome, error) {
	want, dropped := Render(associations)
	out := Outcome{Issues: map[string][]*deliveryv1.Issue{}}
	for _, d := range dropped {
		k := Key{Namespace: d.GetNamespace(), Name: d.GetServiceAccount()}
		out.Issues[d.GetOwnerAddon()] = append(out.Issues[d.GetOwnerAddon()], apply.NewIssue(apply.CodeConfigurationConflict,
			fmt.Sprintf("Pod identity association %s names ServiceAccount %s, which association %s holds.",
				d.GetAssociationId(), k, want[k].Association.GetAssociationId()), ref(k)))
	}
	var list corev1.ServiceAccountList
	if err := r.Client.List(ctx, &list, client.HasLabels{LabelAssociationID}); err != nil {
		return out, apply.AsTransient(fmt.Errorf("list the service accounts with %s: %w", LabelAssociationID, err))
	}
	labelled := make(map[Key]*corev1.ServiceAccount, len(list.Items))
	for i := range list.Items {
		sa := &list.Items[i]
		labelled[Key{Namespace: sa.Namespace, Name: sa.Name}] = sa
	}
	keys := slices.Collect(maps.Keys(want))
	for k := range labelled {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var retry error
	for _, k := range keys {
		rec, wanted := want[k]
		changed, err := r.one(ctx, k, rec, wanted, labelled[k], &out)
		if err != nil {
			issue, verr := apply.Verdict(err, ref(k))
			switch {
			case grant.Refused(verr) && !apply.Transient(verr):
				return out, verr
			case verr != nil:
				retry = cmp.Or(retry, verr)
			default:
				owner := rec.Association.GetOwnerAddon()
				out.Issues[owner] = append(out.Issues[owner], issue)
			}
			continue
		}
		if changed {
			out.Changed++
		}
	}
	return out, retry
}

// one brings one service account in line: k's record rec if wanted, none
// otherwise; live is the labelled listing's copy (nil: not labelled).
func (r *Reconciler) one(ctx context.Context, k Key, rec Record, wanted bool, live *corev1.ServiceAccount, out *Outcome) (bool, error) {
	if !wanted {
		if !managed(live) {
			return false, nil // labelled by someone else: not the agent's to take off
		}
		return r.write(ctx, live, nil)
	}
	if live == nil {
		live = &corev1.ServiceAccount{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, live)
		if apierrors.IsNotFound(err) {
			out.Pending = append(out.Pending, k)
			return false, nil
		}
		if err != nil {
			return false, apply.AsTransient(fmt.Errorf("ServiceAccount %s: %w", k, err))
		}
	}
	if managed(live) && carries(live.Labels, live.Annotations, rec) {
		out.Recorded++
		return false, nil
	}
	changed, err := r.write(ctx, live, &rec)
	if err == nil && changed {
		out.Recorded++
	} else if err == nil {
		out.Pending = append(out.Pending, k)
	}
	return changed, err
}

// write applies rec's label and annotations to the service account live
// (none when rec is nil: the field manager then owns nothing, and what it
// recorded goes). It reports whether the service account was written; an
// apply that created it (it was deleted since it was read) is undone, for
// the agent creates no service accounts.
func (r *Reconciler) write(ctx context.Context, live *corev1.ServiceAccount, rec *Record) (bool, error) {
	ac := applycorev1.ServiceAccount(live.Name, live.Namespace)
	if rec != nil {
		ac.WithLabels(rec.Labels).WithAnnotations(rec.Annotations)
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return false, err
	}
	if uid := ptrValue(ac.UID); uid == live.UID {
		verb := "recorded"
		if rec == nil {
			verb = "removed"
		}
		r.Log.Info("pod identity association "+verb, "service_account", live.Namespace+"/"+live.Name,
			"association", rec.association())
		return true, nil
	}
	created := ptrValue(ac.UID)
	err := r.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: live.Namespace, Name: live.Name}},
		client.Preconditions{UID: &created})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("ServiceAccount %s/%s was gone and the apply created it; deleting it again: %w", live.Namespace, live.Name, err)
	}
	return false, nil
}

func (r *Record) association() string {
	if r == nil {
		return ""
	}
	return r.Association.GetAssociationId()
}

// managed reports whether the agent's field manager has applied to sa.
func managed(sa *corev1.ServiceAccount) bool {
	return sa != nil && slices.ContainsFunc(sa.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply
	})
}

func ref(k Key) inventory.Ref {
	return inventory.Ref{Version: "v1", Kind: "ServiceAccount", Namespace: k.Namespace, Name: k.Name}
}

func ptrValue(p *types.UID) types.UID {
	if p == nil {
		return ""
	}
	return *p
}
