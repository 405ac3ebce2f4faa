package conformance

import (
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/google/uuid"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

func TestAddonTagging(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	clusterARN := "arn:aws:eks:us-east-1:" + h.account + ":cluster/" + h.cluster
	a := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: map[string]string{"team": "platform"}})
	addonARN := aws.ToString(a.AddonArn)

	list := func(t *testing.T, arn string) map[string]string {
		t.Helper()
		out, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		if err != nil {
			t.Fatalf("ListTagsForResource %s: %v", arn, err)
		}
		return out.Tags
	}
	tag := func(t *testing.T, arn string, tags map[string]string) {
		t.Helper()
		if _, err := h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: tags}); err != nil {
			t.Fatalf("TagResource %s: %v", arn, err)
		}
	}
	untag := func(t *testing.T, arn string, keys ...string) {
		t.Helper()
		if _, err := h.eks.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: keys}); err != nil {
			t.Fatalf("UntagResource %s: %v", arn, err)
		}
	}
	wantTags := func(t *testing.T, arn string, want map[string]string) {
		t.Helper()
		if got := list(t, arn); !maps.Equal(got, want) {
			t.Errorf("tags of %s = %v, want %v", arn, got, want)
		}
	}

	t.Run("cluster ARN", func(t *testing.T) {
		wantTags(t, clusterARN, map[string]string{})
		tag(t, clusterARN, map[string]string{"env": "dev", "cost-center": "42"})
		wantTags(t, clusterARN, map[string]string{"env": "dev", "cost-center": "42"})
		tag(t, clusterARN, map[string]string{"env": "prod"})
		untag(t, clusterARN, "cost-center")
		wantTags(t, clusterARN, map[string]string{"env": "prod"})
		// The cluster's own description agrees.
		out, err := h.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(h.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(out.Cluster.Tags, map[string]string{"env": "prod"}) {
			t.Errorf("DescribeCluster tags = %v", out.Cluster.Tags)
		}
	})

	t.Run("add-on ARN", func(t *testing.T) {
		gen := h.get(t, "coredns").GetGeneration()
		wantTags(t, addonARN, map[string]string{"team": "platform"})
		tag(t, addonARN, map[string]string{"env": "dev", "tier": "1"})
		wantTags(t, addonARN, map[string]string{"team": "platform", "env": "dev", "tier": "1"})
		tag(t, addonARN, map[string]string{"team": "infra"})
		untag(t, addonARN, "tier")
		want := map[string]string{"team": "infra", "env": "dev"}
		wantTags(t, addonARN, want)
		if got := h.describe(t, "coredns").Tags; !maps.Equal(got, want) {
			t.Errorf("DescribeAddon tags = %v, want %v", got, want)
		}
		// Tags are metadata: no new generation for the guest to render.
		got := h.get(t, "coredns")
		if got.GetGeneration() != gen || got.GetStatus() != "ACTIVE" {
			t.Errorf("after tagging: generation %d status %s, want %d ACTIVE", got.GetGeneration(), got.GetStatus(), gen)
		}
	})

	t.Run("untag an absent key", func(t *testing.T) {
		before := list(t, addonARN)
		untag(t, addonARN, "no-such-key")
		wantTags(t, addonARN, before)
		untag(t, clusterARN, "no-such-key")
	})

	t.Run("limits", func(t *testing.T) {
		have := list(t, addonARN)
		fill := map[string]string{}
		for i := 0; len(have)+len(fill) < 50; i++ {
			fill["fill-"+string(rune('a'+i/26))+string(rune('a'+i%26))] = "x"
		}
		tag(t, addonARN, fill) // exactly 50 is allowed
		if got := len(list(t, addonARN)); got != 50 {
			t.Fatalf("%d tags, want 50", got)
		}
		bad := awsErr{code: "BadRequestException"}
		tests := []struct {
			name    string
			addon   map[string]string
			cluster map[string]string // the cluster has one tag
		}{
			{"51st tag", map[string]string{"one-too-many": "x"}, manyTags(50)},
			{"aws: prefix", map[string]string{"aws:created-by": "me"}, nil},
			{"AWS: prefix", map[string]string{"AWS:created-by": "me"}, nil},
			{"key of 129 characters", map[string]string{strings.Repeat("k", 129): "x"}, nil},
			{"value of 257 characters", map[string]string{"team": strings.Repeat("v", 257)}, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if tc.cluster == nil {
					tc.cluster = tc.addon
				}
				for arn, tags := range map[string]map[string]string{addonARN: tc.addon, clusterARN: tc.cluster} {
					before := addonKeyspace(t, h)
					_, err := h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: tags})
					checkAWSErr(t, err, bad)
					addonNoWrites(t, h, before)
				}
			})
		}
		// Back under the limit.
		keys := make([]string, 0, len(fill))
		for k := range fill {
			keys = append(keys, k)
		}
		untag(t, addonARN, keys...)
		wantTags(t, addonARN, map[string]string{"team": "infra", "env": "dev"})
	})

	// Recreate saltbush-noop: its first incarnation's ARN must name nothing.
	const noop = "saltbush-noop"
	first := addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String(noop), Tags: map[string]string{"gen": "first"}})
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(noop)}); err != nil {
		t.Fatal(err)
	}
	h.report(t, noop, 2, controlv1.AddonPhase_ADDON_PHASE_REMOVED)
	second := addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String(noop), Tags: map[string]string{"gen": "second"}})
	staleARN, liveARN := aws.ToString(first.AddonArn), aws.ToString(second.AddonArn)
	if staleARN == liveARN {
		t.Fatalf("recreated add-on kept its ARN %s", liveARN)
	}

	notFound := []struct {
		name string
		arn  string
	}{
		{"unknown cluster", "arn:aws:eks:us-east-1:" + h.account + ":cluster/nope"},
		{"unknown add-on", "arn:aws:eks:us-east-1:" + h.account + ":addon/" + h.cluster + "/vpc-cni/" + uuid.NewString()},
		{"add-on of an unknown cluster", "arn:aws:eks:us-east-1:" + h.account + ":addon/nope/coredns/" + uuid.NewString()},
		{"add-on with a uuid not its own", "arn:aws:eks:us-east-1:" + h.account + ":addon/" + h.cluster + "/coredns/" + uuid.NewString()},
		{"cluster of another account", "arn:aws:eks:us-east-1:111111111111:cluster/" + h.cluster},
		{"add-on of another account", strings.Replace(addonARN, ":"+h.account+":", ":111111111111:", 1)},
		{"cluster in another region", "arn:aws:eks:eu-west-1:" + h.account + ":cluster/" + h.cluster},
		{"add-on ARN of an earlier incarnation", staleARN},
	}
	for _, tc := range notFound {
		t.Run("NotFound/"+tc.name, func(t *testing.T) {
			want := awsErr{code: "NotFoundException"}
			before := addonKeyspace(t, h)
			_, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(tc.arn)})
			checkAWSErr(t, err, want)
			_, err = h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(tc.arn), Tags: map[string]string{"x": "y"}})
			checkAWSErr(t, err, want)
			_, err = h.eks.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(tc.arn), TagKeys: []string{"gen"}})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
	}
	// The live incarnation kept its own tags through all that.
	wantTags(t, liveARN, map[string]string{"gen": "second"})

	for _, arn := range []string{
		"not-an-arn",
		"arn:aws:s3:::my-bucket",
		"arn:aws:eks:us-east-1:" + h.account + ":cluster",
		"arn:aws:eks:us-east-1:" + h.account + ":cluster/",
		"arn:aws:eks:us-east-1:12345:cluster/" + h.cluster,
		"arn:aws:eks:us-east-1:" + h.account + ":addon/" + h.cluster + "//x",
		"arn:aws:eks:us-east-1:" + h.account + ":nodegroup-thing/x",
	} {
		t.Run("BadRequest/"+arn, func(t *testing.T) {
			want := awsErr{code: "BadRequestException"}
			before := addonKeyspace(t, h)
			_, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
			checkAWSErr(t, err, want)
			_, err = h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: map[string]string{"x": "y"}})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
	}
}

