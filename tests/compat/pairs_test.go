package compat_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/guest/webhook"
	"github.com/saltbush/saltbush/release"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/compat"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/poll"
)

// noop is the catalogue's add-on that only writes a ConfigMap (every
// baseline in the window has it, at this version).
const (
	noop        = "saltbush-noop"
	noopVersion = "v1.1.0-eksbuild.1"
	waitLong    = 2 * time.Minute
)

// TestAgentAndHost runs one cluster's delivery with an old release's
// agents against the current host, and the current agents against an old
// release's host: assignment, an add-on created, its report making it
// ACTIVE, the webhooks answering from the host's review RPCs, the
// executor drained (fenced) and the standby taking over at a new epoch,
// an update applied and reported by it, the add-on deleted.
func TestAgentAndHost(t *testing.T) {
	type pair struct {
		name        string
		host, agent compat.Binaries
	}
	var pairs []pair
	for _, o := range old(t) {
		n := fmt.Sprintf("baseline %d", o.Baseline.Number)
		pairs = append(pairs,
			pair{name: "agent of " + n + ", current host", host: suite.current, agent: o},
			pair{name: "current agent, host of " + n, host: o, agent: suite.current})
	}
	if *all {
		pairs = append(pairs, pair{name: "current agent, current host", host: suite.current, agent: suite.current})
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) { agentAndHost(t, p.host, p.agent) })
	}
}

func agentAndHost(t *testing.T, hostBins, agentBins compat.Binaries) {
	w := newWorld(t, startHost(t, hostBins.Saltbush, hostOptions{}), "a", "b")
	a := w.startAgent("a", agentBins)
	a.waitRole(t, "EXECUTOR")
	b := w.startAgent("b", agentBins)
	b.waitRole(t, "STANDBY")

	// The host records what each agent says it is: an agent older than
	// the release identity sends its version alone; a host older than
	// it keeps the version alone.
	st := w.deliveryStatus()
	if got := st.GetExecutor().GetInstanceId(); got != "a" {
		t.Fatalf("executor %q, want a", got)
	}
	epoch := st.GetExecutor().GetEpoch()
	if len(st.GetSessions()) != 2 {
		t.Fatalf("%d sessions, want 2: %v", len(st.GetSessions()), st.GetSessions())
	}
	for _, s := range st.GetSessions() {
		if s.GetAgentVersion() == "" {
			t.Errorf("session %s: no agent version", s.GetInstanceId())
		}
		wantBaseline, wantCommit := uint32(0), ""
		if hostBins.Baseline.Number == 0 && agentBins.Baseline.Number == 0 {
			wantBaseline, wantCommit = release.ContractBaseline, suite.agentCommit
		}
		// The session holds the full commit; the version command prints
		// its first 12 digits.
		commitOK := s.GetAgentCommit() == ""
		if wantCommit != "" {
			commitOK = len(s.GetAgentCommit()) == 40 && strings.HasPrefix(s.GetAgentCommit(), wantCommit)
		}
		if s.GetAgentContractBaseline() != wantBaseline || !commitOK {
			t.Errorf("session %s: agent commit %q, baseline %d; want %q, %d", s.GetInstanceId(),
				s.GetAgentCommit(), s.GetAgentContractBaseline(), wantCommit, wantBaseline)
		}
	}

	// Desired set, apply, report.
	w.createAddon("one")
	w.waitActive()
	w.waitConfigMap("one")

	// The webhooks answer for the cluster from the host's reviews: the
	// creator's token authenticates and may list pods; a stranger's
	// token does not authenticate.
	for _, ag := range []*agentProc{a, b} {
		w.checkWebhooks(ag)
	}

	// A pod identity association changes the desired set (a host that
	// has them): an agent that does not know them still takes the set.
	if hostBins.Baseline.Number == 0 {
		w.createPodIdentityAssociation()
		w.waitAllAcked()
	}

	// Fencing: the executor is drained; b takes over at a later epoch.
	if _, err := w.delivery().DrainExecutor(w.ctx(30*time.Second), &controlv1.DrainExecutorRequest{Cluster: w.ref()}); err != nil {
		t.Fatalf("DrainExecutor: %v", err)
	}
	b.waitRole(t, "EXECUTOR")
	st = w.deliveryStatus()
	if got := st.GetExecutor(); got.GetInstanceId() != "b" || got.GetEpoch() <= epoch {
		t.Fatalf("after the drain: executor %q at epoch %d, want b after epoch %d", got.GetInstanceId(), got.GetEpoch(), epoch)
	}
	newEpoch := st.GetExecutor().GetEpoch()

	// The new executor applies and reports an update.
	id := w.updateAddon("two")
	w.waitUpdate(id)
	w.waitConfigMap("two")
	st = w.deliveryStatus()
	i := slices.IndexFunc(st.GetAddons(), func(d *controlv1.AddonDelivery) bool { return d.GetName() == noop })
	if i < 0 {
		t.Fatalf("delivery status lists no %s: %v", noop, st.GetAddons())
	}
	if d := st.GetAddons()[i]; d.GetReportedBy() != "b" || d.GetReportedEpoch() != newEpoch || d.GetObservedGeneration() != d.GetGeneration() {
		t.Errorf("%s: reported by %q at epoch %d for generation %d of %d; want b at epoch %d, the current generation",
			noop, d.GetReportedBy(), d.GetReportedEpoch(), d.GetObservedGeneration(), d.GetGeneration(), newEpoch)
	}

	// Deletion goes through the new executor too.
	w.deleteAddon()
	w.waitConfigMapGone()
	if lines := w.host.errorLines(); len(lines) > 0 {
		t.Errorf("the host logged %d ERROR lines; the first: %s", len(lines), lines[0])
	}
}

