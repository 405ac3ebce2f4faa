package conformance

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// listedAddons are the catalogue's non-hidden add-ons; hiddenAddons are
// creatable by name but not listed.
var (
	listedAddons = []string{"argocd", "aws-ebs-csi-driver", "aws-load-balancer-controller", "coredns", "eks-pod-identity-agent", "kube-proxy",
		"metrics-server", "vpc-cni"}
	hiddenAddons = []string{"nvidia-device-plugin", "saltbush-noop", "saltbush-pod-identity"}
)

// describeAllVersions walks every page of DescribeAddonVersions.
func describeAllVersions(t *testing.T, h *addonHarness, in eks.DescribeAddonVersionsInput) ([]types.AddonInfo, int) {
	t.Helper()
	var (
		all   []types.AddonInfo
		pages int
	)
	for {
		out, err := h.eks.DescribeAddonVersions(ctxT(t), &in)
		if err != nil {
			t.Fatalf("DescribeAddonVersions %+v: %v", in, err)
		}
		pages++
		if in.MaxResults != nil && len(out.Addons) > int(*in.MaxResults) {
			t.Errorf("page of %d add-ons, maxResults %d", len(out.Addons), *in.MaxResults)
		}
		all = append(all, out.Addons...)
		if out.NextToken == nil {
			return all, pages
		}
		if len(out.Addons) == 0 {
			t.Fatalf("empty page with a nextToken")
		}
		if pages > 50 {
			t.Fatal("DescribeAddonVersions does not end")
		}
		in.NextToken = out.NextToken
	}
}

func addonInfoNames(infos []types.AddonInfo) []string {
	names := make([]string, 0, len(infos))
	for _, a := range infos {
		names = append(names, aws.ToString(a.AddonName))
	}
	return names
}

