package sts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

const (
	clusterName = "ci-cluster"
	instance    = "i-0abcdef0123456789"
	issuer      = "https://oidc.ci-cluster.saltbush.test/id/0123456789ABCDEF"
)

// reviewWorld is a world with an ACTIVE cluster whose access entry for
// the role maps its sessions to ci:{{SessionName}}, and the review client
// of the cluster's guest agent (the real review path, over mTLS).
type reviewWorld struct {
	*world
	review deliveryv1.AccessReviewServiceClient
}

func newReviewWorld(t *testing.T) *reviewWorld {
	t.Helper()
	w := &reviewWorld{world: newWorld(t)}
	ctx := ctxT(t)
	admin := w.srv.EKS(t)
	if _, err := admin.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(clusterName), RoleArn: aws.String("arn:aws:iam::" + account + ":role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApi},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	control := controlv1.NewClusterControlServiceClient(w.srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: account, Name: clusterName}
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1",
		CertificateAuthorityData: clustertest.CertificateAuthorityData(t), OidcIssuer: issuer,
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	out, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: instance})
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	w.review = deliveryv1.NewAccessReviewServiceClient(w.srv.AgentConn(t, out.GetCluster().GetUid(), instance))
	if _, err := admin.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
		ClusterName: aws.String(clusterName), PrincipalArn: aws.String(roleARN),
		Username: aws.String("ci:{{SessionName}}"), KubernetesGroups: []string{"deployers"},
	}); err != nil {
		t.Fatalf("CreateAccessEntry: %v", err)
	}
	return w
}

func (w *reviewWorld) reviewToken(t *testing.T, tok string) *deliveryv1.ReviewTokenResponse {
	t.Helper()
	out, err := w.review.ReviewToken(ctxT(t), &deliveryv1.ReviewTokenRequest{
		Cluster: &deliveryv1.ClusterName{AccountId: account, Name: clusterName}, Token: tok,
	})
	if err != nil {
		t.Fatalf("ReviewToken: %v", err)
	}
	return out
}

// TestReviewSessionTokenGoSDK: a token the Go SDK presigns with a role
// session's credentials (for AWS's STS host, and for the façade's own
// address) maps to the role's access entry with the session name.
func TestReviewSessionTokenGoSDK(t *testing.T) {
	w := newReviewWorld(t)
	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("ci-run@42")})
	for _, tc := range []struct {
		name string
		opts servertest.TokenOptions
	}{
		{"AWS's regional STS host", servertest.TokenOptions{Region: "us-east-1"}},
		{"the façade's own address", servertest.TokenOptions{Region: "us-east-1", Endpoint: w.srv.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := w.reviewToken(t, servertest.Token(t, sess, clusterName, tc.opts))
			if !got.GetAuthenticated() {
				t.Fatalf("session token not authenticated: %s", got.GetError())
			}
			if u := got.GetUser(); u.GetUsername() != "ci:ci-run-42" || strings.Join(u.GetGroups(), ",") != "deployers" {
				t.Errorf("user = %q groups %v, want ci:ci-run-42 [deployers]", u.GetUsername(), u.GetGroups())
			}
			if arn := got.GetUser().GetExtra()["arn"].GetValues(); len(arn) != 1 || arn[0] != sess.PrincipalARN {
				t.Errorf("extra arn = %v, want %s", arn, sess.PrincipalARN)
			}
		})
	}
	t.Run("wrong session token", func(t *testing.T) {
		wrong := sess
		wrong.SessionToken = otherSessionToken(sess.SessionToken)
		if got := w.reviewToken(t, servertest.Token(t, wrong, clusterName, servertest.TokenOptions{})); got.GetAuthenticated() {
			t.Error("a token with another session token was authenticated")
		}
	})
	t.Run("expired session", func(t *testing.T) {
		short, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("brief"), DurationSeconds: aws.Int32(900)})
		tok := servertest.Token(t, short, clusterName, servertest.TokenOptions{})
		if got := w.reviewToken(t, tok); !got.GetAuthenticated() {
			t.Fatalf("fresh session token refused: %s", got.GetError())
		}
		w.clock.Advance(901 * time.Second)
		got := w.reviewToken(t, tok)
		if got.GetAuthenticated() || !strings.Contains(got.GetError(), "expired") {
			t.Errorf("expired session: authenticated %v, error %q; want refused as expired", got.GetAuthenticated(), got.GetError())
		}
	})
}

