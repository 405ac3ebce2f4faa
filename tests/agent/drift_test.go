package agent_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saltbush/saltbush/tests/poll"
)

// TestDrift: an object of the add-on deleted by hand comes back; a field
// another manager changes is taken back under OVERWRITE, and under NONE
// shows as a ConfigurationConflict health issue (DEGRADED), not fought
// over, until the other manager lets go.
func TestDrift(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"),
		ConfigurationValues: noopValues("one"), ResolveConflicts: types.ResolveConflictsOverwrite})
	e.waitActive(noop)
	cms := e.k8s.CoreV1().ConfigMaps(noop)

	if err := cms.Delete(e.ctx(waitChange), noop, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitChange, "the deleted ConfigMap comes back", func() (bool, string) {
		cm, err := cms.Get(e.ctx(waitChange), noop, metav1.GetOptions{})
		return err == nil && cm.Data["message"] == "one", fmt.Sprint(err)
	})

	e.editConfigMap(noop, noop, "message", "edited", "kubectl-edit")
	poll.Until(t, waitChange, "OVERWRITE takes the edited field back", func() (bool, string) {
		cm, err := cms.Get(e.ctx(waitChange), noop, metav1.GetOptions{})
		return err == nil && cm.Data["message"] == "one", fmt.Sprint(cm.Data, err)
	})

	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("two"),
		ResolveConflicts: types.ResolveConflictsNone})
	e.waitUpdate(noop, id, types.UpdateStatusSuccessful)
	e.editConfigMap(noop, noop, "message", "edited", "kubectl-edit")
	a := e.waitStatus(noop, types.AddonStatusDegraded)
	if !hasIssue(a, types.AddonIssueCodeConfigurationConflict, ".data.message") {
		t.Fatalf("DEGRADED with %s, want ConfigurationConflict on .data.message", issuesOf(a))
	}
	if cm, _ := cms.Get(e.ctx(waitChange), noop, metav1.GetOptions{}); cm.Data["message"] != "edited" {
		t.Fatalf("under NONE the agent fought over the field: %v", cm.Data)
	}
	// The other manager gives the field back (the add-on's value again).
	e.editConfigMap(noop, noop, "message", "two", "kubectl-edit")
	e.waitStatus(noop, types.AddonStatusActive)
}

// TestDeletePreserve: deleting with preserve stops management and leaves
// the objects; the AddonDeleted waiter returns once that is done.
func TestDeletePreserve(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: noopValues("kept")})
	e.waitActive(noop)
	if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster),
		AddonName: aws.String(noop), Preserve: true}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted(noop)
	cm, err := e.k8s.CoreV1().ConfigMaps(noop).Get(e.ctx(waitChange), noop, metav1.GetOptions{})
	if err != nil || cm.Data["message"] != "kept" {
		t.Fatalf("the preserved ConfigMap: %v %v", cm, err)
	}
	for _, mf := range cm.ManagedFields {
		if mf.Manager == "eks" {
			t.Fatalf("eks still manages the preserved ConfigMap: %v", managersOf(cm.ManagedFields))
		}
	}
	if _, err := e.k8s.CoreV1().Namespaces().Get(e.ctx(waitChange), noop, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Fatal("the preserved add-on's namespace was deleted")
	}
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("preserved objects still carry the add-on label or an inventory: %v", left)
	}
	e.deleteNamespace(noop) // the preserved objects must not meet the next test
}

func managersOf(mfs []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.Manager)
	}
	return out
}