func TestAddonDescribeVersions(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)

	all, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{})
	t.Run("no filter lists the non-hidden add-ons", func(t *testing.T) {
		names := addonInfoNames(all)
		for _, n := range listedAddons {
			if !slices.Contains(names, n) {
				t.Errorf("%s not listed in %v", n, names)
			}
		}
		for _, n := range hiddenAddons {
			if slices.Contains(names, n) {
				t.Errorf("hidden %s listed", n)
			}
		}
		if !sort.StringsAreSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("names not sorted and unique: %v", names)
		}
		for _, a := range all {
			n := aws.ToString(a.AddonName)
			if aws.ToString(a.Type) == "" || aws.ToString(a.Publisher) == "" || aws.ToString(a.Owner) == "" || aws.ToString(a.DefaultNamespace) == "" {
				t.Errorf("%s: type %q publisher %q owner %q defaultNamespace %q", n,
					aws.ToString(a.Type), aws.ToString(a.Publisher), aws.ToString(a.Owner), aws.ToString(a.DefaultNamespace))
			}
			if len(a.AddonVersions) < 2 {
				t.Errorf("%s has %d versions, want at least 2", n, len(a.AddonVersions))
			}
			for _, v := range a.AddonVersions {
				if len(v.Compatibilities) == 0 || len(v.Architecture) == 0 {
					t.Errorf("%s %s: compatibilities %v architecture %v", n, aws.ToString(v.AddonVersion), v.Compatibilities, v.Architecture)
				}
			}
		}
	})

	t.Run("hidden add-ons by name", func(t *testing.T) {
		for _, n := range hiddenAddons {
			got, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{AddonName: aws.String(n)})
			if len(got) != 1 || aws.ToString(got[0].AddonName) != n {
				t.Fatalf("addonName=%s: %v", n, addonInfoNames(got))
			}
		}
		noop, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{AddonName: aws.String("saltbush-noop")})
		req := map[string]bool{}
		for _, v := range noop[0].AddonVersions {
			req[aws.ToString(v.AddonVersion)] = v.RequiresConfiguration
		}
		if want := map[string]bool{"v1.1.0-eksbuild.1": true, "v1.0.0-eksbuild.1": false}; !maps.Equal(req, want) {
			t.Errorf("saltbush-noop requiresConfiguration = %v, want %v", req, want)
		}
		if got, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{AddonName: aws.String("no-such-addon")}); len(got) != 0 {
			t.Errorf("unknown addonName lists %v", addonInfoNames(got))
		}
	})

	t.Run("kubernetesVersion", func(t *testing.T) {
		for _, k8s := range []string{"1.32", "1.33", "1.34", "1.35", "1.36", "1.37"} {
			got, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{KubernetesVersion: aws.String(k8s)})
			if k8s == "1.35" && len(got) != len(all) {
				t.Errorf("%s: %d add-ons, want %d (every add-on has a version for it)", k8s, len(got), len(all))
			}
			if len(got) == 0 {
				t.Errorf("%s: no add-ons", k8s)
			}
			for _, a := range got {
				defaults := 0
				for _, v := range a.AddonVersions {
					if len(v.Compatibilities) != 1 || aws.ToString(v.Compatibilities[0].ClusterVersion) != k8s {
						t.Errorf("%s %s %s: compatibilities %+v, want only %s", k8s, aws.ToString(a.AddonName), aws.ToString(v.AddonVersion), v.Compatibilities, k8s)
						continue
					}
					if v.Compatibilities[0].DefaultVersion {
						defaults++
					}
				}
				if defaults != 1 {
					t.Errorf("%s %s: %d default versions, want 1", k8s, aws.ToString(a.AddonName), defaults)
				}
			}
		}
		// 1.33 gets only the older coredns, 1.37 both, newest first.
		for k8s, want := range map[string][]string{"1.33": {"v1.11.4-eksbuild.2"}, "1.37": {"v1.12.1-eksbuild.2", "v1.11.4-eksbuild.2"}} {
			got, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{KubernetesVersion: aws.String(k8s), AddonName: aws.String("coredns")})
			var versions []string
			if len(got) == 1 {
				for _, v := range got[0].AddonVersions {
					versions = append(versions, aws.ToString(v.AddonVersion))
				}
			}
			if !slices.Equal(versions, want) {
				t.Errorf("coredns on %s: %v, want %v", k8s, versions, want)
			}
		}
		if got, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{KubernetesVersion: aws.String("1.20")}); len(got) != 0 {
			t.Errorf("1.20: %v, want nothing", addonInfoNames(got))
		}
	})

	t.Run("types, publishers, owners", func(t *testing.T) {
		tests := []struct {
			name string
			in   eks.DescribeAddonVersionsInput
			want []string
		}{
			{"one type", eks.DescribeAddonVersionsInput{Types: []string{"storage"}}, []string{"aws-ebs-csi-driver"}},
			{"two types", eks.DescribeAddonVersionsInput{Types: []string{"storage", "gitops"}}, []string{"argocd", "aws-ebs-csi-driver"}},
			{"publisher", eks.DescribeAddonVersionsInput{Publishers: []string{"argoproj"}}, []string{"argocd"}},
			{"owner community (hidden nvidia left out)", eks.DescribeAddonVersionsInput{Owners: []string{"community"}}, []string{"argocd"}},
			{"type and owner", eks.DescribeAddonVersionsInput{Types: []string{"networking", "gitops"}, Owners: []string{"aws"}},
				[]string{"aws-load-balancer-controller", "coredns", "kube-proxy", "vpc-cni"}},
			{"two publishers", eks.DescribeAddonVersionsInput{Publishers: []string{"argoproj", "eks"}}, listedAddons},
			{"unknown type", eks.DescribeAddonVersionsInput{Types: []string{"no-such-type"}}, nil},
			// Filters combine: a name does not override the others.
			{"addonName and its own type", eks.DescribeAddonVersionsInput{AddonName: aws.String("coredns"), Types: []string{"networking"}},
				[]string{"coredns"}},
			{"addonName and another type", eks.DescribeAddonVersionsInput{AddonName: aws.String("coredns"), Types: []string{"storage"}}, nil},
			{"addonName and another owner", eks.DescribeAddonVersionsInput{AddonName: aws.String("saltbush-noop"), Owners: []string{"aws"}}, nil},
			{"addonName and another publisher", eks.DescribeAddonVersionsInput{AddonName: aws.String("argocd"), Publishers: []string{"eks"}}, nil},
			{"hidden add-on's type without its name", eks.DescribeAddonVersionsInput{Types: []string{"testing"}}, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, _ := describeAllVersions(t, h, tc.in)
				if names := addonInfoNames(got); !slices.Equal(names, tc.want) && (len(names) != 0 || len(tc.want) != 0) {
					t.Errorf("names = %v, want %v", names, tc.want)
				}
			})
		}
	})

	t.Run("paging with maxResults=2", func(t *testing.T) {
		paged, pages := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{MaxResults: aws.Int32(2)})
		if !slices.Equal(addonInfoNames(paged), addonInfoNames(all)) {
			t.Errorf("paged %v, unpaged %v", addonInfoNames(paged), addonInfoNames(all))
		}
		if want := (len(all) + 1) / 2; pages != want {
			t.Errorf("%d pages, want %d", pages, want)
		}
		paged, _ = describeAllVersions(t, h, eks.DescribeAddonVersionsInput{MaxResults: aws.Int32(1), KubernetesVersion: aws.String("1.35"), Owners: []string{"aws"}})
		if want := []string{"aws-ebs-csi-driver", "aws-load-balancer-controller", "coredns", "eks-pod-identity-agent", "kube-proxy",
			"metrics-server", "vpc-cni"}; !slices.Equal(addonInfoNames(paged), want) {
			t.Errorf("filtered paging: %v, want %v", addonInfoNames(paged), want)
		}
	})

	// The Go SDK turns an absent requiresConfiguration into false; the wire
	// must carry it explicitly, as AWS does.
	t.Run("requiresConfiguration on the wire", func(t *testing.T) {
		for _, q := range []string{"", "?addonName=saltbush-noop", "?kubernetesVersion=1.35"} {
			status, _, body := rawCall(t, h.srv, "GET", h.srv.URL+"/addons/supported-versions"+q, "")
			if status != http.StatusOK {
				t.Fatalf("%s: %d %v", q, status, body)
			}
			addons, _ := body["addons"].([]any)
			if len(addons) == 0 {
				t.Fatalf("%s: no addons in %v", q, body)
			}
			for _, a := range addons {
				for _, v := range a.(map[string]any)["addonVersions"].([]any) {
					vm := v.(map[string]any)
					if _, ok := vm["requiresConfiguration"].(bool); !ok {
						t.Errorf("%s: %v lacks requiresConfiguration", q, vm["addonVersion"])
					}
					for _, c := range vm["compatibilities"].([]any) {
						if _, ok := c.(map[string]any)["defaultVersion"].(bool); !ok {
							t.Errorf("%s: %v compatibility %v lacks defaultVersion", q, vm["addonVersion"], c)
						}
					}
				}
			}
		}
	})
}

