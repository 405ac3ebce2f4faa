package podwebhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// env is a container's environment after the webhook's patch.
func mutated(t *testing.T, s *Server, pod *corev1.Pod) (map[string]string, []corev1.Volume) {
	t.Helper()
	raw, _ := json.Marshal(pod)
	body, _ := json.Marshal(review{APIVersion: "admission.k8s.io/v1beta1", Kind: "AdmissionReview",
		Request: &admissionv1beta1.AdmissionRequest{UID: "u1", Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw}}})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, MutatePath, bytes.NewReader(body)))
	var out review
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed || out.Response.UID != "u1" ||
		out.APIVersion != "admission.k8s.io/v1beta1" {
		t.Fatalf("answer %d %s", rec.Code, rec.Body.String())
	}
	env := map[string]string{}
	var volumes []corev1.Volume
	var ops []patchOperation
	if out.Response.Patch != nil {
		if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range ops {
		switch op.Path {
		case "/spec/containers":
			var cs []corev1.Container
			_ = json.Unmarshal(op.Value, &cs)
			for _, e := range cs[0].Env {
				env[e.Name] = e.Value
			}
		case "/spec/volumes":
			_ = json.Unmarshal(op.Value, &volumes)
		}
	}
	return env, volumes
}

// TestMutation: the real webhook's mutation, for IRSA (an annotated
// service account) and Pod Identity (an associated one), with saltbush's
// endpoints added to containers given credentials and to no other.
func TestMutation(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "irsa",
			Annotations: map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/app"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pods"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}},
	)
	s := New(kube, Config{Region: "us-east-1", Endpoint: "https://saltbush.example"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go s.Run(ctx)
	s.SetAssociations([]*deliveryv1.DesiredPodIdentityAssociation{{Namespace: "ns", ServiceAccount: "pods"}})
	pod := func(sa string, env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + sa},
			Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "i", Env: env}}}}
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		want       map[string]string
		wantVolume string
	}{
		{"IRSA", pod("irsa"), map[string]string{
			"AWS_ROLE_ARN": "arn:aws:iam::111122223333:role/app", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
			"AWS_REGION": "us-east-1", "AWS_STS_REGIONAL_ENDPOINTS": "regional",
			"AWS_ENDPOINT_URL_STS": "https://saltbush.example", "AWS_ENDPOINT_URL_EKS": "https://saltbush.example", "AWS_ENDPOINT_URL_EKS_AUTH": "https://saltbush.example",
		}, "aws-iam-token"},
		{"Pod Identity", pod("pods"), map[string]string{
			"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "http://169.254.170.23/v1/credentials",
			"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
			"AWS_ENDPOINT_URL_STS":                   "https://saltbush.example",
		}, "eks-pod-identity-token"},
		{"the pod's own endpoint is kept", pod("irsa", corev1.EnvVar{Name: "AWS_ENDPOINT_URL_STS", Value: "https://mine.example"}),
			map[string]string{"AWS_ENDPOINT_URL_STS": "https://mine.example", "AWS_ENDPOINT_URL_EKS": "https://saltbush.example"}, "aws-iam-token"},
		{"no credentials, no change", pod("plain"), map[string]string{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The cache lists the service accounts a moment after Run.
			var env map[string]string
			var vols []corev1.Volume
			for deadline := time.Now().Add(10 * time.Second); ; {
				env, vols = mutated(t, s, tc.pod)
				if len(env) > 0 || tc.wantVolume == "" || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			for k, v := range tc.want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q (env %v)", k, env[k], v, env)
				}
			}
			if tc.wantVolume == "" && len(env) != 0 {
				t.Errorf("a pod without credentials was given %v", env)
			}
			if tc.wantVolume != "" && !slices.ContainsFunc(vols, func(v corev1.Volume) bool { return v.Name == tc.wantVolume }) {
				t.Errorf("volumes %v, want %s", vols, tc.wantVolume)
			}
		})
	}
}

func TestWithEndpointsLeavesOtherOperations(t *testing.T) {
	in := `[{"op":"add","path":"/metadata/labels","value":{"a":"b"}},{"op":"add","path":"/spec/containers","value":[{"name":"c","env":[{"name":"AWS_ROLE_ARN","value":"r"}]},{"name":"d"}]}]`
	out, err := withEndpoints([]byte(in), "https://e")
	if err != nil {
		t.Fatal(err)
	}
	var ops []patchOperation
	if err := json.Unmarshal(out, &ops); err != nil || len(ops) != 2 || string(ops[0].Value) != `{"a":"b"}` {
		t.Fatalf("patch %s", out)
	}
	var cs []corev1.Container
	_ = json.Unmarshal(ops[1].Value, &cs)
	if len(cs[0].Env) != 4 || len(cs[1].Env) != 0 {
		t.Fatalf("containers %+v", cs)
	}
	if _, err := withEndpoints([]byte("{"), "https://e"); err == nil {
		t.Fatal("a malformed patch was accepted")
	}
}
