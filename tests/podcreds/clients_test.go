package podcreds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/saltbush/saltbush/tests/accesstest"
)

// run runs a client program in an environment without the machine's AWS
// configuration, with env added, and returns its stdout.
func run(ctx context.Context, t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = accesstest.Env(append([]string{"AWS_CONFIG_FILE=" + dir + "/config", "AWS_SHARED_CREDENTIALS_FILE=" + dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_DEFAULT_OUTPUT=json", "AWS_PAGER=", "PYTHONDONTWRITEBYTECODE=1"}, env...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestOtherClients: the AWS CLI exchanges a token the apiserver minted at
// STS (no credentials: the CLI sends AssumeRoleWithWebIdentity unsigned),
// and boto3's eks-auth client calls AssumeRoleForPodIdentity.
func TestOtherClients(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
	if err := exec.Command("python3", "-c", "import boto3; boto3.client('eks-auth', region_name='us-east-1')").Run(); err != nil {
		t.Skipf("python3 with boto3's eks-auth model is not installed (%v)", err)
	}
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "clients")
	roleARN := w.role(ctx, t, "cli-app", w.irsaTrust("default", "app"))
	token := w.token(ctx, t, "default", "app", "sts.amazonaws.com", "")
	out := run(ctx, t, []string{"AWS_REGION=" + w.Region}, "aws", "sts", "assume-role-with-web-identity", "--endpoint-url", w.Server.URL,
		"--role-arn", roleARN, "--role-session-name", "cli", "--web-identity-token", token)
	var cli struct {
		Credentials                 struct{ AccessKeyId string }
		SubjectFromWebIdentityToken string
		AssumedRoleUser             struct{ Arn string }
	}
	if err := json.Unmarshal([]byte(out), &cli); err != nil || cli.SubjectFromWebIdentityToken != "system:serviceaccount:default:app" ||
		cli.AssumedRoleUser.Arn != "arn:aws:sts::"+w.Account+":assumed-role/cli-app/cli" || cli.Credentials.AccessKeyId == "" {
		t.Fatalf("aws sts assume-role-with-web-identity: %v\n%s", err, out)
	}

	node := w.Server.NewUser(t, "arn:aws:iam::"+w.Account+":user/node-agent", nodeAgentPolicy)
	podRole := w.role(ctx, t, "boto-pod", podsTrust())
	w.pod(ctx, t, "default", "web-0", "web")
	if _, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("web"), RoleArn: aws.String(podRole),
	}); err != nil {
		t.Fatal(err)
	}
	podToken := w.token(ctx, t, "default", "web", "pods.eks.amazonaws.com", "web-0")
	const script = `
import boto3, json, sys
c = boto3.client("eks-auth", endpoint_url=sys.argv[1], region_name=sys.argv[2])
r = c.assume_role_for_pod_identity(clusterName=sys.argv[3], token=sys.argv[4])
try:
    c.assume_role_for_pod_identity(clusterName=sys.argv[3], token=sys.argv[4][:-8] + "AAAAAAAA")
    refused = ""
except c.exceptions.InvalidTokenException as e:
    refused = e.response["Error"]["Code"]
print(json.dumps({"arn": r["assumedRoleUser"]["arn"], "sa": r["subject"]["serviceAccount"],
                  "expiration": r["credentials"]["expiration"].isoformat(), "refused": refused}))
`
	out = run(ctx, t, []string{"AWS_ACCESS_KEY_ID=" + node.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + node.SecretAccessKey},
		"python3", "-c", script, w.Server.URL, w.Region, w.Cluster, podToken)
	var boto struct{ Arn, Sa, Expiration, Refused string }
	if err := json.Unmarshal([]byte(out), &boto); err != nil || boto.Sa != "web" || boto.Refused != "InvalidTokenException" ||
		len(boto.Arn) < 10 || boto.Expiration == "" {
		t.Fatalf("boto3 eks-auth: %v\n%s", err, out)
	}
}

// TestKeyRotation: once the apiserver's old key is rotated out, saltbush
// serves the new keys (the agent sends them within its interval), tokens
// signed with the old key are refused and the new key's are accepted.
func TestKeyRotation(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "rotation")
	roleARN := w.role(ctx, t, "rotating", w.irsaTrust("default", "app"))
	old := w.token(ctx, t, "default", "app", "sts.amazonaws.com", "")
	assume := func(token string) error {
		_, err := w.anonymousSTS().AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
			RoleArn: aws.String(roleARN), RoleSessionName: aws.String("rotating"), WebIdentityToken: aws.String(token)})
		return err
	}
	if err := assume(old); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	before := w.waitKeys(ctx, t)
	if err := w.Kube.RotateServiceAccountKey(ctx); err != nil {
		t.Fatal(err)
	}
	after := w.waitKeys(ctx, t)
	if after.kids()[0] == before.kids()[0] {
		t.Fatalf("the key set did not change: %v", after.kids())
	}
	var ae smithy.APIError
	if err := assume(old); !errors.As(err, &ae) || ae.ErrorCode() != "InvalidIdentityToken" {
		t.Fatalf("a token of the rotated-out key: %v, want InvalidIdentityToken", err)
	}
	if err := assume(w.token(ctx, t, "default", "app", "sts.amazonaws.com", "")); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
}

// TestTokensStayInTheirCluster: a token of one cluster is not another's:
// EKS Auth refuses it for the other cluster, and a role trusting the other
// cluster's provider does not trust it.
func TestTokensStayInTheirCluster(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	a := newWorld(ctx, t, "cluster-a")
	b := newWorldOn(ctx, t, "cluster-b", a.Server)
	// One account, two clusters, two providers: b's role trusts b's.
	roleB := b.role(ctx, t, "b-app", b.irsaTrust("default", "app"))
	tokenA := a.token(ctx, t, "default", "app", "sts.amazonaws.com", "")
	_, err := b.anonymousSTS().AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String(roleB), RoleSessionName: aws.String("cross"), WebIdentityToken: aws.String(tokenA)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Fatalf("cluster A's token for a role trusting cluster B: %v, want AccessDenied", err)
	}
	if _, err := b.anonymousSTS().AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String(roleB), RoleSessionName: aws.String("own"),
		WebIdentityToken: aws.String(b.token(ctx, t, "default", "app", "sts.amazonaws.com", ""))}); err != nil {
		t.Fatalf("cluster B's own token: %v", err)
	}

	node := b.Server.NewUser(t, "arn:aws:iam::"+b.Account+":user/node-agent", nodeAgentPolicy)
	podRole := b.role(ctx, t, "b-pod", podsTrust())
	b.pod(ctx, t, "default", "app-0", "app")
	a.pod(ctx, t, "default", "app-0", "app")
	if _, err := b.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(b.Cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("app"), RoleArn: aws.String(podRole),
	}); err != nil {
		t.Fatal(err)
	}
	podTokenA := a.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", "app-0")
	if got := b.assumeForPod(ctx, t, node, b.Cluster, podTokenA); got.Status != http.StatusBadRequest || got.Type != "InvalidTokenException" {
		t.Fatalf("cluster A's pod token for cluster B: %d %s %s", got.Status, got.Type, got.Message)
	}
	if got := b.assumeForPod(ctx, t, node, b.Cluster, b.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", "app-0")); got.Status != http.StatusOK {
		t.Fatalf("cluster B's own pod token: %d %s %s", got.Status, got.Type, got.Message)
	}
}
