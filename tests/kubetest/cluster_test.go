package kubetest_test

import (
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// Server-side apply of a field another manager owns, with a different
// value, conflicts unless forced: the apiserver's field management is real.
func TestServerSideApplyConflict(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	cm := func(value string) *corev1apply.ConfigMapApplyConfiguration {
		return corev1apply.ConfigMap("shared", ns).WithData(map[string]string{"level": value})
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Apply(ctx, cm("info"), metav1.ApplyOptions{FieldManager: "agent-a"}); err != nil {
		t.Fatalf("apply as agent-a: %v", err)
	}
	_, err := client.CoreV1().ConfigMaps(ns).Apply(ctx, cm("debug"), metav1.ApplyOptions{FieldManager: "agent-b"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply of an owned field by agent-b: %v, want a conflict", err)
	}
	got, err := client.CoreV1().ConfigMaps(ns).Apply(ctx, cm("debug"), metav1.ApplyOptions{FieldManager: "agent-b", Force: true})
	if err != nil {
		t.Fatalf("forced apply by agent-b: %v", err)
	}
	if got.Data["level"] != "debug" {
		t.Errorf("level %q after forced apply, want debug", got.Data["level"])
	}
	var managers []string
	for _, f := range got.ManagedFields {
		managers = append(managers, f.Manager)
	}
	if !slices.Contains(managers, "agent-b") || slices.Contains(managers, "agent-a") {
		t.Errorf("managers %v after forced apply, want agent-b and not agent-a (it lost its only field)", managers)
	}
}

// The audit log records a create by a minted user with that user's name
// and groups, as soon as the create has returned.
func TestAuditLogRecordsMintedUser(t *testing.T) {
	t.Parallel()
	c, _, ns, ctx := setup(t)
	const user = "addon-agent-7"
	agent := kubernetes.NewForConfigOrDie(c.UserConfig(user, "system:masters", "saltbush:agents"))
	before := time.Now()
	created, err := agent.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "audited"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create as %s: %v", user, err)
	}
	events, err := c.AuditEvents()
	if err != nil {
		t.Fatalf("audit events: %v", err)
	}
	var found *kubetest.AuditEvent
	for i, e := range events {
		if e.Verb == "create" && e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == created.Name {
			found = &events[i]
		}
	}
	if found == nil {
		t.Fatalf("no audit event for the create of configmap %s/%s among %d events", ns, created.Name, len(events))
	}
	if found.User != user {
		t.Errorf("audit user %q, want %q", found.User, user)
	}
	for _, g := range []string{"system:masters", "saltbush:agents", "system:authenticated"} {
		if !slices.Contains(found.Groups, g) {
			t.Errorf("audit groups %v, want %s among them", found.Groups, g)
		}
	}
	if found.Code != 201 || found.ObjectRef.APIVersion != "v1" || found.ObjectRef.APIGroup != "" || found.ObjectRef.Subresource != "" {
		t.Errorf("audit event %+v, want code 201 for core v1 configmaps", *found)
	}
	// The clocks are the same machine's: the request was received after the
	// test sent it (to the second, as the apiserver's clock may round), and
	// completed no earlier than received.
	if found.RequestReceivedTimestamp.Before(before.Add(-time.Second)) || found.StageTimestamp.Before(found.RequestReceivedTimestamp) {
		t.Errorf("audit timestamps received %v stage %v, test sent it at %v", found.RequestReceivedTimestamp, found.StageTimestamp, before)
	}
}

// A kubeconfig from UserKubeconfig authenticates as its user.
func TestUserKubeconfigIdentity(t *testing.T) {
	t.Parallel()
	c, _, _, ctx := setup(t)
	for _, tc := range []struct {
		path   string
		user   string
		groups []string
	}{
		{c.UserKubeconfig("reader", "team:observers"), "reader", []string{"team:observers"}},
		{c.AdminKubeconfig(), kubetest.AdminUser, []string{"system:masters"}},
	} {
		cfg, err := clientcmd.BuildConfigFromFlags("", tc.path)
		if err != nil {
			t.Fatalf("load kubeconfig %s: %v", tc.path, err)
		}
		review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("self subject review with %s: %v", tc.path, err)
		}
		info := review.Status.UserInfo
		if info.Username != tc.user {
			t.Errorf("kubeconfig %s authenticates as %q, want %q", tc.path, info.Username, tc.user)
		}
		for _, g := range tc.groups {
			if !slices.Contains(info.Groups, g) {
				t.Errorf("kubeconfig %s groups %v, want %s among them", tc.path, info.Groups, g)
			}
		}
	}
	// Without RBAC grants a minted user is denied, as in a real cluster.
	reader := kubernetes.NewForConfigOrDie(c.UserConfig("reader", "team:observers"))
	_, err := reader.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("list secrets as an ungranted user: %v, want forbidden", err)
	}
}

// The double's nodes carry a kubelet's labels and capacity, and heartbeat
// with Leases in kube-node-lease.
func TestNodesAndLeases(t *testing.T) {
	t.Parallel()
	c, client, _, ctx := setup(t)
	names := c.Kubelet().NodeNames()
	if len(names) != testNodes {
		t.Fatalf("node names %v, want %d", names, testNodes)
	}
	for _, name := range names {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node %s: %v", name, err)
		}
		for k, v := range map[string]string{
			"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
			"node.kubernetes.io/instance-type": kubetest.InstanceType,
		} {
			if node.Labels[k] != v {
				t.Errorf("node %s label %s=%q, want %q", name, k, node.Labels[k], v)
			}
		}
		cpu, mem := node.Status.Allocatable[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceMemory]
		if cpu.String() != "8" || mem.String() != "32Gi" {
			t.Errorf("node %s allocatable cpu %s memory %s, want 8 and 32Gi", name, cpu.String(), mem.String())
		}
		lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("lease of node %s: %v", name, err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != name || lease.Spec.RenewTime == nil {
			t.Errorf("lease of node %s: %+v, want held by the node and renewed", name, lease.Spec)
		}
		if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != node.UID {
			t.Errorf("lease of node %s owners %+v, want the Node", name, lease.OwnerReferences)
		}
	}
}

// Shared returns the cluster Main started, with its addresses set.
func TestSharedReturnsCluster(t *testing.T) {
	c := kubetest.Shared(t)
	if c.Host() == "" || len(c.CACert()) == 0 || c.AuditLog() == "" {
		t.Fatalf("shared cluster host %q, CA %d bytes, audit log %q", c.Host(), len(c.CACert()), c.AuditLog())
	}
}
