package conformance

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Pod identity associations through the unmodified AWS SDK for Go v2 and
// the façade: every operation, its typed errors, and nothing written when
// a call is refused.

const (
	podRoleARN   = "arn:aws:iam::000000000000:role/pods"
	podRole2ARN  = "arn:aws:iam::000000000000:role/pods-2"
	podTargetARN = "arn:aws:iam::111111111111:role/target"
)

var (
	podAssocIDPattern  = regexp.MustCompile(`^a-[a-z0-9]{17}$`)
	podAssocARNPattern = regexp.MustCompile(`^arn:aws:eks:us-east-1:000000000000:podidentityassociation/addons-1/a-[a-z0-9]{17}$`)
)

func (h *addonHarness) createPod(t *testing.T, ns, sa string, mod ...func(*eks.CreatePodIdentityAssociationInput)) *types.PodIdentityAssociation {
	t.Helper()
	in := &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), Namespace: aws.String(ns), ServiceAccount: aws.String(sa), RoleArn: aws.String(podRoleARN),
	}
	for _, m := range mod {
		m(in)
	}
	out, err := h.eks.CreatePodIdentityAssociation(ctxT(t), in)
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation %s/%s: %v", ns, sa, err)
	}
	return out.Association
}

func (h *addonHarness) describePod(t *testing.T, id string) *types.PodIdentityAssociation {
	t.Helper()
	out, err := h.eks.DescribePodIdentityAssociation(ctxT(t), &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
	if err != nil {
		t.Fatalf("DescribePodIdentityAssociation %s: %v", id, err)
	}
	return out.Association
}

func (h *addonHarness) podGone(t *testing.T, id string) {
	t.Helper()
	_, err := h.eks.DescribePodIdentityAssociation(ctxT(t), &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
}

func TestPodIdentityAssociationLifecycleWithSDK(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)

	a := h.createPod(t, "apps", "web", func(in *eks.CreatePodIdentityAssociationInput) {
		in.Tags = map[string]string{"team": "web"}
		in.TargetRoleArn = aws.String(podTargetARN)
	})
	id := aws.ToString(a.AssociationId)
	if !podAssocIDPattern.MatchString(id) || !podAssocARNPattern.MatchString(aws.ToString(a.AssociationArn)) ||
		!strings.HasSuffix(aws.ToString(a.AssociationArn), "/"+id) {
		t.Errorf("association id %q arn %q", id, aws.ToString(a.AssociationArn))
	}
	if aws.ToString(a.ClusterName) != h.cluster || aws.ToString(a.Namespace) != "apps" || aws.ToString(a.ServiceAccount) != "web" ||
		aws.ToString(a.RoleArn) != podRoleARN || a.OwnerArn != nil || a.Tags["team"] != "web" ||
		aws.ToString(a.TargetRoleArn) != podTargetARN || aws.ToString(a.ExternalId) == "" {
		t.Errorf("created association = %+v", a)
	}
	if a.DisableSessionTags == nil || *a.DisableSessionTags {
		t.Errorf("disableSessionTags = %v, want false (sent)", a.DisableSessionTags)
	}
	recent(t, "createdAt", a.CreatedAt)

	got := h.describePod(t, id)
	if aws.ToString(got.AssociationArn) != aws.ToString(a.AssociationArn) || aws.ToString(got.ExternalId) != aws.ToString(a.ExternalId) {
		t.Errorf("described %+v, created %+v", got, a)
	}

	up, err := h.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(id),
		RoleArn: aws.String(podRole2ARN), DisableSessionTags: aws.Bool(true), TargetRoleArn: aws.String(""),
	})
	if err != nil {
		t.Fatalf("UpdatePodIdentityAssociation: %v", err)
	}
	if u := up.Association; aws.ToString(u.RoleArn) != podRole2ARN || !aws.ToBool(u.DisableSessionTags) ||
		u.TargetRoleArn != nil || u.ExternalId != nil || aws.ToString(u.Namespace) != "apps" || aws.ToString(u.AssociationId) != id {
		t.Errorf("updated association = %+v", u)
	}

	del, err := h.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
	if err != nil {
		t.Fatalf("DeletePodIdentityAssociation: %v", err)
	}
	if aws.ToString(del.Association.AssociationId) != id || aws.ToString(del.Association.RoleArn) != podRole2ARN {
		t.Errorf("deleted association = %+v", del.Association)
	}
	h.podGone(t, id)
	// The service account is free again.
	h.createPod(t, "apps", "web")
}

