package conformance

import (
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const gpuPlugin = "nvidia-device-plugin"

func addonEnsure(t *testing.T, h *addonHarness, name, ref string) *controlv1.EnsureAddonResponse {
	t.Helper()
	out, err := h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: name, Reference: ref})
	if err != nil {
		t.Fatalf("EnsureAddon %s for %s: %v", name, ref, err)
	}
	return out
}

func addonRelease(t *testing.T, h *addonHarness, name, ref string) *controlv1.ReleaseAddonResponse {
	t.Helper()
	out, err := h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: h.ref(), AddonName: name, Reference: ref})
	if err != nil {
		t.Fatalf("ReleaseAddon %s for %s: %v", name, ref, err)
	}
	return out
}

// TestAddonEnsureRelease walks an add-on owned by reference through its
// life: created for the first reference, shared, re-driven after a failure,
// kept while referenced, deleted with its last reference.
func TestAddonEnsureRelease(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	const refA, refB = "nodegroup/gpu-a", "nodegroup/gpu-b"

	first := addonEnsure(t, h, gpuPlugin, refA)
	t.Run("creates the hidden add-on", func(t *testing.T) {
		a := first.GetAddon()
		if !first.GetCreated() || a.GetStatus() != "CREATING" || a.GetGeneration() != 1 || !slices.Equal(a.GetReferences(), []string{refA}) {
			t.Fatalf("Ensure: created=%v %s gen %d refs %v", first.GetCreated(), a.GetStatus(), a.GetGeneration(), a.GetReferences())
		}
		// The façade sees it like any other add-on.
		d := h.describe(t, gpuPlugin)
		if d.Status != types.AddonStatusCreating || aws.ToString(d.AddonVersion) != "v0.17.4-eksbuild.1" {
			t.Errorf("DescribeAddon: %s %s", d.Status, aws.ToString(d.AddonVersion))
		}
		list, err := h.eks.ListAddons(ctxT(t), &eks.ListAddonsInput{ClusterName: aws.String(h.cluster)})
		if err != nil || !slices.Contains(list.Addons, gpuPlugin) {
			t.Errorf("ListAddons = %v, %v", list, err)
		}
	})

	t.Run("repeating is harmless", func(t *testing.T) {
		before := addonKeyspace(t, h)
		again := addonEnsure(t, h, gpuPlugin, refA)
		if again.GetCreated() || again.GetAddon().GetGeneration() != 1 || !slices.Equal(again.GetAddon().GetReferences(), []string{refA}) {
			t.Errorf("repeat: created=%v gen %d refs %v", again.GetCreated(), again.GetAddon().GetGeneration(), again.GetAddon().GetReferences())
		}
		if again.GetAddon().GetUid() != first.GetAddon().GetUid() {
			t.Errorf("repeat changed the uid")
		}
		addonNoWrites(t, h, before)
	})

	t.Run("a second reference", func(t *testing.T) {
		out := addonEnsure(t, h, gpuPlugin, refB)
		if out.GetCreated() || out.GetAddon().GetGeneration() != 1 || !slices.Equal(out.GetAddon().GetReferences(), []string{refA, refB}) {
			t.Errorf("second reference: created=%v gen %d refs %v", out.GetCreated(), out.GetAddon().GetGeneration(), out.GetAddon().GetReferences())
		}
	})

	t.Run("a failed add-on is re-driven", func(t *testing.T) {
		h.report(t, gpuPlugin, 1, controlv1.AddonPhase_ADDON_PHASE_FAILED,
			&controlv1.AddonIssue{Code: "InsufficientNumberOfReplicas", Message: "no GPU nodes yet"})
		if got := h.describe(t, gpuPlugin).Status; got != types.AddonStatusCreateFailed {
			t.Fatalf("after FAILED: %s", got)
		}
		out := addonEnsure(t, h, gpuPlugin, refA)
		a := out.GetAddon()
		if !out.GetCreated() || a.GetStatus() != "CREATING" || a.GetGeneration() != 2 || !slices.Equal(a.GetReferences(), []string{refA, refB}) {
			t.Errorf("re-drive: created=%v %s gen %d refs %v", out.GetCreated(), a.GetStatus(), a.GetGeneration(), a.GetReferences())
		}
		d := h.describe(t, gpuPlugin)
		if d.Status != types.AddonStatusCreating || d.Health == nil || len(d.Health.Issues) != 0 {
			t.Errorf("described after re-drive: %s %+v, want CREATING without issues", d.Status, d.Health)
		}
		// The failed generation's late reports settle nothing now.
		if r := h.report(t, gpuPlugin, 1, controlv1.AddonPhase_ADDON_PHASE_READY); r.GetAccepted() {
			t.Errorf("READY for the failed generation accepted")
		}
	})

	t.Run("release one of two keeps it", func(t *testing.T) {
		out := addonRelease(t, h, gpuPlugin, refB)
		if out.GetDeleting() || out.GetAddon().GetStatus() != "CREATING" || out.GetAddon().GetGeneration() != 2 ||
			!slices.Equal(out.GetAddon().GetReferences(), []string{refA}) {
			t.Errorf("release B: deleting=%v %s gen %d refs %v", out.GetDeleting(), out.GetAddon().GetStatus(),
				out.GetAddon().GetGeneration(), out.GetAddon().GetReferences())
		}
		// Releasing it again, or a reference never taken, changes nothing.
		before := addonKeyspace(t, h)
		for _, ref := range []string{refB, "nodegroup/never"} {
			if again := addonRelease(t, h, gpuPlugin, ref); again.GetDeleting() {
				t.Errorf("release %s again: deleting", ref)
			}
		}
		addonNoWrites(t, h, before)
	})

	t.Run("releasing the last deletes it", func(t *testing.T) {
		out := addonRelease(t, h, gpuPlugin, refA)
		a := out.GetAddon()
		if !out.GetDeleting() || a.GetStatus() != "DELETING" || a.GetGeneration() != 3 || len(a.GetReferences()) != 0 || !a.GetDeleting() {
			t.Errorf("release A: deleting=%v %s gen %d refs %v", out.GetDeleting(), a.GetStatus(), a.GetGeneration(), a.GetReferences())
		}
		if got := h.describe(t, gpuPlugin).Status; got != types.AddonStatusDeleting {
			t.Errorf("DescribeAddon = %s, want DELETING", got)
		}
	})

	t.Run("ensure while DELETING is refused", func(t *testing.T) {
		before := addonKeyspace(t, h)
		_, err := h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: refA})
		wanterr.Status(t, err, codes.AlreadyExists, "ResourceInUseException")
		addonNoWrites(t, h, before)
	})

	t.Run("ensure after removal creates a new incarnation", func(t *testing.T) {
		h.report(t, gpuPlugin, 3, controlv1.AddonPhase_ADDON_PHASE_REMOVED)
		out := addonEnsure(t, h, gpuPlugin, refB)
		if !out.GetCreated() || out.GetAddon().GetUid() == first.GetAddon().GetUid() || out.GetAddon().GetGeneration() != 1 {
			t.Errorf("ensure after removal: created=%v uid %s (old %s) gen %d", out.GetCreated(),
				out.GetAddon().GetUid(), first.GetAddon().GetUid(), out.GetAddon().GetGeneration())
		}
	})
}

