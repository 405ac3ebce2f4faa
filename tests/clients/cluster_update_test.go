package clients

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestUpdateClusterConfigWithAWSCLI: `aws eks update-cluster-config
// --access-config authenticationMode=...` (botocore's serializer and
// parser) moves a cluster's authentication mode forward; describe-update,
// list-updates and describe-cluster print the result; a move back is
// AWS's error, printed as the CLI prints it.
func TestUpdateClusterConfigWithAWSCLI(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
	h := newHarness(t, "cli-config")
	cli := func(args ...string) string {
		return runEnv(t, h.keys(t), "aws", append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	type update struct {
		ID, Status, Type string
		Params           []struct{ Type, Value string }
		Errors           []json.RawMessage
		CreatedAt        any
	}
	var up struct{ Update update }
	out := cli("update-cluster-config", "--name", h.cluster, "--access-config", "authenticationMode=API_AND_CONFIG_MAP")
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("update-cluster-config output is not JSON: %v\n%s", err, out)
	}
	u := up.Update
	if u.ID == "" || u.Status != "Successful" || u.Type != "AccessConfigUpdate" || len(u.Params) != 1 ||
		u.Params[0].Type != "AuthenticationMode" || u.Params[0].Value != `"API_AND_CONFIG_MAP"` ||
		u.Errors == nil || len(u.Errors) != 0 || u.CreatedAt == nil {
		t.Errorf("update-cluster-config printed %+v", u)
	}

	var du struct{ Update update }
	if err := json.Unmarshal([]byte(cli("describe-update", "--name", h.cluster, "--update-id", u.ID)), &du); err != nil {
		t.Fatalf("describe-update: %v", err)
	}
	if du.Update.ID != u.ID || du.Update.Type != "AccessConfigUpdate" || du.Update.Status != "Successful" {
		t.Errorf("describe-update printed %+v", du.Update)
	}
	var lu struct{ UpdateIds []string }
	if err := json.Unmarshal([]byte(cli("list-updates", "--name", h.cluster)), &lu); err != nil {
		t.Fatalf("list-updates: %v", err)
	}
	if len(lu.UpdateIds) != 1 || lu.UpdateIds[0] != u.ID {
		t.Errorf("list-updates printed %v, want [%s]", lu.UpdateIds, u.ID)
	}
	var dc struct {
		Cluster struct {
			Status       string
			AccessConfig struct{ AuthenticationMode string }
		}
	}
	if err := json.Unmarshal([]byte(cli("describe-cluster", "--name", h.cluster)), &dc); err != nil {
		t.Fatalf("describe-cluster: %v", err)
	}
	if dc.Cluster.AccessConfig.AuthenticationMode != "API_AND_CONFIG_MAP" || dc.Cluster.Status != "ACTIVE" {
		t.Errorf("describe-cluster printed %+v", dc.Cluster)
	}

	// Back to CONFIG_MAP: AWS's refusal, as the CLI prints it.
	stdout, stderr, err := runRaw(t, h.keys(t), "aws", "eks", "--endpoint-url", h.srv.URL,
		"update-cluster-config", "--name", h.cluster, "--access-config", "authenticationMode=CONFIG_MAP")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || (exit.ExitCode() != 255 && exit.ExitCode() != 254) {
		t.Fatalf("update-cluster-config back to CONFIG_MAP: %v, want exit 255 (stdout %q, stderr %q)", err, stdout, stderr)
	}
	want := "An error occurred (InvalidParameterException) when calling the UpdateClusterConfig operation: " +
		"Unsupported authentication mode update from API_AND_CONFIG_MAP to CONFIG_MAP"
	if !strings.Contains(stderr, want) {
		t.Errorf("update-cluster-config error output %q, want it to contain %q", stderr, want)
	}
}