func TestPodIdentityAssociationListFiltersAndPages(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	want := map[string]string{} // id → namespace/serviceAccount
	for _, p := range []struct{ ns, sa string }{{"a", "x"}, {"a", "y"}, {"b", "x"}, {"b", "y"}, {"c", "x"}} {
		a := h.createPod(t, p.ns, p.sa)
		want[aws.ToString(a.AssociationId)] = p.ns + "/" + p.sa
	}
	list := func(t *testing.T, ns, sa string, max int32) []types.PodIdentityAssociationSummary {
		t.Helper()
		var all []types.PodIdentityAssociationSummary
		in := &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(max)}
		if ns != "" {
			in.Namespace = aws.String(ns)
		}
		if sa != "" {
			in.ServiceAccount = aws.String(sa)
		}
		p := eks.NewListPodIdentityAssociationsPaginator(h.eks, in)
		pages := 0
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListPodIdentityAssociations page %d: %v", pages, err)
			}
			pages++
			all = append(all, out.Associations...)
		}
		return all
	}
	cases := []struct {
		name, ns, sa string
		want         []string
	}{
		{"all", "", "", []string{"a/x", "a/y", "b/x", "b/y", "c/x"}},
		{"namespace", "b", "", []string{"b/x", "b/y"}},
		{"service account", "", "x", []string{"a/x", "b/x", "c/x"}},
		{"both", "a", "y", []string{"a/y"}},
		{"none", "d", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range list(t, tc.ns, tc.sa, 2) {
				id := aws.ToString(s.AssociationId)
				if want[id] != aws.ToString(s.Namespace)+"/"+aws.ToString(s.ServiceAccount) ||
					aws.ToString(s.ClusterName) != h.cluster || !strings.HasSuffix(aws.ToString(s.AssociationArn), id) {
					t.Errorf("summary %+v does not match its association", s)
				}
				got = append(got, aws.ToString(s.Namespace)+"/"+aws.ToString(s.ServiceAccount))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("bad paging", func(t *testing.T) {
		_, err := h.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{
			ClusterName: aws.String(h.cluster), NextToken: aws.String("forged")})
		wanterr.Type[*types.InvalidParameterException](t, err)
	})
}

func TestPodIdentityAssociationRefusalsWriteNothing(t *testing.T) {
	h := newAddonHarness(t)
	held := h.createPod(t, "apps", "held")
	heldID := aws.ToString(held.AssociationId)
	create := func(mod func(*eks.CreatePodIdentityAssociationInput)) func() error {
		return func() error {
			in := &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
				Namespace: aws.String("apps"), ServiceAccount: aws.String("new"), RoleArn: aws.String(podRoleARN)}
			mod(in)
			_, err := h.eks.CreatePodIdentityAssociation(ctxT(t), in)
			return err
		}
	}
	update := func(id string, mod func(*eks.UpdatePodIdentityAssociationInput)) func() error {
		return func() error {
			in := &eks.UpdatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)}
			mod(in)
			_, err := h.eks.UpdatePodIdentityAssociation(ctxT(t), in)
			return err
		}
	}
	unknownID := "a-0000000000000000z"
	cases := []struct {
		name string
		call func() error
		want func(t testing.TB, err error)
		msg  string
	}{
		{"service account held", create(func(in *eks.CreatePodIdentityAssociationInput) { in.ServiceAccount = aws.String("held") }),
			wanterr.Type[*types.ResourceInUseException], "Association already exists: " + heldID},
		{"no namespace", create(func(in *eks.CreatePodIdentityAssociationInput) { in.Namespace = aws.String("") }),
			wanterr.Type[*types.InvalidParameterException], "namespace"},
		{"bad namespace", create(func(in *eks.CreatePodIdentityAssociationInput) { in.Namespace = aws.String("Bad_NS") }),
			wanterr.Type[*types.InvalidParameterException], "namespace"},
		{"bad service account", create(func(in *eks.CreatePodIdentityAssociationInput) { in.ServiceAccount = aws.String("a/b") }),
			wanterr.Type[*types.InvalidParameterException], "serviceAccount"},
		{"not a role", create(func(in *eks.CreatePodIdentityAssociationInput) {
			in.RoleArn = aws.String("arn:aws:iam::000000000000:user/u")
		}), wanterr.Type[*types.InvalidParameterException], "roleArn"},
		{"another account's role", create(func(in *eks.CreatePodIdentityAssociationInput) { in.RoleArn = aws.String(podTargetARN) }),
			wanterr.Type[*types.InvalidParameterException], "roleArn"},
		{"bad target role", create(func(in *eks.CreatePodIdentityAssociationInput) { in.TargetRoleArn = aws.String("role") }),
			wanterr.Type[*types.InvalidParameterException], "targetRoleArn"},
		{"bad policy", create(func(in *eks.CreatePodIdentityAssociationInput) { in.Policy = aws.String("{not json") }),
			wanterr.Type[*types.InvalidParameterException], "policy"},
		{"reserved tag", create(func(in *eks.CreatePodIdentityAssociationInput) { in.Tags = map[string]string{"aws:x": "y"} }),
			wanterr.Type[*types.InvalidParameterException], ""},
		{"unknown cluster", create(func(in *eks.CreatePodIdentityAssociationInput) { in.ClusterName = aws.String("nope") }),
			wanterr.Type[*types.ResourceNotFoundException], ""},
		{"update unknown id", update(unknownID, func(in *eks.UpdatePodIdentityAssociationInput) { in.RoleArn = aws.String(podRole2ARN) }),
			wanterr.Type[*types.ResourceNotFoundException], "No Pod Identity Association found for id: " + unknownID},
		{"update short id", update("a-123", func(in *eks.UpdatePodIdentityAssociationInput) { in.RoleArn = aws.String(podRole2ARN) }),
			wanterr.Type[*types.InvalidParameterException], "associationId should be 19 characters long"},
		{"update bad role", update(heldID, func(in *eks.UpdatePodIdentityAssociationInput) { in.RoleArn = aws.String(podTargetARN) }),
			wanterr.Type[*types.InvalidParameterException], "roleArn"},
		{"delete unknown id", func() error {
			_, err := h.eks.DeletePodIdentityAssociation(ctxT(t), &eks.DeletePodIdentityAssociationInput{
				ClusterName: aws.String(h.cluster), AssociationId: aws.String(unknownID)})
			return err
		}, wanterr.Type[*types.ResourceNotFoundException], ""},
		{"describe unknown id", func() error {
			_, err := h.eks.DescribePodIdentityAssociation(ctxT(t), &eks.DescribePodIdentityAssociationInput{
				ClusterName: aws.String(h.cluster), AssociationId: aws.String(unknownID)})
			return err
		}, wanterr.Type[*types.ResourceNotFoundException], ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			err := tc.call()
			tc.want(t, err)
			if tc.msg != "" {
				wanterr.Contains(t, err, tc.msg)
			}
			addonNoWrites(t, h, before)
		})
	}
}

