package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/config"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/hostlink"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/guest/podidentity"
	"github.com/saltbush/saltbush/guest/state"
)

// heldVersion is the version of the desired set the fuzzed agent holds
// before each input: a set older than it must be refused.
const heldVersion = 100

// write is one write the agent asked of the cluster.
type write struct {
	verb   string
	ref    inventory.Ref
	labels map[string]string
	// annotations are an applied service account's.
	annotations map[string]string
	owner       string
	dryRun      bool
	force       bool
}

// recorder is a cluster that holds only the service accounts it is given
// and records every write. Writes of CRDs are refused (the agent would
// wait for them to be served); every other write succeeds.
type recorder struct {
	writes   []write
	accounts map[podidentity.Key]types.UID
}

func (r *recorder) client() client.WithWatch {
	forbidden := func(ref inventory.Ref) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: ref.Group, Resource: strings.ToLower(ref.Kind) + "s"}, ref.Name,
			errFuzz("the fuzzed cluster takes no CRDs"))
	}
	refOf := func(obj client.Object) inventory.Ref {
		gvk := obj.GetObjectKind().GroupVersionKind()
		return inventory.Ref{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	}
	record := func(verb string, obj client.Object) {
		r.writes = append(r.writes, write{verb: verb, ref: refOf(obj), labels: obj.GetLabels()})
	}
	return interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			if sa, ok := obj.(*corev1.ServiceAccount); ok {
				if uid, ok := r.accounts[podidentity.Key{Namespace: key.Namespace, Name: key.Name}]; ok {
					*sa = corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: uid}}
					return nil
				}
			}
			return apierrors.NewNotFound(schema.GroupResource{Resource: "objects"}, key.Name)
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return nil },
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, opts ...client.PatchOption) error {
			w := write{verb: "patch", ref: refOf(obj), labels: obj.GetLabels()}
			for _, o := range opts {
				switch o := o.(type) {
				case client.FieldOwner:
					w.owner = string(o)
				}
				if o == client.DryRunAll {
					w.dryRun = true
				}
				if o == client.ForceOwnership {
					w.force = true
				}
			}
			r.writes = append(r.writes, w)
			if w.ref.Kind == "CustomResourceDefinition" && !w.dryRun {
				return forbidden(w.ref)
			}
			return nil
		},
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w := write{verb: "apply"}
			if ac, ok := obj.(*applycorev1.ServiceAccountApplyConfiguration); ok {
				w.ref = inventory.Ref{Version: "v1", Kind: "ServiceAccount", Namespace: ptr(ac.Namespace), Name: ptr(ac.Name)}
				w.labels, w.annotations = ac.Labels, ac.Annotations
				if uid, ok := r.accounts[podidentity.Key{Namespace: ptr(ac.Namespace), Name: ptr(ac.Name)}]; ok {
					ac.WithUID(uid)
				} else {
					ac.WithUID("created-by-the-apply")
				}
			}
			for _, o := range opts {
				if fo, ok := o.(client.FieldOwner); ok {
					w.owner = string(fo)
				}
			}
			r.writes = append(r.writes, w)
			return nil
		},
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			record("create", obj)
			return nil
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			record("update", obj)
			return nil
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			record("delete", obj)
			return nil
		},
		DeleteAllOf: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteAllOfOption) error {
			record("deleteAllOf", obj)
			return nil
		},
	})
}

type errFuzz string

func (e errFuzz) Error() string { return string(e) }