func TestAddonDescribeConfiguration(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)

	// Every version of every add-on has a schema that parses.
	all, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{})
	for _, n := range hiddenAddons {
		more, _ := describeAllVersions(t, h, eks.DescribeAddonVersionsInput{AddonName: aws.String(n)})
		all = append(all, more...)
	}
	for _, a := range all {
		for _, v := range a.AddonVersions {
			out, err := h.eks.DescribeAddonConfiguration(ctx, &eks.DescribeAddonConfigurationInput{AddonName: a.AddonName, AddonVersion: v.AddonVersion})
			if err != nil {
				t.Errorf("%s %s: %v", aws.ToString(a.AddonName), aws.ToString(v.AddonVersion), err)
				continue
			}
			if aws.ToString(out.AddonName) != aws.ToString(a.AddonName) || aws.ToString(out.AddonVersion) != aws.ToString(v.AddonVersion) {
				t.Errorf("echo: %s %s", aws.ToString(out.AddonName), aws.ToString(out.AddonVersion))
			}
			var schema map[string]any
			if err := json.Unmarshal([]byte(aws.ToString(out.ConfigurationSchema)), &schema); err != nil {
				t.Errorf("%s %s: configurationSchema is not JSON: %v", aws.ToString(a.AddonName), aws.ToString(v.AddonVersion), err)
			} else if schema["type"] != "object" {
				t.Errorf("%s %s: schema type %v", aws.ToString(a.AddonName), aws.ToString(v.AddonVersion), schema["type"])
			}
		}
	}

	out, err := h.eks.DescribeAddonConfiguration(ctx, &eks.DescribeAddonConfigurationInput{
		AddonName: aws.String("saltbush-noop"), AddonVersion: aws.String("v1.0.0-eksbuild.1")})
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal([]byte(aws.ToString(out.ConfigurationSchema)), &schema); err != nil || schema.Properties["replicaCount"] == nil {
		t.Errorf("noop schema: %v %v", err, schema)
	}
	if len(out.PodIdentityConfiguration) != 0 {
		t.Errorf("noop podIdentityConfiguration = %+v", out.PodIdentityConfiguration)
	}
	out, err = h.eks.DescribeAddonConfiguration(ctx, &eks.DescribeAddonConfigurationInput{
		AddonName: aws.String("vpc-cni"), AddonVersion: aws.String("v1.20.4-eksbuild.1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.PodIdentityConfiguration) != 1 || aws.ToString(out.PodIdentityConfiguration[0].ServiceAccount) != "aws-node" ||
		!slices.Contains(out.PodIdentityConfiguration[0].RecommendedManagedPolicies, "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy") {
		t.Errorf("vpc-cni podIdentityConfiguration = %+v", out.PodIdentityConfiguration)
	}

	for _, tc := range []struct {
		name, addon, version string
		want                 awsErr
	}{
		{"unknown version", "coredns", "v9.9.9-eksbuild.1", awsErr{code: "ResourceNotFoundException", addon: "coredns"}},
		{"unknown add-on", "no-such-addon", "v1.0.0-eksbuild.1", awsErr{code: "ResourceNotFoundException", addon: "no-such-addon"}},
		{"version of another add-on", "coredns", "v1.20.4-eksbuild.1", awsErr{code: "ResourceNotFoundException", addon: "coredns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.eks.DescribeAddonConfiguration(ctx, &eks.DescribeAddonConfigurationInput{
				AddonName: aws.String(tc.addon), AddonVersion: aws.String(tc.version)})
			checkAWSErr(t, err, tc.want)
		})
	}
	// Both members are required (the SDK enforces that; raw HTTP does not).
	for _, q := range []string{"?addonName=coredns", "?addonVersion=v1.12.1-eksbuild.2", ""} {
		status, hdr, body := rawCall(t, h.srv, "GET", h.srv.URL+"/addons/configuration-schemas"+q, "")
		if status != 400 || hdr.Get("X-Amzn-ErrorType") != "InvalidParameterException" {
			t.Errorf("configuration-schemas%s: %d %s %v, want 400 InvalidParameterException", q, status, hdr.Get("X-Amzn-ErrorType"), body)
		}
	}
}