// world is one test's cluster: a host, a tenant whose SDK client makes
// the cluster, and the cluster's agents on the shared apiserver.
type world struct {
	t       *testing.T
	host    *host
	kube    *kubetest.Cluster
	k8s     kubernetes.Interface
	eks     *eks.Client
	creds   servertest.Creds
	account string
	cluster string
	uid     string
	ns      string
}

const account = "111122223333"

// newWorld makes a tenant on h, an ACTIVE cluster with members on the
// shared apiserver, and a namespace for its add-on.
func newWorld(t *testing.T, h *host, members ...string) *world {
	t.Helper()
	kc := kubetest.Shared(t)
	w := &world{t: t, host: h, kube: kc, account: account, k8s: kubernetes.NewForConfigOrDie(kc.Admin())}
	w.cluster = fmt.Sprintf("compat-%04x", rand.IntN(1<<16))
	w.ns = w.cluster
	ctx := w.ctx(time.Minute)
	id := controlv1.NewIdentityControlServiceClient(h.admin)
	user := "arn:aws:iam::" + account + ":user/compat"
	if _, err := id.CreateAccount(ctx, &controlv1.CreateAccountRequest{AccountId: account, Name: "compat"}); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	for _, arn := range []string{user, "arn:aws:iam::" + account + ":role/eks", "arn:aws:iam::" + account + ":role/pods"} {
		if _, err := id.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:*","iam:PassRole"],"Resource":"*"}]}`
	if _, err := id.PutPolicy(ctx, &controlv1.PutPolicyRequest{AccountId: account, Name: "compat", Document: policy}); err != nil {
		t.Fatalf("PutPolicy: %v", err)
	}
	if _, err := id.AttachPolicy(ctx, &controlv1.AttachPolicyRequest{PrincipalArn: user, PolicyName: "compat"}); err != nil {
		t.Fatalf("AttachPolicy: %v", err)
	}
	key, err := id.CreateAccessKey(ctx, &controlv1.CreateAccessKeyRequest{PrincipalArn: user})
	if err != nil {
		t.Fatalf("CreateAccessKey: %v", err)
	}
	w.creds = servertest.Creds{AccessKeyID: key.GetAccessKeyId(), SecretAccessKey: key.GetSecretAccessKey()}
	w.eks = eks.New(eks.Options{Region: "us-east-1", BaseEndpoint: aws.String(h.url()),
		Credentials: credentials.NewStaticCredentialsProvider(w.creds.AccessKeyID, w.creds.SecretAccessKey, "")})

	if _, err := w.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(w.cluster), RoleArn: aws.String("arn:aws:iam::" + account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
		// Access entries: the creator gets one, with cluster admin.
		AccessConfig:            &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap},
		KubernetesNetworkConfig: &types.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: aws.String(kubetest.ServiceClusterIPRange)},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	cc := controlv1.NewClusterControlServiceClient(h.admin)
	for _, m := range members {
		out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: w.ref(), InstanceId: m})
		if err != nil {
			t.Fatalf("AddMember %s: %v", m, err)
		}
		w.uid = out.GetCluster().GetUid()
	}
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: w.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: kc.Host(), PlatformVersion: "eks.1", CertificateAuthorityData: base64.StdEncoding.EncodeToString(kc.CACert())}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = w.k8s.CoreV1().Namespaces().Delete(ctx, w.ns, metav1.DeleteOptions{})
	})
	return w
}

