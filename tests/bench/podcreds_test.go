package bench

// Pod credentials: a Kubernetes service-account token exchanged for a role
// session, at STS (AssumeRoleWithWebIdentity, IRSA) and at EKS Auth
// (AssumeRoleForPodIdentity, EKS Pod Identity), against one saltbush that
// hosts the cluster's OIDC issuer, with a floor of one etcd read measured
// in the same run.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/accesstest"
	"github.com/saltbush/saltbush/tests/kubetest"
)

const (
	podCredsCluster   = "bench-podcreds"
	podCredsNamespace = "default"
	// irsaAccount is the service account whose token is exchanged at STS,
	// podAccount (and its pod podName) the one exchanged at EKS Auth.
	irsaAccount = "irsa-app"
	podAccount  = "pod-app"
	podName     = "pod-app-0"
	// podCredsNodePolicy is what the pod identity node agent's principal
	// needs.
	podCredsNodePolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks-auth:AssumeRoleForPodIdentity","Resource":"*"}]}`
)

// podCredsConcurrencies are the client counts of BenchmarkPodCredentials.
var podCredsConcurrencies = []int{1, 16}

// podCredsPaths are the sub-benchmarks, the floor first.
var podCredsPaths = []string{"raw-etcd-get", "web-identity", "web-identity-http", "pod-identity"}

