package clients

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

// The principals of the access-entry tests. accessRole has a path: its
// entry ARN, generated username and sessions name it without.
const (
	accessDevUser   = "arn:aws:iam::000000000000:user/saltbush-dev"
	accessRole      = "arn:aws:iam::000000000000:role/ops/deployer"
	accessOperator  = "arn:aws:iam::000000000000:role/operator"
	accessUser      = "arn:aws:iam::000000000000:user/reader"
	accessNodeRole  = "arn:aws:iam::000000000000:role/nodes"
	accessSpareRole = "arn:aws:iam::000000000000:role/spare"
	accessNobody    = "arn:aws:iam::000000000000:user/nobody"

	accessPolicyPrefix = "arn:aws:eks::aws:cluster-access-policy/"
	accessAdminPolicy  = accessPolicyPrefix + "AmazonEKSClusterAdminPolicy"
	accessEditPolicy   = accessPolicyPrefix + "AmazonEKSEditPolicy"
	accessViewPolicy   = accessPolicyPrefix + "AmazonEKSViewPolicy"

	accessAgentInstance = "i-0a1b2c3d4e5f60718"
)

// accessHarness is a running saltbush with one ACTIVE cluster in
// authentication mode API created by the development user (so its creator
// entry, ClusterAdmin on cluster scope, was seeded) and the IAM principals
// the access-entry tests make entries for.
type accessHarness struct {
	srv     *servertest.Server
	eks     *eks.Client
	control controlv1.ClusterControlServiceClient
	account string
	cluster string
}

func newAccessHarness(t *testing.T, cluster string) *accessHarness {
	t.Helper()
	srv := servertest.Start(t)
	h := &accessHarness{
		srv:     srv,
		eks:     srv.EKS(t),
		control: controlv1.NewClusterControlServiceClient(srv.GRPC(t)),
		account: srv.Config.DevAccount,
		cluster: cluster,
	}
	ctx := ctxT(t)
	if _, err := h.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String(cluster),
		Version:            aws.String("1.35"),
		RoleArn:            aws.String(roleARN),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	for _, arn := range []string{accessRole, accessOperator, accessUser, accessNodeRole, accessSpareRole, accessNobody} {
		if _, err := srv.IAM().CreatePrincipal(ctx, arn); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	if _, err := h.control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: h.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	return h
}

func (h *accessHarness) ref() *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: h.account, Name: h.cluster}
}

// keysOf is the environment that makes a client sign with c: an access
// key and secret, no session token.
func keysOf(c servertest.Creds) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + c.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + c.SecretAccessKey}
}

func (h *accessHarness) describe(t *testing.T, principal string) *types.AccessEntry {
	t.Helper()
	out, err := h.eks.DescribeAccessEntry(ctxT(t), &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(principal)})
	if err != nil {
		t.Fatalf("Go SDK DescribeAccessEntry %s: %v", principal, err)
	}
	return out.AccessEntry
}

