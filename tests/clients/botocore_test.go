// Package clients drives saltbush with real AWS clients other than the Go
// SDK (whose conformance lives in tests/conformance): botocore, the library
// under boto3 and the AWS CLI, through botocore_addon.py, and the AWS CLI v1
// itself. The tests skip, saying why, when python3/botocore or aws is not
// installed.
package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

const (
	roleARN = "arn:aws:iam::000000000000:role/eks"
	addon   = "saltbush-noop"
)

// allowAbsentEmptyLists, when true, tolerates a divergence from AWS: an
// absent `health.issues` of a healthy add-on or `errors` of an update, where
// AWS sends [] (the façade's marshaler once emitted [] only for a response's
// top-level lists). The clients then report it as a warning instead of
// failing. Off: the façade sends them (gateway/marshal.go).
const allowAbsentEmptyLists = false

// harness is a running saltbush with one ACTIVE cluster and the internal
// add-on control API standing in for the guest agent's reports.
type harness struct {
	srv     *servertest.Server
	eks     *eks.Client
	control controlv1.AddonControlServiceClient
	account string
	cluster string
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// keys is the environment that makes a client sign as the development
// administrator.
func (h *harness) keys(t *testing.T) []string {
	c := h.srv.Dev(t)
	return []string{"AWS_ACCESS_KEY_ID=" + c.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + c.SecretAccessKey}
}

func newHarness(t *testing.T, cluster string) *harness {
	t.Helper()
	srv := servertest.Start(t)
	conn := srv.GRPC(t)
	h := &harness{
		srv:     srv,
		eks:     srv.EKS(t),
		control: controlv1.NewAddonControlServiceClient(conn),
		account: srv.Config.DevAccount,
		cluster: cluster,
	}
	ctx := ctxT(t)
	if _, err := h.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String(cluster),
		Version:            aws.String("1.35"),
		RoleArn:            aws.String(roleARN),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if _, err := controlv1.NewClusterControlServiceClient(conn).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: h.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	return h
}

func (h *harness) ref() *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: h.account, Name: h.cluster}
}

// report sends a guest report for generation gen of the add-on's current
// incarnation and requires it to be accepted.
func (h *harness) report(t *testing.T, gen int64, phase controlv1.AddonPhase, issues ...*controlv1.AddonIssue) *controlv1.AddonInfo {
	t.Helper()
	ctx := ctxT(t)
	got, err := h.control.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: h.ref(), AddonName: addon})
	if err != nil {
		t.Fatalf("GetAddon: %v", err)
	}
	a := got.GetAddon()
	if a.GetGeneration() != gen {
		t.Fatalf("add-on is at generation %d, want %d (%v)", a.GetGeneration(), gen, a)
	}
	out, err := h.control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
		ClusterUid: a.GetClusterUid(), AddonName: addon, AddonUid: a.GetUid(),
		Generation: gen, Phase: phase, Issues: issues, InstanceId: "i-0123456789abcdef0",
	})
	if err != nil {
		t.Fatalf("ApplyAddonReport gen %d %s: %v", gen, phase, err)
	}
	if !out.GetAccepted() {
		t.Fatalf("report gen %d %s not accepted: %s", gen, phase, out.GetReason())
	}
	return a
}

// clientEnv is the environment of a client subprocess (the access key is
// added by the caller, see harness.keys): no shared config or credentials files, no instance metadata,
// so nothing on the machine changes what the client does.
func clientEnv(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	env := []string{
		"AWS_DEFAULT_REGION=us-east-1",
		"AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE=" + dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_DEFAULT_OUTPUT=json",
		"AWS_PAGER=",
		"PYTHONDONTWRITEBYTECODE=1",
	}
	// Keep what finds the interpreter and its packages (pyenv shims, venvs,
	// user site-packages under HOME).
	for _, kv := range os.Environ() {
		for _, keep := range []string{"PATH=", "HOME=", "PYENV_", "VIRTUAL_ENV=", "PYTHONPATH=", "PYTHONUSERBASE=", "LANG=", "LC_ALL="} {
			if strings.HasPrefix(kv, keep) {
				env = append(env, kv)
			}
		}
	}
	return env
}

// runEnv runs a client command with extra environment variables
// (overriding clientEnv's) and returns its stdout; a non-zero exit fails
// the test with both outputs.
func runEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runRaw(t, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout, stderr)
	}
	t.Logf("%s %s\n%s", name, strings.Join(args, " "), stderr)
	return stdout
}

func runRaw(t *testing.T, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(clientEnv(t), env...) // exec keeps the last value of a repeated variable
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// lastJSON decodes the last non-empty line of out.
func lastJSON(t *testing.T, out string, into any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), into); err != nil {
		t.Fatalf("decode result line %q: %v", lines[len(lines)-1], err)
	}
}

