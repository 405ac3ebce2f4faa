package addons_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saltbush/saltbush/tests/accesstest"
	"github.com/saltbush/saltbush/tests/nodetest"
)

// whoami is credprobe's answer: who the pod's unmodified SDK is, or why
// it could not say.
type whoami struct {
	Status   int
	Arn      string   `json:"arn"`
	Account  string   `json:"account"`
	Clusters []string `json:"clusters"`
	Source   string   `json:"source"`
	Stage    string   `json:"stage"`
	Code     string   `json:"code"`
	Error    string   `json:"error"`
}

// ask asks the credprobe pod who it is (a new credential chain each time).
func (e *env) ask(ctx context.Context, ns, pod string) whoami {
	e.t.Helper()
	p, err := e.k8s.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Status.PodIP+":8080/whoami", nil)
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		// Not an answer of the pod's (askUntil asks again).
		return whoami{Error: fmt.Sprintf("GET /whoami of %s/%s: %v", ns, pod, err)}
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	w := whoami{Status: resp.StatusCode}
	if err := json.Unmarshal(body, &w); err != nil {
		e.t.Fatalf("/whoami of %s/%s: %d %s", ns, pod, resp.StatusCode, body)
	}
	return w
}

// credprobe runs a credprobe pod of service account sa and waits until it
// serves; mutated says whether the webhook gave it credentials of kind
// ("AWS_ROLE_ARN" or "AWS_CONTAINER_CREDENTIALS_FULL_URI"), and a pod it
// did not (its configuration not there yet) is made again.
func (e *env) credprobe(ctx context.Context, ns, name, sa, kind string) {
	e.t.Helper()
	for i := 0; ; i++ {
		p, err := e.k8s.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{
				Name: "credprobe", Image: nodetest.CredProbeImage, Args: []string{"serve", ":8080"},
				// Ready once it listens: a Running container may not yet.
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1},
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatalf("create pod %s/%s: %v", ns, name, err)
		}
		if slices.ContainsFunc(p.Spec.Containers[0].Env, func(v corev1.EnvVar) bool { return v.Name == kind }) {
			break
		}
		if err := e.k8s.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			e.t.Fatal(err)
		}
		e.waitPodGone(ctx, ns, name)
		if ctx.Err() != nil {
			e.t.Fatalf("pod %s/%s was never given %s (%d tries)", ns, name, kind, i+1)
		}
		time.Sleep(300 * time.Millisecond)
	}
	e.waitPodReady(ctx, ns, name)
	e.t.Cleanup(func() {
		_ = e.k8s.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}

// waitPodReady waits until the pod is Ready.
func (e *env) waitPodReady(ctx context.Context, ns, name string) {
	e.t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := e.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && podReady(p), nil
	})
	if err != nil {
		e.t.Fatalf("pod %s/%s not ready: %v", ns, name, err)
	}
}

