// Package ops checks docs/examples against the real programs: the etcd
// unit's flags start a three-member TLS etcd, the saltbush unit's flags
// start the real `saltbush serve` binary on it, a real saltbush-agent and a
// protocol-level agent connect, and every series the Prometheus alert
// rules name is exported by the process its rule group scrapes. It also
// holds docs/operations.md's metric list to what the server registers.
// (scripts/verify-examples.sh checks the units with systemd-analyze and
// the rules with promtool.)
package ops

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"sigs.k8s.io/yaml"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/etcdtls"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/saltbushbin"
	"github.com/saltbush/saltbush/tlsclient"
)

// repoRoot is the repository's root (this file is in tests/ops).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// unit is the part of a systemd unit the test runs: ExecStart's words
// (continuation lines joined; the example units quote nothing) and the
// LoadCredential= IDs with the paths they read.
type unit struct {
	exec        []string
	credentials map[string]string
}

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file of the repository
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	u := unit{credentials: map[string]string{}}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			if strings.ContainsAny(v, `"'`) {
				t.Fatalf("%s: ExecStart quotes words; this test splits on spaces", path)
			}
			u.exec = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "LoadCredential="); ok {
			id, p, ok := strings.Cut(v, ":")
			if !ok {
				t.Fatalf("%s: LoadCredential=%s has no path", path, v)
			}
			u.credentials[id] = p
		}
	}
	if len(u.exec) == 0 {
		t.Fatalf("%s: no ExecStart", path)
	}
	return u
}

// substitute replaces what the unit says about a host (names, ports,
// directories, specifiers) with this machine's, in the given order, and
// fails on anything host-specific left over, so every word of the unit is
// accounted for.
func substitute(t *testing.T, words []string, pairs ...string) []string {
	t.Helper()
	r := strings.NewReplacer(pairs...)
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = r.Replace(w)
		if strings.ContainsAny(out[i], "%") || strings.Contains(out[i], ".example") ||
			strings.HasPrefix(out[i], "/var/") || strings.HasPrefix(out[i], "/etc/") || strings.Contains(out[i], "0.0.0.0") {
			t.Fatalf("unit word %q: %q is left after substitution", w, out[i])
		}
	}
	return out
}