// TestAssumeRoleWithAWSCLI is the workflow of every "assume a role, then
// aws eks get-token" user, with the real AWS CLI v1: assume-role as alice,
// list-clusters and get-caller-identity with the session's environment,
// get-token with the façade as the STS endpoint, and the token through the
// review path maps to the role's access entry with the session name.
func TestAssumeRoleWithAWSCLI(t *testing.T) {
	requireAWSCLI(t)
	w := newReviewWorld(t)
	out := runAWS(t, keyEnv(w.alice), "sts", "assume-role", "--endpoint-url", w.srv.URL,
		"--role-arn", roleARN, "--role-session-name", "cli-session", "--duration-seconds", "1200")
	var assumed struct {
		Credentials     struct{ AccessKeyId, SecretAccessKey, SessionToken, Expiration string }
		AssumedRoleUser struct{ AssumedRoleId, Arn string }
	}
	decode(t, out, &assumed)
	wantARN := "arn:aws:sts::" + account + ":assumed-role/" + roleName + "/cli-session"
	if assumed.AssumedRoleUser.Arn != wantARN || !strings.HasPrefix(assumed.Credentials.AccessKeyId, "ASIA") {
		t.Fatalf("assume-role printed %+v", assumed)
	}
	env := []string{
		"AWS_ACCESS_KEY_ID=" + assumed.Credentials.AccessKeyId,
		"AWS_SECRET_ACCESS_KEY=" + assumed.Credentials.SecretAccessKey,
		"AWS_SESSION_TOKEN=" + assumed.Credentials.SessionToken,
	}
	var ident struct{ UserId, Account, Arn string }
	decode(t, runAWS(t, env, "sts", "get-caller-identity", "--endpoint-url", w.srv.URL), &ident)
	if ident.Arn != wantARN || ident.Account != account || ident.UserId != assumed.AssumedRoleUser.AssumedRoleId {
		t.Errorf("get-caller-identity = %+v, want %s %s %s", ident, wantARN, account, assumed.AssumedRoleUser.AssumedRoleId)
	}
	var clusters struct{ Clusters []string }
	decode(t, runAWS(t, env, "eks", "list-clusters", "--endpoint-url", w.srv.URL), &clusters)
	if strings.Join(clusters.Clusters, ",") != clusterName {
		t.Errorf("list-clusters = %v, want [%s]", clusters.Clusters, clusterName)
	}
	var token struct {
		Status struct{ Token string }
	}
	decode(t, runAWS(t, append(env, "AWS_ENDPOINT_URL_STS="+w.srv.URL), "eks", "get-token", "--cluster-name", clusterName), &token)
	got := w.reviewToken(t, token.Status.Token)
	if !got.GetAuthenticated() {
		t.Fatalf("get-token's token not authenticated: %s", got.GetError())
	}
	if u := got.GetUser().GetUsername(); u != "ci:cli-session" {
		t.Errorf("username = %q, want ci:cli-session", u)
	}
}

// TestDevProfileReachesSTS: the development profile the first start
// writes points sts and iam at the façade, so `aws sts
// get-caller-identity --profile saltbush` names the development user and
// `aws iam list-open-id-connect-providers` answers from saltbush.
func TestDevProfileReachesSTS(t *testing.T) {
	requireAWSCLI(t)
	srv := servertest.Start(t)
	dir := filepath.Join(srv.Config.DataDir, "aws")
	env := []string{"AWS_CONFIG_FILE=" + filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials"),
		"AWS_PROFILE=saltbush", "AWS_DEFAULT_REGION=", "AWS_REGION="}
	var ident struct{ Arn, Account string }
	decode(t, runAWS(t, env, "sts", "get-caller-identity"), &ident)
	if dev := srv.Dev(t); ident.Arn != dev.PrincipalARN || ident.Account != dev.AccountID {
		t.Errorf("get-caller-identity = %+v, want %s", ident, dev.PrincipalARN)
	}
	// IAM too: the CLI signs it for IAM's global region, which is taken.
	var providers struct{ OpenIDConnectProviderList []struct{ Arn string } }
	decode(t, runAWS(t, env, "iam", "list-open-id-connect-providers"), &providers)
	if len(providers.OpenIDConnectProviderList) != 0 {
		t.Errorf("list-open-id-connect-providers = %+v, want none (no cluster)", providers)
	}
}

func requireAWSCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
}

func keyEnv(c servertest.Creds) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + c.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + c.SecretAccessKey}
}

// runAWS runs the AWS CLI in an isolated environment (no configuration
// or credentials of the machine) with env added; an empty NAME= in env
// removes the variable.
func runAWS(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return runCmd(t, "aws", env, args...)
}

// runCmd runs a client program as runAWS runs the AWS CLI.
func runCmd(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	base := []string{
		"AWS_DEFAULT_REGION=us-east-1", "AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + dir + "/config", "AWS_SHARED_CREDENTIALS_FILE=" + dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_DEFAULT_OUTPUT=json", "AWS_PAGER=", "PYTHONDONTWRITEBYTECODE=1",
	}
	for _, kv := range os.Environ() {
		for _, keep := range []string{"PATH=", "HOME=", "PYENV_", "VIRTUAL_ENV=", "PYTHONPATH=", "PYTHONUSERBASE=", "LANG=", "LC_ALL="} {
			if strings.HasPrefix(kv, keep) {
				base = append(base, kv)
			}
		}
	}
	// A variable given empty is removed; any other replaces the base's
	// (exec keeps the last value of a repeated variable).
	for _, kv := range env {
		if name, value, _ := strings.Cut(kv, "="); value == "" {
			base = slices.DeleteFunc(base, func(b string) bool { return strings.HasPrefix(b, name+"=") })
			continue
		}
		base = append(base, kv)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = base
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func decode(t *testing.T, out string, into any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), into); err != nil {
		t.Fatalf("printed no JSON: %v\n%s", err, out)
	}
}