// TestAddonEnsureUserOwned: an add-on the user created is only borrowed by
// references; releasing them never deletes it.
func TestAddonEnsureUserOwned(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String(gpuPlugin)})
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("kube-proxy")})

	out := addonEnsure(t, h, gpuPlugin, "nodegroup/gpu-a")
	if out.GetCreated() || out.GetAddon().GetStatus() != "ACTIVE" || out.GetAddon().GetGeneration() != 1 ||
		!slices.Equal(out.GetAddon().GetReferences(), []string{"nodegroup/gpu-a"}) {
		t.Errorf("ensure a user's add-on: created=%v %s gen %d refs %v", out.GetCreated(), out.GetAddon().GetStatus(),
			out.GetAddon().GetGeneration(), out.GetAddon().GetReferences())
	}
	rel := addonRelease(t, h, gpuPlugin, "nodegroup/gpu-a")
	if rel.GetDeleting() || rel.GetAddon().GetStatus() != "ACTIVE" || len(rel.GetAddon().GetReferences()) != 0 {
		t.Errorf("release a user's add-on: deleting=%v %s refs %v", rel.GetDeleting(), rel.GetAddon().GetStatus(), rel.GetAddon().GetReferences())
	}
	if got := h.describe(t, gpuPlugin).Status; got != types.AddonStatusActive {
		t.Errorf("user's add-on after release = %s, want ACTIVE", got)
	}

	// Referenced while still CREATING, then released: still the user's.
	addonEnsure(t, h, "kube-proxy", "svc/x")
	addonRelease(t, h, "kube-proxy", "svc/x")
	if got := h.describe(t, "kube-proxy").Status; got != types.AddonStatusCreating {
		t.Errorf("kube-proxy = %s, want CREATING", got)
	}

	// The user deleting an add-on others reference is the user's call; the
	// references do not resurrect it while it is DELETING.
	addonEnsure(t, h, gpuPlugin, "nodegroup/gpu-b")
	if _, err := h.eks.DeleteAddon(ctxT(t), &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(gpuPlugin)}); err != nil {
		t.Fatal(err)
	}
	_, err := h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: "nodegroup/gpu-b"})
	wanterr.Status(t, err, codes.AlreadyExists, "ResourceInUseException")
}