// BenchmarkPodCredentials exchanges service-account tokens for role
// sessions against one saltbush hosting the issuer of one cluster (a real
// kube-apiserver whose tokens it verifies with the keys the real guest
// agent sent), each path at 1 and 16 concurrent clients:
//
//	raw-etcd-get       the floor: one linearizable etcd Get of the issuer's
//	                   keys record through the server's own etcd client
//	web-identity       AssumeRoleWithWebIdentity with the AWS SDK for Go
//	                   v2's STS client and anonymous credentials (as its
//	                   web identity provider sends it): one IRSA token,
//	                   a fresh RoleSessionName per op
//	web-identity-http  the same unsigned query-protocol POST from a bare
//	                   net/http client (the server side, little client CPU)
//	pod-identity       AssumeRoleForPodIdentity from a net/http client,
//	                   signed per op with the SDK's SigV4 signer for
//	                   eks-auth as the node agent's user (as the node agent
//	                   sends it): one pod-bound token
//
// The tokens are minted (TokenRequest) before the clock starts. Every op
// must answer 200 with credentials, or the benchmark fails; every
// exchange issues a real session (an etcd txn creating the session record
// on a lease), while the floor is a read. The parent prints the table and
// the ratios to raw-etcd-get of this run and writes them to
// results/podcreds-<time>.txt. No timing is asserted.
//
// It needs `make kube` and starts a control plane (about 20 s of set-up),
// so it runs only when -bench names it (PodCredentials).
func BenchmarkPodCredentials(b *testing.B) {
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "PodCredentials") {
		b.Skip("run it by name: -bench PodCredentials -benchtime 300x (see README.md)")
	}
	if _, err := kubetest.Kubectl(); err != nil {
		b.Skipf("needs the Kubernetes binaries: %v", err)
	}
	bin, err := agentBinary()
	if err != nil {
		b.Fatal(err)
	}
	opt, mode := fsyncMode()
	fmt.Printf("fsync: %s\n", mode)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := servertest.Start(b, servertest.WithConfig(accesstest.Timing), opt)
	w := accesstest.Start(ctx, b, podCredsCluster, accesstest.Options{AgentBinary: bin, HostedIssuer: true, Server: srv})
	kube, err := kubernetes.NewForConfig(w.Kube.Admin())
	if err != nil {
		b.Fatal(err)
	}
	waitHostedKeys(ctx, b, w, kube)

	// IRSA: a role trusting the cluster's provider (derived from the
	// cluster's issuer) for one service account and audience.
	hostPath := strings.TrimPrefix(w.Issuer, "https://")
	provider := "arn:aws:iam::" + w.Account + ":oidc-provider/" + hostPath
	irsaRole := podCredsRole(ctx, b, srv, w.Account, "bench-irsa",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"`+provider+`"},`+
			`"Action":"sts:AssumeRoleWithWebIdentity","Condition":{"StringEquals":{"`+hostPath+`:sub":"system:serviceaccount:`+
			podCredsNamespace+`:`+irsaAccount+`","`+hostPath+`:aud":"sts.amazonaws.com"}}}]}`)
	irsaToken := mintSAToken(ctx, b, kube, irsaAccount, "sts.amazonaws.com", "")

	// Pod Identity: the node agent's user, a role trusting
	// pods.eks.amazonaws.com, a pod of the service account and the
	// association.
	node := srv.NewUser(b, "arn:aws:iam::"+w.Account+":user/bench-node-agent", podCredsNodePolicy)
	podRole := podCredsRole(ctx, b, srv, w.Account, "bench-pod",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`)
	ensurePodCredsSA(ctx, b, kube, podAccount)
	if _, err := kube.CoreV1().Pods(podCredsNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName},
		Spec:       corev1.PodSpec{ServiceAccountName: podAccount, Containers: []corev1.Container{{Name: "c", Image: "saltbush/probe:test"}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("pod: %v", err)
	}
	if _, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), Namespace: aws.String(podCredsNamespace), ServiceAccount: aws.String(podAccount),
		RoleArn: aws.String(podRole),
	}); err != nil {
		b.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	podToken := mintSAToken(ctx, b, kube, podAccount, "pods.eks.amazonaws.com", podName)

	etcd := srv.Etcd(b)
	issuerKey := srv.Store(b).Key(oidc.IssuerKey(w.Issuer))
	stsClient := sts.New(sts.Options{Region: w.Region, BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
		Retryer: aws.NopRetryer{}, HTTPClient: pooledHTTPClient()})
	queryHTTP, eksAuthHTTP := pooledHTTPClient(), pooledHTTPClient()
	signer := v4.NewSigner()
	nodeCreds := aws.Credentials{AccessKeyID: node.AccessKeyID, SecretAccessKey: node.SecretAccessKey}
	eksAuthURL := srv.URL + "/clusters/" + w.Cluster + "/assume-role-for-pod-identity"

	ops := map[string]func(ctx context.Context, seq int64) error{
		"raw-etcd-get": func(ctx context.Context, _ int64) error {
			resp, err := etcd.Get(ctx, issuerKey)
			if err == nil && len(resp.Kvs) != 1 {
				err = fmt.Errorf("etcd get %s: %d keys", issuerKey, len(resp.Kvs))
			}
			return err
		},
		"web-identity": func(ctx context.Context, seq int64) error {
			out, err := stsClient.AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
				RoleArn: aws.String(irsaRole), RoleSessionName: aws.String(fmt.Sprintf("bench-sdk-%d", seq)), WebIdentityToken: aws.String(irsaToken),
			})
			if err != nil {
				return err
			}
			if c := out.Credentials; c == nil || aws.ToString(c.AccessKeyId) == "" || aws.ToString(c.SecretAccessKey) == "" || aws.ToString(c.SessionToken) == "" {
				return fmt.Errorf("AssumeRoleWithWebIdentity answered no credentials")
			}
			return nil
		},
		"web-identity-http": func(ctx context.Context, seq int64) error {
			form := url.Values{
				"Action": {"AssumeRoleWithWebIdentity"}, "Version": {"2011-06-15"}, "RoleArn": {irsaRole},
				"RoleSessionName": {fmt.Sprintf("bench-http-%d", seq)}, "WebIdentityToken": {irsaToken},
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", strings.NewReader(form.Encode()))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			status, body, err := fetchAnswer(queryHTTP, req)
			if err != nil {
				return err
			}
			if status != http.StatusOK || xmlText(body, "AccessKeyId") == "" || xmlText(body, "SecretAccessKey") == "" || xmlText(body, "SessionToken") == "" {
				return fmt.Errorf("AssumeRoleWithWebIdentity: %d %s", status, clipBody(body))
			}
			return nil
		},
		"pod-identity": func(ctx context.Context, _ int64) error {
			body, err := json.Marshal(map[string]string{"token": podToken})
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, eksAuthURL, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			sum := sha256.Sum256(body)
			if err := signer.SignHTTP(ctx, nodeCreds, req, hex.EncodeToString(sum[:]), "eks-auth", w.Region, time.Now()); err != nil {
				return err
			}
			status, raw, err := fetchAnswer(eksAuthHTTP, req)
			if err != nil {
				return err
			}
			var a struct {
				AssumedRoleUser struct {
					Arn string `json:"arn"`
				} `json:"assumedRoleUser"`
				Credentials struct {
					AccessKeyID     string `json:"accessKeyId"`
					SecretAccessKey string `json:"secretAccessKey"`
					SessionToken    string `json:"sessionToken"`
				} `json:"credentials"`
			}
			if status != http.StatusOK || json.Unmarshal(raw, &a) != nil || a.AssumedRoleUser.Arn == "" ||
				a.Credentials.AccessKeyID == "" || a.Credentials.SecretAccessKey == "" || a.Credentials.SessionToken == "" {
				return fmt.Errorf("AssumeRoleForPodIdentity: %d %s", status, clipBody(raw))
			}
			return nil
		},
	}

	// Every path answers before anything is measured (a new access key
	// reaches saltbush's key mirror within milliseconds).
	var seq atomic.Int64
	for _, name := range podCredsPaths {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := ops[name](ctx, seq.Add(1))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s before the clock: %v", name, err)
			}
		}
	}

	type podCredsResult struct {
		result
		cpu  time.Duration
		etcd map[string]float64 // etcd RPCs per op, by method
	}
	results := map[string]map[int]podCredsResult{}
	for _, name := range podCredsPaths {
		results[name] = map[int]podCredsResult{}
		for _, c := range podCredsConcurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", name, c), func(b *testing.B) {
				rpcs0 := etcdRPCs(b)
				stop := profileTimed(b)
				cpu0 := processCPU()
				r := measure(b, c, func(ctx context.Context) error { return ops[name](ctx, seq.Add(1)) })
				cpu := (processCPU() - cpu0) / time.Duration(b.N+c)
				stop()
				rpcs := etcdRPCs(b)
				for m := range rpcs {
					rpcs[m] = (rpcs[m] - rpcs0[m]) / float64(b.N+c)
				}
				b.ReportMetric(us(cpu), "cpu-us/op")
				b.ReportMetric(rpcs["Range"], "etcd-ranges/op")
				b.ReportMetric(rpcs["Txn"], "etcd-txns/op")
				results[name][c] = podCredsResult{r, cpu, rpcs}
			})
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "pod credential exchanges, fsync=%s, GOMAXPROCS=%d; one saltbush hosting the issuer of one cluster (real kube-apiserver and agent)\n",
		mode, runtime.GOMAXPROCS(0))
	sb.WriteString("every exchange issues a session (an etcd txn with a lease); raw-etcd-get is one linearizable Get of the issuer's keys record\n")
	sb.WriteString("cpu µs/op: this process (saltbush, etcd, clients) over the measurement; etcd ranges, txns, other RPCs per op: what etcd's\n")
	sb.WriteString("gRPC server handled over it (background traffic of the agent included); both with the warm-ups\n\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "path\tc\tops\tops/s\tp50 ms\tp99 ms\tcpu µs/op\tetcd ranges\ttxns\tother\t")
	for _, name := range podCredsPaths {
		for _, c := range podCredsConcurrencies {
			if r, ok := results[name][c]; ok {
				other := 0.0
				for m, v := range r.etcd {
					if m != "Range" && m != "Txn" {
						other += v
					}
				}
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t%.2f\t%.2f\t%.2f\t\n", name, c, r.n, r.opsPerS, ms(r.p50), ms(r.p99), us(r.cpu),
					r.etcd["Range"], r.etcd["Txn"], other)
			}
		}
	}
	_ = tw.Flush()
	sb.WriteString("\nratios (same run): throughput x/base (higher is better), p50 latency x/base (lower is better), cpu per op x/base\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "ratio\tc\tthroughput\tp50\tcpu\t")
	pairs := [][2]string{{"web-identity", "raw-etcd-get"}, {"web-identity-http", "raw-etcd-get"}, {"pod-identity", "raw-etcd-get"},
		{"pod-identity", "web-identity-http"}}
	for _, pr := range pairs {
		for _, c := range podCredsConcurrencies {
			x, okX := results[pr[0]][c]
			base, okB := results[pr[1]][c]
			if !okX || !okB || base.opsPerS == 0 || base.p50 == 0 || base.cpu == 0 {
				continue
			}
			_, _ = fmt.Fprintf(tw, "%s/%s\t%d\t%.2f\t%.2f\t%.2f\t\n", pr[0], pr[1], c, x.opsPerS/base.opsPerS,
				float64(x.p50)/float64(base.p50), float64(x.cpu)/float64(base.cpu))
		}
	}
	_ = tw.Flush()
	summary := sb.String()
	// Stdout, not b.Log: a parent benchmark's log is shown only with -v.
	fmt.Print("\n" + summary + "\n")
	writePodCredsResults(summary)
}

// etcdRPCs is the unary RPCs the in-process etcd server has handled, by
// method (its grpc_server_handled_total, in the default Prometheus
// registry): every client's, saltbush's and the raw path's alike.
func etcdRPCs(b *testing.B) map[string]float64 {
	b.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatalf("etcd's metrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var service, method string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "grpc_service":
					service = l.GetValue()
				case "grpc_method":
					method = l.GetValue()
				}
			}
			if strings.HasPrefix(service, "etcdserverpb.") && m.GetCounter() != nil {
				out[method] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// pooledHTTPClient keeps a keep-alive connection per client of a path.
func pooledHTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}
}

// fetchAnswer sends req and reads the whole answer.
func fetchAnswer(client *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// xmlText is the text of the first <tag> element of body ("" when none):
// enough to see that a query-protocol answer carries credentials without
// parsing it.
func xmlText(body []byte, tag string) string {
	_, rest, ok := bytes.Cut(body, []byte("<"+tag+">"))
	if !ok {
		return ""
	}
	text, _, ok := bytes.Cut(rest, []byte("</"+tag+">"))
	if !ok {
		return ""
	}
	return string(text)
}

func clipBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// podCredsRole creates a role of account with trust policy trust.
func podCredsRole(ctx context.Context, b *testing.B, srv *servertest.Server, account, name, trust string) string {
	b.Helper()
	arn := "arn:aws:iam::" + account + ":role/" + name
	if _, err := srv.IAM().CreatePrincipal(ctx, arn); err != nil {
		b.Fatalf("CreatePrincipal %s: %v", arn, err)
	}
	if _, err := srv.IAM().UpdateRole(ctx, arn, iam.RoleUpdate{TrustPolicy: &trust}); err != nil {
		b.Fatalf("trust policy of %s: %v", arn, err)
	}
	return arn
}

func ensurePodCredsSA(ctx context.Context, b *testing.B, kube kubernetes.Interface, sa string) {
	b.Helper()
	_, err := kube.CoreV1().ServiceAccounts(podCredsNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		b.Fatalf("service account %s: %v", sa, err)
	}
}

// mintSAToken asks the apiserver for a token of service account sa, as the
// kubelet asks for a projected one: for audience, valid for an hour, bound
// to pod when it is not "".
func mintSAToken(ctx context.Context, b *testing.B, kube kubernetes.Interface, sa, audience, pod string) string {
	b.Helper()
	ensurePodCredsSA(ctx, b, kube, sa)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: aws.Int64(3600),
	}}
	if pod != "" {
		p, err := kube.CoreV1().Pods(podCredsNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			b.Fatalf("pod %s: %v", pod, err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: p.UID}
	}
	out, err := kube.CoreV1().ServiceAccounts(podCredsNamespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		b.Fatalf("TokenRequest %s: %v", sa, err)
	}
	return out.Status.Token
}

// waitHostedKeys waits until saltbush serves the apiserver's keys (the
// agent sends them every second).
func waitHostedKeys(ctx context.Context, b *testing.B, w *accesstest.World, kube kubernetes.Interface) {
	b.Helper()
	type jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	kids := func(raw []byte) string {
		var k jwks
		if json.Unmarshal(raw, &k) != nil {
			return ""
		}
		var out []string
		for _, key := range k.Keys {
			out = append(out, key.Kid)
		}
		return strings.Join(out, ",")
	}
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		b.Fatalf("the apiserver's JWKS: %v", err)
	}
	want := kids(raw)
	// The façade serves the issuer's documents under its path, as a load
	// balancer terminating TLS forwards them.
	keysURL := "http://" + strings.TrimPrefix(w.Issuer, "https://") + "/keys"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, keysURL, nil)
		if err != nil {
			b.Fatal(err)
		}
		if status, body, err := fetchAnswer(http.DefaultClient, req); err == nil && status == http.StatusOK && want != "" && kids(body) == want {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("saltbush never served the apiserver's keys %s", want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writePodCredsResults saves the summary under results/ (gitignored).
// Failing to write it does not fail the benchmark.
func writePodCredsResults(summary string) {
	if err := os.MkdirAll("results", 0o755); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	f := filepath.Join("results", "podcreds-"+time.Now().Format("20060102-150405")+".txt")
	if err := os.WriteFile(f, []byte(summary), 0o644); err != nil {
		fmt.Printf("results not saved: %v\n", err)
		return
	}
	fmt.Printf("summary written to %s\n", filepath.Join("tests/bench", f))
}
