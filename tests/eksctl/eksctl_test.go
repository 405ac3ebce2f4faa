package eksctl_test

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// The add-on eksctl drives: created at the older of two versions the
// cluster's Kubernetes version offers, then updated to the newer one. Not
// coredns: eksctl does not wait for coredns on a cluster whose config has
// no node groups (its --wait would return at once). Not metrics-server:
// it is ACTIVE only once its metrics API answers, which needs real pods
// (tests/addons), and these nodes are the kubelet double.
const (
	clusterVersion = "1.35"
	addonName      = "argocd"
	addonOld       = "v2.14.15-eksbuild.1"
	addonNew       = "v3.1.5-eksbuild.1"
	// addonDeployment is the Deployment the add-on's bundle applies.
	addonNamespace, addonDeployment = "argocd", "argocd-server"
)

// What eksctl says when the CloudFormation call it makes after the EKS
// part of a command fails (saltbush serves no CloudFormation;
// docs/clients.md). The rest of the line is the façade's refusal.
const (
	deleteAddonStacks  = `Error: failed to fetch addons stacks: describing CloudFormation stacks for %q: operation error CloudFormation: ListStacks, https response error StatusCode: 4`
	listClustersStacks = `Error: failed to list cluster stacks in region %q: operation error CloudFormation: ListStacks, https response error StatusCode: 4`
	accessEntryStacks  = `Error: error listing access entry stacks: operation error CloudFormation: ListStacks, https response error StatusCode: 4`
)

// TestEksctl runs eksctl's add-on, access-entry, cluster and identity
// (OIDC provider, IRSA, pod identity) commands once each, in the order a
// user would, against one cluster, asserting each on what eksctl printed
// and on the state the SDK reads back.
func TestEksctl(t *testing.T) {
	e := newEnv(t, "eksctl", clusterVersion)
	steps := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"version", testVersion},
		{"describe-cluster-versions", testDescribeClusterVersions},
		{"describe-addon-versions", testDescribeAddonVersions},
		{"describe-addon-configuration", testDescribeAddonConfiguration},
		{"get addons before", testNoAddons},
		{"create addon", testCreateAddon},
		{"get addons", testGetAddons},
		{"update addon", testUpdateAddon},
		{"delete addon", testDeleteAddon},
		{"get accessentry", testGetAccessEntry},
		{"create accessentry", testCreateAccessEntry},
		{"get cluster", testGetCluster},
		{"write-kubeconfig", testWriteKubeconfig},
		{"associate-iam-oidc-provider", testAssociateOIDCProvider},
		{"create iamserviceaccount", testCreateIAMServiceAccount},
		{"create podidentityassociation", testCreatePodIdentityAssociation},
		{"get podidentityassociation", testGetPodIdentityAssociation},
		{"delete podidentityassociation", testDeletePodIdentityAssociation},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e.in(t)) }) {
			return // later steps build on this one
		}
	}
}

// in is the env for a step: failures stop the step.
func (e *env) in(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// testVersion: the binary is the version the repository pins.
func testVersion(t *testing.T, e *env) {
	r := e.ok("version")
	if got, want := strings.TrimSpace(r.stdout), strings.TrimPrefix(eksctlVersion, "v"); got != want {
		t.Fatalf("eksctl version = %q, want %q (tools/eksctl/go.mod); run `make eksctl`", got, want)
	}
}

// testDescribeClusterVersions: eksctl lists the Kubernetes versions the
// SDK's DescribeClusterVersions does, the cluster's among them.
func testDescribeClusterVersions(t *testing.T, e *env) {
	var got struct {
		ClusterVersions []struct{ ClusterVersion string }
	}
	r := e.ok("utils", "describe-cluster-versions")
	if err := decodeJSON(r.stdout, &got); err != nil {
		t.Fatalf("decode: %v\n%s", err, r)
	}
	var versions []string
	for _, v := range got.ClusterVersions {
		versions = append(versions, v.ClusterVersion)
	}
	var want []string
	p := eks.NewDescribeClusterVersionsPaginator(e.eks, &eks.DescribeClusterVersionsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx(30 * time.Second))
		if err != nil {
			t.Fatalf("DescribeClusterVersions: %v", err)
		}
		for _, v := range page.ClusterVersions {
			want = append(want, aws.ToString(v.ClusterVersion))
		}
	}
	if !slices.Equal(versions, want) || !slices.Contains(versions, clusterVersion) {
		t.Fatalf("eksctl lists versions %v, the SDK %v (the cluster runs %s)", versions, want, clusterVersion)
	}
}