func TestAddonListPaging(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	names := []string{"coredns", "kube-proxy", "metrics-server", "saltbush-noop", "vpc-cni"}
	for _, n := range names {
		addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String(n)})
	}
	out, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(h.cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Addons, names) || out.NextToken != nil {
		t.Errorf("ListAddons = %v next %v, want %v", out.Addons, out.NextToken, names)
	}

	var (
		got   []string
		sizes []int
		token *string
	)
	for i := 0; ; i++ {
		out, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(2), NextToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		got = append(got, out.Addons...)
		sizes = append(sizes, len(out.Addons))
		if token = out.NextToken; token == nil || i > 10 {
			break
		}
	}
	if !slices.Equal(got, names) || !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Errorf("paged: %v in pages %v, want %v in [2 2 1]", got, sizes, names)
	}

	// The SDK's paginator agrees.
	p := eks.NewListAddonsPaginator(h.eks, &eks.ListAddonsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(2)})
	got = nil
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Addons...)
	}
	if !slices.Equal(got, names) {
		t.Errorf("paginator: %v", got)
	}

	// An empty cluster lists [] (not an absent member) and an unknown one 404s.
	addonCluster(t, h, "empty-1", "1.35")
	status, _, body := rawCall(t, h.srv, "GET", h.srv.URL+"/clusters/empty-1/addons", "")
	if status != 200 || len(body) != 1 || body["addons"] == nil {
		t.Errorf("empty ListAddons: %d %v, want {\"addons\": []}", status, body)
	}
	_, err = h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String("nope")})
	checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: "nope"})
}