func ptr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// fuzzManifests are bundles as the catalogue renders them, and ones no
// catalogue would: the agent must refuse or contain them.
var fuzzManifests = []string{
	"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: coredns\n  namespace: kube-system\n---\n" +
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  namespace: kube-system\ndata:\n  Corefile: \".:53 {}\"\n---\n" +
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: coredns\n  namespace: kube-system\n  labels: {app: dns}\nspec:\n  selector: {matchLabels: {app: dns}}\n  template:\n    metadata: {labels: {app: dns}}\n    spec: {containers: [{name: c, image: x}]}\n",
	"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: amazon-cloudwatch\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.com\nspec:\n  group: example.com\n  names: {kind: Thing, plural: things}\n  scope: Namespaced\n  versions: [{name: v1, served: true, storage: true}]\n",
	"apiVersion: v1\nkind: Secret\nmetadata:\n  name: hook-tls\n  namespace: kube-system\n  annotations: {addons.saltbush.io/serving-certificate: \"hook.kube-system.svc, hook\"}\ntype: kubernetes.io/tls\n---\n" +
		"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: hook\n  annotations: {addons.saltbush.io/inject-ca-from: kube-system/hook-tls}\nwebhooks: [{name: a.b.c, clientConfig: {}}]\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  annotations: {addons.saltbush.io/inject-ca-from: kube-system/none}\n",
	"apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  annotations: {addons.saltbush.io/serving-certificate: \",\"}\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a, namespace: default}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: spoof\n  namespace: default\n  labels: {addons.saltbush.io/name: another-addon, addons.saltbush.io/inventory: x}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: saltbush-addon-other\n  namespace: kube-system\n",
	"kind: ConfigMap\nmetadata: {name: a}\n", "apiVersion: v1\nmetadata: {name: a}\n", "apiVersion: v1\nkind: ConfigMap\n",
	"{", "- a\n", "---\n---\n", "", "\x00", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [a]}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {\"\": x}\n",
}

