package conformance

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Accounts are walls: account B, holding valid root credentials of its
// own, can neither see nor change anything of account A's, by name or by
// ARN, and cannot tell A's resources from ones that never existed.

// tenancyTarget names the resources an attempt aims at.
type tenancyTarget struct {
	cluster, addon, updateID, clusterARN, addonARN string
}

// tenancyView is everything A can read about its resources.
type tenancyView struct {
	Clusters    []string
	Cluster     *types.Cluster
	Shared      *types.Cluster
	Addons      []string
	Addon       *types.Addon
	Updates     []string
	Update      *types.Update
	ClusterTags map[string]string
	AddonTags   map[string]string
}

func tenancyRead(t *testing.T, c *eks.Client, cluster, addon, updateID, clusterARN, addonARN string) tenancyView {
	t.Helper()
	ctx := ctxT(t)
	var v tenancyView
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	lc, err := c.ListClusters(ctx, &eks.ListClustersInput{})
	must("ListClusters", err)
	v.Clusters = lc.Clusters
	dc, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
	must("DescribeCluster", err)
	v.Cluster = dc.Cluster
	ds, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("shared-2")})
	must("DescribeCluster shared-2", err)
	v.Shared = ds.Cluster
	la, err := c.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cluster)})
	must("ListAddons", err)
	v.Addons = la.Addons
	da, err := c.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
	must("DescribeAddon", err)
	v.Addon = da.Addon
	lu, err := c.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(cluster), AddonName: aws.String(addon)})
	must("ListUpdates", err)
	v.Updates = lu.UpdateIds
	du, err := c.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(cluster), UpdateId: aws.String(updateID), AddonName: aws.String(addon)})
	must("DescribeUpdate", err)
	v.Update = du.Update
	ct, err := c.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(clusterARN)})
	must("ListTagsForResource cluster", err)
	v.ClusterTags = ct.Tags
	at, err := c.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(addonARN)})
	must("ListTagsForResource addon", err)
	v.AddonTags = at.Tags
	return v
}

