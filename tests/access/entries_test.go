package access_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
)

const (
	editPolicy         = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"
	clusterAdminPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
)

// team is a world with: role dev-team (entry username dev:{{SessionName}},
// group dev-team, Edit on namespace dev) and a session key of it for
// alice; user ops (ClusterAdmin on cluster scope); namespaces dev, prod and
// rbac-only, where an RBAC RoleBinding lets group dev-team view pods.
type team struct {
	*accesstest.World
	alice, ops servertest.Creds
	k8s        kubernetes.Interface
}

func newTeam(ctx context.Context, t *testing.T, o accesstest.Options) *team {
	t.Helper()
	o.AgentBinary = agentBinary
	w := accesstest.Start(ctx, t, clusterName(t), o)
	tm := &team{World: w, k8s: kubernetes.NewForConfigOrDie(w.Kube.Admin())}
	role := "arn:aws:iam::" + w.Account + ":role/dev-team"
	opsARN := "arn:aws:iam::" + w.Account + ":user/ops"
	for _, arn := range []string{role, opsARN} {
		if _, err := w.Server.IAM().CreatePrincipal(ctx, arn); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	// `aws eks update-kubeconfig` calls DescribeCluster as the role.
	if _, err := w.Server.IAM().PutPolicy(ctx, w.Account, "describe-clusters",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:DescribeCluster","Resource":"*"}]}`); err != nil {
		t.Fatalf("PutPolicy: %v", err)
	}
	if err := w.Server.IAM().AttachPolicy(ctx, role, "describe-clusters"); err != nil {
		t.Fatalf("AttachPolicy: %v", err)
	}
	tm.alice = w.Server.NewKey(t, "arn:aws:sts::"+w.Account+":assumed-role/dev-team/alice")
	tm.ops = w.Server.NewKey(t, opsARN)
	tm.entry(ctx, t, role, "dev:{{SessionName}}", []string{"dev-team"}, editPolicy, "dev")
	tm.entry(ctx, t, opsARN, "", nil, clusterAdminPolicy)
	for _, ns := range []string{"dev", "prod", "rbac-only"} {
		if _, err := tm.k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	if _, err := tm.k8s.RbacV1().RoleBindings("rbac-only").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-team-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "dev-team"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("RoleBinding: %v", err)
	}
	return tm
}

// entry makes an access entry and, when policy is set, associates it on
// the namespaces (cluster scope when none).
func (tm *team) entry(ctx context.Context, t *testing.T, principal, username string, groups []string, policy string, namespaces ...string) {
	t.Helper()
	in := &eks.CreateAccessEntryInput{ClusterName: aws.String(tm.Cluster), PrincipalArn: aws.String(principal), KubernetesGroups: groups}
	if username != "" {
		in.Username = aws.String(username)
	}
	if _, err := tm.EKS.CreateAccessEntry(ctx, in); err != nil {
		t.Fatalf("CreateAccessEntry %s: %v", principal, err)
	}
	if policy == "" {
		return
	}
	scope := &types.AccessScope{Type: types.AccessScopeTypeCluster}
	if len(namespaces) > 0 {
		scope = &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: namespaces}
	}
	if _, err := tm.EKS.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(tm.Cluster),
		PrincipalArn: aws.String(principal), PolicyArn: aws.String(policy), AccessScope: scope}); err != nil {
		t.Fatalf("AssociateAccessPolicy %s: %v", principal, err)
	}
}

// awsEnv is the environment that makes the AWS CLI sign as c and reach
// saltbush's façade for EKS calls (STS is never called: get-token only
// presigns).
func (tm *team) awsEnv(c servertest.Creds) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + c.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + c.SecretAccessKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_DEFAULT_REGION=" + tm.Region, "AWS_ENDPOINT_URL_EKS=" + tm.Server.URL}
}

// cliToken is a token from the real `aws eks get-token`.
func (tm *team) cliToken(ctx context.Context, t *testing.T, c servertest.Creds) string {
	t.Helper()
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not installed: %v", err)
	}
	cmd := exec.CommandContext(ctx, "aws", "eks", "get-token", "--cluster-name", tm.Cluster, "--region", tm.Region, "--output", "json")
	cmd.Env = accesstest.Env(tm.awsEnv(c)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("aws eks get-token: %v\n%s", err, stderr)
	}
	var cred struct {
		Kind   string `json:"kind"`
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &cred); err != nil || cred.Kind != "ExecCredential" || !strings.HasPrefix(cred.Status.Token, "k8s-aws-v1.") {
		t.Fatalf("aws eks get-token printed %s (%v), want an ExecCredential with a k8s-aws-v1. token", out, err)
	}
	return cred.Status.Token
}