// FuzzDesiredSet feeds the agent a host message as the stream delivers it
// (protobuf wire bytes, as gRPC decodes them). A message that is not a
// desired set goes through the link's handler to an executor, whose grant
// must follow it (checkHostMessage). A desired set, with one more add-on
// whose name, conflict mode and bundle are fuzzed on their own, is taken
// and every add-on of it applied as the executor would, to a cluster that
// records each write. It never panics; a set older than the one held is
// refused and changes nothing; a set taken is persisted exactly (the state
// file reads back as the set, and adopting it again after a restart keeps
// every add-on's state); an add-on with a bundle or mode the agent cannot
// use is refused with an InternalFailure issue before any write; and every
// write is of the add-on's own inventory record or of an object of its
// bundle (never an inventory record, its own or another add-on's),
// labelled with its name, applied under the field manager eks and forced
// only in OVERWRITE, or of a service account that exists, under the pod
// identity field manager and keys of its own.
func FuzzDesiredSet(f *testing.F) {
	pia := &deliveryv1.DesiredPodIdentityAssociation{AssociationId: "a-00000000000000001",
		AssociationArn: "arn:aws:eks:us-east-1:111122223333:podidentityassociation/demo/a-00000000000000001",
		Namespace:      "kube-system", ServiceAccount: "coredns", RoleArn: "arn:aws:iam::111122223333:role/r", OwnerAddon: "coredns"}
	sets := []*deliveryv1.DesiredSet{
		{Version: 101, Nonce: "n", Epoch: 1, Digest: "d", Addons: []*deliveryv1.DesiredAddon{
			{Name: "coredns", Uid: "u1", Generation: 1, Version: "v1.11.1-eksbuild.1", Namespace: "kube-system", Manifest: []byte(fuzzManifests[0])}},
			PodIdentityAssociations: []*deliveryv1.DesiredPodIdentityAssociation{pia}},
		{Version: 99, Addons: []*deliveryv1.DesiredAddon{{Name: "old", Manifest: []byte(fuzzManifests[0])}}},
		{Version: 102, Addons: []*deliveryv1.DesiredAddon{{Name: "gone", Uid: "u2", Deleting: true, Preserve: true}}},
		{Version: 103, Addons: []*deliveryv1.DesiredAddon{{Name: "a", ResolveConflicts: "OVERWRITE"}, {Name: "a", ResolveConflicts: "PRESERVE"}}},
		{Version: 104, PodIdentityAssociations: []*deliveryv1.DesiredPodIdentityAssociation{pia, {AssociationId: "a-0", Namespace: "kube-system",
			ServiceAccount: "coredns", RoleArn: "r"}, {AssociationId: "a-1", Namespace: "nope", ServiceAccount: "none"}}},
		{Version: heldVersion},
		{Version: -1},
	}
	for i, s := range sets {
		wire, err := proto.Marshal(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: s}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire, "extra", "", []byte(fuzzManifests[i%len(fuzzManifests)]))
	}
	for _, m := range fuzzManifests {
		f.Add([]byte(nil), "extra", "", []byte(m))
	}
	for _, mode := range []string{"OVERWRITE", "NONE", "PRESERVE", "overwrite", "FORCE"} {
		f.Add([]byte(nil), "extra", mode, []byte(fuzzManifests[0]))
	}
	for _, name := range []string{"", "../x", "Upper", strings.Repeat("a", 300), "a/b", "coredns"} {
		f.Add([]byte(nil), name, "", []byte(fuzzManifests[0]))
	}
	f.Add([]byte{0xff, 0xff}, "extra", "", []byte(nil))
	for _, hm := range []*deliveryv1.HostMessage{
		{Message: &deliveryv1.HostMessage_Fence{Fence: &deliveryv1.Fence{Epoch: 5, Reason: "r"}}},
		{Message: &deliveryv1.HostMessage_Fence{Fence: &deliveryv1.Fence{Epoch: 4}}},
		{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_STANDBY, Epoch: 6}}},
		{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_EXECUTOR, Epoch: 3,
			Timing: &deliveryv1.Timing{FenceAfter: durationpb.New(-time.Second), HeartbeatInterval: durationpb.New(time.Hour)}}}},
		{Message: &deliveryv1.HostMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}},
		{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: &deliveryv1.ReportResult{Addon: "held", Reason: "unavailable"}}},
		{},
	} {
		wire, err := proto.Marshal(hm)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire, "extra", "", []byte(nil))
	}

	dir := f.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, wire []byte, name, mode string, manifest []byte) {
		var m deliveryv1.HostMessage
		if err := proto.Unmarshal(wire, &m); err != nil {
			return // gRPC refuses the message; the agent never sees it
		}
		set := m.GetDesiredSet()
		if set == nil {
			// Another host message: through the link's handler, as the
			// stream delivers it, to an executor at epoch 5.
			checkHostMessage(t, dir, log, &m)
			set = &deliveryv1.DesiredSet{Version: heldVersion + 1}
		}
		set.Addons = append(set.Addons, &deliveryv1.DesiredAddon{Name: name, Uid: "u-extra", Generation: 1, ResolveConflicts: mode, Manifest: manifest})
		// The whole set on the wire, as the stream carries it.
		wire, err := proto.Marshal(set)
		if err != nil {
			return // not a message gRPC could send (a string that is not UTF-8)
		}
		set = &deliveryv1.DesiredSet{}
		if err := proto.Unmarshal(wire, set); err != nil {
			t.Fatalf("a set does not decode from its own encoding: %v", err)
		}

		a := fuzzAgent(t, dir, log)
		held := a.st.Desired
		before := a.addons
		a.handle(context.Background(), event{msg: &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: set}}})
		if set.GetVersion() < heldVersion {
			if a.st.Desired != held || !sameStates(a.addons, before) || a.held.Load().GetVersion() != heldVersion {
				t.Fatalf("a set older than the one held was taken: version %d", set.GetVersion())
			}
			return
		}
		if a.st.Desired != set || a.held.Load().GetVersion() != set.GetVersion() || a.held.Load().GetDigest() != set.GetDigest() {
			t.Fatalf("the set was not taken: holding %v", a.held.Load())
		}

		// Persisted exactly, and adopted the same after a restart.
		st, err := state.Load(dir, "uid", "i-a")
		if err != nil {
			t.Fatalf("the state file does not read back: %v", err)
		}
		want := withoutUnknown(t, set)
		if !proto.Equal(st.Desired, want) {
			t.Fatalf("the state file holds another set:\n%v\nwant\n%v", st.Desired, want)
		}
		restarted := fuzzAgent(t, dir, log)
		restarted.adopt(st.Desired)
		for n, s := range a.addons {
			r := restarted.addons[n]
			if r == nil || r.digest != s.digest || !slices.Equal(r.objects, s.objects) {
				t.Fatalf("add-on %q is adopted otherwise after a restart", n)
			}
		}

		// Applied as the executor would.
		for n, s := range a.addons {
			if s.desired.GetDeleting() {
				continue
			}
			rec := &recorder{}
			applier := apply.New(rec.client(), meta.NewDefaultRESTMapper(nil), log)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, err := applier.Apply(ctx, s.desired, 1)
			cancel()
			checkApply(t, n, s.desired, rec.writes, out, err)
		}

		rec := &recorder{accounts: map[podidentity.Key]types.UID{{Namespace: "kube-system", Name: "coredns"}: "uid-coredns"}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = (&podidentity.Reconciler{Client: rec.client(), Log: log}).Reconcile(ctx, set.GetPodIdentityAssociations())
		for _, w := range rec.writes {
			k := podidentity.Key{Namespace: w.ref.Namespace, Name: w.ref.Name}
			_, exists := rec.accounts[k]
			if w.verb != "apply" || w.ref.Kind != "ServiceAccount" || !exists || w.owner != podidentity.FieldManager {
				t.Fatalf("pod identity wrote %s %s as %q (the service account exists: %v)", w.verb, w.ref, w.owner, exists)
			}
			for key := range w.labels {
				if !strings.HasPrefix(key, podidentity.Prefix) {
					t.Fatalf("pod identity set label %q on %s", key, w.ref)
				}
			}
			for key := range w.annotations {
				if !strings.HasPrefix(key, podidentity.Prefix) {
					t.Fatalf("pod identity set annotation %q on %s", key, w.ref)
				}
			}
		}
	})
}