func TestAddonEnsureErrors(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	addonCluster(t, h, "broken", "1.35")
	addonSetClusterStatus(t, h, "broken", controlv1.ClusterStatus_CLUSTER_STATUS_FAILED)
	addonCluster(t, h, "old-133", "1.33")
	ref := h.ref()
	other := func(name string) *controlv1.ClusterRef {
		return &controlv1.ClusterRef{AccountId: h.account, Name: name}
	}

	tests := []struct {
		name   string
		req    *controlv1.EnsureAddonRequest
		code   codes.Code
		reason string
	}{
		{"unknown cluster", &controlv1.EnsureAddonRequest{Cluster: other("nope"), AddonName: gpuPlugin, Reference: "ng/a"},
			codes.NotFound, "ResourceNotFoundException"},
		{"cluster of another account", &controlv1.EnsureAddonRequest{
			Cluster: &controlv1.ClusterRef{AccountId: "111111111111", Name: h.cluster}, AddonName: gpuPlugin, Reference: "ng/a"},
			codes.NotFound, "ResourceNotFoundException"},
		{"no cluster", &controlv1.EnsureAddonRequest{AddonName: gpuPlugin, Reference: "ng/a"},
			codes.InvalidArgument, "InvalidParameterException"},
		{"FAILED cluster", &controlv1.EnsureAddonRequest{Cluster: other("broken"), AddonName: gpuPlugin, Reference: "ng/a"},
			codes.FailedPrecondition, "InvalidRequestException"},
		{"unknown add-on", &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: "no-such-addon", Reference: "ng/a"},
			codes.InvalidArgument, "InvalidParameterException"},
		{"empty reference", &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: gpuPlugin},
			codes.InvalidArgument, "InvalidParameterException"},
		{"malformed reference", &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: gpuPlugin, Reference: "/ng a"},
			codes.InvalidArgument, "InvalidParameterException"},
		{"unknown version", &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: gpuPlugin, AddonVersion: "v9.9.9", Reference: "ng/a"},
			codes.InvalidArgument, "InvalidParameterException"},
		{"incompatible version", &controlv1.EnsureAddonRequest{Cluster: other("old-133"), AddonName: gpuPlugin,
			AddonVersion: "v0.17.4-eksbuild.1", Reference: "ng/a"}, codes.InvalidArgument, "InvalidParameterException"},
		{"invalid configuration", &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: gpuPlugin,
			ConfigurationValues: `{"noSuchSetting": true}`, Reference: "ng/a"}, codes.InvalidArgument, "InvalidParameterException"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			_, err := h.control.EnsureAddon(ctxT(t), tc.req)
			wanterr.Status(t, err, tc.code, tc.reason)
			addonNoWrites(t, h, before)
		})
	}

	t.Run("release on an unknown cluster", func(t *testing.T) {
		_, err := h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: other("nope"), AddonName: gpuPlugin, Reference: "ng/a"})
		wanterr.Status(t, err, codes.NotFound, "ResourceNotFoundException")
	})
	t.Run("release with a malformed reference", func(t *testing.T) {
		_, err := h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: ref, AddonName: gpuPlugin, Reference: ""})
		wanterr.Status(t, err, codes.InvalidArgument, "InvalidParameterException")
	})
	t.Run("release of an absent add-on changes nothing", func(t *testing.T) {
		before := addonKeyspace(t, h)
		out, err := h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: ref, AddonName: gpuPlugin, Reference: "ng/a"})
		if err != nil || out.GetDeleting() {
			t.Errorf("release absent: %v %v", out, err)
		}
		addonNoWrites(t, h, before)
	})
	t.Run("ensure with a version and configuration", func(t *testing.T) {
		out, err := h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: other("old-133"), AddonName: gpuPlugin,
			AddonVersion: "v0.17.1-eksbuild.1", ConfigurationValues: `{"migStrategy": "single"}`, Reference: "ng/a"})
		if err != nil {
			t.Fatalf("EnsureAddon: %v", err)
		}
		if !out.GetCreated() || out.GetAddon().GetVersion() != "v0.17.1-eksbuild.1" {
			t.Errorf("ensure: created=%v version %s", out.GetCreated(), out.GetAddon().GetVersion())
		}
		if got := aws.ToString(addonDescribeOn(t, h, "old-133", gpuPlugin).ConfigurationValues); got != `{"migStrategy": "single"}` {
			t.Errorf("configurationValues = %q", got)
		}
	})
}