// TestExamples: see the package comment.
func TestExamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := repoRoot(t)
	dir := t.TempDir()
	ca := etcdtls.NewCA(t, filepath.Join(dir, "ca"))

	// etcd from docs/examples/etcd.service, three members on loopback.
	etcdUnit := readUnit(t, filepath.Join(root, "docs/examples/etcd.service"))
	if etcdUnit.exec[0] != "/usr/local/bin/etcd" {
		t.Fatalf("etcd unit runs %s", etcdUnit.exec[0])
	}
	const members = 3
	var cp, pp, mp [members]string
	for i := range members {
		for _, p := range []*string{&cp[i], &pp[i], &mp[i]} {
			*p = loopport.Addr(t)
		}
	}
	type started struct {
		etcd *embed.Etcd
		err  error
	}
	ready := make(chan started, members)
	var cfgs []*embed.Config
	for i := range members {
		name := fmt.Sprintf("etcd-%d", i)
		creds := filepath.Join(dir, name+"-credentials")
		files := map[string]string{}
		serverCrt, serverKey := ca.Issue(t, name+"-server", x509.ExtKeyUsageServerAuth)
		peerCrt, peerKey := ca.Issue(t, name+"-peer", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
		for id, src := range etcdUnit.credentials {
			switch src {
			case "/etc/etcd/pki/ca.crt":
				files[id] = ca.File
			case "/etc/etcd/pki/server.crt":
				files[id] = serverCrt
			case "/etc/etcd/pki/server.key":
				files[id] = serverKey
			case "/etc/etcd/pki/peer.crt":
				files[id] = peerCrt
			case "/etc/etcd/pki/peer.key":
				files[id] = peerKey
			default:
				t.Fatalf("etcd unit loads credential %s from %s: not in the layout docs/operations.md describes", id, src)
			}
		}
		credentialDir(t, creds, files)
		pairs := []string{
			"https://%l.saltbush.example:2379", "https://" + cp[i],
			"https://%l.saltbush.example:2380", "https://" + pp[i],
			"https://0.0.0.0:2379", "https://" + cp[i],
			"https://0.0.0.0:2380", "https://" + pp[i],
			"http://0.0.0.0:2381", "http://" + mp[i],
			"/var/lib/etcd", filepath.Join(dir, name),
			"%d/", creds + "/",
		}
		for k := range members {
			pairs = append(pairs, fmt.Sprintf("https://etcd-%d.saltbush.example:2380", k), "https://"+pp[k])
		}
		pairs = append(pairs, "%l", name)
		cfgs = append(cfgs, etcdConfig(t, substitute(t, etcdUnit.exec[1:], pairs...)))
	}
	// Members wait for a quorum: start them at once, once every config is
	// parsed (embed.Config.AddFlags writes a package variable of etcd's
	// that a starting member reads).
	for i, cfg := range cfgs {
		name := fmt.Sprintf("etcd-%d", i)
		go func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				ready <- started{err: fmt.Errorf("start %s from the unit's flags: %w", name, err)}
				return
			}
			select {
			case <-e.Server.ReadyNotify():
			case err = <-e.Err():
			case <-ctx.Done():
				err = ctx.Err()
			}
			ready <- started{etcd: e, err: err}
		}()
	}
	for range members {
		r := <-ready
		if r.etcd != nil {
			t.Cleanup(r.etcd.Close)
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
	}

	// saltbush from docs/examples/saltbush.service, on that etcd.
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	saltbush := saltbushbin.Path(t)
	sbUnit := readUnit(t, filepath.Join(root, "docs/examples/saltbush.service"))
	if sbUnit.exec[0] != "/usr/local/bin/saltbush" || sbUnit.exec[1] != "serve" {
		t.Fatalf("saltbush unit runs %v", sbUnit.exec[:2])
	}
	clientCrt, clientKey := ca.Issue(t, "saltbush-client", x509.ExtKeyUsageClientAuth)
	masterKey := filepath.Join(dir, "master.key")
	sum := sha256.Sum256([]byte("tests/ops master key"))
	if err := os.WriteFile(masterKey, []byte(base64.StdEncoding.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sbCreds := filepath.Join(dir, "saltbush-credentials")
	files := map[string]string{}
	for id, src := range sbUnit.credentials {
		switch src {
		case "/etc/saltbush/master.key":
			files[id] = masterKey
		case "/etc/saltbush/etcd/ca.crt":
			files[id] = ca.File
		case "/etc/saltbush/etcd/client.crt":
			files[id] = clientCrt
		case "/etc/saltbush/etcd/client.key":
			files[id] = clientKey
		default:
			t.Fatalf("saltbush unit loads credential %s from %s: not in the layout docs/operations.md describes", id, src)
		}
	}
	credentialDir(t, sbCreds, files)
	dataDir := filepath.Join(dir, "saltbush-data")
	var endpoints []string
	for i := range members {
		endpoints = append(endpoints, fmt.Sprintf("https://etcd-%d.saltbush.example:2379", i))
	}
	var local []string
	for i := range members {
		local = append(local, "https://"+cp[i])
	}
	args := substitute(t, sbUnit.exec[1:],
		strings.Join(endpoints, ","), strings.Join(local, ","),
		"0.0.0.0:8080", "127.0.0.1:0",
		"0.0.0.0:9090", "127.0.0.1:0",
		"/var/lib/saltbush", dataDir,
		"/var/log/saltbush", filepath.Join(dir, "log"),
		"%d/", sbCreds+"/",
		"%H", "replica-1",
		"saltbush.saltbush.example", "saltbush.test",
	)
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o700); err != nil {
		t.Fatal(err)
	}
	srv := startProcess(t, saltbush, args, `"msg":"saltbush serving"`)
	var serving struct{ HTTP, GRPC string }
	if err := json.Unmarshal([]byte(srv.line), &serving); err != nil {
		t.Fatalf("serving line %q: %v", srv.line, err)
	}
	admin := func(args ...string) []byte {
		t.Helper()
		full := append([]string{"admin", "--grpc-addr", serving.GRPC, "--tls-dir", filepath.Join(dataDir, "pki")}, args...)
		out, err := exec.CommandContext(ctx, saltbush, full...).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("saltbush %v: %v\n%s", full, err, stderr)
		}
		return out
	}

	// Traffic, so that every labelled family has a series.
	awsCfg, err := config.LoadDefaultConfig(ctx,
		config.WithSharedConfigFiles([]string{filepath.Join(dataDir, "aws", "config")}),
		config.WithSharedCredentialsFiles([]string{filepath.Join(dataDir, "aws", "credentials")}),
		config.WithSharedConfigProfile("saltbush"))
	if err != nil {
		t.Fatalf("the development profile the first start wrote: %v", err)
	}
	api := eks.NewFromConfig(awsCfg, func(o *eks.Options) { o.BaseEndpoint = aws.String("http://" + serving.HTTP) })
	if _, err := api.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("ops"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}}}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if _, err := api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("missing")}); err == nil {
		t.Fatal("DescribeCluster of a missing cluster succeeded")
	}
	admin("cluster", "set-status", "ops", "ACTIVE", "--endpoint", "https://10.0.0.1:6443", "--ca-file", filepath.Join(dataDir, "pki", "ca.crt"))
	var member struct {
		Cluster struct{ UID string } `json:"cluster"`
	}
	for _, inst := range []string{"i-1", "i-2"} {
		if err := json.Unmarshal(admin("cluster", "add-member", "ops", inst), &member); err != nil || member.Cluster.UID == "" {
			t.Fatalf("add-member %s: %v (uid %q)", inst, err, member.Cluster.UID)
		}
	}
	uid := member.Cluster.UID
	certs := filepath.Join(dir, "agent-pki")
	admin("cert", "issue", "--agent", uid+"/i-1", "--out-dir", certs)
	admin("cert", "issue", "--agent", uid+"/i-2", "--out-dir", certs)

	// A protocol-level executor (i-1): it acknowledges, reports READY, and
	// sends one report for an add-on that does not exist, and one review.
	tlsCfg, err := tlsclient.Load(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "agent-i-1.crt"), filepath.Join(certs, "agent-i-1.key"), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(serving.GRPC, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	cluster := &deliveryv1.ClusterName{AccountId: "000000000000", Name: "ops"}
	stream, err := fakeagent.Connect(ctx, conn, fakeagent.Options{Hello: &deliveryv1.Hello{Cluster: cluster, InstanceId: "i-1", BootId: "b", AgentVersion: "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	session := fakeagent.NewSession("i-1", &fakeagent.Applied{}, fakeagent.SessionOptions{})
	results := make(chan *deliveryv1.ReportResult, 16)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			taken, _ := session.Take(m)
			if r := m.GetReportResult(); r != nil {
				results <- r
			}
			for _, r := range taken.Replies {
				_ = stream.Send(r)
			}
			for _, r := range session.Due() {
				_ = stream.Send(session.Track(r, true))
			}
		}
	}()
	if _, err := api.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String("ops"), AddonName: aws.String("saltbush-noop"),
		ConfigurationValues: aws.String(`{"message": "ops"}`)}); err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	waitResult(t, results, func(r *deliveryv1.ReportResult) bool { return r.GetAccepted() }, "an accepted READY report")
	epoch := session.Epoch()
	if err := stream.Send(session.Track(&deliveryv1.Report{Epoch: epoch, Addon: "coredns", AddonUid: "no-such-uid", Generation: 1,
		Phase: deliveryv1.Phase_PHASE_READY}, false)); err != nil {
		t.Fatal(err)
	}
	waitResult(t, results, func(r *deliveryv1.ReportResult) bool { return !r.GetAccepted() }, "a rejected report")
	if _, err := deliveryv1.NewAccessReviewServiceClient(conn).ReviewToken(ctx, &deliveryv1.ReviewTokenRequest{Cluster: cluster,
		Token: "k8s-aws-v1.not-a-token"}); err != nil {
		t.Fatalf("ReviewToken: %v", err)
	}

	// The real agent (i-2, a standby) with the unit's status port: its
	// metrics need no apiserver (the kubeconfig names none that answers).
	agentBin, err := agentproc.Build(bin, false)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: none}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ag := startProcess(t, agentBin, []string{"run", "--config", filepath.Join(dir, "agent.yaml"),
		"--account-id", "000000000000", "--cluster-name", "ops", "--cluster-uid", uid, "--instance-id", "i-2",
		"--endpoint", serving.GRPC, "--cert", filepath.Join(certs, "agent-i-2.crt"), "--key", filepath.Join(certs, "agent-i-2.key"),
		"--ca", filepath.Join(certs, "ca.crt"), "--kubeconfig", kubeconfig, "--state-dir", filepath.Join(dir, "agent-state"),
		"--status-addr", "127.0.0.1:0", "--webhook-addr", "", "--log-json"}, `"msg":"status and metrics"`)
	var status struct{ Addr string }
	if err := json.Unmarshal([]byte(ag.line), &status); err != nil {
		t.Fatalf("agent status line %q: %v", ag.line, err)
	}

	// What each rule group scrapes.
	server := waitSeries(t, "http://"+serving.HTTP+"/metrics", "saltbush_delivery_executor_in_sync", "saltbush_delivery_sessions")
	var etcdSeries map[string]bool
	for i := range members {
		etcdSeries = scrape(t, "http://"+mp[i]+"/metrics")
	}
	agentSeries := waitSeries(t, "http://"+status.Addr+"/metrics", "saltbush_agent_connected")

	rules := readRules(t, filepath.Join(root, "docs/examples/prometheus-alerts.yaml"))
	exported := map[string]map[string]bool{"saltbush": server, "etcd": etcdSeries, "saltbush-agent": agentSeries}
	checked := 0
	for _, g := range rules.Groups {
		have, ok := exported[g.Name]
		if !ok {
			t.Errorf("rule group %s: no process it scrapes", g.Name)
			continue
		}
		for _, r := range g.Rules {
			names := seriesNames(r.Expr)
			if len(names) == 0 {
				t.Errorf("alert %s: no series in %q", r.Alert, r.Expr)
			}
			for _, n := range names {
				checked++
				if n == "up" {
					continue // Prometheus's own, per scraped target
				}
				if !have[n] {
					t.Errorf("alert %s (group %s) uses %s, which the %s process does not export", r.Alert, g.Name, n, g.Name)
				}
			}
			if !strings.Contains(r.Expr, `job="`+g.Name+`"`) {
				t.Errorf("alert %s: its series are not selected by job=%q", r.Alert, g.Name)
			}
		}
	}
	t.Logf("%d series references in %d groups checked", checked, len(rules.Groups))

	// docs/operations.md names every saltbush family the server and the
	// agent export, and names none they do not.
	doc, err := os.ReadFile(filepath.Join(root, "docs/operations.md")) //nolint:gosec // G304: a file of the repository
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bsaltbush_[a-z0-9_]+`).FindAllString(string(doc), -1) {
		documented[m] = true
	}
	families := map[string]bool{}
	for _, set := range []map[string]bool{server, agentSeries} {
		for n := range set {
			if strings.HasPrefix(n, "saltbush_") {
				families[family(n, set)] = true
			}
		}
	}
	for f := range families {
		if !documented[f] {
			t.Errorf("docs/operations.md does not name %s, which a running saltbush or agent exports", f)
		}
	}
	// The agent's labelled families (applies, reports, webhook reviews)
	// have series only once it applied, reported or was asked by an
	// apiserver, which this test's standby has none to do: the server's
	// side only.
	for d := range documented {
		if !strings.HasPrefix(d, "saltbush_agent_") && !families[d] {
			t.Errorf("docs/operations.md names %s, which a running saltbush does not export", d)
		}
	}
}

// family is the metric family a series name belongs to (a histogram's
// _bucket, _sum and _count are its own).
func family(name string, set map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && set[base+"_bucket"] {
			return base
		}
	}
	return name
}

// seriesNames are the metric names a PromQL expression selects: the
// identifiers of saltbush's, etcd's and the Go client's families (labels,
// functions and keywords have other names), and `up`.
func seriesNames(expr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\b(?:(?:saltbush|etcd|process|go)_[a-z0-9_]+|up)\b`).FindAllString(expr, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file of the repository
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", path)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: rule %+v lacks an alert name, expression, severity or summary", path, r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: alert %s: for %q: %v", path, r.Alert, r.For, err)
				}
			}
		}
	}
	return f
}

