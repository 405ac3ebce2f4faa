package agent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/poll"
)

// gate is an admission webhook that holds the first real (not dry-run)
// write of a kind until released, so a test can stop an agent in the
// middle of applying an add-on.
type gate struct {
	srv      *httptest.Server
	caPEM    []byte
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
}

func newGate(t *testing.T) *gate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gate"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{reached: make(chan struct{}), released: make(chan struct{}),
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(g.review))
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() {
	select {
	case <-g.released:
	default:
		close(g.released)
	}
}

func (g *gate) review(w http.ResponseWriter, r *http.Request) {
	var ar admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&ar); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ar.Request.DryRun == nil || !*ar.Request.DryRun {
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.released:
		case <-r.Context().Done():
			return
		}
	}
	ar.Response = &admissionv1.AdmissionResponse{UID: ar.Request.UID, Allowed: true}
	_ = json.NewEncoder(w).Encode(ar)
}

// install registers the gate for creates of Deployments of addon.
func (g *gate) install(t *testing.T, e *env, addon string) {
	t.Helper()
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(30)
	url := g.srv.URL + "/validate"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gate-" + strings.ToLower(e.cluster)},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "gate.saltbush.test", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: g.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{apply.AddonLabel: addon}},
			FailurePolicy:  &fail, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	ctx := e.ctx(30 * time.Second)
	if _, err := e.k8s.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.k8s.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(e.ctx(30*time.Second), cfg.Name, metav1.DeleteOptions{})
	})
}

// isInventory reports whether a write is of an inventory record.
func isInventory(w kubetest.AuditEvent) bool {
	return w.ObjectRef.Resource == "configmaps" && w.ObjectRef.Namespace == inventory.Namespace &&
		strings.HasPrefix(w.ObjectRef.Name, inventory.Name(""))
}

// applyStamps identify, per object, what the field manager eks last
// applied: its managedFields entry (time and fields) and, for kinds no
// controller writes, the resource version.
func (e *env) applyStamps(objs map[string]kubetest.AuditObjectRef) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for key, r := range objs {
		u := e.object(schema.GroupVersionResource{Group: r.APIGroup, Version: r.APIVersion, Resource: r.Resource}, r.Namespace, r.Name)
		if u == nil {
			out[key] = "gone"
			continue
		}
		var stamp string
		for _, mf := range u.GetManagedFields() {
			if mf.Manager == apply.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
				stamp = mf.Time.String() + " " + mf.FieldsV1.GetRawString()
			}
		}
		switch r.Resource {
		case "serviceaccounts", "clusterroles", "clusterrolebindings", "configmaps":
			stamp += " rv " + u.GetResourceVersion()
		}
		out[key] = stamp
	}
	return out
}

// realWrites are the writes that changed something (not dry runs).
func realWrites(evs []kubetest.AuditEvent) []kubetest.AuditEvent {
	var out []kubetest.AuditEvent
	for _, ev := range evs {
		if !strings.Contains(ev.RequestURI, "dryRun=") && ev.Code < 400 {
			out = append(out, ev)
		}
	}
	return out
}