// addonVersions is the JSON `eksctl utils describe-addon-versions`
// prints: the SDK's AddonInfo, marshalled by encoding/json.
type addonVersions struct {
	Addons []struct {
		AddonName     string
		AddonVersions []struct {
			AddonVersion    string
			Compatibilities []struct {
				ClusterVersion string
				DefaultVersion bool
			}
		}
	}
}

// pairs lists "name@version" of a describe-addon-versions answer.
func (v addonVersions) pairs() []string {
	var out []string
	for _, a := range v.Addons {
		for _, av := range a.AddonVersions {
			out = append(out, a.AddonName+"@"+av.AddonVersion)
		}
	}
	slices.Sort(out)
	return out
}

// sdkVersions is what the SDK's DescribeAddonVersions lists for a
// Kubernetes version, as "name@version".
func (e *env) sdkVersions(k8s string) []string {
	e.t.Helper()
	var out []string
	p := eks.NewDescribeAddonVersionsPaginator(e.eks, &eks.DescribeAddonVersionsInput{KubernetesVersion: aws.String(k8s)})
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx(30 * time.Second))
		if err != nil {
			e.t.Fatalf("DescribeAddonVersions %s: %v", k8s, err)
		}
		for _, a := range page.Addons {
			for _, av := range a.AddonVersions {
				out = append(out, aws.ToString(a.AddonName)+"@"+aws.ToString(av.AddonVersion))
			}
		}
	}
	slices.Sort(out)
	return out
}

// testDescribeAddonVersions: for the cluster (its version looked up) and
// for a Kubernetes version given outright, eksctl lists what the SDK does.
func testDescribeAddonVersions(t *testing.T, e *env) {
	for _, tc := range []struct {
		name, k8s string
		args      []string
	}{
		{"cluster", clusterVersion, []string{"--cluster", e.cluster}},
		{"kubernetes-version", "1.33", []string{"--kubernetes-version", "1.33"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			var got addonVersions
			r := e.ok(append([]string{"utils", "describe-addon-versions"}, tc.args...)...)
			if err := decodeJSON(r.stdout, &got); err != nil {
				t.Fatalf("decode: %v\n%s", err, r)
			}
			want := e.sdkVersions(tc.k8s)
			if !slices.Equal(got.pairs(), want) {
				t.Fatalf("eksctl lists %v for %s, the SDK %v", got.pairs(), tc.k8s, want)
			}
			if !slices.Contains(want, addonName+"@"+addonOld) && tc.k8s == clusterVersion {
				t.Fatalf("%s@%s is not offered on %s: the test's versions are out of date", addonName, addonOld, tc.k8s)
			}
		})
	}
}

// addonSummary is one add-on of `eksctl get addons -o json`.
type addonSummary struct {
	Name, Version, NewerVersion, Status string
}

// testNoAddons: a new cluster has no add-ons.
func testNoAddons(t *testing.T, e *env) {
	var got []addonSummary
	e.okJSON(&got, "get", "addons", "--cluster", e.cluster)
	if len(got) != 0 {
		t.Fatalf("get addons = %+v on a new cluster", got)
	}
}

// testCreateAddon: `create addon --wait` returns once the add-on is ACTIVE,
// and the agent has applied its bundle to the cluster.
func testCreateAddon(t *testing.T, e *env) {
	r := e.ok("create", "addon", "--cluster", e.cluster, "--name", addonName, "--version", addonOld,
		"--wait", "--timeout", waitTimeout.String())
	if !strings.Contains(r.output(), "creating addon: "+addonName) {
		t.Fatalf("eksctl did not say it creates the add-on:\n%s", r)
	}
	a := e.describeAddon()
	if a.Status != types.AddonStatusActive || aws.ToString(a.AddonVersion) != addonOld {
		t.Fatalf("after create addon --wait: %s %s, want ACTIVE %s", a.Status, aws.ToString(a.AddonVersion), addonOld)
	}
	e.wantDeploymentImageTag(imageTag(addonOld))
}