// TestAccessEntriesWithBotocore runs botocore_access.py step by step over
// every access-entry operation, and checks with the Go SDK between the
// steps that what botocore did is what the other client sees.
func TestAccessEntriesWithBotocore(t *testing.T) {
	requireBotocore(t)
	h := newAccessHarness(t, "boto-access")
	script := func(step string) string {
		return runEnv(t, keysOf(h.srv.Dev(t)), "python3", "botocore_access.py",
			"--endpoint", h.srv.URL, "--cluster", h.cluster, "--step", step,
			"--role", accessRole, "--user", accessUser, "--node-role", accessNodeRole, "--spare-role", accessSpareRole)
	}

	var entries struct {
		AccessEntryArn, Botocore string
		CreatedAt                float64
	}
	lastJSON(t, script("entries"), &entries)
	t.Logf("botocore %s", entries.Botocore)
	e := h.describe(t, accessRole)
	if aws.ToString(e.AccessEntryArn) != entries.AccessEntryArn || aws.ToString(e.Username) != "ops:{{SessionName}}" ||
		!slices.Equal(e.KubernetesGroups, []string{"deployers", "ops"}) ||
		len(e.Tags) != 2 || e.Tags["team"] != "ops" || e.Tags["env"] != "dev" {
		t.Errorf("the Go SDK sees %+v after the botocore entries step (arn %s)", e, entries.AccessEntryArn)
	}
	if got := float64(e.CreatedAt.UnixMilli()) / 1000; math.Abs(got-entries.CreatedAt) > 0.0005 {
		t.Errorf("botocore parsed createdAt %.3f, the Go SDK %.3f", entries.CreatedAt, got)
	}

	var policies struct{ Policies []string }
	lastJSON(t, script("policies"), &policies)
	la, err := h.eks.ListAssociatedAccessPolicies(ctxT(t), &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessRole)})
	if err != nil {
		t.Fatalf("Go SDK ListAssociatedAccessPolicies: %v", err)
	}
	if len(la.AssociatedAccessPolicies) != 1 || aws.ToString(la.AssociatedAccessPolicies[0].PolicyArn) != accessEditPolicy ||
		la.AssociatedAccessPolicies[0].AccessScope.Type != types.AccessScopeTypeCluster ||
		len(la.AssociatedAccessPolicies[0].AccessScope.Namespaces) != 0 {
		t.Errorf("the Go SDK sees associations %+v after the botocore policies step", la.AssociatedAccessPolicies)
	}
	if len(policies.Policies) != 19 {
		t.Errorf("botocore listed %d access policies, want 19", len(policies.Policies))
	}

	script("errors")

	var deleted struct{ Deleted string }
	lastJSON(t, script("delete"), &deleted)
	if deleted.Deleted != entries.AccessEntryArn {
		t.Errorf("botocore deleted %s, created %s", deleted.Deleted, entries.AccessEntryArn)
	}
	_, err = h.eks.DescribeAccessEntry(ctxT(t), &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessRole)})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("Go SDK DescribeAccessEntry after botocore's delete: %v, want ResourceNotFoundException", err)
	}
}

func requireAWSCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
}

// awsCLIVersion returns `aws --version` and whether it is CLI v1.
func awsCLIVersion(t *testing.T) (string, bool) {
	t.Helper()
	// CLI v1 prints its version on stdout (older ones on stderr).
	v, verr, _ := runRaw(t, nil, "aws", "--version")
	version := strings.TrimSpace(v + verr)
	return version, strings.HasPrefix(version, "aws-cli/1.")
}