func (w *world) ref() *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: w.account, Name: w.cluster}
}

func (w *world) delivery() controlv1.DeliveryControlServiceClient {
	return controlv1.NewDeliveryControlServiceClient(w.host.admin)
}

// ctx is a context for one step, cancelled when the test ends.
func (w *world) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	w.t.Cleanup(cancel)
	return ctx
}

func (w *world) deliveryStatus() *controlv1.GetDeliveryStatusResponse {
	w.t.Helper()
	st, err := w.delivery().GetDeliveryStatus(w.ctx(30*time.Second), &controlv1.GetDeliveryStatusRequest{Cluster: w.ref()})
	if err != nil {
		w.t.Fatalf("GetDeliveryStatus: %v", err)
	}
	return st
}

// agentProc is one agent process of the world's cluster.
type agentProc struct {
	*agentproc.Process
	webhookAddr string
}

// startAgent runs bins' agent for member instance, its webhooks on a port
// of their own. Flags of agentproc's that an older agent lacks are left
// out.
func (w *world) startAgent(instance string, bins compat.Binaries) *agentProc {
	w.t.Helper()
	flags, err := compat.Flags(w.ctx(30*time.Second), bins.Agent, "run")
	if err != nil {
		w.t.Fatal(err)
	}
	var without []string
	for _, f := range []string{"pod-identity-webhook-addr"} {
		if !flags[f] {
			without = append(without, f)
		}
	}
	port, err := loopport.Reserve("127.0.0.1")
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(port.Release)
	p, err := agentproc.Start(w.ctx(30*time.Second), agentproc.Options{
		Binary: bins.Agent, Dir: w.t.TempDir(), Issuer: w.host,
		Account: w.account, Cluster: w.cluster, UID: w.uid, Instance: instance, Endpoints: []string{w.host.grpcAddr()},
		Kubeconfig: w.kube.UserKubeconfig("agent:"+w.cluster+":"+instance, "system:masters"),
		Args:       []string{"--webhook-addr", port.Addr()}, Without: without,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		p.Stop()
		if w.t.Failed() {
			w.t.Logf("agent %s log (end):\n%s", instance, tail(p.LogPath, 12000))
		}
	})
	return &agentProc{Process: p, webhookAddr: port.Addr()}
}

// waitRole waits until the agent's status API shows role (an executor:
// with a grant it may write under).
func (a *agentProc) waitRole(t *testing.T, role string) {
	t.Helper()
	poll.Until(t, waitLong, "agent "+a.Instance+" "+role, func() (bool, string) {
		st, err := a.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return st.Role == role && (role != "EXECUTOR" || st.Writable), fmt.Sprintf("role %s writable %v", st.Role, st.Writable)
	})
}