func TestPodIdentityAssociationClientRequestToken(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	in := &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster), Namespace: aws.String("apps"),
		ServiceAccount: aws.String("web"), RoleArn: aws.String(podRoleARN), ClientRequestToken: aws.String("token-1")}
	first, err := h.eks.CreatePodIdentityAssociation(ctx, in)
	if err != nil {
		t.Fatalf("first create: %v", err)
	}
	again, err := h.eks.CreatePodIdentityAssociation(ctx, in)
	if err != nil {
		t.Fatalf("retry with the same token: %v", err)
	}
	if aws.ToString(again.Association.AssociationId) != aws.ToString(first.Association.AssociationId) {
		t.Errorf("retry made %s, first %s", aws.ToString(again.Association.AssociationId), aws.ToString(first.Association.AssociationId))
	}
	other := *in
	other.ServiceAccount = aws.String("other")
	before := addonKeyspace(t, h)
	_, err = h.eks.CreatePodIdentityAssociation(ctx, &other)
	wanterr.Type[*types.InvalidParameterException](t, err)
	addonNoWrites(t, h, before)
	// Without a token the same pair is refused: it is held.
	in.ClientRequestToken = nil
	_, err = h.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: in.ClusterName,
		Namespace: in.Namespace, ServiceAccount: in.ServiceAccount, RoleArn: in.RoleArn, ClientRequestToken: aws.String("token-2")})
	wanterr.Type[*types.ResourceInUseException](t, err)
}

