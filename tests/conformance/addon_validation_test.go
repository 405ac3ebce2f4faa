package conformance

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Helpers shared by the addon_*_test.go files.

// addonCluster creates one more ACTIVE cluster on the harness's server.
func addonCluster(t *testing.T, h *addonHarness, name, version string) {
	t.Helper()
	ctx := ctxT(t)
	in := createInput(name)
	in.Version = aws.String(version)
	if _, err := h.eks.CreateCluster(ctx, in); err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	addonSetClusterStatus(t, h, name, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
}

func addonSetClusterStatus(t *testing.T, h *addonHarness, name string, st controlv1.ClusterStatus) {
	t.Helper()
	cc := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t))
	if _, err := cc.SetStatus(ctxT(t), &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: name}, Status: st,
		Endpoint: "https://10.0.0.2:6443", PlatformVersion: "eks.1", Reason: "test",
		CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus %s %s: %v", name, st, err)
	}
}

// addonCreate creates an add-on on the harness cluster and fails the test
// on error.
func addonCreate(t *testing.T, h *addonHarness, in *eks.CreateAddonInput) *types.Addon {
	t.Helper()
	if in.ClusterName == nil {
		in.ClusterName = aws.String(h.cluster)
	}
	out, err := h.eks.CreateAddon(ctxT(t), in)
	if err != nil {
		t.Fatalf("CreateAddon %s: %v", aws.ToString(in.AddonName), err)
	}
	return out.Addon
}

// addonActive creates an add-on and reports it READY for generation 1.
func addonActive(t *testing.T, h *addonHarness, in *eks.CreateAddonInput) *types.Addon {
	t.Helper()
	addonCreate(t, h, in)
	name := aws.ToString(in.AddonName)
	if r := h.report(t, name, 1, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
		t.Fatalf("READY for %s generation 1 not accepted: %v", name, r)
	}
	a := h.describe(t, name)
	if a.Status != types.AddonStatusActive {
		t.Fatalf("%s after READY: %s, want ACTIVE", name, a.Status)
	}
	return a
}

// addonKeyspace is every key under the store's root prefix with its value
// and mod revision (a rewrite of an identical value is a write too). The
// sweeper's election keys are left out: a replica campaigns on its own
// schedule, not because of a request.
func addonKeyspace(t *testing.T, h *addonHarness) map[string]string {
	t.Helper()
	prefix := h.srv.Store(t).Prefix()
	resp, err := h.srv.Etcd(t).Get(ctxT(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read keyspace: %v", err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if strings.HasPrefix(k, "elections/") {
			continue
		}
		out[k] = fmt.Sprintf("rev=%d %q", kv.ModRevision, kv.Value)
	}
	return out
}

