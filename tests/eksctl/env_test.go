package eksctl_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"k8s.io/client-go/kubernetes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/kubetest"
)

// The cluster's provisioned network, as a provisioner reports it.
const (
	vpcID           = "vpc-0e1c2a3b4d5f60718"
	securityGroupID = "sg-0e1c2a3b4d5f60718"
	instanceID      = "i-0e1c2a3b4d5f60718"
)

// commandTimeout bounds one eksctl command; waitTimeout is what --wait
// commands are given (eksctl's own --timeout), below it.
//
// deleteTimeout bounds the wait for the deleted add-on (argocd, with CRDs)
// to be gone: on a saturated machine the kube-apiserver's CRD finalizer can
// find a new CRD's watch cache still initializing and back off
// exponentially, so the CRDs go minutes later (tests/agent waits as long).
const (
	commandTimeout = 5 * time.Minute
	waitTimeout    = 4 * time.Minute
	deleteTimeout  = 8 * time.Minute
)

// env is the test's world: saltbush, one ACTIVE cluster on the shared
// Kubernetes control plane, its agent, and eksctl's environment.
type env struct {
	t       *testing.T
	srv     *servertest.Server
	eks     *eks.Client
	kube    *kubetest.Cluster
	k8s     kubernetes.Interface
	account string
	cluster string
	uid     string
	agent   *agentproc.Process

	home     string
	environ  []string
	tripwire *tripwire
}

// newEnv starts saltbush, creates a cluster of the given Kubernetes
// version through the SDK, makes it ACTIVE through the provisioner's
// control API with the shared apiserver's endpoint, CA and token issuer,
// and starts its agent.
func newEnv(t *testing.T, cluster, version string) *env {
	t.Helper()
	kc := kubetest.Shared(t)
	srv := servertest.Start(t)
	e := &env{t: t, srv: srv, eks: srv.EKS(t), kube: kc, account: srv.Config.DevAccount, cluster: cluster}
	e.k8s = kubernetes.NewForConfigOrDie(kc.Admin())
	ctx := e.ctx(time.Minute)
	if _, err := e.eks.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(cluster), Version: aws.String(version),
		RoleArn:            aws.String("arn:aws:iam::" + e.account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-0a1b2c3d4e5f60718", "subnet-0b1c2d3e4f5a60718"}},
		// eksctl's access-entry commands refuse a CONFIG_MAP cluster.
		AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	conn := srv.GRPC(t)
	cc := controlv1.NewClusterControlServiceClient(conn)
	ref := &controlv1.ClusterRef{AccountId: e.account, Name: cluster}
	out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: instanceID})
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	e.uid = out.GetCluster().GetUid()
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: kc.Host(), CertificateAuthorityData: base64.StdEncoding.EncodeToString(kc.CACert()),
		PlatformVersion: "eks.1", OidcIssuer: kubetest.ServiceAccountIssuer,
		VpcId: vpcID, ClusterSecurityGroupId: securityGroupID,
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	agentDir := t.TempDir()
	e.agent, err = agentproc.Start(ctx, agentproc.Options{
		Binary: agentBinary, Dir: agentDir, Server: srv,
		Account: e.account, Cluster: cluster, UID: e.uid, Instance: instanceID, Endpoints: []string{srv.GRPCAddr()},
		Kubeconfig: kc.UserKubeconfig("agent:"+cluster+":"+instanceID, "system:masters"),
	})
	if err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	t.Cleanup(func() {
		e.agent.Stop()
		if t.Failed() {
			b := e.agent.Log()
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("agent log (end):\n%s", b)
		}
	})
	e.setupEksctl()
	return e
}