// TestAddonClusterRecreated: add-ons live under the cluster's incarnation,
// so a cluster recreated with the same name inherits none of them, and the
// ARNs and reports of the earlier incarnation's add-ons name nothing.
func TestAddonClusterRecreated(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	const cl = "reborn"
	addonCluster(t, h, cl, "1.35")
	old, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns"),
		Tags: map[string]string{"incarnation": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	oldInfo, err := h.control.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: cl}, AddonName: "coredns"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(cl)}); err != nil {
		t.Fatal(err)
	}
	cc := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t))
	if _, err := cc.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: cl}}); err != nil {
		t.Fatalf("FinalizeDeletion: %v", err)
	}
	addonCluster(t, h, cl, "1.35")

	list, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cl)})
	if err != nil || len(list.Addons) != 0 {
		t.Errorf("recreated cluster lists %v (%v), want no add-ons", list, err)
	}
	_, err = h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns")})
	checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: cl, addon: "coredns"})

	again, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(again.Addon.AddonArn) == aws.ToString(old.Addon.AddonArn) || len(again.Addon.Tags) != 0 {
		t.Errorf("new incarnation: arn %s (old %s) tags %v", aws.ToString(again.Addon.AddonArn), aws.ToString(old.Addon.AddonArn), again.Addon.Tags)
	}
	before := addonKeyspace(t, h)
	_, err = h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: old.Addon.AddonArn})
	checkAWSErr(t, err, awsErr{code: "NotFoundException"})
	_, err = h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: old.Addon.AddonArn, Tags: map[string]string{"x": "y"}})
	checkAWSErr(t, err, awsErr{code: "NotFoundException"})
	// A late report from the old cluster incarnation's agent names nothing.
	r, err := h.control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
		ClusterUid: oldInfo.GetAddon().GetClusterUid(), AddonName: "coredns", AddonUid: oldInfo.GetAddon().GetUid(),
		Generation: 1, Phase: controlv1.AddonPhase_ADDON_PHASE_READY,
	})
	if err != nil || r.GetAccepted() {
		t.Errorf("report for the old cluster incarnation: %v %v, want rejected", r, err)
	}
	addonNoWrites(t, h, before)
}