func noopValues(message string) *string {
	return aws.String(`{"message": "` + message + `"}`)
}

func (w *world) createAddon(message string) {
	w.t.Helper()
	if _, err := w.eks.CreateAddon(w.ctx(30*time.Second), &eks.CreateAddonInput{
		ClusterName: aws.String(w.cluster), AddonName: aws.String(noop), AddonVersion: aws.String(noopVersion),
		ConfigurationValues: noopValues(message), NamespaceConfig: &types.AddonNamespaceConfigRequest{Namespace: aws.String(w.ns)},
	}); err != nil {
		w.t.Fatalf("CreateAddon: %v", err)
	}
}

func (w *world) updateAddon(message string) string {
	w.t.Helper()
	out, err := w.eks.UpdateAddon(w.ctx(30*time.Second), &eks.UpdateAddonInput{
		ClusterName: aws.String(w.cluster), AddonName: aws.String(noop), ConfigurationValues: noopValues(message),
	})
	if err != nil {
		w.t.Fatalf("UpdateAddon: %v", err)
	}
	return aws.ToString(out.Update.Id)
}

func (w *world) deleteAddon() {
	w.t.Helper()
	if _, err := w.eks.DeleteAddon(w.ctx(30*time.Second), &eks.DeleteAddonInput{ClusterName: aws.String(w.cluster), AddonName: aws.String(noop)}); err != nil {
		w.t.Fatalf("DeleteAddon: %v", err)
	}
	wt := eks.NewAddonDeletedWaiter(w.eks, func(o *eks.AddonDeletedWaiterOptions) { o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second })
	if err := wt.Wait(context.Background(), &eks.DescribeAddonInput{ClusterName: aws.String(w.cluster), AddonName: aws.String(noop)}, waitLong); err != nil {
		w.t.Fatalf("add-on not deleted: %v", err)
	}
}

func (w *world) waitActive() {
	w.t.Helper()
	wt := eks.NewAddonActiveWaiter(w.eks, func(o *eks.AddonActiveWaiterOptions) { o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second })
	if err := wt.Wait(context.Background(), &eks.DescribeAddonInput{ClusterName: aws.String(w.cluster), AddonName: aws.String(noop)}, waitLong); err != nil {
		out, _ := w.eks.DescribeAddon(w.ctx(10*time.Second), &eks.DescribeAddonInput{ClusterName: aws.String(w.cluster), AddonName: aws.String(noop)})
		var last *types.Addon
		if out != nil {
			last = out.Addon
		}
		w.t.Fatalf("add-on not ACTIVE: %v (last: %s)", err, jsonOf(last))
	}
}

func (w *world) waitUpdate(id string) {
	w.t.Helper()
	poll.Until(w.t, waitLong, "update "+id, func() (bool, string) {
		out, err := w.eks.DescribeUpdate(w.ctx(10*time.Second), &eks.DescribeUpdateInput{Name: aws.String(w.cluster), AddonName: aws.String(noop), UpdateId: aws.String(id)})
		if err != nil {
			return false, err.Error()
		}
		if s := out.Update.Status; s != types.UpdateStatusInProgress {
			if s != types.UpdateStatusSuccessful {
				w.t.Fatalf("update %s: %s %v", id, s, out.Update.Errors)
			}
			return true, ""
		}
		return false, string(out.Update.Status)
	})
}