func TestAddonListUpdates(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	const name = "saltbush-noop"
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String(name)})
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})

	var ids []string
	for i, cfg := range []string{`{"replicaCount": 2}`, `{"replicaCount": 3}`, `{"message": "hi"}`} {
		out, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name),
			ConfigurationValues: aws.String(cfg)})
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		ids = append(ids, aws.ToString(out.Update.Id))
		h.report(t, name, int64(i+2), controlv1.AddonPhase_ADDON_PHASE_READY)
	}
	// An update of another add-on is not listed with this one's.
	other, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
	if err != nil {
		t.Fatal(err)
	}

	out, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.UpdateIds, ids) || out.NextToken != nil {
		t.Errorf("ListUpdates = %v next %v, want %v (creation order)", out.UpdateIds, out.NextToken, ids)
	}
	p1, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String(name), MaxResults: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p1.UpdateIds, ids[:2]) || p1.NextToken == nil {
		t.Fatalf("page 1 = %v next %v, want %v and a token", p1.UpdateIds, p1.NextToken, ids[:2])
	}
	p2, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String(name), MaxResults: aws.Int32(2), NextToken: p1.NextToken})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p2.UpdateIds, ids[2:]) || p2.NextToken != nil {
		t.Errorf("page 2 = %v next %v, want %v and no token", p2.UpdateIds, p2.NextToken, ids[2:])
	}
	for _, id := range ids {
		u := addonDescribeUpdate(t, h, name, id)
		if u.Status != types.UpdateStatusSuccessful || u.Type != types.UpdateTypeAddonUpdate || u.CreatedAt == nil {
			t.Errorf("update %s: %s %s %v", id, u.Status, u.Type, u.CreatedAt)
		}
	}
	if got := addonDescribeUpdate(t, h, "coredns", aws.ToString(other.Update.Id)).Status; got != types.UpdateStatusInProgress {
		t.Errorf("coredns update = %s, want InProgress", got)
	}

	t.Run("without addonName", func(t *testing.T) {
		out, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.UpdateIds) != 0 || out.NextToken != nil {
			t.Errorf("cluster updates = %v, want none", out.UpdateIds)
		}
		// And on the wire: an empty list, not an absent member.
		status, _, body := rawCall(t, h.srv, "GET", h.srv.URL+"/clusters/"+h.cluster+"/updates", "")
		if ids, ok := body["updateIds"].([]any); status != 200 || !ok || len(ids) != 0 {
			t.Errorf("raw ListUpdates: %d %v, want {\"updateIds\": []}", status, body)
		}
		_, err = h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(ids[0])})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: h.cluster})
	})
	t.Run("scoped to the wrong add-on", func(t *testing.T) {
		_, err := h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(ids[0]), AddonName: aws.String("coredns")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: h.cluster})
	})
	t.Run("unknown add-on and cluster", func(t *testing.T) {
		_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String("vpc-cni")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: h.cluster, addon: "vpc-cni"})
		_, err = h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String("nope"), AddonName: aws.String(name)})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: "nope"})
		_, err = h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String("not-a-uuid"), AddonName: aws.String(name)})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: h.cluster})
	})
	// Removing the add-on removes its update history with it.
	t.Run("history goes with the add-on", func(t *testing.T) {
		if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		h.report(t, name, 5, controlv1.AddonPhase_ADDON_PHASE_REMOVED)
		addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String(name)})
		out, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.UpdateIds) != 0 {
			t.Errorf("recreated add-on inherits updates %v", out.UpdateIds)
		}
	})
}
