package sts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/saltbushbin"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// admin runs the real `saltbush admin` binary against srv with the
// credentials the server wrote to its TLS directory.
func admin(t *testing.T, srv *servertest.Server, bin, stdin string, args ...string) (map[string]any, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"admin", "--grpc-addr", srv.GRPCAddr(), "--tls-dir", srv.Config.TLSDir(), "--timeout", "5s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SALTBUSH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, errb.String(), err
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("saltbush admin %s: output is not JSON: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return m, errb.String(), nil
}

// TestAdminRoleCommands: `saltbush admin account role` sets a role's trust
// policy and maximum session duration, shows them, and revokes its
// sessions; AssumeRole through the façade follows each change.
func TestAdminRoleCommands(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	bin := saltbushbin.Path(t)
	ok := func(stdin string, args ...string) map[string]any {
		t.Helper()
		m, stderr, err := admin(t, srv, bin, stdin, args...)
		if err != nil {
			t.Fatalf("saltbush admin %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return m
	}
	const role = "arn:aws:iam::" + account + ":role/ops"
	ok("", "account", "create-principal", role)
	ok(`{"Statement":[{"Effect":"Allow","Action":"eks:ListClusters","Resource":"*"}]}`, "account", "put-policy", account, "ops-read", "-")
	ok("", "account", "attach-policy", role, "ops-read")
	alice := srv.NewUser(t, aliceARN, `{"Statement":[{"Effect":"Allow","Action":"sts:AssumeRole","Resource":"`+role+`"}]}`)
	assume := func(seconds int32) (servertest.Creds, error) {
		out, err := stsAs(srv, alice).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("ops"), DurationSeconds: aws.Int32(seconds)})
		if err != nil {
			return servertest.Creds{}, err
		}
		c := out.Credentials
		return servertest.Creds{AccessKeyID: aws.ToString(c.AccessKeyId), SecretAccessKey: aws.ToString(c.SecretAccessKey), SessionToken: aws.ToString(c.SessionToken)}, nil
	}

	// Without a trust policy nobody may assume the role.
	_, err := assume(900)
	queryError(t, err, "AccessDenied", http.StatusForbidden)

	// A trust policy saltbush cannot evaluate as written is refused, naming
	// what it does not take, and changes nothing. (AWS, Federated OIDC
	// provider and Service principals with their conditions are taken:
	// server/iam/trust.go.)
	for _, tc := range []struct{ what, doc, want string }{
		{"a CanonicalUser principal", `{"Statement":[{"Effect":"Allow","Principal":{"CanonicalUser":"79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be"},"Action":"sts:AssumeRole"}]}`,
			`Principal type "CanonicalUser" is not supported`},
		{"a SAML provider", `{"Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::` + account + `:saml-provider/corp"},"Action":"sts:AssumeRoleWithWebIdentity"}]}`,
			`is not an IAM OIDC provider ARN`},
		{"a NotPrincipal", `{"Statement":[{"Effect":"Allow","NotPrincipal":{"AWS":"` + aliceARN + `"},"Action":"sts:AssumeRole"}]}`,
			`member "NotPrincipal" is not supported`},
		{"an unknown condition key", `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + aliceARN + `"},"Action":"sts:AssumeRole","Condition":{"StringEquals":{"aws:PrincipalTag/team":"ops"}}}]}`,
			`condition key "aws:PrincipalTag/team" is not supported`},
		{"a Bool condition", `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + aliceARN + `"},"Action":"sts:AssumeRole","Condition":{"Bool":{"aws:MultiFactorAuthPresent":"true"}}}]}`,
			`condition operator "Bool" is not supported`},
	} {
		if _, stderr, err := admin(t, srv, bin, tc.doc, "account", "role", "update", role, "--trust-policy", "-"); err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: err %v, stderr %q; want refused with %q", tc.what, err, stderr, tc.want)
		}
	}
	if got := ok("", "account", "role", "get", role); got["trustPolicy"] != nil && got["trustPolicy"] != "" {
		t.Errorf("after refused trust policies, role get printed %v; want no trust policy", got)
	}

	got := ok(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+aliceARN+`"},"Action":"sts:AssumeRole"}]}`,
		"account", "role", "update", role, "--trust-policy", "-", "--max-session-duration", "3h")
	if got["maxSessionDurationSeconds"] != float64(10800) || !strings.Contains(got["trustPolicy"].(string), aliceARN) {
		t.Errorf("role update printed %v", got)
	}
	if got := ok("", "account", "role", "get", role); got["maxSessionDurationSeconds"] != float64(10800) || !zero(got["sessionsRevokedBeforeEpochSeconds"]) {
		t.Errorf("role get printed %v", got)
	}
	if _, stderr, err := admin(t, srv, bin, "", "account", "role", "update", role, "--max-session-duration", "13h"); err == nil || !strings.Contains(stderr, "MaxSessionDuration") {
		t.Errorf("13h: err %v, stderr %q; want refused", err, stderr)
	}

	sess, err := assume(3 * 3600)
	if err != nil {
		t.Fatalf("AssumeRole for 3h after the trust policy was set: %v", err)
	}
	if _, err := assume(3*3600 + 1); err == nil {
		t.Error("AssumeRole beyond the role's 3h maximum succeeded")
	}
	if _, err := srv.EKSAs(t, sess).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters as the session: %v", err)
	}

	revoked := ok("", "account", "role", "revoke-sessions", role)
	if zero(revoked["sessionsRevokedBeforeEpochSeconds"]) {
		t.Errorf("revoke-sessions printed %v", revoked)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := srv.EKSAs(t, sess, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil {
			wanterr.AWS(t, err, errdefs.UnrecognizedClientException, http.StatusForbidden)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a revoked session was still accepted after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zero reports whether a printed int64 member is absent or zero (protojson
// prints int64 as a string).
func zero(v any) bool { return v == nil || v == "0" || v == float64(0) }
