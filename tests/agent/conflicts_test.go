package agent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/fluxcd/pkg/ssa"
)

const noop = "saltbush-noop"

// noopValues is the no-op add-on's configuration (its schema requires a
// message).
func noopValues(message string) *string {
	return aws.String(`{"message": "` + message + `"}`)
}

// editConfigMap changes data[key] of a ConfigMap as another field manager
// (an Update, as `kubectl edit` makes).
func (e *env) editConfigMap(namespace, name, key, value, manager string) {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	cm, err := e.k8s.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data[key] = value
	if _, err := e.k8s.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: manager}); err != nil {
		e.t.Fatalf("edit ConfigMap %s/%s as %s: %v", namespace, name, manager, err)
	}
}

// owns reports whether manager owns the field path (as written in
// managedFields, e.g. f:data.f:message) of u.
func owns(t *testing.T, u *unstructured.Unstructured, manager string, path ...string) bool {
	t.Helper()
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != manager || mf.FieldsV1 == nil {
			continue
		}
		set, err := ssa.FieldsToSet(*mf.FieldsV1)
		if err != nil {
			t.Fatal(err)
		}
		if set.Has(fieldpath.MakePathOrDie(toAny(path)...)) {
			return true
		}
	}
	return false
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestResolveConflicts changes a field the add-on sets with a second field
// manager, then updates the add-on in each mode, with AWS's outcomes: NONE
// fails the update with ConfigurationConflict naming the object and field
// and changes nothing; PRESERVE keeps the other manager's value and applies
// the rest; OVERWRITE takes the field back.
func TestResolveConflicts(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: noopValues("one")})
	e.waitActive(noop)
	e.editConfigMap(noop, noop, "message", "edited", "kubectl-edit")
	data := func() map[string]string {
		cm := e.object(configmaps, noop, noop)
		d, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		return d
	}

	t.Run("NONE fails on the conflict", func(t *testing.T) {
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("two"),
			ResolveConflicts: types.ResolveConflictsNone})
		u := e.waitUpdate(noop, id, types.UpdateStatusFailed)
		if len(u.Errors) == 0 || u.Errors[0].ErrorCode != types.ErrorCode(types.AddonIssueCodeConfigurationConflict) ||
			!strings.Contains(aws.ToString(u.Errors[0].ErrorMessage), "ConfigMap saltbush-noop/saltbush-noop") ||
			!strings.Contains(aws.ToString(u.Errors[0].ErrorMessage), ".data.message") {
			t.Fatalf("update errors %+v, want ConfigurationConflict naming the ConfigMap and .data.message", u.Errors)
		}
		a := e.waitStatus(noop, types.AddonStatusUpdateFailed)
		if !hasIssue(a, types.AddonIssueCodeConfigurationConflict, "kubectl-edit") {
			t.Errorf("issues %s, want the conflicting manager named", issuesOf(a))
		}
		if got := data()["message"]; got != "edited" {
			t.Fatalf("message %q after a NONE conflict, want the other manager's %q", got, "edited")
		}
	})

	t.Run("PRESERVE keeps the other manager's field", func(t *testing.T) {
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop),
			ConfigurationValues: aws.String(`{"message": "three", "replicaCount": 4}`), ResolveConflicts: types.ResolveConflictsPreserve})
		e.waitUpdate(noop, id, types.UpdateStatusSuccessful)
		d := data()
		if d["message"] != "edited" || d["replicaCount"] != "4" {
			t.Fatalf("data %v: want message kept as edited and replicaCount 4 applied", d)
		}
		cm := e.object(configmaps, noop, noop)
		if owns(t, cm, "eks", "data", "message") {
			t.Fatal("eks owns .data.message after PRESERVE")
		}
		if !owns(t, cm, "eks", "data", "replicaCount") {
			t.Fatal("eks does not own .data.replicaCount after PRESERVE")
		}
	})

	t.Run("OVERWRITE takes the field back", func(t *testing.T) {
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("four"),
			ResolveConflicts: types.ResolveConflictsOverwrite})
		e.waitUpdate(noop, id, types.UpdateStatusSuccessful)
		e.waitActive(noop)
		if got := data()["message"]; got != "four" {
			t.Fatalf("message %q after OVERWRITE, want four", got)
		}
		cm := e.object(configmaps, noop, noop)
		if !owns(t, cm, "eks", "data", "message") || owns(t, cm, "kubectl-edit", "data", "message") {
			t.Fatalf("after OVERWRITE managers %v: want eks alone to own .data.message", managers(cm))
		}
	})
}

// TestSelfManagedInstall: an add-on created over objects another tool
// installed (different values) fails under NONE with ConfigurationConflict
// and leaves them as they were — also through the delete of the failed
// add-on, which deletes nothing it did not apply, nor the namespace it
// found; under OVERWRITE it takes them over.
func TestSelfManagedInstall(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	const ns = "self-managed"
	ctx := e.ctx(time.Minute)
	if _, err := e.k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.k8s.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: noop},
		Data: map[string]string{"message": "mine"}}, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	in := eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"),
		ConfigurationValues: noopValues("ours"), NamespaceConfig: &types.AddonNamespaceConfigRequest{Namespace: aws.String(ns)}}

	in.ResolveConflicts = types.ResolveConflictsNone
	e.createAddon(in)
	a := e.waitStatus(noop, types.AddonStatusCreateFailed)
	if !hasIssue(a, types.AddonIssueCodeConfigurationConflict, "ConfigMap "+ns+"/"+noop, ".data.message") {
		t.Fatalf("issues %s, want ConfigurationConflict on the self-managed ConfigMap", issuesOf(a))
	}
	if got := e.object(configmaps, ns, noop).Object["data"].(map[string]any)["message"]; got != "mine" {
		t.Fatalf("message %v after a NONE conflict, want mine", got)
	}
	if _, err := e.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(noop)}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted(noop)
	if e.object(configmaps, ns, noop) == nil || e.object(namespaces, "", ns) == nil {
		t.Fatal("deleting the failed add-on deleted the self-managed ConfigMap or the namespace it found")
	}

	in.ResolveConflicts = types.ResolveConflictsOverwrite
	e.createAddon(in)
	e.waitActive(noop)
	cm := e.object(configmaps, ns, noop)
	if got := cm.Object["data"].(map[string]any)["message"]; got != "ours" {
		t.Fatalf("message %v under OVERWRITE, want ours", got)
	}
	if !slices.Contains(managers(cm), "eks/Apply") {
		t.Fatalf("managers %v: want eks applying", managers(cm))
	}
	// Deleted, the add-on leaves the namespace it found; the test then
	// removes it (before, the agent would rightly put it back).
	if _, err := e.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(noop)}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted(noop)
	if e.object(namespaces, "", ns) == nil {
		t.Fatal("the namespace the add-on found was deleted with it")
	}
	e.deleteNamespace(ns)
}