// whoami is `kubectl auth whoami`'s user.
type whoami struct {
	Status struct {
		UserInfo struct {
			Username string              `json:"username"`
			UID      string              `json:"uid"`
			Groups   []string            `json:"groups"`
			Extra    map[string][]string `json:"extra"`
		} `json:"userInfo"`
	} `json:"status"`
}

func (tm *team) whoami(ctx context.Context, t *testing.T, kubeconfig string, env ...string) whoami {
	t.Helper()
	r := tm.Run(ctx, kubeconfig, env, "auth", "whoami", "-o", "json")
	if r.Err != nil {
		t.Fatalf("kubectl auth whoami: %v\n%s", r.Err, r.Stderr)
	}
	var w whoami
	if err := json.Unmarshal([]byte(r.Stdout), &w); err != nil {
		t.Fatalf("kubectl auth whoami printed %q: %v", r.Stdout, err)
	}
	return w
}

// expect runs kubectl and checks the outcome: "ok", "forbidden" or
// "unauthorized".
func (tm *team) expect(ctx context.Context, t *testing.T, kubeconfig, want string, env []string, args ...string) {
	t.Helper()
	r := tm.Run(ctx, kubeconfig, env, args...)
	got := "ok"
	switch {
	case r.Forbidden():
		got = "forbidden"
	case r.Unauthorized():
		got = "unauthorized"
	case r.Err != nil:
		got = "error: " + r.Err.Error()
	}
	if got != want {
		t.Errorf("kubectl %s: %s, want %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, want, r.Stdout, r.Stderr)
	}
}

func TestAccessEntriesDecide(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	tm := newTeam(ctx, t, accesstest.Options{CacheTTL: 10 * time.Second, NegativeCacheTTL: time.Second})

	sdkToken := servertest.Token(t, tm.alice, tm.Cluster, servertest.TokenOptions{Region: tm.Region})
	tokens := map[string]string{"Go SDK presigner": sdkToken, "aws eks get-token": tm.cliToken(ctx, t, tm.alice)}
	for name, token := range tokens {
		t.Run(name, func(t *testing.T) {
			kc := tm.TokenKubeconfig(t, strings.ReplaceAll(name, " ", "-"), token)
			who := tm.whoami(ctx, t, kc)
			u := who.Status.UserInfo
			if u.Username != "dev:alice" {
				t.Errorf("username %q, want dev:alice (the entry's dev:{{SessionName}})", u.Username)
			}
			for _, g := range []string{"dev-team", "system:authenticated"} {
				if !slices.Contains(u.Groups, g) {
					t.Errorf("groups %v lack %s", u.Groups, g)
				}
			}
			if want := "aws-iam-authenticator:" + tm.Account + ":"; !strings.HasPrefix(u.UID, want) {
				t.Errorf("uid %q, want the prefix %s", u.UID, want)
			}
			if got := u.Extra["canonicalArn"]; !slices.Equal(got, []string{"arn:aws:iam::" + tm.Account + ":role/dev-team"}) {
				t.Errorf("extra canonicalArn %v, want the role's ARN (extra %v)", got, u.Extra)
			}
			tm.expect(ctx, t, kc, "ok", nil, "get", "pods", "-n", "dev")
			tm.expect(ctx, t, kc, "ok", nil, "create", "configmap", "made-by-alice-"+strings.ToLower(strings.Fields(name)[0]), "-n", "dev")
			tm.expect(ctx, t, kc, "forbidden", nil, "get", "pods", "-n", "prod")
			tm.expect(ctx, t, kc, "forbidden", nil, "get", "nodes")
			// No access policy covers rbac-only: saltbush has no opinion
			// and the cluster's RoleBinding for dev-team decides.
			tm.expect(ctx, t, kc, "ok", nil, "get", "pods", "-n", "rbac-only")
			tm.expect(ctx, t, kc, "forbidden", nil, "create", "configmap", "x", "-n", "rbac-only")
		})
	}

	t.Run("cluster admin policy", func(t *testing.T) {
		kc := tm.TokenKubeconfig(t, "ops", servertest.Token(t, tm.ops, tm.Cluster, servertest.TokenOptions{Region: tm.Region}))
		if u := tm.whoami(ctx, t, kc).Status.UserInfo; u.Username != "arn:aws:iam::"+tm.Account+":user/ops" {
			t.Errorf("username %q, want the user's ARN (AWS's generated username)", u.Username)
		}
		tm.expect(ctx, t, kc, "ok", nil, "get", "nodes")
		tm.expect(ctx, t, kc, "ok", nil, "get", "pods", "-A")
		tm.expect(ctx, t, kc, "ok", nil, "get", "clusterroles")
	})

	t.Run("aws eks update-kubeconfig", func(t *testing.T) {
		if _, err := exec.LookPath("aws"); err != nil {
			t.Skipf("the AWS CLI is not installed: %v", err)
		}
		kc := filepath.Join(t.TempDir(), "config")
		cmd := exec.CommandContext(ctx, "aws", "eks", "update-kubeconfig", "--name", tm.Cluster, "--region", tm.Region, "--kubeconfig", kc)
		cmd.Env = accesstest.Env(tm.awsEnv(tm.alice)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("aws eks update-kubeconfig: %v\n%s", err, out)
		}
		// kubectl runs `aws eks get-token` itself (the kubeconfig's exec
		// plugin), with this environment.
		env := tm.awsEnv(tm.alice)
		if u := tm.whoami(ctx, t, kc, env...).Status.UserInfo; u.Username != "dev:alice" {
			t.Errorf("username %q, want dev:alice", u.Username)
		}
		tm.expect(ctx, t, kc, "ok", env, "get", "pods", "-n", "dev")
		tm.expect(ctx, t, kc, "forbidden", env, "get", "pods", "-n", "prod")
	})

	t.Run("no access entry", func(t *testing.T) {
		arn := "arn:aws:iam::" + tm.Account + ":user/stranger"
		if _, err := tm.Server.IAM().CreatePrincipal(ctx, arn); err != nil {
			t.Fatal(err)
		}
		kc := tm.TokenKubeconfig(t, "stranger", servertest.Token(t, tm.Server.NewKey(t, arn), tm.Cluster, servertest.TokenOptions{Region: tm.Region}))
		tm.expect(ctx, t, kc, "unauthorized", nil, "get", "pods", "-n", "dev")
	})

	t.Run("token for another cluster", func(t *testing.T) {
		kc := tm.TokenKubeconfig(t, "other", servertest.Token(t, tm.alice, "some-other-cluster", servertest.TokenOptions{Region: tm.Region}))
		tm.expect(ctx, t, kc, "unauthorized", nil, "get", "pods", "-n", "dev")
	})

	t.Run("static token user still works", func(t *testing.T) {
		kc := tm.TokenKubeconfig(t, "static", accesstest.StaticToken)
		if u := tm.whoami(ctx, t, kc).Status.UserInfo; u.Username != accesstest.StaticUser {
			t.Errorf("username %q, want %s", u.Username, accesstest.StaticUser)
		}
	})
}

// TestStandbyAnswers: the member whose apiserver asks need not be the
// executor; a standby's webhooks decide the same way.
func TestStandbyAnswers(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	tm := newTeam(ctx, t, accesstest.Options{Standby: true, CacheTTL: time.Minute, NegativeCacheTTL: time.Second})
	st, err := tm.Agent.Status(ctx)
	if err != nil || st.Role != "STANDBY" || st.Writable {
		t.Fatalf("the webhook-serving agent: role %q writable %v (%v), want a standby", st.Role, st.Writable, err)
	}
	kc := tm.TokenKubeconfig(t, "standby", servertest.Token(t, tm.alice, tm.Cluster, servertest.TokenOptions{Region: tm.Region}))
	if u := tm.whoami(ctx, t, kc).Status.UserInfo; u.Username != "dev:alice" {
		t.Errorf("username %q, want dev:alice", u.Username)
	}
	tm.expect(ctx, t, kc, "ok", nil, "get", "pods", "-n", "dev")
	tm.expect(ctx, t, kc, "forbidden", nil, "get", "pods", "-n", "prod")
}