// checkHostMessage hands m to an executor's link handler and run loop: a
// Fence of its epoch or a later one ends its grant, an older one does not;
// an Assignment leaves it writable only as the executor; anything else
// leaves the grant as it was.
func checkHostMessage(t *testing.T, dir string, log *slog.Logger, m *deliveryv1.HostMessage) {
	t.Helper()
	a := fuzzAgent(t, dir, log)
	a.events = make(chan event, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := &linkHandler{a: a, ctx: ctx}
	h.Opened("fuzz")
	h.Received(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{
		Role: deliveryv1.Role_ROLE_EXECUTOR, Epoch: 5, ExecutorInstanceId: "i-a"}}})
	h.Received(m)
	for len(a.events) > 0 {
		a.handle(ctx, <-a.events)
	}
	writable := a.grant.Snapshot().Writable
	switch msg := m.GetMessage().(type) {
	case *deliveryv1.HostMessage_Fence:
		if ended := msg.Fence.GetEpoch() >= 5; writable == ended {
			t.Fatalf("after a Fence at epoch %d of an executor at epoch 5: writable %v", msg.Fence.GetEpoch(), writable)
		}
	case *deliveryv1.HostMessage_Assignment:
		executor := msg.Assignment.GetRole() == deliveryv1.Role_ROLE_EXECUTOR
		if fa := msg.Assignment.GetTiming().GetFenceAfter().AsDuration(); executor && fa > 0 && fa < time.Minute {
			return // it may have lapsed already
		}
		if writable != executor {
			t.Fatalf("after an Assignment as %s: writable %v", msg.Assignment.GetRole(), writable)
		}
	default:
		if !writable {
			t.Fatalf("after a %T an executor is no longer writable", msg)
		}
	}
}