func TestPodIdentityAssociationTagsByARN(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	a := h.createPod(t, "apps", "web")
	arn := a.AssociationArn
	if _, err := h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: arn, Tags: map[string]string{"k": "v"}}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	out, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: arn})
	if err != nil || out.Tags["k"] != "v" {
		t.Fatalf("ListTagsForResource = %v, %v", out, err)
	}
	if got := h.describePod(t, aws.ToString(a.AssociationId)).Tags; got["k"] != "v" {
		t.Errorf("described tags %v", got)
	}
	if _, err := h.eks.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: arn, TagKeys: []string{"k"}}); err != nil {
		t.Fatalf("UntagResource: %v", err)
	}
	if got := h.describePod(t, aws.ToString(a.AssociationId)).Tags; len(got) != 0 {
		t.Errorf("tags after untag %v", got)
	}
}

// TestPodIdentityAssociationsOwnedByAddon: an add-on's
// podIdentityAssociations are real associations it owns: created with it,
// replaced by UpdateAddon (a kept service account keeps its id), refused
// for direct change, and deleted with it.
func TestPodIdentityAssociationsOwnedByAddon(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	cni := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(podRoleARN)}}})
	ebs := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("aws-ebs-csi-driver"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("ebs-csi-controller-sa"), RoleArn: aws.String(podRoleARN)}}})

	idOf := func(t *testing.T, arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }
	owned := map[string]*types.Addon{}
	for _, ad := range []*types.Addon{cni, ebs} {
		if len(ad.PodIdentityAssociations) != 1 {
			t.Fatalf("%s associations %v", aws.ToString(ad.AddonName), ad.PodIdentityAssociations)
		}
		p := h.describePod(t, idOf(t, ad.PodIdentityAssociations[0]))
		if aws.ToString(p.OwnerArn) != aws.ToString(ad.AddonArn) || aws.ToString(p.Namespace) != "kube-system" ||
			aws.ToString(p.AssociationArn) != ad.PodIdentityAssociations[0] || aws.ToString(p.RoleArn) != podRoleARN {
			t.Errorf("association of %s = %+v", aws.ToString(ad.AddonName), p)
		}
		owned[aws.ToString(p.AssociationId)] = ad
	}
	cniID := idOf(t, cni.PodIdentityAssociations[0])
	ebsID := idOf(t, ebs.PodIdentityAssociations[0])

	t.Run("listed with their owner", func(t *testing.T) {
		out, err := h.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Associations) != 2 {
			t.Fatalf("listed %d associations", len(out.Associations))
		}
		for _, s := range out.Associations {
			if aws.ToString(s.OwnerArn) != aws.ToString(owned[aws.ToString(s.AssociationId)].AddonArn) {
				t.Errorf("summary %+v", s)
			}
		}
	})
	t.Run("direct change refused", func(t *testing.T) {
		before := addonKeyspace(t, h)
		_, err := h.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
			ClusterName: aws.String(h.cluster), AssociationId: aws.String(cniID), RoleArn: aws.String(podRole2ARN)})
		wanterr.Type[*types.InvalidRequestException](t, err)
		_, err = h.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
			ClusterName: aws.String(h.cluster), AssociationId: aws.String(cniID)})
		wanterr.Type[*types.InvalidRequestException](t, err)
		wanterr.Contains(t, err, aws.ToString(cni.AddonArn))
		addonNoWrites(t, h, before)
	})
	t.Run("a held service account is refused", func(t *testing.T) {
		before := addonKeyspace(t, h)
		_, err := h.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
			Namespace: aws.String("kube-system"), ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(podRoleARN)})
		wanterr.Type[*types.ResourceInUseException](t, err)
		wanterr.Contains(t, err, cniID)
		addonNoWrites(t, h, before)
	})

	// UpdateAddon with another role keeps the id and changes the role.
	_, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(podRole2ARN)}}})
	if err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	if p := h.describePod(t, cniID); aws.ToString(p.RoleArn) != podRole2ARN || aws.ToString(p.OwnerArn) != aws.ToString(cni.AddonArn) {
		t.Errorf("association after UpdateAddon = %+v", p)
	}
	if got := h.describe(t, "vpc-cni").PodIdentityAssociations; len(got) != 1 || idOf(t, got[0]) != cniID {
		t.Errorf("add-on associations after update %v, want the kept %s", got, cniID)
	}
	gen := h.get(t, "vpc-cni").GetGeneration()
	if r := h.report(t, "vpc-cni", gen, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
		t.Fatalf("READY not accepted: %v", r)
	}

	// An empty list removes the association.
	if _, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{}}); err != nil {
		t.Fatalf("UpdateAddon []: %v", err)
	}
	h.podGone(t, cniID)
	// The service account is free: a direct association may take it now.
	h.createPod(t, "kube-system", "aws-node")

	// DeleteAddon deletes the add-on's associations.
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("aws-ebs-csi-driver")}); err != nil {
		t.Fatalf("DeleteAddon: %v", err)
	}
	h.podGone(t, ebsID)
}