// TestAddonEnsureConcurrent: references taken at once share one add-on;
// released at once, exactly one release deletes it.
func TestAddonEnsureConcurrent(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	const n = 10
	refs := make([]string, n)
	for i := range refs {
		refs[i] = "nodegroup/gpu-" + string(rune('a'+i))
	}
	outs, errs := concurrently(n, func(i int) (*controlv1.EnsureAddonResponse, error) {
		return h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: refs[i]})
	})
	created := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ensure %s: %v", refs[i], err)
		}
		if outs[i].GetCreated() {
			created++
		}
	}
	a := h.get(t, gpuPlugin)
	if created != 1 || a.GetGeneration() != 1 || !slices.Equal(a.GetReferences(), refs) {
		t.Fatalf("concurrent ensure: %d created, generation %d, references %v", created, a.GetGeneration(), a.GetReferences())
	}

	rels, errs := concurrently(n, func(i int) (*controlv1.ReleaseAddonResponse, error) {
		return h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: refs[i]})
	})
	deleting := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("release %s: %v", refs[i], err)
		}
		if rels[i].GetDeleting() {
			deleting++
		}
	}
	a = h.get(t, gpuPlugin)
	if deleting != 1 || a.GetStatus() != "DELETING" || a.GetGeneration() != 2 || len(a.GetReferences()) != 0 {
		t.Errorf("concurrent release: %d said deleting, status %s generation %d references %v",
			deleting, a.GetStatus(), a.GetGeneration(), a.GetReferences())
	}
}