func requireBotocore(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("python3 not on PATH (%v): the botocore client test needs it", err)
	}
	cmd := exec.Command("python3", "-c", "import botocore")
	cmd.Env = clientEnv(t) // the environment the script runs in
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("botocore is not importable by python3 (%v): %s", err, bytes.TrimSpace(out))
	}
}

// TestAddonLifecycleWithBotocore runs botocore_addon.py step by step, with
// the guest reports sent from here between the steps.
func TestAddonLifecycleWithBotocore(t *testing.T) {
	requireBotocore(t)
	h := newHarness(t, "boto-1")
	script := func(step string, extra ...string) string {
		args := []string{"botocore_addon.py", "--endpoint", h.srv.URL, "--cluster", h.cluster, "--step", step}
		if allowAbsentEmptyLists {
			args = append(args, "--allow-absent-empty-lists")
		}
		out := runEnv(t, h.keys(t), "python3", append(args, extra...)...)
		var res struct{ Warnings []string }
		lastJSON(t, out, &res)
		for _, w := range res.Warnings {
			t.Logf("step %s: known divergence: %s", step, w)
		}
		return out
	}

	var created struct {
		Step, AddonArn, ClientRequestToken, Botocore string
	}
	lastJSON(t, script("create"), &created)
	t.Logf("botocore %s", created.Botocore)
	info := h.report(t, 1, controlv1.AddonPhase_ADDON_PHASE_READY, &controlv1.AddonIssue{
		Code: "InsufficientNumberOfReplicas", Message: "1 of 2 replicas ready", ResourceIds: []string{"saltbush-noop/noop"},
	})
	if !strings.HasSuffix(created.AddonArn, "/"+info.GetUid()) {
		t.Errorf("botocore saw addonArn %q; the add-on's incarnation is %s", created.AddonArn, info.GetUid())
	}

	var updated struct{ Step, UpdateID string }
	lastJSON(t, script("update"), &updated)
	if info := h.report(t, 2, controlv1.AddonPhase_ADDON_PHASE_READY); info.GetUpdateId() != updated.UpdateID {
		t.Errorf("botocore saw update %q; the add-on's update is %q", updated.UpdateID, info.GetUpdateId())
	}

	var deleting struct{ Step, Status string }
	lastJSON(t, script("delete", "--update-id", updated.UpdateID), &deleting)
	if deleting.Status != "DELETING" {
		t.Errorf("after the delete step status = %q, want DELETING", deleting.Status)
	}
	h.report(t, 3, controlv1.AddonPhase_ADDON_PHASE_REMOVED)

	var gone struct {
		Step   string
		Addons []string
	}
	lastJSON(t, script("gone", "--update-id", updated.UpdateID), &gone)

	// The Go SDK agrees the add-on is gone.
	_, err := h.eks.DescribeAddon(ctxT(t), &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(addon)})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("Go SDK DescribeAddon after removal: %v, want ResourceNotFoundException", err)
	}
}

