package access_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/tests/accesstest"
)

// TestAssumedRoleSession is the "assume a role, then use the cluster"
// workflow with real clients only: `aws sts assume-role` against saltbush,
// `aws eks update-kubeconfig` with the session's credentials, and kubectl,
// whose exec plugin runs `aws eks get-token` with the façade as the STS
// endpoint; the role's access entry decides, with the session name as
// {{SessionName}}. Revoking the role's sessions ends the access.
func TestAssumedRoleSession(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not installed: %v", err)
	}
	ctx := ctxT(t, 5*time.Minute)
	tm := newTeam(ctx, t, accesstest.Options{})
	role := "arn:aws:iam::" + tm.Account + ":role/dev-team"
	carolARN := "arn:aws:iam::" + tm.Account + ":user/carol"
	carol := tm.Server.NewUser(t, carolARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sts:AssumeRole","Resource":"`+role+`"}]}`)
	trust := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"` + carolARN + `"},"Action":"sts:AssumeRole"}]}`
	if _, err := tm.Server.IAM().UpdateRole(ctx, role, iam.RoleUpdate{TrustPolicy: &trust}); err != nil {
		t.Fatalf("UpdateRole: %v", err)
	}
	endpoints := []string{"AWS_ENDPOINT_URL_STS=" + tm.Server.URL}

	cmd := exec.CommandContext(ctx, "aws", "sts", "assume-role", "--role-arn", role, "--role-session-name", "carol@example.com", "--output", "json")
	cmd.Env = accesstest.Env(append(tm.awsEnv(carol), endpoints...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("aws sts assume-role: %v\n%s", err, stderrOf(err))
	}
	var assumed struct {
		Credentials struct{ AccessKeyId, SecretAccessKey, SessionToken string }
	}
	if err := json.Unmarshal(out, &assumed); err != nil || assumed.Credentials.SessionToken == "" {
		t.Fatalf("aws sts assume-role printed %s (%v)", out, err)
	}
	// The session's environment: its credentials, EKS and STS at saltbush.
	sessionEnv := []string{"AWS_ACCESS_KEY_ID=" + assumed.Credentials.AccessKeyId,
		"AWS_SECRET_ACCESS_KEY=" + assumed.Credentials.SecretAccessKey, "AWS_SESSION_TOKEN=" + assumed.Credentials.SessionToken,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_DEFAULT_REGION=" + tm.Region,
		"AWS_ENDPOINT_URL_EKS=" + tm.Server.URL, endpoints[0]}

	kc := filepath.Join(t.TempDir(), "config")
	cmd = exec.CommandContext(ctx, "aws", "eks", "update-kubeconfig", "--name", tm.Cluster, "--region", tm.Region, "--kubeconfig", kc)
	cmd.Env = accesstest.Env(sessionEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aws eks update-kubeconfig as the session: %v\n%s", err, out)
	}
	if u := tm.whoami(ctx, t, kc, sessionEnv...).Status.UserInfo; u.Username != "dev:carol-example.com" {
		t.Errorf("username %q, want dev:carol-example.com (the entry's dev:{{SessionName}})", u.Username)
	}
	tm.expect(ctx, t, kc, "ok", sessionEnv, "get", "pods", "-n", "dev")
	tm.expect(ctx, t, kc, "forbidden", sessionEnv, "get", "pods", "-n", "prod")

	// Revoked: the next token review refuses it. kube-apiserver caches a
	// token's answer (10 s) and the agent its review (review-cache-ttl),
	// and kubectl's exec plugin makes a fresh token for each run; so the
	// bound is those caches, polled until a deadline.
	if _, err := tm.Server.IAM().RevokeRoleSessions(ctx, role); err != nil {
		t.Fatalf("RevokeRoleSessions: %v", err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := tm.Run(ctx, kc, sessionEnv, "get", "pods", "-n", "dev")
		if r.Unauthorized() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked session still reached the cluster after 90s: %v %s", r.Err, r.Stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