// TestPodIdentityAssociationAddonConflicts: an add-on whose service account
// already has an association is refused, and writes nothing.
func TestPodIdentityAssociationAddonConflicts(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	held := h.createPod(t, "kube-system", "ebs-csi-controller-sa")
	before := addonKeyspace(t, h)
	_, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("aws-ebs-csi-driver"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("ebs-csi-controller-sa"), RoleArn: aws.String(podRoleARN)}}})
	wanterr.Type[*types.ResourceInUseException](t, err)
	wanterr.Contains(t, err, aws.ToString(held.AssociationId))
	addonNoWrites(t, h, before)

	// The same through UpdateAddon.
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("aws-ebs-csi-driver")})
	before = addonKeyspace(t, h)
	_, err = h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("aws-ebs-csi-driver"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("ebs-csi-controller-sa"), RoleArn: aws.String(podRoleARN)}}})
	wanterr.Type[*types.ResourceInUseException](t, err)
	addonNoWrites(t, h, before)

	// DeleteAddon with preserve leaves the associations, no longer owned.
	cni := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(podRoleARN)}}})
	id := cni.PodIdentityAssociations[0][strings.LastIndex(cni.PodIdentityAssociations[0], "/")+1:]
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"), Preserve: true}); err != nil {
		t.Fatalf("DeleteAddon preserve: %v", err)
	}
	if p := h.describePod(t, id); p.OwnerArn != nil {
		t.Errorf("association after DeleteAddon preserve: owner %s", aws.ToString(p.OwnerArn))
	}
}