// TestAddonReleaseRacingEnsure: a release of the last reference that races
// a new reference must answer deleting=true only if it really moved the
// add-on to DELETING. The caller acts on that answer (it stops tracking the
// add-on), so a wrong true leaves an add-on nobody believes they hold.
func TestAddonReleaseRacingEnsure(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	const rounds = 30
	wrong := 0
	for i := range rounds {
		refA, refC := "ng/a-"+strconv.Itoa(i), "ng/c-"+strconv.Itoa(i)
		if out := addonEnsure(t, h, gpuPlugin, refA); !out.GetCreated() {
			t.Fatalf("round %d: ensure did not create: %v", i, out)
		}
		var (
			wg     sync.WaitGroup
			rel    *controlv1.ReleaseAddonResponse
			relErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			rel, relErr = h.control.ReleaseAddon(ctxT(t), &controlv1.ReleaseAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: refA})
		}()
		go func() {
			defer wg.Done()
			// Refused (ResourceInUse) when the release won; either is fine.
			_, _ = h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: refC})
		}()
		wg.Wait()
		if relErr != nil {
			t.Fatalf("round %d: release: %v", i, relErr)
		}
		stored := h.get(t, gpuPlugin)
		if rel.GetDeleting() != (stored.GetStatus() == "DELETING") || rel.GetDeleting() != (rel.GetAddon().GetStatus() == "DELETING") {
			wrong++
			if wrong <= 3 {
				t.Errorf("round %d: release answered deleting=%v with addon status %s, but the stored add-on is %s with references %v",
					i, rel.GetDeleting(), rel.GetAddon().GetStatus(), stored.GetStatus(), stored.GetReferences())
			}
		}
		// Reset: delete it (if the ensure won) and observe the removal.
		if stored.GetStatus() != "DELETING" {
			addonRelease(t, h, gpuPlugin, refC)
		}
		h.report(t, gpuPlugin, h.get(t, gpuPlugin).GetGeneration(), controlv1.AddonPhase_ADDON_PHASE_REMOVED)
	}
	if wrong > 0 {
		t.Errorf("%d of %d racing releases answered deleting wrongly", wrong, rounds)
	}
}

// TestAddonEnsureDeleteFailed: an add-on whose deletion failed still has
// deletion as its desired state. Ensure must not answer success while
// leaving it so (the caller would believe the add-on is provided while
// saltbush keeps trying to remove it): it either refuses, as for DELETING,
// or re-drives it to a new CREATING generation that is no longer deleted.
func TestAddonEnsureDeleteFailed(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	addonEnsure(t, h, gpuPlugin, "ng/a")
	if out := addonRelease(t, h, gpuPlugin, "ng/a"); !out.GetDeleting() {
		t.Fatalf("release of the only reference: %v", out)
	}
	h.report(t, gpuPlugin, 2, controlv1.AddonPhase_ADDON_PHASE_FAILED)
	if got := h.describe(t, gpuPlugin).Status; got != types.AddonStatusDeleteFailed {
		t.Fatalf("after FAILED while deleting: %s", got)
	}

	out, err := h.control.EnsureAddon(ctxT(t), &controlv1.EnsureAddonRequest{Cluster: h.ref(), AddonName: gpuPlugin, Reference: "ng/b"})
	a := h.get(t, gpuPlugin)
	if err != nil {
		st, _ := status.FromError(err)
		if st.Code() != codes.AlreadyExists && st.Code() != codes.FailedPrecondition {
			t.Errorf("ensure on DELETE_FAILED: %v, want a refusal (AlreadyExists or FailedPrecondition) or a re-drive", err)
		}
		if slices.Contains(a.GetReferences(), "ng/b") {
			t.Errorf("a refused ensure recorded its reference: %v", a.GetReferences())
		}
		return
	}
	if a.GetDeleting() || a.GetStatus() != "CREATING" || a.GetGeneration() != 3 || !out.GetCreated() {
		t.Errorf("ensure on DELETE_FAILED answered success (created=%v) but the add-on is %s, deleting=%v, generation %d, references %v",
			out.GetCreated(), a.GetStatus(), a.GetDeleting(), a.GetGeneration(), a.GetReferences())
	}
}
