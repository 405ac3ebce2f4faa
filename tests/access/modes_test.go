package access_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
)

// TestAuthenticationModes walks one cluster through AWS's authentication
// modes, CONFIG_MAP → API_AND_CONFIG_MAP → API, with kubectl's apiserver
// asking the agent's webhooks at every step:
//   - CONFIG_MAP: the aws-auth ConfigMap maps a role (with
//     {{SessionName}}) and a user; access entries cannot be made;
//   - API_AND_CONFIG_MAP: an access entry wins over the ConfigMap for its
//     principal, the ConfigMap still maps everyone else;
//   - API: the ConfigMap is ignored;
//   - every other direction is refused with AWS's error, changing nothing.
func TestAuthenticationModes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	w := accesstest.Start(ctx, t, clusterName(t), accesstest.Options{AgentBinary: agentBinary, AuthenticationMode: "CONFIG_MAP",
		CacheTTL: 10 * time.Second, NegativeCacheTTL: 200 * time.Millisecond})
	k8s := kubernetes.NewForConfigOrDie(w.Kube.Admin())
	role := "arn:aws:iam::" + w.Account + ":role/dev-team"
	bobARN := "arn:aws:iam::" + w.Account + ":user/bob"
	for _, arn := range []string{role, bobARN} {
		if _, err := w.Server.IAM().CreatePrincipal(ctx, arn); err != nil {
			t.Fatal(err)
		}
	}
	alice := w.Server.NewKey(t, "arn:aws:sts::"+w.Account+":assumed-role/dev-team/alice")
	bob := w.Server.NewKey(t, bobARN)
	// Each step signs new tokens: the apiserver keeps a successful
	// authentication for 10 s, and a fresh token is asked about afresh.
	// SigV4 signs to the second, so every token gets a second of its own,
	// counting back from the test's start (the server accepts 15 minutes).
	start, signed := time.Now().Truncate(time.Second), 0
	token := func(c servertest.Creds) string {
		signed++
		at := start.Add(-time.Duration(signed) * time.Second)
		return servertest.Token(t, c, w.Cluster, servertest.TokenOptions{Region: w.Region, At: at})
	}
	// username is who kubectl is, "" when unauthenticated; it polls for
	// want, since the agent sees the ConfigMap through a watch.
	username := func(t *testing.T, c servertest.Creds, want string) {
		t.Helper()
		var got string
		for {
			kc := w.TokenKubeconfig(t, "whoami", token(c))
			r := w.Run(ctx, kc, nil, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			got = strings.TrimSpace(r.Stdout)
			if r.Err != nil {
				got = ""
				if !r.Unauthorized() {
					t.Fatalf("kubectl auth whoami: %v\n%s", r.Err, r.Stderr)
				}
			}
			if got == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("kubectl auth whoami: user %q, want %q", got, want)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	update := func(t *testing.T, mode types.AuthenticationMode) (*eks.UpdateClusterConfigOutput, error) {
		t.Helper()
		return w.EKS.UpdateClusterConfig(ctx, &eks.UpdateClusterConfigInput{Name: aws.String(w.Cluster),
			AccessConfig: &types.UpdateAccessConfigRequest{AuthenticationMode: mode}})
	}
	mode := func(t *testing.T, want types.AuthenticationMode) {
		t.Helper()
		out, err := w.EKS.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(w.Cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Cluster.AccessConfig.AuthenticationMode; got != want {
			t.Fatalf("authenticationMode %s, want %s", got, want)
		}
	}
	refused := func(t *testing.T, from, to types.AuthenticationMode) {
		t.Helper()
		_, err := update(t, to)
		var api smithy.APIError
		want := "Unsupported authentication mode update from " + string(from) + " to " + string(to)
		if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterException" || !strings.Contains(api.ErrorMessage(), want) {
			t.Fatalf("UpdateClusterConfig %s → %s: %v, want InvalidParameterException %q", from, to, err, want)
		}
		mode(t, from)
	}

	t.Run("CONFIG_MAP", func(t *testing.T) {
		mode(t, types.AuthenticationModeConfigMap)
		username(t, alice, "") // no aws-auth yet
		if _, err := k8s.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "aws-auth"},
			Data: map[string]string{
				"mapRoles": "- rolearn: " + role + "\n  username: cm:{{SessionName}}\n  groups:\n    - cm-viewers\n",
				"mapUsers": "- userarn: " + bobARN + "\n  username: bob-from-configmap\n  groups:\n    - cm-viewers\n",
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("aws-auth: %v", err)
		}
		if _, err := k8s.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cm-viewers"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "cm-viewers"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("ClusterRoleBinding: %v", err)
		}
		username(t, alice, "cm:alice")
		username(t, bob, "bob-from-configmap")
		// The ConfigMap's groups are bound by RBAC; saltbush has no
		// opinion on users without an access entry.
		kc := w.TokenKubeconfig(t, "alice-cm", token(alice))
		if r := w.Run(ctx, kc, nil, "get", "pods", "-n", "kube-system"); r.Err != nil {
			t.Errorf("get pods as a mapped viewer: %v\n%s", r.Err, r.Stderr)
		}
		if r := w.Run(ctx, kc, nil, "create", "namespace", "not-for-viewers"); !r.Forbidden() {
			t.Errorf("create namespace as a mapped viewer: %v, want forbidden\n%s", r.Err, r.Stderr)
		}
		_, err := w.EKS.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(w.Cluster), PrincipalArn: aws.String(role)})
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "InvalidRequestException" {
			t.Fatalf("CreateAccessEntry in CONFIG_MAP mode: %v, want InvalidRequestException", err)
		}
		// One step at a time, as AWS allows.
		refused(t, types.AuthenticationModeConfigMap, types.AuthenticationModeApi)
		refused(t, types.AuthenticationModeConfigMap, types.AuthenticationModeConfigMap)
	})

	t.Run("API_AND_CONFIG_MAP", func(t *testing.T) {
		out, err := update(t, types.AuthenticationModeApiAndConfigMap)
		if err != nil {
			t.Fatalf("UpdateClusterConfig → API_AND_CONFIG_MAP: %v", err)
		}
		u, err := w.EKS.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(w.Cluster), UpdateId: out.Update.Id})
		if err != nil {
			t.Fatal(err)
		}
		if u.Update.Type != types.UpdateTypeAccessConfigUpdate || u.Update.Status != types.UpdateStatusSuccessful {
			t.Errorf("DescribeUpdate: type %s status %s, want AccessConfigUpdate Successful", u.Update.Type, u.Update.Status)
		}
		mode(t, types.AuthenticationModeApiAndConfigMap)
		username(t, alice, "cm:alice") // no entry yet: the ConfigMap maps
		if _, err := w.EKS.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(w.Cluster),
			PrincipalArn: aws.String(role), Username: aws.String("entry:{{SessionName}}")}); err != nil {
			t.Fatalf("CreateAccessEntry: %v", err)
		}
		username(t, alice, "entry:alice")      // the entry wins
		username(t, bob, "bob-from-configmap") // everyone else: the ConfigMap
		refused(t, types.AuthenticationModeApiAndConfigMap, types.AuthenticationModeConfigMap)
	})

	t.Run("API", func(t *testing.T) {
		if _, err := update(t, types.AuthenticationModeApi); err != nil {
			t.Fatalf("UpdateClusterConfig → API: %v", err)
		}
		mode(t, types.AuthenticationModeApi)
		username(t, alice, "entry:alice")
		username(t, bob, "") // the ConfigMap no longer counts
		refused(t, types.AuthenticationModeApi, types.AuthenticationModeApiAndConfigMap)
		refused(t, types.AuthenticationModeApi, types.AuthenticationModeConfigMap)
	})
}