// TestRestartMidApply kills the agent (SIGKILL) while it is applying
// coredns — some objects written, the Deployment's create held by an
// admission webhook — and starts it again on the same state directory: it
// converges, changes none of the objects it had written (eks's
// managedFields entries and the resource versions stay), and the
// inventory covered every object of the generation from before the first
// write. Killed and started again once converged, it changes nothing.
func TestRestartMidApply(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	g := newGate(t)
	g.install(t, e, "coredns")
	a := e.startAgent("i-a", agentOptions{})
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String("coredns"), ConfigurationValues: aws.String(`{"replicaCount": 1}`)})
	select {
	case <-g.reached:
	case <-time.After(waitChange):
		t.Fatal("the agent never got to the Deployment")
	}
	a.kill(t)
	g.release()

	before := realWrites(e.writes(a.user))
	written := map[string]kubetest.AuditObjectRef{}
	for _, w := range before {
		// The Deployment's create was held at the kill: whether it landed
		// (the apiserver finishes a request whose client died) is a race.
		if !isInventory(w) && w.ObjectRef.Resource != "deployments" {
			written[w.ObjectRef.Resource+"/"+w.ObjectRef.Name] = w.ObjectRef
		}
	}
	if len(written) < 2 {
		t.Fatalf("only %v written before the kill: not mid-apply", written)
	}
	stamps := e.applyStamps(written)
	inv := e.object(configmaps, inventory.Namespace, inventory.Name("coredns"))
	if inv == nil || !strings.Contains(inv.Object["data"].(map[string]any)["inventory.json"].(string), `"Deployment"`) {
		t.Fatalf("the inventory at the kill does not list the Deployment it was creating: %v", inv)
	}

	a = e.startAgent("i-a", agentOptions{stateDir: a.stateDir})
	e.waitActive("coredns")
	// Re-applying may send patches the apiserver finds to be no-ops
	// (Flux's drift check races the controllers' status writes); what must
	// not happen is a write that changed what eks applied.
	for key, now := range e.applyStamps(written) {
		if now != stamps[key] {
			t.Fatalf("after the restart the agent wrote %s again: %s, before %s", key, now, stamps[key])
		}
	}
	if e.object(deployments, "kube-system", "coredns") == nil {
		t.Fatal("no Deployment after the restart")
	}

	a.kill(t)
	settled := time.Now()
	a = e.startAgent("i-a", agentOptions{stateDir: a.stateDir})
	a.waitRole(t, "EXECUTOR")
	e.waitActive("coredns")
	// Give it time to do whatever it would do: its reports reach saltbush
	// (the add-on stays ACTIVE), then look at what it wrote.
	poll.Until(t, waitChange, "the restarted agent reports", func() (bool, string) {
		st, err := a.status(t)
		return err == nil && len(st.Addons) == 1 && st.Addons[0].Phase == "READY", fmt.Sprint(st.Addons, err)
	})
	all := map[string]kubetest.AuditObjectRef{}
	for _, w := range realWrites(e.writes(a.user)) {
		if !isInventory(w) && w.RequestReceivedTimestamp.Before(settled) {
			all[w.ObjectRef.Resource+"/"+w.ObjectRef.Name] = w.ObjectRef
		}
	}
	if len(all) < 7 {
		t.Fatalf("coredns has 7 objects, the agent wrote %d", len(all))
	}
	stamps = e.applyStamps(all)
	time.Sleep(time.Second) // a write now would show in eks's managedFields time (second resolution)
	for key, now := range e.applyStamps(all) {
		if now != stamps[key] {
			t.Fatalf("a converged agent restarted and wrote %s: %s, before %s", key, now, stamps[key])
		}
	}
}

// TestStopLogged: SIGTERM, as systemd stops the unit, is logged when it
// arrives (the signal, the member, the role it held) and when the stop is
// over (the grant ended, no write outlived it), so that the journal tells a
// stop that was asked for from a crash.
func TestStopLogged(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	a := e.startAgent("i-a", agentOptions{})
	a.waitRole(t, "EXECUTOR")
	a.Stop()
	lines := map[string]string{}
	for _, l := range strings.Split(a.log(), "\n") {
		for _, msg := range []string{"saltbush-agent stopping", "saltbush-agent stopped"} {
			if strings.Contains(l, `msg="`+msg) {
				lines[msg] = l
			}
		}
	}
	for msg, want := range map[string][]string{
		"saltbush-agent stopping": {`reason="terminated signal received"`, "cluster=" + e.cluster, "cluster_uid=" + e.uid,
			"instance=i-a", "role=ROLE_EXECUTOR"},
		"saltbush-agent stopped": {"took=", "grant_released=true", "writes_drained=true"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[msg], w) {
				t.Errorf("the %q line %q lacks %q", msg, lines[msg], w)
			}
		}
	}
}