// addonNoWrites fails the test if the keyspace differs from before.
func addonNoWrites(t *testing.T, h *addonHarness, before map[string]string) {
	t.Helper()
	after := addonKeyspace(t, h)
	for k, v := range after {
		if bv, ok := before[k]; !ok {
			t.Errorf("a failed request wrote key %s", k)
		} else if bv != v {
			t.Errorf("a failed request rewrote key %s", k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("a failed request deleted key %s", k)
		}
	}
}

// addonKeysUnder counts keys under a prefix relative to the store root.
func addonKeysUnder(t *testing.T, h *addonHarness, rel string) int {
	t.Helper()
	n := 0
	for k := range addonKeyspace(t, h) {
		if strings.HasPrefix(k, rel) {
			n++
		}
	}
	return n
}

// awsErr is the error a call must fail with.
type awsErr struct {
	// code is the exception shape name.
	code string
	// msg holds substrings the message must contain; exact, when set,
	// is the whole message.
	msg   []string
	exact string
	// cluster and addon, when set, are the clusterName and addonName
	// members the body must carry.
	cluster, addon string
}

var awsErrStatus = map[string]int{
	"InvalidParameterException": 400, "InvalidRequestException": 400, "BadRequestException": 400,
	"ResourceNotFoundException": 404, "NotFoundException": 404, "ResourceInUseException": 409,
}

// checkAWSErr asserts err is want's SDK exception type (errors.As on the
// SDK's modelled type), with want's HTTP status, message and members.
func checkAWSErr(t *testing.T, err error, want awsErr) {
	t.Helper()
	status, ok := awsErrStatus[want.code]
	if !ok {
		t.Fatalf("checkAWSErr: no status for %s", want.code)
	}
	_, msg := wanterr.AWS(t, err, want.code, status)
	// The members are the modelled type's.
	var cluster, addon *string
	switch want.code {
	case "InvalidParameterException":
		e := wanterr.As[*types.InvalidParameterException](t, err)
		cluster, addon = e.ClusterName, e.AddonName
	case "InvalidRequestException":
		e := wanterr.As[*types.InvalidRequestException](t, err)
		cluster, addon = e.ClusterName, e.AddonName
	case "ResourceNotFoundException":
		e := wanterr.As[*types.ResourceNotFoundException](t, err)
		cluster, addon = e.ClusterName, e.AddonName
	case "ResourceInUseException":
		e := wanterr.As[*types.ResourceInUseException](t, err)
		cluster, addon = e.ClusterName, e.AddonName
	case "BadRequestException":
		wanterr.Type[*types.BadRequestException](t, err)
	case "NotFoundException":
		wanterr.Type[*types.NotFoundException](t, err)
	}
	if msg == "" {
		t.Errorf("%s has an empty message", want.code)
	}
	if want.exact != "" && msg != want.exact {
		t.Errorf("message = %q, want %q", msg, want.exact)
	}
	for _, s := range want.msg {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q does not contain %q", msg, s)
		}
	}
	if want.cluster != "" && aws.ToString(cluster) != want.cluster {
		t.Errorf("clusterName member = %v, want %q (message %q)", strPtr(cluster), want.cluster, msg)
	}
	if want.addon != "" && aws.ToString(addon) != want.addon {
		t.Errorf("addonName member = %v, want %q (message %q)", strPtr(addon), want.addon, msg)
	}
}

func strPtr(p *string) string {
	if p == nil {
		return "<absent>"
	}
	return strconv.Quote(*p)
}

