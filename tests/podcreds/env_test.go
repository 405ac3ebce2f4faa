package podcreds_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
)

// world is one cluster whose issuer saltbush hosts, with its apiserver's
// admin client.
type world struct {
	*accesstest.World
	kube kubernetes.Interface
	// provider is the cluster's OIDC provider ARN in its account, and
	// hostPath its issuer without https:// (the trust policies' key
	// prefix).
	provider, hostPath string
}

func newWorld(ctx context.Context, t *testing.T, name string) *world {
	t.Helper()
	return newWorldOn(ctx, t, name, nil)
}

// newWorldOn starts the cluster on srv (a new saltbush when nil).
func newWorldOn(ctx context.Context, t *testing.T, name string, srv *servertest.Server) *world {
	t.Helper()
	w := &world{World: accesstest.Start(ctx, t, name, accesstest.Options{AgentBinary: agentBinary, HostedIssuer: true, Server: srv})}
	var err error
	if w.kube, err = kubernetes.NewForConfig(w.Kube.Admin()); err != nil {
		t.Fatal(err)
	}
	w.hostPath = strings.TrimPrefix(w.Issuer, "https://")
	w.provider = "arn:aws:iam::" + w.Account + ":oidc-provider/" + w.hostPath
	w.waitKeys(ctx, t)
	return w
}

// jwks is a key set as JSON.
type jwks struct {
	Keys []struct {
		Kid string `json:"kid"`
	} `json:"keys"`
}

func (k jwks) kids() []string {
	var out []string
	for _, key := range k.Keys {
		out = append(out, key.Kid)
	}
	return out
}

// apiserverKeys is what the apiserver publishes.
func (w *world) apiserverKeys(ctx context.Context, t *testing.T) jwks {
	t.Helper()
	raw, err := w.kube.Discovery().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the apiserver's JWKS: %v", err)
	}
	var k jwks
	if err := json.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	return k
}

// hosted fetches a document of the issuer from the façade, as a relying
// party fetches it through the load balancer that terminates TLS.
func (w *world) hosted(t *testing.T, path string) (int, []byte) {
	t.Helper()
	u := "http://" + strings.TrimPrefix(w.Issuer, "https://") + path
	resp, err := http.Get(u) //nolint:gosec // the test's own façade
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// waitKeys waits until saltbush serves the apiserver's current keys.
func (w *world) waitKeys(ctx context.Context, t *testing.T) jwks {
	t.Helper()
	want := strings.Join(w.apiserverKeys(ctx, t).kids(), ",")
	var last string
	for {
		status, body := w.hosted(t, "/keys")
		if status == http.StatusOK {
			var k jwks
			if err := json.Unmarshal(body, &k); err != nil {
				t.Fatalf("hosted JWKS %s: %v", body, err)
			}
			if strings.Join(k.kids(), ",") == want {
				return k
			}
		}
		last = string(body)
		select {
		case <-ctx.Done():
			t.Fatalf("saltbush never served the apiserver's keys %s; last answer %s", want, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// token mints a service-account token as the kubelet asks for a projected
// one: for audience, bound to pod when it is not "".
func (w *world) token(ctx context.Context, t *testing.T, ns, sa, audience, pod string) string {
	t.Helper()
	w.ensureServiceAccount(ctx, t, ns, sa)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: aws.Int64(3600),
	}}
	if pod != "" {
		p, err := w.kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: p.UID}
	}
	out, err := w.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest %s/%s: %v", ns, sa, err)
	}
	return out.Status.Token
}

func (w *world) ensureServiceAccount(ctx context.Context, t *testing.T, ns, sa string) {
	t.Helper()
	_, err := w.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	_, err = w.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// pod creates a pod of service account sa (the kubelet double runs it).
func (w *world) pod(ctx context.Context, t *testing.T, ns, name, sa string) {
	t.Helper()
	w.ensureServiceAccount(ctx, t, ns, sa)
	_, err := w.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "saltbush/probe:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// role creates a role with a trust policy whose session may list and
// describe clusters.
func (w *world) role(_ context.Context, t *testing.T, name, trust string) string {
	t.Helper()
	arn := "arn:aws:iam::" + w.Account + ":role/" + name
	w.Server.NewRole(t, arn, trust, readerPolicy)
	return arn
}

// readerPolicy lets a session list and describe clusters.
const readerPolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:ListClusters","eks:DescribeCluster"],"Resource":"*"}]}`

// irsaTrust trusts the cluster's provider for one service account.
func (w *world) irsaTrust(ns, sa string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"` + w.provider + `"},` +
		`"Action":"sts:AssumeRoleWithWebIdentity","Condition":{"StringEquals":{"` + w.hostPath + `:sub":"system:serviceaccount:` + ns + `:` + sa + `",` +
		`"` + w.hostPath + `:aud":"sts.amazonaws.com"}}}]}`
}

// podsTrust is EKS Pod Identity's trust policy.
func podsTrust() string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`
}

// anonymousSTS is an STS client without credentials, as the SDKs'
// web-identity provider calls AssumeRoleWithWebIdentity.
func (w *world) anonymousSTS() *sts.Client {
	return sts.New(sts.Options{Region: w.Region, BaseEndpoint: aws.String(w.Server.URL), Credentials: aws.AnonymousCredentials{},
		RetryMaxAttempts: 1, HTTPClient: &http.Client{Timeout: 30 * time.Second}})
}

// stsAs is an STS client signing with static credentials.
func (w *world) stsAs(id, secret, token string) *sts.Client {
	return sts.New(sts.Options{Region: w.Region, BaseEndpoint: aws.String(w.Server.URL),
		Credentials: credentials.NewStaticCredentialsProvider(id, secret, token), HTTPClient: &http.Client{Timeout: 30 * time.Second}})
}

// eksAuthAnswer is AssumeRoleForPodIdentity's answer, or its error.
type eksAuthAnswer struct {
	Status  int
	Type    string // X-Amzn-ErrorType
	Message string `json:"message"`
	Subject struct {
		Namespace      string `json:"namespace"`
		ServiceAccount string `json:"serviceAccount"`
	} `json:"subject"`
	Audience               string `json:"audience"`
	PodIdentityAssociation struct {
		AssociationArn string `json:"associationArn"`
		AssociationID  string `json:"associationId"`
	} `json:"podIdentityAssociation"`
	AssumedRoleUser struct {
		Arn          string `json:"arn"`
		AssumeRoleID string `json:"assumeRoleId"`
	} `json:"assumedRoleUser"`
	Credentials struct {
		SessionToken    string  `json:"sessionToken"`
		SecretAccessKey string  `json:"secretAccessKey"`
		AccessKeyID     string  `json:"accessKeyId"`
		Expiration      float64 `json:"expiration"`
	} `json:"credentials"`
}

// assumeForPod calls EKS Auth as c (the node agent), signed for eks-auth
// as the pod identity agent signs it.
func (w *world) assumeForPod(ctx context.Context, t *testing.T, c servertest.Creds, cluster, token string) eksAuthAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"token": token})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Server.URL+"/clusters/"+cluster+"/assume-role-for-pod-identity", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken},
		req, hex.EncodeToString(sum[:]), "eks-auth", w.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	a := eksAuthAnswer{Status: resp.StatusCode, Type: resp.Header.Get("X-Amzn-Errortype")}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("EKS Auth answered %d %s", resp.StatusCode, raw)
	}
	return a
}