// testGetAddons: eksctl lists the add-on with its status and the newer
// version the catalogue offers.
func testGetAddons(t *testing.T, e *env) {
	var got []addonSummary
	e.okJSON(&got, "get", "addons", "--cluster", e.cluster)
	if len(got) != 1 || got[0].Name != addonName || got[0].Version != addonOld || got[0].Status != "ACTIVE" ||
		!strings.Contains(got[0].NewerVersion, addonNew) {
		t.Fatalf("get addons = %+v, want one %s %s ACTIVE with newer %s", got, addonName, addonOld, addonNew)
	}
}

// testUpdateAddon: `update addon --wait` returns once the new version is
// ACTIVE, and the cluster runs it.
func testUpdateAddon(t *testing.T, e *env) {
	r := e.ok("update", "addon", "--cluster", e.cluster, "--name", addonName, "--version", addonNew,
		"--wait", "--timeout", waitTimeout.String())
	if !strings.Contains(r.output(), "updating addon") {
		t.Fatalf("eksctl did not say it updates the add-on:\n%s", r)
	}
	a := e.describeAddon()
	if a.Status != types.AddonStatusActive || aws.ToString(a.AddonVersion) != addonNew {
		t.Fatalf("after update addon --wait: %s %s, want ACTIVE %s", a.Status, aws.ToString(a.AddonVersion), addonNew)
	}
	e.wantDeploymentImageTag(imageTag(addonNew))
}

// testDeleteAddon: eksctl deletes the add-on through EKS, then looks for
// the add-on's IAM stacks in CloudFormation, which saltbush does not
// serve: the command fails there, and the add-on is gone all the same.
func testDeleteAddon(t *testing.T, e *env) {
	r := e.run("delete", "addon", "--cluster", e.cluster, "--name", addonName)
	if !strings.Contains(r.output(), "deleted addon: "+addonName) {
		t.Fatalf("eksctl did not delete the add-on through EKS:\n%s", r)
	}
	if want := fmt.Sprintf(deleteAddonStacks, e.cluster); r.err == nil || !strings.Contains(r.output(), want) {
		t.Fatalf("want the CloudFormation step to fail with %q (docs/clients.md):\n%s", want, r)
	}
	w := eks.NewAddonDeletedWaiter(e.eks, func(o *eks.AddonDeletedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second
	})
	in := &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(addonName)}
	if err := w.Wait(e.ctx(deleteTimeout), in, deleteTimeout); err != nil {
		t.Fatalf("add-on not deleted: %v", err)
	}
	_, err := e.k8s.AppsV1().Deployments(addonNamespace).Get(e.ctx(30*time.Second), addonDeployment, metav1.GetOptions{})
	if err == nil {
		t.Fatalf("the add-on's Deployment %s/%s is still in the cluster", addonNamespace, addonDeployment)
	}
}

// accessEntry is one entry of `eksctl get accessentry -o json`.
type accessEntry struct {
	PrincipalARN     string
	KubernetesGroups []string
	AccessPolicies   []struct {
		PolicyARN   string
		AccessScope struct{ Type string }
	}
}

// testGetAccessEntry: eksctl lists the cluster creator's entry with its
// admin policy, as the SDK does.
func testGetAccessEntry(t *testing.T, e *env) {
	var got []accessEntry
	e.okJSON(&got, "get", "accessentry", "--cluster", e.cluster)
	list, err := e.eks.ListAccessEntries(e.ctx(30*time.Second), &eks.ListAccessEntriesInput{ClusterName: aws.String(e.cluster)})
	if err != nil {
		t.Fatalf("ListAccessEntries: %v", err)
	}
	var principals []string
	for _, g := range got {
		principals = append(principals, g.PrincipalARN)
	}
	slices.Sort(principals)
	want := slices.Sorted(slices.Values(list.AccessEntries))
	if !slices.Equal(principals, want) {
		t.Fatalf("eksctl lists %v, the SDK %v", principals, want)
	}
	for _, g := range got {
		for _, p := range g.AccessPolicies {
			if p.PolicyARN == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy" && p.AccessScope.Type == "cluster" {
				return
			}
		}
	}
	t.Fatalf("no entry with AmazonEKSClusterAdminPolicy on the cluster scope: %+v", got)
}

// testCreateAccessEntry: eksctl creates access entries as CloudFormation
// stacks and lists the stacks first: the command fails there, before any
// EKS call, and no entry exists.
func testCreateAccessEntry(t *testing.T, e *env) {
	principal := "arn:aws:iam::" + e.account + ":user/alice"
	r := e.run("create", "accessentry", "--cluster", e.cluster, "--principal-arn", principal)
	if r.err == nil || !strings.Contains(r.output(), accessEntryStacks) {
		t.Fatalf("want create accessentry to stop at CloudFormation with %q (docs/clients.md):\n%s", accessEntryStacks, r)
	}
	_, err := e.eks.DescribeAccessEntry(e.ctx(30*time.Second), &eks.DescribeAccessEntryInput{
		ClusterName: aws.String(e.cluster), PrincipalArn: aws.String(principal)})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
}