// TestAddonWithAWSCLI checks the JSON the AWS CLI v1 prints for an add-on
// created with the Go SDK, and its error output.
func TestAddonWithAWSCLI(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
	h := newHarness(t, "cli-1")
	ctx := ctxT(t)
	created, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{
		ClusterName:         aws.String(h.cluster),
		AddonName:           aws.String(addon),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`),
		Tags:                map[string]string{"team": "platform"},
	})
	if err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	h.report(t, 1, controlv1.AddonPhase_ADDON_PHASE_READY)

	cli := func(args ...string) string {
		return runEnv(t, h.keys(t), "aws", append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	isoConfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(isoConfig, []byte("[default]\ncli_timestamp_format = iso8601\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cliISO := func(args ...string) string {
		return runEnv(t, append(h.keys(t), "AWS_CONFIG_FILE="+isoConfig), "aws",
			append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	// CLI v1 prints its version on stdout (older ones on stderr).
	v, verr, _ := runRaw(t, nil, "aws", "--version")
	version := strings.TrimSpace(v + verr)
	t.Logf("aws --version: %s", version)
	cliV1 := strings.HasPrefix(version, "aws-cli/1.")

	// describe-addon: the CLI prints botocore's parse.
	var desc struct {
		Addon struct {
			AddonName, ClusterName, Status, AddonVersion, AddonArn string
			CreatedAt, ModifiedAt                                  any // v1's default: epoch seconds; v2's: ISO 8601
			ConfigurationValues, Publisher, Owner                  string
			Tags                                                   map[string]string
			Health                                                 struct {
				Issues []json.RawMessage
			}
			NamespaceConfig struct{ Namespace string }
		}
	}
	out := cli("describe-addon", "--cluster-name", h.cluster, "--addon-name", addon)
	if err := json.Unmarshal([]byte(out), &desc); err != nil {
		t.Fatalf("describe-addon output is not JSON: %v\n%s", err, out)
	}
	a := desc.Addon
	if a.AddonName != addon || a.ClusterName != h.cluster || a.Status != "ACTIVE" ||
		a.AddonArn != aws.ToString(created.Addon.AddonArn) || a.AddonVersion != "v1.0.0-eksbuild.1" ||
		a.ConfigurationValues != `{"replicaCount": 2}` || a.Tags["team"] != "platform" ||
		a.Publisher != "saltbush" || a.NamespaceConfig.Namespace != "saltbush-noop" {
		t.Errorf("describe-addon printed %+v", a)
	}
	switch {
	case a.Health.Issues == nil && allowAbsentEmptyLists:
		t.Logf("known divergence: describe-addon printed no health.issues; AWS prints []")
	case a.Health.Issues == nil || len(a.Health.Issues) != 0:
		t.Errorf("describe-addon health.issues = %v, want []", a.Health.Issues)
	}
	// CLI v1 prints timestamps as they came on the wire (epoch seconds)
	// unless cli_timestamp_format = iso8601, when it prints botocore's
	// parsed datetime: check both.
	if cliV1 {
		want := float64(created.Addon.CreatedAt.UnixMilli()) / 1000
		c, cok := a.CreatedAt.(float64)
		m, mok := a.ModifiedAt.(float64)
		if !cok || !mok || math.Abs(c-want) > 0.0005 || m < c {
			t.Errorf("describe-addon (default timestamp format) createdAt %v modifiedAt %v, want the wire's epoch seconds %.3f",
				a.CreatedAt, a.ModifiedAt, want)
		}
	}
	var iso struct {
		Addon struct{ CreatedAt, ModifiedAt string }
	}
	out = cliISO("describe-addon", "--cluster-name", h.cluster, "--addon-name", addon)
	if err := json.Unmarshal([]byte(out), &iso); err != nil {
		t.Fatalf("describe-addon (iso8601) output: %v\n%s", err, out)
	}
	for what, s := range map[string]string{"createdAt": iso.Addon.CreatedAt, "modifiedAt": iso.Addon.ModifiedAt} {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Errorf("describe-addon %s = %q is not ISO 8601: %v", what, s, err)
			continue
		}
		if want := *created.Addon.CreatedAt; what == "createdAt" && !ts.Equal(want) {
			t.Errorf("describe-addon createdAt = %s, the Go SDK saw %s", ts, want)
		}
		if d := time.Since(ts); d < -time.Minute || d > 5*time.Minute {
			t.Errorf("describe-addon %s = %s is %s from now", what, s, d)
		}
	}

	var list struct{ Addons []string }
	if err := json.Unmarshal([]byte(cli("list-addons", "--cluster-name", h.cluster)), &list); err != nil {
		t.Fatalf("list-addons: %v", err)
	}
	if len(list.Addons) != 1 || list.Addons[0] != addon {
		t.Errorf("list-addons = %v, want [%s]", list.Addons, addon)
	}

	// update-addon, then describe-update with the id the CLI printed.
	var up struct {
		Update struct {
			ID     string `json:"id"`
			Status string
			Type   string
			Params []struct{ Type, Value string }
		}
	}
	if err := json.Unmarshal([]byte(cli("update-addon", "--cluster-name", h.cluster, "--addon-name", addon,
		"--configuration-values", `{"replicaCount": 4}`)), &up); err != nil {
		t.Fatalf("update-addon: %v", err)
	}
	if up.Update.Status != "InProgress" || up.Update.Type != "AddonUpdate" || up.Update.ID == "" {
		t.Errorf("update-addon printed %+v", up.Update)
	}
	var du struct{ Update struct{ ID, Status string } }
	if err := json.Unmarshal([]byte(cli("describe-update", "--name", h.cluster, "--addon-name", addon,
		"--update-id", up.Update.ID)), &du); err != nil {
		t.Fatalf("describe-update: %v", err)
	}
	if du.Update.Status != "InProgress" {
		t.Errorf("describe-update printed %+v, want InProgress", du.Update)
	}

	// Errors: the CLI prints the parsed code and message and exits 255 (v1;
	// v2 exits 254).
	stdout, stderr, err := runRaw(t, h.keys(t), "aws", "eks", "--endpoint-url", h.srv.URL,
		"describe-addon", "--cluster-name", h.cluster, "--addon-name", "coredns")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || (exit.ExitCode() != 255 && exit.ExitCode() != 254) {
		t.Fatalf("describe-addon of an absent add-on: %v, want exit 255 (stdout %q, stderr %q)", err, stdout, stderr)
	}
	want := "An error occurred (ResourceNotFoundException) when calling the DescribeAddon operation: No addon: coredns found in cluster: " + h.cluster
	if !strings.Contains(stderr, want) {
		t.Errorf("describe-addon error output %q, want it to contain %q", stderr, want)
	}
}