func (e *env) waitPodGone(ctx context.Context, ns, name string) {
	e.t.Helper()
	for {
		if _, err := e.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("pod %s/%s never gone", ns, name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serviceAccount makes a service account with annotations.
func (e *env) serviceAccount(ctx context.Context, ns, name string, annotations map[string]string) {
	e.t.Helper()
	if _, err := e.k8s.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create service account %s/%s: %v", ns, name, err)
	}
	e.t.Cleanup(func() {
		_ = e.k8s.CoreV1().ServiceAccounts(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestPodsGetAWSCredentials: on the real node, pods running the unmodified
// AWS SDK for Go v2 get the role their service account is meant to have
// and call STS and EKS with it — through IRSA (the webhook's web identity
// token, exchanged at saltbush's STS) and through EKS Pod Identity (the
// eks-pod-identity-agent add-on on the node exchanging the pod's token at
// EKS Auth, itself with IRSA credentials), with and without
// targetRoleArn. A role whose trust policy does not name the service
// account is refused, and once the association is deleted no new
// credentials are issued.
func TestPodsGetAWSCredentials(t *testing.T) {
	e := newCredentialsEnv(t)
	ctx := e.ctx(8 * time.Minute)
	node := e.node
	account := e.srv.Config.DevAccount
	hostPath := strings.TrimPrefix(node.Front.Issuer(), "https://")
	provider := "arn:aws:iam::" + account + ":oidc-provider/" + hostPath
	role := func(name string) string { return "arn:aws:iam::" + account + ":role/" + name }
	irsaTrust := func(ns, sa string) string {
		return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"` + provider + `"},` +
			`"Action":"sts:AssumeRoleWithWebIdentity","Condition":{"StringEquals":{"` + hostPath + `:sub":"system:serviceaccount:` + ns + `:` + sa + `",` +
			`"` + hostPath + `:aud":"sts.amazonaws.com"}}}]}`
	}
	const readers = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:ListClusters","eks:DescribeCluster"],"Resource":"*"}]}`
	e.srv.NewRole(t, role("pod-identity-agent"), irsaTrust("kube-system", "eks-pod-identity-agent"),
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks-auth:AssumeRoleForPodIdentity","Resource":"*"}]}`)
	e.srv.NewRole(t, role("irsa-app"), irsaTrust("default", "irsa-app"), readers)
	e.srv.NewRole(t, role("irsa-other"), irsaTrust("default", "someone-else"), readers)
	e.srv.NewRole(t, role("pods-target"), `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+role("pods-app")+`"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`, readers)
	e.srv.NewRole(t, role("pods-app"), `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`,
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:ListClusters"],"Resource":"*"},{"Effect":"Allow","Action":["sts:AssumeRole","sts:TagSession"],"Resource":"`+role("pods-target")+`"}]}`)

	// The webhook is configured once the agent is the executor.
	e.serviceAccount(ctx, "default", "irsa-app", map[string]string{"eks.amazonaws.com/role-arn": role("irsa-app")})
	accesstest.WaitPodWebhook(ctx, t, e.k8s, "default", "irsa-app")

	// IRSA.
	e.credprobe(ctx, "default", "irsa-app-0", "irsa-app", "AWS_ROLE_ARN")
	if w := e.ask(ctx, "default", "irsa-app-0"); w.Status != http.StatusOK || !strings.HasPrefix(w.Arn, "arn:aws:sts::"+account+":assumed-role/irsa-app/") ||
		!slices.Contains(w.Clusters, e.cluster) || w.Source != "WebIdentityCredentials" {
		t.Fatalf("IRSA pod: %+v", w)
	}
	e.serviceAccount(ctx, "default", "irsa-other", map[string]string{"eks.amazonaws.com/role-arn": role("irsa-other")})
	e.credprobe(ctx, "default", "irsa-other-0", "irsa-other", "AWS_ROLE_ARN")
	if w := e.ask(ctx, "default", "irsa-other-0"); w.Status != http.StatusBadGateway || w.Stage != "credentials" || !strings.Contains(w.Error, "AccessDenied") {
		t.Errorf("a pod whose role does not trust its service account: %+v", w)
	}

	// EKS Pod Identity: the node agent, then an associated pod.
	// The agent keeps no credentials between requests here, so that a
	// deleted association shows at once.
	if _, err := e.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("eks-pod-identity-agent"),
		ServiceAccountRoleArn: aws.String(role("pod-identity-agent")),
		ConfigurationValues:   aws.String(`{"agent":{"additionalArgs":{"--max-credential-retention-before-renewal":"0s"}}}`),
	}); err != nil {
		t.Fatalf("CreateAddon eks-pod-identity-agent: %v", err)
	}
	e.waitActive(ctx, "eks-pod-identity-agent")
	e.serviceAccount(ctx, "default", "pods-app", nil)
	assoc, err := e.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("pods-app"), RoleArn: aws.String(role("pods-app")),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.credprobe(ctx, "default", "pods-app-0", "pods-app", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
	prefix := "arn:aws:sts::" + account + ":assumed-role/pods-app/eks-" + e.cluster
	if w := e.askUntil(ctx, "default", "pods-app-0", func(w whoami) bool { return w.Status == http.StatusOK }); !strings.HasPrefix(w.Arn, prefix[:min(len(prefix), 60)]) ||
		w.Source != "CredentialsEndpointProvider" {
		t.Fatalf("Pod Identity pod: %+v%s", w, e.podLogs("kube-system", "app.kubernetes.io/name=eks-pod-identity-agent"))
	}

	// targetRoleArn: the first role's session assumes the target.
	if _, err := e.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), AssociationId: assoc.Association.AssociationId, TargetRoleArn: aws.String(role("pods-target")),
	}); err != nil {
		t.Fatal(err)
	}
	if w := e.askUntil(ctx, "default", "pods-app-0", func(w whoami) bool {
		return strings.Contains(w.Arn, ":assumed-role/pods-target/")
	}); !slices.Contains(w.Clusters, e.cluster) {
		t.Fatalf("with targetRoleArn: %+v", w)
	}

	// An add-on's own pod identity association gives its own pod
	// credentials.
	e.srv.NewRole(t, role("addon-app"), `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`, readers)
	if _, err := e.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("saltbush-pod-identity"),
		AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: aws.String(`{"credprobe": true}`),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("saltbush-pod-identity-controller"), RoleArn: aws.String(role("addon-app"))}},
	}); err != nil {
		t.Fatalf("CreateAddon saltbush-pod-identity: %v", err)
	}
	e.waitActive(ctx, "saltbush-pod-identity")
	pods := e.pods(ctx, "saltbush-pod-identity", "app.kubernetes.io/component=credprobe")
	if len(pods) != 1 {
		t.Fatalf("the add-on's credprobe pods: %d", len(pods))
	}
	if w := e.askUntil(ctx, "saltbush-pod-identity", pods[0].Name, func(w whoami) bool { return w.Status == http.StatusOK }); !strings.Contains(w.Arn, ":assumed-role/addon-app/eks-") {
		t.Fatalf("the add-on's pod: %+v", w)
	}

	// No association, no new credentials.
	if _, err := e.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), AssociationId: assoc.Association.AssociationId}); err != nil {
		t.Fatal(err)
	}
	if w := e.askUntil(ctx, "default", "pods-app-0", func(w whoami) bool { return w.Status != http.StatusOK }); w.Stage != "credentials" {
		t.Fatalf("after DeletePodIdentityAssociation: %+v", w)
	}
}

// askUntil asks the pod until done holds for its answer (the change it
// waits for reaches the node agent and saltbush within moments).
func (e *env) askUntil(ctx context.Context, ns, pod string, done func(whoami) bool) whoami {
	e.t.Helper()
	var w whoami
	for i := 0; ; i++ {
		w = e.ask(ctx, ns, pod)
		if done(w) {
			return w
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("%s/%s never answered as awaited (%d asks); last %+v", ns, pod, i+1, w)
		case <-time.After(time.Second):
		}
	}
}