// ctx is a context for one step, cancelled when the test ends.
func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// setupEksctl makes eksctl's environment: every AWS service at the
// façade (AWS_ENDPOINT_URL), the development administrator's key, the
// server's region, a fresh HOME and KUBECONFIG, no shared AWS files, no
// instance metadata, and a proxy that refuses and records any HTTP
// request for a host outside loopback (Go's clients never proxy loopback),
// so a call that would have left the machine fails the test.
func (e *env) setupEksctl() {
	e.home = e.t.TempDir()
	e.tripwire = startTripwire(e.t)
	empty := filepath.Join(e.home, "bin") // PATH: eksctl runs no other program here
	if err := os.Mkdir(empty, 0o700); err != nil {
		e.t.Fatal(err)
	}
	keys := e.srv.Dev(e.t)
	e.environ = []string{
		"HOME=" + e.home,
		"PATH=" + empty,
		"KUBECONFIG=" + filepath.Join(e.home, "kubeconfig"),
		"AWS_ENDPOINT_URL=" + e.srv.URL,
		"AWS_ACCESS_KEY_ID=" + keys.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + keys.SecretAccessKey,
		"AWS_REGION=" + e.srv.Config.Cluster.Region,
		"AWS_CONFIG_FILE=" + filepath.Join(e.home, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(e.home, "aws-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
		"HTTPS_PROXY=" + e.tripwire.url,
		"HTTP_PROXY=" + e.tripwire.url,
		"NO_PROXY=",
	}
	e.t.Cleanup(func() {
		if hosts := e.tripwire.hosts(); len(hosts) > 0 {
			e.t.Errorf("eksctl tried to leave loopback: requests for %s were refused", strings.Join(hosts, ", "))
		}
	})
}

// result is one eksctl run.
type result struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("eksctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.err, r.stdout, r.stderr)
}

// output is what eksctl printed on both streams (its log goes to one or
// the other, depending on the command and --output).
func (r result) output() string { return r.stdout + "\n" + r.stderr }

// run runs eksctl with args and returns what it did, whatever its status.
func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, eksctlBinary, args...)
	cmd.Env, cmd.Dir = e.environ, e.home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
	e.t.Logf("eksctl %s (exit %v)\n%s", strings.Join(args, " "), err, indent(clip(r.output())))
	return r
}

// ok runs eksctl and fails the test unless it exits 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.err != nil {
		e.t.Fatalf("%s", r)
	}
	return r
}

// okJSON runs eksctl (with -o json) and decodes its standard output.
func (e *env) okJSON(v any, args ...string) result {
	e.t.Helper()
	r := e.ok(append(args, "--output", "json")...)
	if err := decodeJSON(r.stdout, v); err != nil {
		e.t.Fatalf("decode the JSON of %s: %v", r, err)
	}
	return r
}

// decodeJSON decodes the JSON document that starts at the first line of
// out opening with { or [ (eksctl may log lines before it).
func decodeJSON(out string, v any) error {
	for i, line := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(line, "{") || strings.HasPrefix(line, "[") {
			rest := strings.Join(strings.SplitAfter(out, "\n")[i:], "")
			return json.Unmarshal([]byte(rest), v)
		}
	}
	return fmt.Errorf("no JSON document in %q", out)
}

// clip keeps the start of a long output (describe-addon-versions prints
// the whole catalogue) for the test's log.
func clip(s string) string {
	const limit = 4096
	if len(s) <= limit {
		return s
	}
	return s[:limit] + fmt.Sprintf("\n… (%d more bytes)", len(s)-limit)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// tripwire is an HTTP proxy that refuses every request (a CONNECT for
// https, a plain request for http) and records the host asked for.
type tripwire struct {
	url string
	mu  sync.Mutex
	got map[string]bool
}

func startTripwire(t *testing.T) *tripwire {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tw := &tripwire{url: "http://" + ln.Addr().String(), got: map[string]bool{}}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw.mu.Lock()
		tw.got[r.Host] = true
		tw.mu.Unlock()
		http.Error(w, "tests/eksctl: nothing leaves loopback", http.StatusForbidden)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tw
}

// hosts are the hosts asked for, sorted.
func (tw *tripwire) hosts() []string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	var out []string
	for h := range tw.got {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