// addonReportsTotal scrapes saltbush_addon_reports_total{result=...}.
func addonReportsTotal(t *testing.T, h *addonHarness, result string) float64 {
	t.Helper()
	resp, err := http.Get(h.srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	prefix := `saltbush_addon_reports_total{result="` + result + `"} `
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return 0
}

func manyTags(n int) map[string]string {
	tags := make(map[string]string, n)
	for i := range n {
		tags[fmt.Sprintf("k%02d", i)] = "v"
	}
	return tags
}

// yamlAliasBomb expands to 9^9 strings if aliases are followed blindly.
const yamlAliasBomb = `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

func TestAddonCreateValidation(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	// 1.33: the newer versions (compatible from 1.34) are not for it.
	addonCluster(t, h, "old-133", "1.33")
	const (
		noop = "saltbush-noop"
		acct = "000000000000"
	)
	c := h.cluster
	bigConfig := `{"message": "` + strings.Repeat("x", 64<<10) + `"}`

	tests := []struct {
		name string
		in   eks.CreateAddonInput
		want awsErr
	}{
		{
			name: "unknown add-on name",
			in:   eks.CreateAddonInput{AddonName: aws.String("no-such-addon")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"no-such-addon"}, cluster: c, addon: "no-such-addon"},
		},
		{
			name: "add-on name with a slash",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns/x")},
			want: awsErr{code: "InvalidParameterException", cluster: c},
		},
		{
			name: "unknown version",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), AddonVersion: aws.String("v9.9.9-eksbuild.1")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"v9.9.9-eksbuild.1"}, cluster: c, addon: "coredns"},
		},
		{
			name: "version incompatible with the cluster's Kubernetes version",
			in: eks.CreateAddonInput{ClusterName: aws.String("old-133"), AddonName: aws.String("coredns"),
				AddonVersion: aws.String("v1.12.1-eksbuild.2")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"v1.12.1-eksbuild.2", "1.33"}, cluster: "old-133", addon: "coredns"},
		},
		{
			name: "configurationValues neither JSON nor YAML",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`{"replicaCount": 3`)},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "configurationValues not an object",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`[1, 2]`)},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "configurationValues with a duplicated key",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`{"replicaCount": 1, "replicaCount": 2}`)},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "configurationValues with two YAML documents",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String("replicaCount: 1\n---\nmessage: x\n")},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "configurationValues YAML alias bomb",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(yamlAliasBomb)},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "configurationValues nested 30000 deep",
			in: eks.CreateAddonInput{AddonName: aws.String(noop),
				ConfigurationValues: aws.String(`{"labels": ` + strings.Repeat("[", 30000) + strings.Repeat("]", 30000) + `}`)},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "schema violation: maximum",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`{"replicaCount": 11}`)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"replicaCount"}, cluster: c, addon: noop},
		},
		{
			name: "schema violation: type, in YAML",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String("replicaCount: three\n")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"replicaCount"}, cluster: c, addon: noop},
		},
		{
			name: "schema violation: nested path",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`{"labels": {"team": 7}}`)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"labels/team"}, cluster: c, addon: noop},
		},
		{
			name: "additional property",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(`{"replicaCount": 2, "bogus": true}`)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"bogus"}, cluster: c, addon: noop},
		},
		{
			name: "configurationValues over 64 KiB",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), ConfigurationValues: aws.String(bigConfig)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"65536"}, cluster: c, addon: noop},
		},
		{
			name: "requiresConfiguration version without configuration",
			in:   eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1")},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: noop},
		},
		{
			name: "requiresConfiguration version with configuration lacking a required member",
			in: eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"),
				ConfigurationValues: aws.String(`{"replicaCount": 2}`)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"message"}, cluster: c, addon: noop},
		},
		{
			name: "serviceAccountRoleArn malformed",
			in:   eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), ServiceAccountRoleArn: aws.String("not-an-arn")},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "vpc-cni"},
		},
		{
			name: "serviceAccountRoleArn of another account",
			in:   eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), ServiceAccountRoleArn: aws.String("arn:aws:iam::111111111111:role/cni")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"111111111111"}, cluster: c, addon: "vpc-cni"},
		},
		{
			name: "serviceAccountRoleArn is a user",
			in:   eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), ServiceAccountRoleArn: aws.String("arn:aws:iam::" + acct + ":user/bob")},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "vpc-cni"},
		},
		{
			name: "podIdentityAssociations: service account the version does not use",
			in: eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
				{ServiceAccount: aws.String("default"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/cni")},
			}},
			want: awsErr{code: "InvalidParameterException", msg: []string{"default"}, cluster: c, addon: "vpc-cni"},
		},
		{
			name: "podIdentityAssociations: role of another account",
			in: eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
				{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String("arn:aws:iam::111111111111:role/cni")},
			}},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "vpc-cni"},
		},
		{
			name: "podIdentityAssociations: duplicate service account",
			in: eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
				{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/cni")},
				{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/cni-2")},
			}},
			want: awsErr{code: "InvalidParameterException", msg: []string{"aws-node"}, cluster: c, addon: "vpc-cni"},
		},
		{
			name: "podIdentityAssociations on an add-on that takes none",
			in: eks.CreateAddonInput{AddonName: aws.String("coredns"), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
				{ServiceAccount: aws.String("coredns"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/dns")},
			}},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "coredns"},
		},
		{
			name: "resolveConflicts PRESERVE on create",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), ResolveConflicts: types.ResolveConflictsPreserve},
			want: awsErr{code: "InvalidParameterException", msg: []string{"PRESERVE"}, cluster: c, addon: "coredns"},
		},
		{
			name: "resolveConflicts bogus",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), ResolveConflicts: types.ResolveConflicts("SOMETIMES")},
			want: awsErr{code: "InvalidParameterException", msg: []string{"SOMETIMES"}, cluster: c, addon: "coredns"},
		},
		{
			name: "namespaceConfig invalid namespace",
			in: eks.CreateAddonInput{AddonName: aws.String("coredns"),
				NamespaceConfig: &types.AddonNamespaceConfigRequest{Namespace: aws.String("Not_A_Namespace")}},
			want: awsErr{code: "InvalidParameterException", msg: []string{"Not_A_Namespace"}, cluster: c, addon: "coredns"},
		},
		{
			name: "namespaceConfig empty namespace",
			in: eks.CreateAddonInput{AddonName: aws.String("coredns"),
				NamespaceConfig: &types.AddonNamespaceConfigRequest{Namespace: aws.String("")}},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "coredns"},
		},
		{
			name: "tag key with the aws: prefix",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: map[string]string{"aws:owner": "me"}},
			want: awsErr{code: "InvalidParameterException", msg: []string{"aws:"}, cluster: c, addon: "coredns"},
		},
		{
			name: "51 tags",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: manyTags(51)},
			want: awsErr{code: "InvalidParameterException", msg: []string{"50"}, cluster: c, addon: "coredns"},
		},
		{
			name: "tag key of 129 characters",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: map[string]string{strings.Repeat("k", 129): "v"}},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "coredns"},
		},
		{
			name: "tag value of 257 characters",
			in:   eks.CreateAddonInput{AddonName: aws.String("coredns"), Tags: map[string]string{"k": strings.Repeat("v", 257)}},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "coredns"},
		},
		{
			name: "cluster not found",
			in:   eks.CreateAddonInput{ClusterName: aws.String("nope"), AddonName: aws.String("coredns")},
			want: awsErr{code: "ResourceNotFoundException", exact: "No cluster found for name: nope.", cluster: "nope"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.ClusterName == nil {
				in.ClusterName = aws.String(h.cluster)
			}
			before := addonKeyspace(t, h)
			_, err := h.eks.CreateAddon(ctxT(t), &in)
			checkAWSErr(t, err, tc.want)
			addonNoWrites(t, h, before)
		})
	}

	// The valid forms of what was refused above are accepted (the cases
	// fail for the reason they name, not for another).
	t.Run("valid counterparts are accepted", func(t *testing.T) {
		addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"),
			ConfigurationValues: aws.String("message: hello\nreplicaCount: 10\nlabels:\n  team: platform\n"),
			Tags:                manyTags(50)})
		addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni"),
			ServiceAccountRoleArn: aws.String("arn:aws:iam::" + acct + ":role/path/cni"),
			ResolveConflicts:      types.ResolveConflictsOverwrite,
			PodIdentityAssociations: []types.AddonPodIdentityAssociations{
				{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/cni")},
			}})
		addonCreate(t, h, &eks.CreateAddonInput{ClusterName: aws.String("old-133"), AddonName: aws.String("coredns"),
			NamespaceConfig: &types.AddonNamespaceConfigRequest{Namespace: aws.String("dns-system")}})
		if got := aws.ToString(addonDescribeOn(t, h, "old-133", "coredns").AddonVersion); got != "v1.11.4-eksbuild.2" {
			t.Errorf("default coredns on 1.33 = %s, want v1.11.4-eksbuild.2", got)
		}
	})
}

// addonDescribeOn describes an add-on of another cluster on the harness server.
func addonDescribeOn(t *testing.T, h *addonHarness, cluster, name string) *types.Addon {
	t.Helper()
	out, err := h.eks.DescribeAddon(ctxT(t), &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeAddon %s/%s: %v", cluster, name, err)
	}
	return out.Addon
}

// TestAddonClusterStateValidation: add-ons of a DELETING or FAILED cluster
// cannot be created, updated or deleted, as access entries cannot
// (docs/architecture.md, "Access entries"); they can still be described.
func TestAddonClusterStateValidation(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	for _, cl := range []string{"doomed", "broken"} {
		addonCluster(t, h, cl, "1.35")
		if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns")}); err != nil {
			t.Fatalf("CreateAddon on %s: %v", cl, err)
		}
	}
	if _, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("doomed")}); err != nil {
		t.Fatalf("DeleteCluster: %v", err)
	}
	addonSetClusterStatus(t, h, "broken", controlv1.ClusterStatus_CLUSTER_STATUS_FAILED)

	for _, cl := range []string{"doomed", "broken"} {
		want := awsErr{code: "InvalidRequestException", cluster: cl}
		t.Run(cl+"/create", func(t *testing.T) {
			before := addonKeyspace(t, h)
			_, err := h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("kube-proxy")})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
		t.Run(cl+"/create with a token", func(t *testing.T) {
			before := addonKeyspace(t, h)
			_, err := h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("kube-proxy"),
				ClientRequestToken: aws.String("state-" + cl)})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
		t.Run(cl+"/update", func(t *testing.T) {
			before := addonKeyspace(t, h)
			_, err := h.eks.UpdateAddon(ctxT(t), &eks.UpdateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns"),
				ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
		t.Run(cl+"/delete", func(t *testing.T) {
			before := addonKeyspace(t, h)
			_, err := h.eks.DeleteAddon(ctxT(t), &eks.DeleteAddonInput{ClusterName: aws.String(cl), AddonName: aws.String("coredns")})
			checkAWSErr(t, err, want)
			addonNoWrites(t, h, before)
		})
		t.Run(cl+"/describe still works", func(t *testing.T) {
			if got := addonDescribeOn(t, h, cl, "coredns").Status; got != types.AddonStatusCreating {
				t.Errorf("status = %s, want CREATING", got)
			}
		})
	}
}

func TestAddonUpdateValidation(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	c := h.cluster
	update := func(name string, mod func(*eks.UpdateAddonInput)) error {
		in := &eks.UpdateAddonInput{ClusterName: aws.String(c), AddonName: aws.String(name)}
		if mod != nil {
			mod(in)
		}
		_, err := h.eks.UpdateAddon(ctx, in)
		return err
	}
	config := func(v string) func(*eks.UpdateAddonInput) {
		return func(in *eks.UpdateAddonInput) { in.ConfigurationValues = aws.String(v) }
	}

	// coredns stays CREATING.
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	// kube-proxy: ACTIVE, then UPDATING.
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("kube-proxy")})
	if err := update("kube-proxy", config(`{"mode": "ipvs"}`)); err != nil {
		t.Fatalf("UpdateAddon kube-proxy: %v", err)
	}
	// metrics-server: ACTIVE, then DELETING.
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("metrics-server")})
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(c), AddonName: aws.String("metrics-server")}); err != nil {
		t.Fatalf("DeleteAddon metrics-server: %v", err)
	}
	// saltbush-noop and vpc-cni: ACTIVE, the targets of the validation cases.
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("saltbush-noop")})
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni")})
	// argocd: ACTIVE at the newer version; a downgrade is refused.
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("argocd")})

	tests := []struct {
		name  string
		addon string
		mod   func(*eks.UpdateAddonInput)
		want  awsErr
	}{
		{
			name: "while CREATING", addon: "coredns", mod: config(`{"replicaCount": 2}`),
			want: awsErr{code: "ResourceInUseException", exact: "Addon coredns cannot be updated as it is currently in CREATING state",
				cluster: c, addon: "coredns"},
		},
		{
			name: "while UPDATING", addon: "kube-proxy", mod: config(`{"mode": "iptables"}`),
			want: awsErr{code: "ResourceInUseException", exact: "Addon kube-proxy cannot be updated as it is currently in UPDATING state",
				cluster: c, addon: "kube-proxy"},
		},
		{
			name: "while DELETING", addon: "metrics-server", mod: config(`{"replicaCount": 2}`),
			want: awsErr{code: "ResourceInUseException", exact: "Addon metrics-server cannot be updated as it is currently in DELETING state",
				cluster: c, addon: "metrics-server"},
		},
		{
			name: "downgrade", addon: "argocd",
			mod:  func(in *eks.UpdateAddonInput) { in.AddonVersion = aws.String("v2.14.15-eksbuild.1") },
			want: awsErr{code: "InvalidParameterException", msg: []string{"v2.14.15-eksbuild.1"}, cluster: c, addon: "argocd"},
		},
		{
			name: "unknown version", addon: "argocd",
			mod:  func(in *eks.UpdateAddonInput) { in.AddonVersion = aws.String("v9.9.9-eksbuild.1") },
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "argocd"},
		},
		{
			name: "to a requiresConfiguration version keeping empty configuration", addon: "saltbush-noop",
			mod:  func(in *eks.UpdateAddonInput) { in.AddonVersion = aws.String("v1.1.0-eksbuild.1") },
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "saltbush-noop"},
		},
		{
			name: "schema violation", addon: "saltbush-noop", mod: config(`{"replicaCount": 0}`),
			want: awsErr{code: "InvalidParameterException", msg: []string{"replicaCount"}, cluster: c, addon: "saltbush-noop"},
		},
		{
			name: "additional property", addon: "saltbush-noop", mod: config(`{"extra": 1}`),
			want: awsErr{code: "InvalidParameterException", msg: []string{"extra"}, cluster: c, addon: "saltbush-noop"},
		},
		{
			name: "configuration not JSON or YAML", addon: "saltbush-noop", mod: config(`{{{`),
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "saltbush-noop"},
		},
		{
			name: "serviceAccountRoleArn of another account", addon: "vpc-cni",
			mod: func(in *eks.UpdateAddonInput) {
				in.ServiceAccountRoleArn = aws.String("arn:aws:iam::111111111111:role/cni")
			},
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "vpc-cni"},
		},
		{
			name: "podIdentityAssociations: unused service account", addon: "vpc-cni",
			mod: func(in *eks.UpdateAddonInput) {
				in.PodIdentityAssociations = []types.AddonPodIdentityAssociations{
					{ServiceAccount: aws.String("nobody"), RoleArn: aws.String("arn:aws:iam::000000000000:role/cni")},
				}
			},
			want: awsErr{code: "InvalidParameterException", msg: []string{"nobody"}, cluster: c, addon: "vpc-cni"},
		},
		{
			name: "resolveConflicts bogus", addon: "vpc-cni",
			mod:  func(in *eks.UpdateAddonInput) { in.ResolveConflicts = types.ResolveConflicts("MAYBE") },
			want: awsErr{code: "InvalidParameterException", cluster: c, addon: "vpc-cni"},
		},
		{
			name: "add-on not in the catalogue", addon: "no-such-addon", mod: config(`{}`),
			want: awsErr{code: "ResourceNotFoundException", cluster: c, addon: "no-such-addon"},
		},
		{
			name: "catalogue add-on not installed", addon: "aws-ebs-csi-driver", mod: config(`{}`),
			want: awsErr{code: "ResourceNotFoundException", exact: "No addon: aws-ebs-csi-driver found in cluster: " + c,
				cluster: c, addon: "aws-ebs-csi-driver"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			checkAWSErr(t, update(tc.addon, tc.mod), tc.want)
			addonNoWrites(t, h, before)
		})
	}

	t.Run("update on an unknown cluster", func(t *testing.T) {
		before := addonKeyspace(t, h)
		_, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String("nope"), AddonName: aws.String("coredns")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", exact: "No cluster found for name: nope.", cluster: "nope"})
		addonNoWrites(t, h, before)
	})
	t.Run("delete and describe an absent add-on", func(t *testing.T) {
		before := addonKeyspace(t, h)
		_, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(c), AddonName: aws.String("aws-ebs-csi-driver")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", cluster: c, addon: "aws-ebs-csi-driver"})
		_, err = h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c), AddonName: aws.String("aws-ebs-csi-driver")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", exact: "No addon: aws-ebs-csi-driver found in cluster: " + c,
			cluster: c, addon: "aws-ebs-csi-driver"})
		_, err = h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String("nope"), AddonName: aws.String("coredns")})
		checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException", exact: "No cluster found for name: nope.", cluster: "nope"})
		addonNoWrites(t, h, before)
	})
	// Nothing above moved the generations.
	for name, gen := range map[string]int64{"coredns": 1, "kube-proxy": 2, "metrics-server": 2, "saltbush-noop": 1, "vpc-cni": 1, "argocd": 1} {
		if got := h.get(t, name).GetGeneration(); got != gen {
			t.Errorf("%s generation = %d, want %d", name, got, gen)
		}
	}
}

func TestAddonPagingValidation(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	c := h.cluster
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("kube-proxy")})
	for _, v := range []string{`{"replicaCount": 2}`, `{"replicaCount": 3}`} {
		if _, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(c), AddonName: aws.String("coredns"),
			ConfigurationValues: aws.String(v)}); err != nil {
			t.Fatalf("UpdateAddon: %v", err)
		}
		h.report(t, "coredns", h.get(t, "coredns").GetGeneration(), controlv1.AddonPhase_ADDON_PHASE_READY)
	}

	// Real tokens, to tamper with and to use in the wrong place.
	la, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(c), MaxResults: aws.Int32(1)})
	if err != nil || la.NextToken == nil {
		t.Fatalf("ListAddons page 1: %v %v", la, err)
	}
	dv, err := h.eks.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{MaxResults: aws.Int32(1)})
	if err != nil || dv.NextToken == nil {
		t.Fatalf("DescribeAddonVersions page 1: %v %v", dv, err)
	}
	lu, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), AddonName: aws.String("coredns"), MaxResults: aws.Int32(1)})
	if err != nil || lu.NextToken == nil {
		t.Fatalf("ListUpdates page 1: %v %v", lu, err)
	}
	tamper := func(tok string) string {
		b := []byte(tok)
		i := len(b) / 2
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	invalid := awsErr{code: "InvalidParameterException"}
	type call struct {
		name string
		do   func() error
	}
	var calls []call
	for _, n := range []int32{0, 101, -1} {
		calls = append(calls,
			call{fmt.Sprintf("ListAddons maxResults=%d", n), func() error {
				_, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(c), MaxResults: aws.Int32(n)})
				return err
			}},
			call{fmt.Sprintf("DescribeAddonVersions maxResults=%d", n), func() error {
				_, err := h.eks.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{MaxResults: aws.Int32(n)})
				return err
			}},
			call{fmt.Sprintf("ListUpdates maxResults=%d", n), func() error {
				_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), AddonName: aws.String("coredns"), MaxResults: aws.Int32(n)})
				return err
			}},
			call{fmt.Sprintf("ListUpdates without addonName maxResults=%d", n), func() error {
				_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), MaxResults: aws.Int32(n)})
				return err
			}},
		)
	}
	forged := map[string]struct{ addons, versions, updates string }{
		"garbage":                {"forged", "forged", "forged"},
		"base64 of JSON":         {"eyJhZnRlciI6ImEifQ", "eyJhZnRlciI6ImEifQ", "eyJhZnRlciI6ImEifQ"},
		"tampered":               {tamper(*la.NextToken), tamper(*dv.NextToken), tamper(*lu.NextToken)},
		"from another operation": {*lu.NextToken, *la.NextToken, *dv.NextToken},
	}
	for name, f := range forged {
		calls = append(calls,
			call{"ListAddons nextToken " + name, func() error {
				_, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(c), NextToken: aws.String(f.addons)})
				return err
			}},
			call{"DescribeAddonVersions nextToken " + name, func() error {
				_, err := h.eks.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{NextToken: aws.String(f.versions)})
				return err
			}},
			call{"ListUpdates nextToken " + name, func() error {
				_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), AddonName: aws.String("coredns"), NextToken: aws.String(f.updates)})
				return err
			}},
			call{"ListUpdates without addonName nextToken " + name, func() error {
				_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), NextToken: aws.String(f.updates)})
				return err
			}},
		)
	}
	// A ListUpdates token of one add-on does not page another's updates.
	calls = append(calls, call{"ListUpdates nextToken of another add-on", func() error {
		_, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), AddonName: aws.String("kube-proxy"), NextToken: lu.NextToken})
		return err
	}})
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			checkAWSErr(t, tc.do(), invalid)
		})
	}

	// The untampered tokens still work.
	if _, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(c), NextToken: la.NextToken}); err != nil {
		t.Errorf("ListAddons with its own token: %v", err)
	}
	if _, err := h.eks.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{NextToken: dv.NextToken}); err != nil {
		t.Errorf("DescribeAddonVersions with its own token: %v", err)
	}
	if _, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(c), AddonName: aws.String("coredns"), NextToken: lu.NextToken}); err != nil {
		t.Errorf("ListUpdates with its own token: %v", err)
	}
}
