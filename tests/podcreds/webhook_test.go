package podcreds_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/guest/podwebhook"
	"github.com/saltbush/saltbush/tests/accesstest"
)

func envOf(p *corev1.Pod) map[string]string {
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestWebhookMutatesPods: the agent's pod identity webhook, configured by
// the executor on the real apiserver, gives an IRSA service account's pods
// the web identity token and role, an associated one's the container
// credentials, each with saltbush's endpoints, and leaves other pods and
// pods labelled to skip it alone.
func TestWebhookMutatesPods(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := &world{World: accesstest.Start(ctx, t, "webhook", accesstest.Options{AgentBinary: agentBinary, HostedIssuer: true, PodIdentityWebhook: true})}
	var err error
	if w.kube, err = kubernetes.NewForConfig(w.Kube.Admin()); err != nil {
		t.Fatal(err)
	}
	roleARN := "arn:aws:iam::" + w.Account + ":role/app"
	w.ensureServiceAccount(ctx, t, "default", "irsa")
	sa, err := w.kube.CoreV1().ServiceAccounts("default").Get(ctx, "irsa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa.Annotations = map[string]string{"eks.amazonaws.com/role-arn": roleARN}
	if _, err := w.kube.CoreV1().ServiceAccounts("default").Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	accesstest.WaitPodWebhook(ctx, t, w.kube, "default", "irsa")

	cfg, err := w.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, podwebhook.ConfigurationName, metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) != 1 || cfg.Webhooks[0].FailurePolicy == nil || *cfg.Webhooks[0].FailurePolicy != "Ignore" {
		t.Fatalf("webhook configuration: %v %+v", err, cfg)
	}

	create := func(name, sa string, labels map[string]string) *corev1.Pod {
		t.Helper()
		w.ensureServiceAccount(ctx, t, "default", sa)
		p, err := w.kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "saltbush/probe:test"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := envOf(create("irsa-0", "irsa", nil))
	if env["AWS_ROLE_ARN"] != roleARN || env["AWS_WEB_IDENTITY_TOKEN_FILE"] == "" || env["AWS_ENDPOINT_URL_STS"] != w.Server.URL ||
		env["AWS_REGION"] != w.Region {
		t.Errorf("IRSA pod env %v", env)
	}
	if env := envOf(create("skipped-0", "irsa", map[string]string{"eks.amazonaws.com/skip-pod-identity-webhook": "true"})); len(env) != 0 {
		t.Errorf("a pod labelled to skip the webhook was given %v", env)
	}
	if env := envOf(create("plain-0", "plain", nil)); len(env) != 0 {
		t.Errorf("a pod of a plain service account was given %v", env)
	}

	// An association reaches the webhook with the desired set.
	podRole := w.role(ctx, t, "pods-app", podsTrust())
	if _, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("pods"), RoleArn: aws.String(podRole),
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		env := envOf(create(fmt.Sprintf("pods-%d", i), "pods", nil))
		if env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] == "http://169.254.170.23/v1/credentials" {
			if env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] == "" || env["AWS_ENDPOINT_URL_EKS_AUTH"] != w.Server.URL {
				t.Errorf("Pod Identity pod env %v", env)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a pod of the associated service account was never given container credentials; last env %v", env)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