// TestAccessEntriesWithAWSCLI drives the access-entry commands of the AWS
// CLI and checks the JSON it prints, and one error's exit code and message.
func TestAccessEntriesWithAWSCLI(t *testing.T) {
	requireAWSCLI(t)
	h := newAccessHarness(t, "cli-access")
	version, cliV1 := awsCLIVersion(t)
	t.Logf("aws --version: %s", version)
	keys := keysOf(h.srv.Dev(t))
	cli := func(args ...string) string {
		return runEnv(t, keys, "aws", append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	isoConfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(isoConfig, []byte("[default]\ncli_timestamp_format = iso8601\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cliISO := func(args ...string) string {
		return runEnv(t, append(slices.Clone(keys), "AWS_CONFIG_FILE="+isoConfig), "aws",
			append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	decode := func(what, out string, into any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), into); err != nil {
			t.Fatalf("%s printed no JSON: %v\n%s", what, err, out)
		}
	}
	type printedEntry struct {
		ClusterName, PrincipalArn, AccessEntryArn, Username, Type string
		KubernetesGroups                                          []string
		Tags                                                      map[string]string
		CreatedAt, ModifiedAt                                     any // v1's default: epoch seconds; iso8601: a string
	}

	// create-access-entry
	var created struct{ AccessEntry printedEntry }
	decode("create-access-entry", cli("create-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser,
		"--kubernetes-groups", "readers", "viewers", "--tags", "team=ops,env=dev"), &created)
	c := created.AccessEntry
	wantARN := "arn:aws:eks:us-east-1:000000000000:access-entry/" + h.cluster + "/user/000000000000/reader/"
	if c.ClusterName != h.cluster || c.PrincipalArn != accessUser || c.Type != "STANDARD" || c.Username != accessUser ||
		!slices.Equal(c.KubernetesGroups, []string{"readers", "viewers"}) || len(c.Tags) != 2 || c.Tags["team"] != "ops" ||
		!strings.HasPrefix(c.AccessEntryArn, wantARN) || len(c.AccessEntryArn) != len(wantARN)+36 {
		t.Errorf("create-access-entry printed %+v", c)
	}
	sdk := h.describe(t, accessUser)
	if aws.ToString(sdk.AccessEntryArn) != c.AccessEntryArn {
		t.Errorf("the Go SDK sees ARN %s, the CLI printed %s", aws.ToString(sdk.AccessEntryArn), c.AccessEntryArn)
	}

	// describe-access-entry: CLI v1 prints timestamps as they came on the
	// wire (epoch seconds) unless cli_timestamp_format = iso8601, when it
	// prints botocore's parsed datetime; check both.
	var desc struct{ AccessEntry printedEntry }
	decode("describe-access-entry", cli("describe-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser), &desc)
	d := desc.AccessEntry
	if d.AccessEntryArn != c.AccessEntryArn || d.Username != accessUser || !slices.Equal(d.KubernetesGroups, []string{"readers", "viewers"}) {
		t.Errorf("describe-access-entry printed %+v", d)
	}
	if cliV1 {
		want := float64(sdk.CreatedAt.UnixMilli()) / 1000
		cv, cok := d.CreatedAt.(float64)
		mv, mok := d.ModifiedAt.(float64)
		if !cok || !mok || math.Abs(cv-want) > 0.0005 || mv < cv {
			t.Errorf("describe-access-entry (default timestamp format) createdAt %v modifiedAt %v, want the wire's epoch seconds %.3f",
				d.CreatedAt, d.ModifiedAt, want)
		}
	}
	var iso struct {
		AccessEntry struct{ CreatedAt, ModifiedAt any }
	}
	decode("describe-access-entry (iso8601)", cliISO("describe-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser), &iso)
	for what, v := range map[string]any{"createdAt": iso.AccessEntry.CreatedAt, "modifiedAt": iso.AccessEntry.ModifiedAt} {
		s, ok := v.(string)
		if !ok {
			t.Errorf("describe-access-entry (iso8601) %s = %v (%T), want a timestamp string", what, v, v)
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Errorf("describe-access-entry %s = %q is not ISO 8601: %v", what, s, err)
			continue
		}
		if !ts.Equal(aws.ToTime(sdk.CreatedAt)) {
			t.Errorf("describe-access-entry %s = %s, the Go SDK saw createdAt %s", what, ts, aws.ToTime(sdk.CreatedAt))
		}
	}

	// list-access-entries: the CLI pages through every page itself; with
	// --page-size 1 it asks for one entry a page.
	var list struct{ AccessEntries []string }
	decode("list-access-entries", cli("list-access-entries", "--cluster-name", h.cluster, "--page-size", "1"), &list)
	if !slices.Equal(sortedCopy(list.AccessEntries), sortedCopy([]string{accessDevUser, accessUser})) {
		t.Errorf("list-access-entries --page-size 1 printed %v, want the dev user and %s", list.AccessEntries, accessUser)
	}
	decode("list-access-entries filtered", cli("list-access-entries", "--cluster-name", h.cluster, "--associated-policy-arn", accessAdminPolicy), &list)
	if !slices.Equal(list.AccessEntries, []string{accessDevUser}) {
		t.Errorf("list-access-entries --associated-policy-arn ClusterAdmin printed %v", list.AccessEntries)
	}

	// associate-access-policy with the CLI's shorthand scope.
	type printedAssociation struct {
		ClusterName, PrincipalArn string
		AssociatedAccessPolicy    struct {
			PolicyArn   string
			AccessScope struct {
				Type       string
				Namespaces []string
			}
			AssociatedAt, ModifiedAt any
		}
	}
	var assoc printedAssociation
	decode("associate-access-policy", cli("associate-access-policy", "--cluster-name", h.cluster, "--principal-arn", accessUser,
		"--policy-arn", accessViewPolicy, "--access-scope", "type=namespace,namespaces=dev"), &assoc)
	a := assoc.AssociatedAccessPolicy
	if assoc.ClusterName != h.cluster || assoc.PrincipalArn != accessUser || a.PolicyArn != accessViewPolicy ||
		a.AccessScope.Type != "namespace" || !slices.Equal(a.AccessScope.Namespaces, []string{"dev"}) {
		t.Errorf("associate-access-policy printed %+v", assoc)
	}
	if _, ok := a.AssociatedAt.(float64); cliV1 && !ok {
		t.Errorf("associate-access-policy associatedAt = %v (%T), want epoch seconds", a.AssociatedAt, a.AssociatedAt)
	}
	// Cluster scope: the CLI prints the "namespaces": [] AWS sends.
	out := cli("associate-access-policy", "--cluster-name", h.cluster, "--principal-arn", accessUser,
		"--policy-arn", accessEditPolicy, "--access-scope", "type=cluster")
	var rawAssoc struct {
		AssociatedAccessPolicy struct {
			AccessScope map[string]json.RawMessage `json:"accessScope"`
		} `json:"associatedAccessPolicy"`
	}
	decode("associate-access-policy (cluster)", out, &rawAssoc)
	if sc := rawAssoc.AssociatedAccessPolicy.AccessScope; string(sc["type"]) != `"cluster"` || string(compactJSON(t, sc["namespaces"])) != `[]` {
		t.Errorf("associate-access-policy --access-scope type=cluster printed accessScope %s, want type cluster, namespaces []", out)
	}
	var listed struct {
		ClusterName, PrincipalArn string
		AssociatedAccessPolicies  []struct{ PolicyArn string }
	}
	decode("list-associated-access-policies", cli("list-associated-access-policies", "--cluster-name", h.cluster,
		"--principal-arn", accessUser, "--page-size", "1"), &listed)
	var arns []string
	for _, p := range listed.AssociatedAccessPolicies {
		arns = append(arns, p.PolicyArn)
	}
	if !slices.Equal(sortedCopy(arns), []string{accessEditPolicy, accessViewPolicy}) {
		t.Errorf("list-associated-access-policies --page-size 1 printed %+v", listed)
	}

	// list-access-policies: the catalogue, every page.
	var pols struct {
		AccessPolicies []struct{ Name, Arn string }
	}
	decode("list-access-policies", cli("list-access-policies", "--page-size", "5"), &pols)
	names := []string{}
	for _, p := range pols.AccessPolicies {
		if p.Arn != accessPolicyPrefix+p.Name {
			t.Errorf("list-access-policies: %s has ARN %s", p.Name, p.Arn)
		}
		names = append(names, p.Name)
	}
	if len(names) != 19 || !slices.IsSorted(names) || !slices.Contains(names, "AmazonEKSClusterAdminPolicy") {
		t.Errorf("list-access-policies printed %d policies %v, want the 19, sorted", len(names), names)
	}

	// delete-access-entry prints nothing (an empty response).
	if out := strings.TrimSpace(cli("delete-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser)); out != "" && out != "{}" {
		t.Errorf("delete-access-entry printed %q, want nothing", out)
	}

	// Errors: the CLI exits non-zero with botocore's message on stderr.
	wantRC := 254 // CLI v2: a service error
	if cliV1 {
		wantRC = 255
	}
	cliFails := func(code, message string, args ...string) {
		t.Helper()
		stdout, stderr, err := runRaw(t, keys, "aws", append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Errorf("aws eks %s: %v, want a non-zero exit\nstdout: %s\nstderr: %s", args[0], err, stdout, stderr)
			return
		}
		want := "An error occurred (" + code + ") when calling the "
		if exit.ExitCode() != wantRC || !strings.Contains(stderr, want) || !strings.Contains(stderr, message) || stdout != "" {
			t.Errorf("aws eks %s: exit %d, stdout %q, stderr %q; want exit %d and %q ... %q",
				args[0], exit.ExitCode(), stdout, stderr, wantRC, want, message)
		}
		t.Logf("aws eks %s: exit %d: %s", args[0], exit.ExitCode(), strings.TrimSpace(stderr))
	}
	cliFails("ResourceNotFoundException",
		"DescribeAccessEntry operation: The specified principalArn could not be found. You can view your available access entries with 'list-access-entries'.",
		"describe-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser)
	cliFails("InvalidParameterException",
		"CreateAccessEntry operation: The kubernetes group name system:masters is invalid, it cannot start with system:",
		"create-access-entry", "--cluster-name", h.cluster, "--principal-arn", accessUser, "--kubernetes-groups", "system:masters")
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func compactJSON(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}

// execCredential is what `aws eks get-token` prints.
type execCredential struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     struct {
		ExpirationTimestamp string `json:"expirationTimestamp"`
		Token               string `json:"token"`
	} `json:"status"`
}

// getToken runs the AWS CLI's `aws eks get-token` signing with c and
// returns its token. When this CLI has no get-token, it presigns with
// botocore the way the CLI does (botocore_access.py --step token) and says
// so.
func getToken(t *testing.T, c servertest.Creds, cluster string) string {
	t.Helper()
	env := keysOf(c)
	stdout, stderr, err := runRaw(t, env, "aws", "eks", "get-token", "--cluster-name", cluster, "--region", "us-east-1", "--output", "json")
	if err != nil && strings.Contains(stderr, "Invalid choice") {
		t.Logf("this AWS CLI has no `eks get-token` (%s): presigning with botocore the way the CLI does", strings.TrimSpace(stderr))
		return botocoreToken(t, c, cluster)
	} else if err != nil {
		t.Fatalf("aws eks get-token --cluster-name %s: %v\nstdout:\n%s\nstderr:\n%s", cluster, err, stdout, stderr)
	}
	return checkExecCredential(t, stdout, c, cluster)
}

// botocoreToken presigns a token with botocore as `aws eks get-token`
// does (botocore_access.py --step token).
func botocoreToken(t *testing.T, c servertest.Creds, cluster string) string {
	t.Helper()
	requireBotocore(t)
	out := runEnv(t, keysOf(c), "python3", "botocore_access.py", "--step", "token", "--cluster", cluster)
	return checkExecCredential(t, out, c, cluster)
}

// checkExecCredential decodes an ExecCredential and checks its token is an
// `aws eks get-token` token: k8s-aws-v1. and the base64url of a presigned
// STS GetCallerIdentity URL, signed by c's key for cluster's name.
func checkExecCredential(t *testing.T, out string, c servertest.Creds, cluster string) string {
	t.Helper()
	var ec execCredential
	if err := json.Unmarshal([]byte(out), &ec); err != nil {
		t.Fatalf("get-token printed no ExecCredential JSON: %v\n%s", err, out)
	}
	if ec.Kind != "ExecCredential" || !strings.HasPrefix(ec.APIVersion, "client.authentication.k8s.io/") {
		t.Errorf("get-token printed kind %q apiVersion %q", ec.Kind, ec.APIVersion)
	}
	if exp, err := time.Parse(time.RFC3339, ec.Status.ExpirationTimestamp); err != nil || time.Until(exp) < 10*time.Minute || time.Until(exp) > 15*time.Minute {
		t.Errorf("get-token expirationTimestamp %q (%v), want about 14 minutes from now", ec.Status.ExpirationTimestamp, err)
	}
	tok := ec.Status.Token
	body, ok := strings.CutPrefix(tok, "k8s-aws-v1.")
	if !ok {
		t.Fatalf("get-token token %q does not start with k8s-aws-v1.", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatalf("get-token token is not unpadded base64url: %v", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatalf("get-token token holds %q, not a URL: %v", raw, err)
	}
	q := u.Query()
	if u.Scheme != "https" || !strings.HasPrefix(u.Host, "sts.") || !strings.HasSuffix(u.Host, ".amazonaws.com") ||
		q.Get("Action") != "GetCallerIdentity" || q.Get("X-Amz-Expires") != "60" ||
		!strings.HasPrefix(q.Get("X-Amz-Credential"), c.AccessKeyID+"/") ||
		!slices.Contains(strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), "x-k8s-aws-id") || q.Get("X-Amz-Security-Token") != "" {
		t.Errorf("get-token for %s presigned %s", cluster, raw)
	}
	t.Logf("get-token for %s as %s: host %s", cluster, c.PrincipalARN, u.Host)
	return tok
}

func extraValue(u *deliveryv1.UserInfo, key string) string {
	if v := u.GetExtra()[key].GetValues(); len(v) == 1 {
		return v[0]
	}
	return "<" + strings.Join(u.GetExtra()[key].GetValues(), ",") + ">"
}

// TestGetTokenReviewWithAWSCLI feeds tokens `aws eks get-token` made to
// ReviewToken, as the cluster's guest agent does, for the dev user (the
// creator entry), an IAM user with an entry, and an assumed-role session
// of a role whose entry's username is ops:{{SessionName}}; then checks a
// token for another cluster, and one of a principal without an entry, do
// not authenticate, and that ReviewAccess takes the reviewed users.
func TestGetTokenReviewWithAWSCLI(t *testing.T) {
	requireAWSCLI(t)
	h := newAccessHarness(t, "token-access")
	version, _ := awsCLIVersion(t)
	t.Logf("aws --version: %s", version)
	ctx := ctxT(t)
	for _, in := range []*eks.CreateAccessEntryInput{
		{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessOperator), Username: aws.String("ops:{{SessionName}}"), KubernetesGroups: []string{"operators"}},
		{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessRole), Username: aws.String("deploy:{{SessionName}}"), KubernetesGroups: []string{"deployers"}},
		{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessUser), KubernetesGroups: []string{"readers", "viewers"}},
	} {
		if _, err := h.eks.CreateAccessEntry(ctx, in); err != nil {
			t.Fatalf("CreateAccessEntry %s: %v", aws.ToString(in.PrincipalArn), err)
		}
	}
	if _, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(accessOperator), PolicyArn: aws.String(accessViewPolicy),
		AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev"}},
	}); err != nil {
		t.Fatalf("AssociateAccessPolicy: %v", err)
	}
	member, err := h.control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: h.ref(), InstanceId: accessAgentInstance})
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	review := deliveryv1.NewAccessReviewServiceClient(h.srv.AgentConn(t, member.GetCluster().GetUid(), accessAgentInstance))
	name := &deliveryv1.ClusterName{AccountId: h.account, Name: h.cluster}

	const session = "alice@example.com"
	dev, user := h.srv.Dev(t), h.srv.NewKey(t, accessUser)
	sess := h.srv.NewKey(t, "arn:aws:sts::000000000000:assumed-role/operator/"+session)
	cases := []struct {
		name                    string
		creds                   servertest.Creds
		username                string
		groups                  []string
		idPrefix                string
		canonical, sessionName  string
		allowedVerb, allowedNS  string // a request ReviewAccess allows
		noOpinionVerb, noOpinNS string // one it has no opinion on
	}{
		{"dev user (creator entry)", dev, accessDevUser, nil, "AIDA", accessDevUser, "", "delete", "kube-system", "", ""},
		{"IAM user", user, accessUser, []string{"readers", "viewers"}, "AIDA", accessUser, "", "", "", "get", "default"},
		// The entry names the role with its path; the session ARN and the
		// canonical ARN name it without; {{SessionName}} turns @ into -.
		{"assumed-role session", sess, "ops:alice-example.com", []string{"operators"}, "AROA",
			accessOperator, session, "list", "dev", "list", "prod"},
	}
	// A session of a role with a path names the role without it, and so
	// does the canonical ARN token review matches entries by; the key
	// store finds the session's role by name (its path included).
	const pathSession = "arn:aws:sts::000000000000:assumed-role/deployer/ci-run-7"
	akid, secret, err := h.srv.IAM().CreateAccessKey(ctx, pathSession)
	if err != nil {
		t.Fatalf("key for %s, a session of %s: %v", pathSession, accessRole, err)
	}
	cases = append(cases, struct {
		name                    string
		creds                   servertest.Creds
		username                string
		groups                  []string
		idPrefix                string
		canonical, sessionName  string
		allowedVerb, allowedNS  string
		noOpinionVerb, noOpinNS string
	}{"session of a role with a path", servertest.Creds{AccessKeyID: akid, SecretAccessKey: secret, AccountID: "000000000000", PrincipalARN: pathSession},
		"deploy:ci-run-7", []string{"deployers"}, "AROA", "arn:aws:iam::000000000000:role/deployer", "ci-run-7", "", "", "get", "default"})
	ids := map[string]string{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := getToken(t, tc.creds, h.cluster)
			got, err := review.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: tok, Audiences: []string{"https://kubernetes.default.svc"}})
			if err != nil {
				t.Fatalf("ReviewToken: %v", err)
			}
			u := got.GetUser()
			if !got.GetAuthenticated() || got.GetError() != "" {
				t.Fatalf("ReviewToken of %s's get-token token: authenticated %v, error %q", tc.creds.PrincipalARN, got.GetAuthenticated(), got.GetError())
			}
			if u.GetUsername() != tc.username || !slices.Equal(u.GetGroups(), tc.groups) {
				t.Errorf("reviewed username %q groups %v, want %q %v", u.GetUsername(), u.GetGroups(), tc.username, tc.groups)
			}
			id, ok := strings.CutPrefix(u.GetUid(), "aws-iam-authenticator:000000000000:")
			if !ok || !strings.HasPrefix(id, tc.idPrefix) || len(id) != 21 || strings.ToUpper(id) != id {
				t.Errorf("reviewed uid %q, want aws-iam-authenticator:000000000000:%s + 17 characters", u.GetUid(), tc.idPrefix)
			}
			for key, want := range map[string]string{
				"arn": tc.creds.PrincipalARN, "canonicalArn": tc.canonical, "accessKeyId": tc.creds.AccessKeyID,
				"sessionName": tc.sessionName, "principalId": id,
			} {
				if got := extraValue(u, key); got != want {
					t.Errorf("reviewed extra %s = %q, want %q", key, got, want)
				}
			}
			if len(got.GetAudiences()) != 0 {
				t.Errorf("audiences %v: an EKS token is bound to none (the apiserver applies its own)", got.GetAudiences())
			}
			ids[tc.name] = id

			// The reviewed user, as the apiserver passes it on to ReviewAccess.
			access := func(verb, ns string) *deliveryv1.ReviewAccessResponse {
				t.Helper()
				out, err := review.ReviewAccess(ctx, &deliveryv1.ReviewAccessRequest{
					Cluster: name, User: u.GetUsername(), Groups: u.GetGroups(), Extra: u.GetExtra(), Uid: u.GetUid(),
					ResourceAttributes: &deliveryv1.ResourceAttributes{Namespace: ns, Verb: verb, Version: "v1", Resource: "pods"},
				})
				if err != nil {
					t.Fatalf("ReviewAccess %s pods in %s: %v", verb, ns, err)
				}
				return out
			}
			if tc.allowedVerb != "" {
				if out := access(tc.allowedVerb, tc.allowedNS); !out.GetAllowed() || out.GetDenied() {
					t.Errorf("ReviewAccess %s pods in %s = %+v, want allowed", tc.allowedVerb, tc.allowedNS, out)
				}
			}
			if tc.noOpinionVerb != "" {
				if out := access(tc.noOpinionVerb, tc.noOpinNS); out.GetAllowed() || out.GetDenied() {
					t.Errorf("ReviewAccess %s pods in %s = %+v, want no opinion", tc.noOpinionVerb, tc.noOpinNS, out)
				}
			}
		})
	}
	if ids[cases[0].name] != "" && ids[cases[0].name] == ids[cases[1].name] {
		t.Errorf("the dev user and %s share the principal id %s", accessUser, ids[cases[0].name])
	}

	unauthenticated := func(what, tok, wantErr string) {
		t.Helper()
		got, err := review.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: tok})
		if err != nil {
			t.Fatalf("ReviewToken (%s): %v", what, err)
		}
		if got.GetAuthenticated() || got.GetUser() != nil || got.GetError() == "" || !strings.Contains(got.GetError(), wantErr) {
			t.Errorf("ReviewToken (%s) = authenticated %v user %v error %q, want unauthenticated saying %q",
				what, got.GetAuthenticated(), got.GetUser(), got.GetError(), wantErr)
		}
		t.Logf("ReviewToken (%s): %s", what, got.GetError())
	}
	// The CLI's token for another cluster name is not one for this cluster.
	// (x-k8s-aws-id is signed: as STS would, saltbush finds the signature
	// does not match the request for this cluster's name).
	unauthenticated("a dev token made with --cluster-name other", getToken(t, dev, "other"), "signature")
	// A principal with a key but no entry.
	unauthenticated("a token of a principal without an entry", getToken(t, h.srv.NewKey(t, accessNobody), h.cluster), "not mapped")

	// The fallback for a CLI without get-token makes tokens that work too.
	t.Run("botocore presign", func(t *testing.T) {
		got, err := review.ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: name, Token: botocoreToken(t, sess, h.cluster)})
		if err != nil || !got.GetAuthenticated() || got.GetUser().GetUsername() != "ops:alice-example.com" {
			t.Errorf("ReviewToken of botocore's presigned token = %v, %v", got, err)
		}
	})
}
