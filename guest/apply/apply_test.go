package apply_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/guest/kube"
	"github.com/saltbush/saltbush/tests/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m, kubetest.Options{}) }

// executorGrant is a grant of a connected executor (renewed by the test's
// calls, which are quick).
func executorGrant() *grant.Grant {
	g := grant.New()
	g.Connected()
	g.Assign(&deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_EXECUTOR, Epoch: 1,
		Timing: &deliveryv1.Timing{FenceAfter: durationpb.New(time.Minute)}})
	return g
}

// newApplier is an applier as cfg's user, holding g.
func newApplier(t *testing.T, cfg *rest.Config, g *grant.Grant) (*apply.Applier, *kube.Clients) {
	t.Helper()
	cfg.QPS, cfg.Burst = 100, 200
	kc, err := kube.New(cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	return apply.New(kc.Client, kc.Mapper, slog.New(slog.NewTextHandler(io.Discard, nil))), kc
}

func admin(t *testing.T) kubernetes.Interface {
	cfg := kubetest.Shared(t).Admin()
	cfg.QPS, cfg.Burst = 100, 200
	return kubernetes.NewForConfigOrDie(cfg)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func desired(name string, gen int64, manifest string) *deliveryv1.DesiredAddon {
	return &deliveryv1.DesiredAddon{Name: name, Uid: "uid-" + name, Generation: gen, Version: "v1", Manifest: []byte(manifest)}
}

func configMap(ns, name, value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\ndata:\n  value: \"" + value + "\"\n---\n"
}

func namespace(name string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n---\n"
}

// TestIssueCodes: what the cluster refuses becomes the AWS issue code it
// means, naming the object.
func TestIssueCodes(t *testing.T) {
	ctx := ctxFor(t)
	c := kubetest.Shared(t)
	k := admin(t)

	// A validating admission policy that refuses ConfigMaps labelled deny.
	vap := `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: deny-labelled}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)"
    message: labelled deny
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: deny-labelled}
spec: {policyName: deny-labelled, validationActions: [Deny]}
`
	setup, _ := newApplier(t, c.Admin(), executorGrant())
	if out, err := setup.Apply(ctx, desired("policy-setup", 1, vap), 1); err != nil || len(out.Issues) > 0 {
		t.Fatalf("install the policy: %v %v", err, out.Issues)
	}
	t.Cleanup(func() {
		_, _ = setup.Delete(context.Background(), desired("policy-setup", 2, ""), k.Discovery())
	})
	// The apiserver loads a new policy asynchronously: wait until it
	// refuses a dry run.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe",
			Labels: map[string]string{"deny": "yes"}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the admission policy never took effect")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A user who may manage ConfigMaps (and so its inventory) but not
	// ClusterRoles.
	_, err := k.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "limited-agent"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "limited-agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "limited-agent"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "limited-agent"}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		user     *rest.Config
		manifest string
		code     string
		names    string
	}{
		{
			name: "admission policy", user: c.Admin(), code: apply.CodeAdmissionRequestDenied, names: "ConfigMap default/refused",
			manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: refused\n  namespace: default\n  labels: {deny: \"yes\"}\ndata: {a: b}\n",
		},
		{
			name: "RBAC", user: c.UserConfig("limited-agent"), code: apply.CodeAccessDenied, names: "ClusterRole limited-demo",
			manifest: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: limited-demo}\nrules: []\n",
		},
		{
			name: "kind not served", user: c.Admin(), code: apply.CodeK8sResourceNotFound, names: "Widget default/w",
			manifest: "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {}\n",
		},
		{
			name: "namespace missing", user: c.Admin(), code: apply.CodeK8sResourceNotFound, names: "ConfigMap no-such-namespace/c",
			manifest: configMap("no-such-namespace", "c", "x"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newApplier(t, tt.user, executorGrant())
			name := "codes-" + strings.ReplaceAll(strings.ToLower(tt.name), " ", "-")
			out, err := a.Apply(ctx, desired(name, 1, tt.manifest), 1)
			if err != nil {
				t.Fatalf("no verdict: %v", err)
			}
			if len(out.Issues) != 1 || out.Issues[0].GetCode() != tt.code || !strings.Contains(out.Issues[0].GetMessage(), tt.names) {
				t.Fatalf("issues %v, want one %s naming %s", out.Issues, tt.code, tt.names)
			}
			if len(out.Issues[0].GetResourceIds()) != 1 {
				t.Fatalf("resource ids %v", out.Issues[0].GetResourceIds())
			}
			_, _ = a.Delete(ctx, desired(name, 2, ""), k.Discovery())
		})
	}
}

// TestPruneAndDelete: a generation that drops an object prunes it; the
// inventory lists what the generation has; deleting the add-on deletes
// its objects and the namespace it created, last and only once empty of
// everything else; a namespace holding someone else's object stays.
func TestPruneAndDelete(t *testing.T) {
	ctx := ctxFor(t)
	k := admin(t)
	a, _ := newApplier(t, kubetest.Shared(t).Admin(), executorGrant())
	const ns = "prune-test"
	gen1 := namespace(ns) + configMap(ns, "a", "1") + configMap(ns, "b", "1")
	if out, err := a.Apply(ctx, desired("prune", 1, gen1), 1); err != nil || len(out.Issues) > 0 {
		t.Fatalf("gen 1: %v %v", err, out.Issues)
	}
	out, err := a.Apply(ctx, desired("prune", 2, namespace(ns)+configMap(ns, "a", "2")), 1)
	if err != nil || len(out.Issues) > 0 {
		t.Fatalf("gen 2: %v %v", err, out.Issues)
	}
	if _, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dropped ConfigMap b is still there: %v", err)
	}
	rec, err := a.Inventory().Get(ctx, "prune")
	if err != nil || !rec.Complete || len(rec.Objects) != 2 || !slices.Contains(rec.CreatedNamespaces, ns) {
		t.Fatalf("inventory after gen 2: %+v %v", rec, err)
	}

	// Someone else's object in the add-on's namespace keeps it.
	if _, err := k.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "users"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del := desired("prune", 3, "")
	del.Deleting = true
	removeAll(t, a, del, k)
	if _, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the add-on's ConfigMap a survived its deletion: %v", err)
	}
	if n, err := k.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || n.DeletionTimestamp != nil {
		t.Fatalf("the namespace holding a user's Secret was deleted: %v", err)
	}

	t.Cleanup(func() { _ = k.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	// A namespace the add-on found there is not its own: applied again
	// into it, and deleted, it stays.
	if _, err := a.Apply(ctx, desired("prune", 4, gen1), 1); err != nil {
		t.Fatal(err)
	}
	del.Generation = 5
	removeAll(t, a, del, k)
	if n, err := k.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || n.DeletionTimestamp != nil {
		t.Fatalf("a namespace the add-on found was deleted with it: %v", err)
	}

	// A namespace it created and that holds only its objects goes with it.
	const own = "prune-test-own"
	if _, err := a.Apply(ctx, desired("prune", 6, namespace(own)+configMap(own, "a", "1")), 1); err != nil {
		t.Fatal(err)
	}
	del.Generation = 7
	removeAll(t, a, del, k)
	if _, err := k.CoreV1().Namespaces().Get(ctx, own, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the add-on's own namespace survived it: %v", err)
	}
	if rec, _ := a.Inventory().Get(ctx, "prune"); rec != nil {
		t.Fatalf("inventory left after removal: %+v", rec)
	}
}

// removeAll calls Delete until nothing is pending (bounded).
func removeAll(t *testing.T, a *apply.Applier, d *deliveryv1.DesiredAddon, k kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := a.Delete(ctxFor(t), d, k.Discovery())
		if err != nil && !apply.Transient(err) {
			t.Fatalf("delete: %v", err)
		}
		if err == nil && len(out.Issues) > 0 {
			t.Fatalf("delete issues: %v", out.Issues)
		}
		if err == nil && len(out.Pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still pending: %v %v", out.Pending, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRelease: deleting with preserve leaves the objects, without the
// add-on's label and without the eks field manager, and drops the
// inventory.
func TestRelease(t *testing.T) {
	ctx := ctxFor(t)
	k := admin(t)
	a, _ := newApplier(t, kubetest.Shared(t).Admin(), executorGrant())
	if out, err := a.Apply(ctx, desired("keep", 1, configMap("default", "kept", "v")), 1); err != nil || len(out.Issues) > 0 {
		t.Fatalf("apply: %v %v", err, out.Issues)
	}
	d := desired("keep", 2, "")
	d.Deleting, d.Preserve = true, true
	if out, err := a.Release(ctx, d); err != nil || len(out.Issues) > 0 || out.Changed != 1 {
		t.Fatalf("release: %+v %v", out, err)
	}
	cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the preserved ConfigMap is gone: %v", err)
	}
	t.Cleanup(func() {
		_ = k.CoreV1().ConfigMaps("default").Delete(context.Background(), "kept", metav1.DeleteOptions{})
	})
	if _, ok := cm.Labels[apply.AddonLabel]; ok || cm.Data["value"] != "v" {
		t.Fatalf("preserved ConfigMap labels %v data %v", cm.Labels, cm.Data)
	}
	for _, mf := range cm.ManagedFields {
		if mf.Manager == apply.FieldManager {
			t.Fatalf("eks still manages the preserved ConfigMap: %v", cm.ManagedFields)
		}
	}
	if rec, _ := a.Inventory().Get(ctx, "keep"); rec != nil {
		t.Fatalf("inventory kept: %+v", rec)
	}
}

// TestNoGrantNoWrite: an agent without a grant (a standby, or fenced)
// writes nothing, not even the inventory.
func TestNoGrantNoWrite(t *testing.T) {
	ctx := ctxFor(t)
	k := admin(t)
	g := executorGrant()
	g.Fence(&deliveryv1.Fence{Epoch: 1})
	a, _ := newApplier(t, kubetest.Shared(t).Admin(), g)
	_, err := a.Apply(ctx, desired("fenced", 1, configMap("default", "fenced", "v")), 1)
	if !grant.Refused(err) {
		t.Fatalf("a fenced apply returned %v, want a refusal", err)
	}
	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "fenced", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a fenced agent wrote its object: %v", err)
	}
	if _, err := k.CoreV1().ConfigMaps(inventory.Namespace).Get(ctx, inventory.Name("fenced"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a fenced agent wrote its inventory: %v", err)
	}
}

// TestServingCertificate: a bundle's serving-certificate Secret gets a
// certificate for its names, an object asking for its CA gets it, and
// applying again keeps both (nothing is written).
func TestServingCertificate(t *testing.T) {
	ctx := ctxFor(t)
	k := admin(t)
	a, _ := newApplier(t, kubetest.Shared(t).Admin(), executorGrant())
	manifest := `apiVersion: v1
kind: Secret
metadata:
  name: hook-tls
  namespace: default
  annotations: {addons.saltbush.io/serving-certificate: "hook.default.svc,hook.default.svc.cluster.local"}
type: kubernetes.io/tls
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: cert-test
  annotations: {addons.saltbush.io/inject-ca-from: default/hook-tls}
webhooks:
- name: hook.example.com
  clientConfig: {service: {name: hook, namespace: default, path: /validate}}
  rules: [{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}]
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Ignore
`
	out, err := a.Apply(ctx, desired("certs", 1, manifest), 1)
	if err != nil || len(out.Issues) > 0 {
		t.Fatalf("apply: %v %v", err, out.Issues)
	}
	d := desired("certs", 2, "")
	d.Deleting = true
	t.Cleanup(func() { removeAll(t, a, d, k) })
	sec, err := k.CoreV1().Secrets("default").Get(ctx, "hook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(sec.Data["tls.crt"])
	if block == nil {
		t.Fatalf("no certificate in the Secret: %v", sec.Data)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.Data["ca.crt"])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "hook.default.svc.cluster.local"}); err != nil {
		t.Fatalf("the certificate does not serve its names: %v", err)
	}
	hook, err := k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "cert-test", metav1.GetOptions{})
	if err != nil || string(hook.Webhooks[0].ClientConfig.CABundle) != string(sec.Data["ca.crt"]) {
		t.Fatalf("the webhook's caBundle is not the Secret's CA: %v", err)
	}
	again, err := a.Apply(ctx, desired("certs", 1, manifest), 1)
	if err != nil || again.Changed != 0 {
		t.Fatalf("applying again wrote %d objects (%v): the certificate must be kept", again.Changed, err)
	}
	sec2, _ := k.CoreV1().Secrets("default").Get(ctx, "hook-tls", metav1.GetOptions{})
	if string(sec2.Data["tls.crt"]) != string(sec.Data["tls.crt"]) {
		t.Fatal("the certificate was replaced while valid")
	}
}