// testGetCluster: eksctl describes the cluster by name with the fields the
// provisioner reported (endpoint, CA, token issuer, VPC and security
// group); listing clusters goes through CloudFormation first, out of
// scope.
func testGetCluster(t *testing.T, e *env) {
	var got []struct {
		Name, Version, Status, Endpoint string
		ResourcesVpcConfig              struct{ VpcId, ClusterSecurityGroupId string }
		Identity                        struct{ Oidc struct{ Issuer string } }
		CertificateAuthority            struct{ Data string }
	}
	e.okJSON(&got, "get", "cluster", "--name", e.cluster)
	if len(got) != 1 {
		t.Fatalf("get cluster --name = %d clusters, want 1", len(got))
	}
	c := got[0]
	if c.Name != e.cluster || c.Version != clusterVersion || c.Status != "ACTIVE" || c.Endpoint != e.kube.Host() ||
		c.ResourcesVpcConfig.VpcId != vpcID || c.ResourcesVpcConfig.ClusterSecurityGroupId != securityGroupID ||
		c.Identity.Oidc.Issuer != kubetest.ServiceAccountIssuer ||
		c.CertificateAuthority.Data != base64.StdEncoding.EncodeToString(e.kube.CACert()) {
		t.Fatalf("get cluster --name = %+v", c)
	}
	r := e.run("get", "cluster")
	if want := fmt.Sprintf(listClustersStacks, e.srv.Config.Cluster.Region); r.err == nil || !strings.Contains(r.output(), want) {
		t.Fatalf("want listing clusters to stop at CloudFormation with %q (docs/clients.md):\n%s", want, r)
	}
}

// testWriteKubeconfig: eksctl names the cluster in its token command by
// DescribeCluster's id when there is one (AWS sends an id only for a local
// cluster on an Outpost), and token review matches the cluster's name, so
// the kubeconfig must name the cluster, not its uid.
func testWriteKubeconfig(t *testing.T, e *env) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	e.ok("utils", "write-kubeconfig", "--cluster", e.cluster, "--kubeconfig", path)
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatalf("the kubeconfig eksctl wrote: %v", err)
	}
	if len(cfg.AuthInfos) == 0 {
		t.Fatalf("kubeconfig %s has no users", path)
	}
	for name, u := range cfg.AuthInfos {
		if u.Exec == nil {
			t.Fatalf("user %s has no exec credential plugin", name)
		}
		i := slices.IndexFunc(u.Exec.Args, func(a string) bool { return a == "--cluster-name" || a == "-i" })
		if i < 0 || i+1 >= len(u.Exec.Args) || u.Exec.Args[i+1] != e.cluster {
			t.Fatalf("user %s runs %s %q, want the cluster named %s", name, u.Exec.Command, u.Exec.Args, e.cluster)
		}
	}
}

// describeAddon reads the add-on back through the SDK.
func (e *env) describeAddon() *types.Addon {
	e.t.Helper()
	out, err := e.eks.DescribeAddon(e.ctx(30*time.Second), &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(addonName)})
	if err != nil {
		e.t.Fatalf("DescribeAddon: %v", err)
	}
	return out.Addon
}

// wantDeploymentImageTag checks that the add-on's Deployment in the
// cluster runs an image of the given tag.
func (e *env) wantDeploymentImageTag(tag string) {
	e.t.Helper()
	d, err := e.k8s.AppsV1().Deployments(addonNamespace).Get(e.ctx(30*time.Second), addonDeployment, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the add-on's Deployment: %v", err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if strings.HasSuffix(c.Image, ":"+tag) {
			return
		}
	}
	e.t.Fatalf("Deployment %s/%s runs %v, want an image tagged %s", addonNamespace, addonDeployment, d.Spec.Template.Spec.Containers, tag)
}

// imageTag is the image tag of an add-on version's bundle: its upstream
// version, v0.8.0-eksbuild.2 → v0.8.0.
func imageTag(version string) string {
	upstream, _, _ := strings.Cut(version, "-")
	return upstream
}