// TestPodIdentityAssociationConcurrentCreates: of concurrent creates for
// one service account exactly one wins; every other gets
// ResourceInUseException naming the winner.
func TestPodIdentityAssociationConcurrentCreates(t *testing.T) {
	h := newAddonHarness(t)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.eks.CreatePodIdentityAssociation(ctxT(t), &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
				Namespace: aws.String("apps"), ServiceAccount: aws.String("contended"), RoleArn: aws.String(podRoleARN)})
			if err == nil {
				ids[i] = aws.ToString(out.Association.AssociationId)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	winner := ""
	for i := range n {
		if errs[i] == nil {
			if winner != "" {
				t.Fatalf("two creates won: %s and %s", winner, ids[i])
			}
			winner = ids[i]
		}
	}
	if winner == "" {
		t.Fatalf("no create won: %v", errs)
	}
	for i := range n {
		if errs[i] != nil {
			wanterr.Type[*types.ResourceInUseException](t, errs[i])
			wanterr.Contains(t, errs[i], winner)
		}
	}
	out, err := h.eks.ListPodIdentityAssociations(ctxT(t), &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
	if err != nil || len(out.Associations) != 1 || aws.ToString(out.Associations[0].AssociationId) != winner {
		t.Errorf("listed %v, %v; want only %s", out, err, winner)
	}
}

// TestPodIdentityTwoAssociationsOfOneAddon: one add-on
// (catalog/addons/saltbush-pod-identity) owns two associations, created
// with it, changed and dropped by UpdateAddon one at a time, and deleted
// with it.
func TestPodIdentityTwoAssociationsOfOneAddon(t *testing.T) {
	const (
		name       = "saltbush-pod-identity"
		ns         = "saltbush-pod-identity"
		controller = "saltbush-pod-identity-controller"
		node       = "saltbush-pod-identity-node"
		podRole3   = "arn:aws:iam::000000000000:role/pods-3"
	)
	h := newAddonHarness(t)
	ctx := ctxT(t)
	idOf := func(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }
	assoc := func(sa, role string) types.AddonPodIdentityAssociations {
		return types.AddonPodIdentityAssociations{ServiceAccount: aws.String(sa), RoleArn: aws.String(role)}
	}
	// check holds the add-on, DescribePodIdentityAssociation and
	// ListPodIdentityAssociations to want (service account to role) and
	// returns the association id of each service account.
	check := func(t *testing.T, addonARN string, want map[string]string) map[string]string {
		t.Helper()
		arns := h.describe(t, name).PodIdentityAssociations
		if len(arns) != len(want) {
			t.Fatalf("add-on associations %v, want %d", arns, len(want))
		}
		ids := map[string]string{}
		for _, arn := range arns {
			if !podAssocARNPattern.MatchString(arn) {
				t.Errorf("association ARN %q", arn)
			}
			p := h.describePod(t, idOf(arn))
			sa := aws.ToString(p.ServiceAccount)
			role, ok := want[sa]
			if !ok || ids[sa] != "" {
				t.Fatalf("association %s of service account %s, want one of each of %v", arn, sa, want)
			}
			ids[sa] = aws.ToString(p.AssociationId)
			if aws.ToString(p.AssociationArn) != arn || aws.ToString(p.OwnerArn) != addonARN ||
				aws.ToString(p.Namespace) != ns || aws.ToString(p.RoleArn) != role ||
				!podAssocIDPattern.MatchString(aws.ToString(p.AssociationId)) {
				t.Errorf("association of %s = %+v, want role %s owned by %s", sa, p, role, addonARN)
			}
		}
		out, err := h.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Associations) != len(want) {
			t.Fatalf("listed %+v, want %d associations", out.Associations, len(want))
		}
		for _, s := range out.Associations {
			sa := aws.ToString(s.ServiceAccount)
			if aws.ToString(s.AssociationId) != ids[sa] || aws.ToString(s.OwnerArn) != addonARN ||
				aws.ToString(s.Namespace) != ns || aws.ToString(s.ClusterName) != h.cluster {
				t.Errorf("summary %+v, want %s of %s owned by %s", s, ids[sa], sa, addonARN)
			}
		}
		return ids
	}
	update := func(t *testing.T, assocs ...types.AddonPodIdentityAssociations) {
		t.Helper()
		if _, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name),
			PodIdentityAssociations: assocs}); err != nil {
			t.Fatalf("UpdateAddon %+v: %v", assocs, err)
		}
		gen := h.get(t, name).GetGeneration()
		if r := h.report(t, name, gen, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
			t.Fatalf("READY for generation %d not accepted: %v", gen, r)
		}
	}

	ad := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String(name),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{assoc(controller, podRoleARN), assoc(node, podRole2ARN)}})
	addonARN := aws.ToString(ad.AddonArn)
	if len(ad.PodIdentityAssociations) != 2 {
		t.Fatalf("CreateAddon associations %v, want 2", ad.PodIdentityAssociations)
	}
	ids := check(t, addonARN, map[string]string{controller: podRoleARN, node: podRole2ARN})

	t.Run("direct change refused", func(t *testing.T) {
		for _, id := range ids {
			before := addonKeyspace(t, h)
			_, err := h.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
				ClusterName: aws.String(h.cluster), AssociationId: aws.String(id), RoleArn: aws.String(podRole3)})
			wanterr.Type[*types.InvalidRequestException](t, err)
			_, err = h.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
				ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
			wanterr.Type[*types.InvalidRequestException](t, err)
			wanterr.Contains(t, err, addonARN)
			addonNoWrites(t, h, before)
		}
	})

	// One replaced: the node's role changes, the controller's stays; both
	// keep their ids.
	update(t, assoc(controller, podRoleARN), assoc(node, podRole3))
	if got := check(t, addonARN, map[string]string{controller: podRoleARN, node: podRole3}); !maps.Equal(got, ids) {
		t.Errorf("ids after changing a role %v, want the kept %v", got, ids)
	}

	// One dropped: the node's association is deleted, the controller's kept.
	update(t, assoc(controller, podRoleARN))
	if got := check(t, addonARN, map[string]string{controller: podRoleARN}); got[controller] != ids[controller] {
		t.Errorf("controller association %s after dropping the node's, want the kept %s", got[controller], ids[controller])
	}
	h.podGone(t, ids[node])
	// The dropped service account is free for a direct association.
	direct := h.createPod(t, ns, node)
	if direct.OwnerArn != nil {
		t.Errorf("direct association owned by %s", aws.ToString(direct.OwnerArn))
	}
	if _, err := h.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: direct.AssociationId}); err != nil {
		t.Fatalf("DeletePodIdentityAssociation of the direct association: %v", err)
	}

	// Back to two, then DeleteAddon deletes both.
	update(t, assoc(controller, podRoleARN), assoc(node, podRole2ARN))
	ids = check(t, addonARN, map[string]string{controller: podRoleARN, node: podRole2ARN})
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name)}); err != nil {
		t.Fatalf("DeleteAddon: %v", err)
	}
	gen := h.get(t, name).GetGeneration()
	if r := h.report(t, name, gen, controlv1.AddonPhase_ADDON_PHASE_REMOVED); !r.GetAccepted() {
		t.Fatalf("REMOVED for generation %d not accepted: %v", gen, r)
	}
	_, err := h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name)})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
	for _, id := range ids {
		h.podGone(t, id)
	}
	out, err := h.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Associations) != 0 {
		t.Errorf("listed %+v after DeleteAddon, want none", out.Associations)
	}
}