// etcdConfig parses etcd's command line as etcd does (etcdmain's flag set
// is embed.Config's flags plus --initial-cluster-state), so a misspelt or
// removed flag fails here.
func etcdConfig(t *testing.T, args []string) *embed.Config {
	t.Helper()
	cfg := embed.NewConfig()
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	state := fs.String("initial-cluster-state", embed.ClusterStateFlagNew, "")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("etcd unit flags: %v", err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("etcd unit: %q is not a flag", fs.Arg(0))
	}
	for name, dst := range map[string]*[]url.URL{
		"listen-peer-urls": &cfg.ListenPeerUrls, "initial-advertise-peer-urls": &cfg.AdvertisePeerUrls,
		"listen-client-urls": &cfg.ListenClientUrls, "advertise-client-urls": &cfg.AdvertiseClientUrls,
		"listen-metrics-urls": &cfg.ListenMetricsUrls,
	} {
		*dst = nil
		for _, s := range strings.Split(fs.Lookup(name).Value.String(), ",") {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatalf("etcd unit --%s %q: %v", name, s, err)
			}
			*dst = append(*dst, *u)
		}
	}
	cfg.ClusterState = *state
	// The test's own: no fsync on a shared machine, no logs.
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if err := cfg.Validate(); err != nil {
		t.Fatalf("etcd unit flags: %v", err)
	}
	return cfg
}