// checkApply checks what applying one add-on wrote and answered.
func checkApply(t *testing.T, name string, d *deliveryv1.DesiredAddon, writes []write, out apply.Outcome, err error) {
	t.Helper()
	objs, perr := apply.Objects(name, d.GetManifest())
	modeOK := slices.Contains([]string{"", "NONE", "OVERWRITE", "PRESERVE"}, d.GetResolveConflicts())
	if perr != nil || !modeOK {
		if err != nil || len(out.Issues) != 1 || out.Issues[0].GetCode() != apply.CodeInternalFailure || len(writes) > 0 {
			t.Fatalf("add-on %q (mode %q, bundle error %v): wrote %v, answered %v %v, want an InternalFailure and no write",
				name, d.GetResolveConflicts(), perr, writes, out.Issues, err)
		}
		return
	}
	bundle := map[string]bool{}
	for _, o := range objs {
		bundle[inventory.RefOf(o).Key()] = true
	}
	record := inventory.Ref{Version: "v1", Kind: "ConfigMap", Namespace: inventory.Namespace, Name: inventory.Name(name)}
	for _, w := range writes {
		switch {
		case w.verb == "patch" && w.ref == record:
			if w.owner != apply.InventoryManager || w.labels[inventory.Label] != name {
				t.Fatalf("add-on %q: its inventory record written as %q with labels %v", name, w.owner, w.labels)
			}
		case w.verb == "patch" && bundle[w.ref.Key()]:
			if isRecord(w.ref) || w.labels[inventory.Label] != "" {
				t.Fatalf("add-on %q: its bundle wrote %s, an inventory record (labels %v)", name, w.ref, w.labels)
			}
			if w.owner != apply.FieldManager || w.labels[apply.AddonLabel] != name {
				t.Fatalf("add-on %q: %s applied as %q with labels %v", name, w.ref, w.owner, w.labels)
			}
			if w.force != (d.GetResolveConflicts() == "OVERWRITE") {
				t.Fatalf("add-on %q in mode %q: %s applied with force %v", name, d.GetResolveConflicts(), w.ref, w.force)
			}
		default:
			t.Fatalf("add-on %q wrote %s %s, which is neither its bundle's nor its inventory record", name, w.verb, w.ref)
		}
	}
}

// isRecord reports whether ref names an add-on's inventory record.
func isRecord(ref inventory.Ref) bool {
	return ref.Group == "" && ref.Kind == "ConfigMap" && ref.Namespace == inventory.Namespace && strings.HasPrefix(ref.Name, inventory.Name(""))
}

// fuzzAgent is an agent with no stream and no cluster, holding a desired
// set of version heldVersion (the state in dir is reset first).
func fuzzAgent(t *testing.T, dir string, log *slog.Logger) *Agent {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, state.FileName)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir, cfg.ClusterUID, cfg.InstanceID = dir, "uid", "i-a"
	st, err := state.Load(dir, cfg.ClusterUID, cfg.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: cfg, log: log, grant: grant.New(), link: hostlink.New(hostlink.Config{Log: log}),
		st: st, addons: map[string]*addonState{}, metrics: newMetrics()}
	a.received(context.Background(), &deliveryv1.DesiredSet{Version: heldVersion, Digest: "held", Addons: []*deliveryv1.DesiredAddon{
		{Name: "held", Uid: "u-held", Generation: 1, Manifest: []byte(fuzzManifests[0])}}})
	return a
}

// sameStates reports whether two add-on state maps hold the same states.
func sameStates(a, b map[string]*addonState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, s := range a {
		if b[k] != s {
			return false
		}
	}
	return true
}

// withoutUnknown is set without the fields this agent's contract does not
// know (protojson, the state file's encoding, has no place for them).
func withoutUnknown(t *testing.T, set *deliveryv1.DesiredSet) *deliveryv1.DesiredSet {
	t.Helper()
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	out := &deliveryv1.DesiredSet{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}