// waitConfigMap waits until the add-on's ConfigMap holds message,
// written by the field manager eks.
func (w *world) waitConfigMap(message string) {
	w.t.Helper()
	poll.Until(w.t, waitLong, "ConfigMap message "+message, func() (bool, string) {
		cm, err := w.k8s.CoreV1().ConfigMaps(w.ns).Get(w.ctx(10*time.Second), noop, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		managers := []string{}
		for _, f := range cm.ManagedFields {
			managers = append(managers, f.Manager)
		}
		return cm.Data["message"] == message && slices.Contains(managers, "eks"),
			fmt.Sprintf("message %q, managers %v", cm.Data["message"], managers)
	})
}

func (w *world) waitConfigMapGone() {
	w.t.Helper()
	poll.Until(w.t, waitLong, "ConfigMap removed", func() (bool, string) {
		_, err := w.k8s.CoreV1().ConfigMaps(w.ns).Get(w.ctx(10*time.Second), noop, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
	})
}

// createPodIdentityAssociation makes an association of the cluster.
func (w *world) createPodIdentityAssociation() {
	w.t.Helper()
	if _, err := w.eks.CreatePodIdentityAssociation(w.ctx(30*time.Second), &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.cluster), Namespace: aws.String(w.ns), ServiceAccount: aws.String("compat"),
		RoleArn: aws.String("arn:aws:iam::" + account + ":role/pods"),
	}); err != nil {
		w.t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
}

// waitAllAcked waits until every session has acknowledged the cluster's
// current desired set.
func (w *world) waitAllAcked() {
	w.t.Helper()
	poll.Until(w.t, waitLong, "every agent acknowledges the desired set", func() (bool, string) {
		st := w.deliveryStatus()
		var behind []string
		for _, s := range st.GetSessions() {
			if s.GetAckedDigest() != st.GetDesiredDigest() {
				behind = append(behind, fmt.Sprintf("%s at %d %.12s", s.GetInstanceId(), s.GetAckedVersion(), s.GetAckedDigest()))
			}
		}
		return len(behind) == 0, fmt.Sprintf("desired %d %.12s; behind: %v", st.GetDesiredVersion(), st.GetDesiredDigest(), behind)
	})
}

// checkWebhooks posts reviews to an agent's webhooks as the apiserver
// does, with the client certificate of the kubeconfig the agent wrote.
func (w *world) checkWebhooks(a *agentProc) {
	w.t.Helper()
	post := func(file, body string) map[string]any {
		w.t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(a.StateDir, "webhook", file))
		if err != nil {
			w.t.Fatalf("agent %s: webhook kubeconfig: %v", a.Instance, err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			w.t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(w.ctx(30*time.Second), http.MethodPost, cfg.Host, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			w.t.Fatalf("agent %s: %s: %v", a.Instance, cfg.Host, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		var out struct {
			Status map[string]any `json:"status"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
			w.t.Fatalf("agent %s: %s: %s %s", a.Instance, cfg.Host, resp.Status, b)
		}
		return out.Status
	}
	tokenReview := func(token string) string {
		return fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":%q}}`, token)
	}
	token := servertest.Token(w.t, w.creds, w.cluster, servertest.TokenOptions{})
	st := post(webhook.AuthenticationKubeconfig, tokenReview(token))
	if st["authenticated"] != true {
		w.t.Fatalf("agent %s: the cluster creator's token: %v", a.Instance, st)
	}
	user, _ := st["user"].(map[string]any)
	name, _ := user["username"].(string)
	// The apiserver asks with what the token review said: user, uid,
	// groups and extra.
	spec, _ := json.Marshal(map[string]any{"user": name, "uid": user["uid"], "groups": user["groups"], "extra": user["extra"],
		"resourceAttributes": map[string]any{"verb": "list", "resource": "pods", "namespace": w.ns}})
	sar := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":` + string(spec) + `}`
	if st := post(webhook.AuthorizationKubeconfig, sar); st["allowed"] != true {
		w.t.Errorf("agent %s: the creator %s may not list pods: %v", a.Instance, name, st)
	}
	stranger := servertest.Token(w.t, servertest.Creds{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, w.cluster, servertest.TokenOptions{})
	if st := post(webhook.AuthenticationKubeconfig, tokenReview(stranger)); st["authenticated"] == true {
		w.t.Errorf("agent %s: a stranger's token authenticated: %v", a.Instance, st)
	}
}

// jsonOf is v as JSON, for messages.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