// credentialDir lays files out as systemd's LoadCredential= does: a
// directory of ID -> contents.
func credentialDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for id, src := range files {
		b, err := os.ReadFile(src) //nolint:gosec // G304: the test's own files
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

type process struct {
	cmd  *exec.Cmd
	line string // the log line start waited for
}

// startProcess runs bin and waits for a stderr line containing marker.
func startProcess(t *testing.T, bin string, args []string, marker string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...)} //nolint:gosec // G204: the binaries this test built
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-exited //nolint:errcheck // the exit of a process just killed
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if os.Getenv("SALTBUSH_TEST_LOG") != "" {
				fmt.Fprintln(os.Stderr, sc.Text())
			}
			if strings.Contains(sc.Text(), marker) {
				select {
				case found <- sc.Text():
				default:
				}
			}
		}
	}()
	select {
	case p.line = <-found:
	case err := <-exited:
		t.Fatalf("%s exited before logging %s: %v", filepath.Base(bin), marker, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not log %s within 60s", filepath.Base(bin), marker)
	}
	return p
}

func waitResult(t *testing.T, ch <-chan *deliveryv1.ReportResult, match func(*deliveryv1.ReportResult) bool, what string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			if match(r) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s within 20s", what)
		}
	}
}

// scrape returns the series names of a Prometheus text exposition.
func scrape(t *testing.T, u string) map[string]bool {
	t.Helper()
	resp, err := http.Get(u) //nolint:gosec,noctx // G107: a loopback address this test started
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	out := map[string]bool{}
	for line := range strings.Lines(string(body)) {
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[strings.TrimSpace(name)] = true
	}
	return out
}

// waitSeries scrapes u until it exports every one of names (series that
// follow an event, such as an executor's acknowledgement).
func waitSeries(t *testing.T, u string, names ...string) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := scrape(t, u)
		missing := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return got[n] })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not export %v after 20s", u, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