func TestAuthTenancyIsolation(t *testing.T) {
	t.Parallel()
	// Account A: the development account, with an ACTIVE cluster, an
	// add-on with an update in progress, tags on both, and a second
	// cluster created with a known idempotency token.
	h := newAddonHarness(t)
	srv, a := h.srv, h.eks
	ctx := ctxT(t)
	region, acctA := srv.Config.Cluster.Region, h.account
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: map[string]string{"owner": "a"},
		ClientRequestToken: aws.String("tenancy-addon-token")})
	up, err := a.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
	if err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	in := createInput("shared-2")
	in.ClientRequestToken = aws.String("tenancy-cluster-token")
	if _, err := a.CreateCluster(ctx, in); err != nil {
		t.Fatalf("CreateCluster shared-2: %v", err)
	}
	real := tenancyTarget{
		cluster:    h.cluster,
		addon:      "coredns",
		updateID:   aws.ToString(up.Update.Id),
		clusterARN: "arn:aws:eks:" + region + ":" + acctA + ":cluster/" + h.cluster,
		addonARN:   aws.ToString(h.describe(t, "coredns").AddonArn),
	}
	if _, err := a.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(real.clusterARN), Tags: map[string]string{"env": "a"}}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	// What B would name to probe for things that never existed: the
	// answers must be the same, or B learns what A has.
	ghost := tenancyTarget{
		cluster:    "ghost-1",
		addon:      "coredns",
		updateID:   "5b3a3a4e-9d1f-4c7e-8a55-0c1d2e3f4a5b",
		clusterARN: "arn:aws:eks:" + region + ":" + acctA + ":cluster/ghost-1",
		addonARN:   "arn:aws:eks:" + region + ":" + acctA + ":addon/ghost-1/coredns/5b3a3a4e-9d1f-4c7e-8a55-0c1d2e3f4a5b",
	}
	readA := func() tenancyView {
		return tenancyRead(t, a, real.cluster, real.addon, real.updateID, real.clusterARN, real.addonARN)
	}
	viewA := readA()
	if viewA.Cluster.Status != types.ClusterStatusActive || viewA.Addon.Status != types.AddonStatusUpdating ||
		viewA.ClusterTags["env"] != "a" || viewA.AddonTags["owner"] != "a" {
		t.Fatalf("set-up: cluster %s, add-on %s, tags %v %v", viewA.Cluster.Status, viewA.Addon.Status, viewA.ClusterTags, viewA.AddonTags)
	}

	// Account B: another account's root, which policies do not restrict.
	credsB := srv.NewAccount(t, "111111111111")
	acctB := credsB.AccountID
	b := srv.EKSAs(t, credsB, authOneAttempt)

	// Every operation that names a resource, aimed at A's resources and
	// at ghosts: refused with the operation's not-found exception, and
	// the same answer for both.
	ops := []struct {
		name string
		code string // "" when the code is whatever a ghost gets
		call func(ctx context.Context, x tenancyTarget) error
	}{
		{"DescribeCluster", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(x.cluster)})
			return err
		}},
		{"DescribeCluster by ARN", "", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(x.clusterARN)})
			return err
		}},
		{"DeleteCluster", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(x.cluster)})
			return err
		}},
		{"DeleteCluster by ARN", "", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(x.clusterARN)})
			return err
		}},
		{"CreateAddon", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(x.cluster), AddonName: aws.String("vpc-cni")})
			return err
		}},
		{"CreateAddon, A's add-on name and token", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(x.cluster), AddonName: aws.String(x.addon),
				ClientRequestToken: aws.String("tenancy-addon-token")})
			return err
		}},
		{"DescribeAddon", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(x.cluster), AddonName: aws.String(x.addon)})
			return err
		}},
		{"ListAddons", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(x.cluster)})
			return err
		}},
		{"UpdateAddon", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(x.cluster), AddonName: aws.String(x.addon),
				ConfigurationValues: aws.String(`{"replicaCount": 9}`)})
			return err
		}},
		{"DeleteAddon", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(x.cluster), AddonName: aws.String(x.addon)})
			return err
		}},
		{"DescribeUpdate", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(x.cluster), UpdateId: aws.String(x.updateID), AddonName: aws.String(x.addon)})
			return err
		}},
		{"DescribeUpdate without the add-on", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(x.cluster), UpdateId: aws.String(x.updateID)})
			return err
		}},
		{"ListUpdates", "ResourceNotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(x.cluster), AddonName: aws.String(x.addon)})
			return err
		}},
		{"TagResource cluster ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(x.clusterARN), Tags: map[string]string{"env": "b"}})
			return err
		}},
		{"TagResource add-on ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(x.addonARN), Tags: map[string]string{"owner": "b"}})
			return err
		}},
		{"UntagResource cluster ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(x.clusterARN), TagKeys: []string{"env"}})
			return err
		}},
		{"UntagResource add-on ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(x.addonARN), TagKeys: []string{"owner"}})
			return err
		}},
		{"ListTagsForResource cluster ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(x.clusterARN)})
			return err
		}},
		{"ListTagsForResource add-on ARN", "NotFoundException", func(ctx context.Context, x tenancyTarget) error {
			_, err := b.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(x.addonARN)})
			return err
		}},
	}
	// ghostify rewrites A's identifiers in a message into the ghost's.
	ghostify := strings.NewReplacer(real.addonARN, ghost.addonARN, real.clusterARN, ghost.clusterARN,
		real.updateID, ghost.updateID, real.cluster, ghost.cluster)
	before := addonKeyspace(t, h)
	for _, op := range ops {
		t.Run("B "+op.name, func(t *testing.T) {
			code, msg := wanterr.AWS(t, op.call(ctxT(t), real), "", wanterr.AnyClientError)
			if op.code != "" && code != op.code {
				t.Errorf("code = %s (%q), want %s", code, msg, op.code)
			}
			if strings.Contains(msg, acctA) && !strings.Contains(op.name, "ARN") {
				t.Errorf("message %q names account A", msg)
			}
			gcode, gmsg := wanterr.AWS(t, op.call(ctxT(t), ghost), "", wanterr.AnyClientError)
			if code != gcode || ghostify.Replace(msg) != gmsg {
				t.Errorf("A's resource and a ghost answer differently:\n  A's:   %s %q\n  ghost: %s %q", code, msg, gcode, gmsg)
			}
		})
	}

	// Account-wide reads see only B's (empty) account; the catalogue is
	// the same for everyone and carries nothing of A's.
	t.Run("B ListClusters", func(t *testing.T) {
		if got := authClusterNames(t, b); len(got) != 0 {
			t.Errorf("B's clusters = %v, want none", got)
		}
	})
	t.Run("B DescribeAddonVersions and DescribeAddonConfiguration", func(t *testing.T) {
		vin := &eks.DescribeAddonVersionsInput{AddonName: aws.String("coredns"), KubernetesVersion: aws.String("1.35")}
		va, err := a.DescribeAddonVersions(ctx, vin)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.DescribeAddonVersions(ctx, vin)
		if err != nil {
			t.Fatalf("B DescribeAddonVersions: %v", err)
		}
		if !reflect.DeepEqual(va.Addons, vb.Addons) || len(vb.Addons) != 1 {
			t.Errorf("DescribeAddonVersions differs between accounts:\n A: %+v\n B: %+v", va.Addons, vb.Addons)
		}
		cin := &eks.DescribeAddonConfigurationInput{AddonName: aws.String("coredns"), AddonVersion: viewA.Addon.AddonVersion}
		ca, err := a.DescribeAddonConfiguration(ctx, cin)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := b.DescribeAddonConfiguration(ctx, cin)
		if err != nil {
			t.Fatalf("B DescribeAddonConfiguration: %v", err)
		}
		if aws.ToString(ca.ConfigurationSchema) != aws.ToString(cb.ConfigurationSchema) || aws.ToString(cb.ConfigurationSchema) == "" ||
			!reflect.DeepEqual(ca.PodIdentityConfiguration, cb.PodIdentityConfiguration) {
			t.Errorf("DescribeAddonConfiguration differs between accounts")
		}
	})

	// Nothing B tried wrote anything, and A sees exactly what it saw.
	addonNoWrites(t, h, before)
	if got := readA(); !reflect.DeepEqual(got, viewA) {
		t.Fatalf("A's resources changed after B's attempts:\n got: %+v\nwant: %+v", got, viewA)
	}

	// B's own resources of the same names are B's: its own ARNs, its own
	// idempotency tokens, its own (empty) add-ons, updates and tags.
	t.Run("B's same-named resources are its own", func(t *testing.T) {
		ctx := ctxT(t)
		roleB := "arn:aws:iam::" + acctB + ":role/eks-cluster"
		for _, name := range []string{h.cluster, "shared-2"} {
			in := createInput(name)
			in.RoleArn = aws.String(roleB)
			in.Tags = map[string]string{"owner": "b"}
			if name == "shared-2" {
				in.ClientRequestToken = aws.String("tenancy-cluster-token") // A's token
			}
			out, err := b.CreateCluster(ctx, in)
			if err != nil {
				t.Fatalf("B CreateCluster %s: %v", name, err)
			}
			wantARN := "arn:aws:eks:" + region + ":" + acctB + ":cluster/" + name
			if got := aws.ToString(out.Cluster.Arn); got != wantARN {
				t.Errorf("B's cluster ARN = %s, want %s", got, wantARN)
			}
			if uid := clusterUID(t, h.srv, acctB, name); uid == clusterUID(t, h.srv, h.account, h.cluster) ||
				uid == clusterUID(t, h.srv, h.account, "shared-2") {
				t.Errorf("B's cluster %s has the uid of one of A's", name)
			}
		}
		cc := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
		if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster: &controlv1.ClusterRef{AccountId: acctB, Name: h.cluster}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: "https://10.0.0.9:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
		}); err != nil {
			t.Fatalf("SetStatus B's cluster ACTIVE: %v", err)
		}
		if got, want := authClusterNames(t, b), []string{h.cluster, "shared-2"}; !slices.Equal(got, want) {
			t.Errorf("B's clusters = %v, want %v", got, want)
		}
		la, err := b.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(h.cluster)})
		if err != nil || len(la.Addons) != 0 {
			t.Errorf("B's ListAddons = %v, %v; want none", la, err)
		}
		_, err = b.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException"})
		_, err = b.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(real.updateID)})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException"})
		_, err = b.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(real.updateID), AddonName: aws.String("coredns")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException"})
		lu, err := b.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster)})
		if err != nil || len(lu.UpdateIds) != 0 {
			t.Errorf("B's ListUpdates = %v, %v; want none", lu, err)
		}
		arnB := "arn:aws:eks:" + region + ":" + acctB + ":cluster/" + h.cluster
		tags, err := b.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(arnB)})
		if err != nil || !reflect.DeepEqual(tags.Tags, map[string]string{"owner": "b"}) {
			t.Errorf("B's cluster tags = %v, %v; want owner=b", tags, err)
		}
		// The same add-on request with A's idempotency token creates B's own.
		ad, err := b.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
			Tags: map[string]string{"owner": "a"}, ClientRequestToken: aws.String("tenancy-addon-token")})
		if err != nil {
			t.Fatalf("B CreateAddon with A's token: %v", err)
		}
		if got := aws.ToString(ad.Addon.AddonArn); !strings.HasPrefix(got, "arn:aws:eks:"+region+":"+acctB+":addon/"+h.cluster+"/coredns/") || got == real.addonARN {
			t.Errorf("B's add-on ARN = %s, want one of B's account", got)
		}
		if ad.Addon.Status != types.AddonStatusCreating {
			t.Errorf("B's add-on status = %s, want CREATING (a new add-on, not A's)", ad.Addon.Status)
		}
		if _, err := b.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arnB), Tags: map[string]string{"env": "b"}}); err != nil {
			t.Fatalf("B TagResource own cluster: %v", err)
		}
		del, err := b.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("shared-2")})
		if err != nil || del.Cluster.Status != types.ClusterStatusDeleting || aws.ToString(del.Cluster.Arn) != "arn:aws:eks:"+region+":"+acctB+":cluster/shared-2" {
			t.Fatalf("B DeleteCluster own shared-2: %+v, %v", del, err)
		}

		// A sees only its own, unchanged.
		if got := readA(); !reflect.DeepEqual(got, viewA) {
			t.Errorf("A's resources changed after B used the same names:\n got: %+v\nwant: %+v", got, viewA)
		}
	})
}
