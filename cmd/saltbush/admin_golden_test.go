package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/fakeagent"
)

// TestMain registers -update: `go test ./cmd/saltbush -run Golden -update`
// rewrites testdata/golden from what the commands print now. The flag lives
// in the flag package's set, read back by updating, so that no variable of
// this package holds it.
func TestMain(m *testing.M) {
	flag.Bool("update", false, "rewrite testdata/golden with the output of this run")
	flag.Parse()
	os.Exit(m.Run())
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// goldenEnv is one real saltbush and the admin CLI run against it in
// process, with what varies from run to run (uids, times, revisions,
// serials, digests, directories) replaced by placeholders before outputs
// are compared with testdata/golden.
type goldenEnv struct {
	srv    *servertest.Server
	tlsDir string
	// conn is the test's own control connection, made before any CA
	// rotation: it stays up when the server's certificate changes.
	conn *grpc.ClientConn
	// known are exact values and their placeholders.
	known map[string]string
	re    normalizer
}

// normalizer holds the patterns of what varies per run besides the known
// values.
type normalizer struct {
	rfc3339, tableTime, pem, serial, uuid, caName, accessKey, secret, count, cellGap, token *regexp.Regexp
}

func newNormalizer() normalizer {
	return normalizer{
		rfc3339:   regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z`),
		tableTime: regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC`),
		pem:       regexp.MustCompile(`(?s)-----BEGIN ([A-Z ]+)-----.*?-----END [A-Z ]+-----`),
		// Certificate serials: lower-case hex, longer than a short digest
		// (12) and shorter than a whole one (64).
		serial: regexp.MustCompile(`\b[0-9a-f]{20,40}\b`),
		// The uids of add-ons, which a command makes (ensure) before the
		// test could know them; the cluster's are known.
		uuid:      regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`),
		caName:    regexp.MustCompile(`saltbush CA [0-9a-f]+`),
		accessKey: regexp.MustCompile(`\bAKIA[A-Z0-9]{16}\b`),
		secret:    regexp.MustCompile(`(?m)("secretAccessKey": "|secretAccessKey: |Secret access key:\s+)[A-Za-z0-9/+=]+`),
		count:     regexp.MustCompile(`(?m)("?(?:deletedKeys|notAfterEpochSeconds|sessionsRevokedBeforeEpochSeconds)"?:\s*|Deleted keys:\s+)[1-9]\d*`),
		cellGap:   regexp.MustCompile(` {2,}`),
		// A number stands alone between blanks and commas: revision 37
		// is a token in "ackedVersion": 37, not in 1.37 or v1.37.2.
		token: regexp.MustCompile(`[^\s,]+`),
	}
}

func newGoldenEnv(t *testing.T) *goldenEnv {
	t.Helper()
	srv := servertest.Start(t)
	// `cert rotate-ca` writes the new bundle to TLS_DIR/ca.crt: the CLI
	// gets a copy, so that the server's own files stay as servertest wrote
	// them.
	tlsDir := t.TempDir()
	for _, f := range []string{"ca.crt", "admin.crt", "admin.key"} {
		b, err := os.ReadFile(filepath.Join(srv.Config.TLSDir(), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tlsDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g := &goldenEnv{srv: srv, tlsDir: tlsDir, conn: srv.GRPC(t), known: map[string]string{}, re: newNormalizer()}
	g.know(srv.GRPCAddr(), "<grpc-addr>")
	g.know(tlsDir, "<tls-dir>")
	return g
}

// know makes value print as placeholder in the compared output.
func (g *goldenEnv) know(value, placeholder string) {
	if value != "" {
		g.known[value] = placeholder
	}
}

// admin runs `saltbush admin ARGS...` in process as main does (run), and
// returns its stdout, stderr and exit code.
func (g *goldenEnv) admin(ctx context.Context, args ...string) (string, string, int) {
	full := append([]string{"admin", "--grpc-addr", g.srv.GRPCAddr(), "--tls-dir", g.tlsDir,
		// A deadline for a machine whose CPUs another process saturates.
		"--timeout", "30s"}, args...)
	var stdout, stderr bytes.Buffer
	code := run(ctx, full, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// golden runs a command that must succeed in form and compares what it
// printed, normalized, with testdata/golden/NAME.FORM.
func (g *goldenEnv) golden(t *testing.T, ctx context.Context, form, name string, args ...string) string {
	t.Helper()
	stdout, stderr, code := g.admin(ctx, append([]string{"-o", form}, args...)...)
	if code != exitOK {
		t.Fatalf("saltbush admin %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), code, stderr, stdout)
	}
	if stderr != "" {
		t.Errorf("saltbush admin %s wrote to stderr: %s", strings.Join(args, " "), stderr)
	}
	g.compare(t, filepath.Join("testdata", "golden", name+"."+form), g.normalize(form, stdout))
	return stdout
}

func (g *goldenEnv) compare(t *testing.T, path, got string) {
	t.Helper()
	if updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path) //nolint:gosec // G304: the test's own golden file
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// normalize replaces what varies per run with placeholders, and re-aligns
// tables, whose columns move with the width of what was replaced.
func (g *goldenEnv) normalize(form, out string) string {
	out = g.re.pem.ReplaceAllString(out, "<pem $1>")
	out = g.re.rfc3339.ReplaceAllString(out, "<time>")
	out = g.re.tableTime.ReplaceAllString(out, "<time>")
	out = g.re.accessKey.ReplaceAllString(out, "<access-key-id>")
	out = g.re.secret.ReplaceAllString(out, "${1}<secret>")
	out = g.re.count.ReplaceAllString(out, "${1}<n>")
	// Longest first: a value that contains another is replaced whole.
	values := make([]string, 0, len(g.known))
	for v := range g.known {
		values = append(values, v)
	}
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	for _, v := range values {
		if !isNumber(v) {
			out = wordRegexp(v).ReplaceAllLiteralString(out, g.known[v])
		}
	}
	out = g.re.token.ReplaceAllStringFunc(out, func(tok string) string {
		if p, ok := g.known[tok]; ok && isNumber(tok) {
			return p
		}
		return tok
	})
	out = g.re.serial.ReplaceAllString(out, "<serial>")
	out = g.re.uuid.ReplaceAllString(out, "<uuid>")
	out = g.re.caName.ReplaceAllString(out, "saltbush CA <id>")
	if form == formatTable {
		out = realign(g.re.cellGap, out)
	}
	return out
}

// isNumber reports whether v is all decimal digits (a revision).
func isNumber(v string) bool {
	return strings.Trim(v, "0123456789") == ""
}

// wordRegexp matches v where it is a whole word at each end that is a word
// character: revision 57 is not replaced inside 1057.
func wordRegexp(v string) *regexp.Regexp {
	isWord := func(b byte) bool {
		return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
	}
	expr := regexp.QuoteMeta(v)
	if isWord(v[0]) {
		expr = `\b` + expr
	}
	if isWord(v[len(v)-1]) {
		expr += `\b`
	}
	return regexp.MustCompile(expr)
}

// realign lays out each block of a table again, its cells split where
// writeTables put two or more spaces.
func realign(cellGap *regexp.Regexp, out string) string {
	var b strings.Builder
	for i, block := range strings.Split(out, "\n\n") {
		if i > 0 {
			b.WriteString("\n\n")
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		lines := strings.Split(block, "\n")
		for j, line := range lines {
			_, _ = fmt.Fprint(tw, strings.Join(cellGap.Split(strings.TrimRight(line, " "), -1), "\t"))
			if j < len(lines)-1 {
				_, _ = fmt.Fprintln(tw)
			}
		}
		_ = tw.Flush()
	}
	return b.String()
}

// ok runs a command that must succeed, for its effect.
func (g *goldenEnv) ok(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	if _, stderr, code := g.admin(ctx, args...); code != exitOK {
		t.Fatalf("saltbush admin %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
}

// printedSerial is the serial a `cert issue` printed, in any form.
func printedSerial(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)(?:"serial": "|^serial: |^Serial:\s+)([0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no serial in:\n%s", out)
	}
	return m[1]
}

// waitCAView waits until the server's in-memory view of its CAs (what its
// TLS certificate is signed by) is what etcd holds: a CLI call right after
// a rotation could otherwise meet the old issuer's certificate, which the
// bundle the CLI saved may no longer trust.
func (g *goldenEnv) waitCAView(t *testing.T, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		want, serial, err := g.srv.Authority().BundleFromStore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, gotSerial := g.srv.Authority().Bundle()
		if gotSerial == serial && bytes.Equal(got, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server's CA view did not reach issuing CA %s within a minute", serial)
		case <-tick.C:
		}
	}
}

// deliveryStatus asks the server (not the CLI) for a cluster's delivery.
func (g *goldenEnv) deliveryStatus(t *testing.T, ctx context.Context, cluster string) *controlv1.GetDeliveryStatusResponse {
	t.Helper()
	st, err := controlv1.NewDeliveryControlServiceClient(g.conn).GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: g.srv.Config.DevAccount, Name: cluster}})
	if err != nil {
		t.Fatalf("GetDeliveryStatus %s: %v", cluster, err)
	}
	return st
}

// waitDelivery polls the cluster's delivery until ok holds, within a
// deadline; a poll is how a test waits for a state of etcd it does not
// watch itself.
func (g *goldenEnv) waitDelivery(t *testing.T, ctx context.Context, cluster, what string, ok func(*controlv1.GetDeliveryStatusResponse) bool) *controlv1.GetDeliveryStatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st := g.deliveryStatus(t, ctx, cluster)
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("cluster %s: %s: not within a minute; last status %v", cluster, what, st)
		case <-tick.C:
		}
	}
}

// startAgent connects a protocol-keeping guest agent (fakeagent) for
// instance of the cluster: it acknowledges desired sets and, as the
// executor, reports each add-on READY (REMOVED once deleting).
func (g *goldenEnv) startAgent(t *testing.T, ctx context.Context, cluster, uid, instance string) {
	t.Helper()
	stream, err := fakeagent.Connect(ctx, g.srv.AgentConn(t, uid, instance), fakeagent.Options{Hello: &deliveryv1.Hello{
		Cluster:    &deliveryv1.ClusterName{AccountId: g.srv.Config.DevAccount, Name: cluster},
		InstanceId: instance, BootId: "boot-" + instance, AgentVersion: "golden",
		AgentCommit: "0123456789abcdef0123456789abcdef01234567", AgentContractBaseline: 7,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stream.Close)
	session := fakeagent.NewSession(instance, &fakeagent.Applied{}, fakeagent.SessionOptions{})
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			taken, _ := session.Take(m)
			for _, r := range taken.Replies {
				_ = stream.Send(r)
			}
			for _, r := range session.Due() {
				_ = stream.Send(session.Track(r, true))
			}
		}
	}()
}

// TestAdminGolden runs every admin command that talks to the server, in
// table, JSON and YAML, against a real saltbush, and compares what each
// printed with testdata/golden/COMMAND.FORM. Each form works on its own
// cluster, account and service, named after the form, so that the three
// runs of a command see the same state.
func TestAdminGolden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := newGoldenEnv(t)
	api := g.srv.EKS(t)
	clusters := controlv1.NewClusterControlServiceClient(g.conn)

	forms := outputForms()
	for _, form := range forms {
		t.Run("cluster/"+form, func(t *testing.T) {
			name := "golden-" + form
			if _, err := api.CreateCluster(ctx, &eks.CreateClusterInput{
				Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"), Version: aws.String("1.36"),
				ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
			}); err != nil {
				t.Fatalf("CreateCluster: %v", err)
			}
			got, err := clusters.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: &controlv1.ClusterRef{AccountId: g.srv.Config.DevAccount, Name: name}})
			if err != nil {
				t.Fatal(err)
			}
			uid := got.GetCluster().GetUid()
			g.know(uid, "<cluster-uid>")

			g.golden(t, ctx, form, "cluster-add-member", "cluster", "add-member", name, "i-1")
			g.ok(t, ctx, "cluster", "add-member", name, "i-2")
			g.ok(t, ctx, "cluster", "add-member", name, "i-3")
			g.golden(t, ctx, form, "cluster-remove-member", "cluster", "remove-member", name, "i-3")
			g.golden(t, ctx, form, "cluster-set-status", "cluster", "set-status", name, "ACTIVE",
				"--endpoint", "https://10.0.0.1:6443", "--ca-file", filepath.Join(g.tlsDir, "ca.crt"), "--platform-version", "eks.1",
				"--vpc-id", "vpc-0a1b2c3d", "--cluster-security-group-id", "sg-0a1b2c3d", "--oidc-issuer", "https://oidc.example/"+name,
				"--health-issue", "Ec2SubnetNotFound:The subnet subnet-c was not found.")
			g.golden(t, ctx, form, "cluster-get", "cluster", "get", name)

			// complete-update ends an upgrade the façade started.
			up, err := api.UpdateClusterVersion(ctx, &eks.UpdateClusterVersionInput{Name: aws.String(name), Version: aws.String("1.37")})
			if err != nil {
				t.Fatalf("UpdateClusterVersion: %v", err)
			}
			g.know(aws.ToString(up.Update.Id), "<update-id>")
			g.golden(t, ctx, form, "cluster-complete-update", "cluster", "complete-update", name, aws.ToString(up.Update.Id), "Successful",
				"--platform-version", "eks.2")

			// Add-ons: one created through the façade and reported by
			// hand, one held by a reference and released.
			if _, err := api.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil {
				t.Fatalf("CreateAddon: %v", err)
			}
			g.golden(t, ctx, form, "addon-get", "addon", "get", name, "coredns")
			g.golden(t, ctx, form, "addon-report", "addon", "report", name, "coredns", "READY")
			g.golden(t, ctx, form, "addon-ensure", "addon", "ensure", name, "kube-proxy", "node-group-a")
			g.golden(t, ctx, form, "addon-release", "addon", "release", name, "kube-proxy", "node-group-a")

			// Delivery: i-1 connects first and becomes the executor, i-2
			// stands by; the executor reports the add-ons (kube-proxy's
			// REMOVED ends it).
			g.startAgent(t, ctx, name, uid, "i-1")
			g.waitDelivery(t, ctx, name, "i-1 the executor", func(st *controlv1.GetDeliveryStatusResponse) bool {
				return st.GetExecutor().GetInstanceId() == "i-1"
			})
			g.startAgent(t, ctx, name, uid, "i-2")
			st := g.waitDelivery(t, ctx, name, "both agents on the desired set, coredns reported by i-1, kube-proxy gone",
				func(st *controlv1.GetDeliveryStatusResponse) bool {
					if len(st.GetSessions()) != 2 || len(st.GetAddons()) != 1 {
						return false
					}
					for _, s := range st.GetSessions() {
						if s.GetAckedDigest() != st.GetDesiredDigest() {
							return false
						}
					}
					a := st.GetAddons()[0]
					return a.GetName() == "coredns" && a.GetReportedBy() == "i-1" && a.GetObservedGeneration() == a.GetGeneration()
				})
			g.know(st.GetDesiredDigest(), "<digest>")
			g.know(shortDigest(st.GetDesiredDigest()), "<digest12>")
			g.know(fmt.Sprint(st.GetDesiredVersion()), "<revision>")
			for _, s := range st.GetSessions() {
				g.know(s.GetReplica(), "<replica>")
				g.know(fmt.Sprint(s.GetAckedVersion()), "<revision>")
			}
			g.golden(t, ctx, form, "delivery-status", "delivery", "status", name)
			g.golden(t, ctx, form, "delivery-drain-executor", "delivery", "drain-executor", name)
			// The drained executor acknowledges its fence and a successor
			// follows; the cluster is deleted once that settled, as
			// DeleteCluster loses its race with the assignment otherwise.
			g.waitDelivery(t, ctx, name, "a successor to the drained executor", func(st *controlv1.GetDeliveryStatusResponse) bool {
				return st.GetExecutor().GetEpoch() > 1 && !st.GetExecutor().GetDraining() && st.GetExecutor().GetInstanceId() != ""
			})

			if _, err := api.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(name)}); err != nil {
				t.Fatalf("DeleteCluster: %v", err)
			}
			g.golden(t, ctx, form, "cluster-finalize-deletion", "cluster", "finalize-deletion", name)
		})
	}

	// Publishing: the example private add-on under a name of its own per
	// form (published versions are immutable), both versions, one retired
	// and unretired, the listing.
	for _, form := range forms {
		t.Run("catalog/"+form, func(t *testing.T) {
			name := "acme-agent-" + form
			dir := privateAddon(t, name)
			g.know(dir, "<dir>")
			g.golden(t, ctx, form, "addon-publish", "addon", "publish", dir)
			g.golden(t, ctx, form, "addon-retire", "addon", "retire", name, "v1.0.0")
			g.golden(t, ctx, form, "addon-unretire", "addon", "unretire", name, "v1.0.0")
			g.golden(t, ctx, form, "addon-list-published", "addon", "list-published", name)
		})
	}

	for i, form := range forms {
		t.Run("identity/"+form, func(t *testing.T) {
			account := fmt.Sprintf("10000000000%d", i+1)
			user := "arn:aws:iam::" + account + ":user/viewer"
			role := "arn:aws:iam::" + account + ":role/deployer"
			dir := t.TempDir()
			g.know(dir, "<dir>")
			policy := filepath.Join(dir, "policy.json")
			writeFile(t, policy, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:Describe*","eks:List*"],"Resource":"*"}]}`)
			trust := filepath.Join(dir, "trust.json")
			writeFile(t, trust, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+user+`"},"Action":"sts:AssumeRole"}]}`)

			g.golden(t, ctx, form, "account-create", "account", "create", account, "team-"+form)
			g.golden(t, ctx, form, "account-create-principal", "account", "create-principal", user)
			g.golden(t, ctx, form, "account-put-policy", "account", "put-policy", account, "read-only", policy)
			g.golden(t, ctx, form, "account-attach-policy", "account", "attach-policy", user, "read-only")
			out := g.golden(t, ctx, form, "account-create-key", "account", "create-key", user)
			keyID := g.re.accessKey.FindString(out)
			if keyID == "" {
				t.Fatalf("create-key printed no access key id:\n%s", out)
			}
			g.golden(t, ctx, form, "account-set-key-status", "account", "set-key-status", keyID, "Inactive")
			g.ok(t, ctx, "account", "create-principal", role)
			g.golden(t, ctx, form, "account-role-update", "account", "role", "update", role, "--trust-policy", trust, "--max-session-duration", "2h")
			g.golden(t, ctx, form, "account-role-get", "account", "role", "get", role)
			g.golden(t, ctx, form, "account-role-revoke-sessions", "account", "role", "revoke-sessions", role)

			service := "ci-" + form
			servicePolicy := filepath.Join(dir, "service.json")
			writeFile(t, servicePolicy, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"saltbush:GetCluster","Resource":"*"}]}`)
			g.golden(t, ctx, form, "service-put-policy", "service", "put-policy", service, servicePolicy)

			out = g.golden(t, ctx, form, "cert-issue", "cert", "issue", "--service", service, "--out-dir", filepath.Join(dir, "certs"), "--ttl", "1h")
			g.golden(t, ctx, form, "cert-revoke", "cert", "revoke", printedSerial(t, out), "golden")
		})
	}

	// The CA last: once it rotates, connections the test makes from the
	// server's original files would no longer trust the server.
	authority := controlv1.NewIdentityControlServiceClient(g.conn)
	for _, form := range forms {
		t.Run("ca/"+form, func(t *testing.T) {
			g.golden(t, ctx, form, "cert-ca-bundle", "cert", "ca-bundle")
			g.golden(t, ctx, form, "cert-rotate-ca", "cert", "rotate-ca")
			g.waitCAView(t, ctx)
			rotated, err := authority.GetCertificateAuthorityBundle(ctx, &controlv1.GetCertificateAuthorityBundleRequest{})
			if err != nil {
				t.Fatal(err)
			}
			// A second rotation, so that the first new CA no longer
			// issues and may be removed; through the CLI, which saves the
			// bundle it must trust from now on.
			g.ok(t, ctx, "cert", "rotate-ca")
			g.waitCAView(t, ctx)
			g.golden(t, ctx, form, "cert-remove-ca", "cert", "remove-ca", rotated.GetIssuingSerial())
			g.waitCAView(t, ctx)
		})
	}
}

// privateAddon copies docs/examples/private-addon/acme-agent into a
// temporary directory as the add-on name.
func privateAddon(t *testing.T, name string) string {
	t.Helper()
	src := os.DirFS(filepath.Join("..", "..", "docs", "examples", "private-addon", "acme-agent"))
	dir := t.TempDir()
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, p), 0o750)
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		if p == "addon.yaml" {
			b = []byte(strings.Replace(string(b), "name: acme-agent\n", "name: "+name+"\n", 1))
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAdminErrors: a server error is one line naming the AWS exception
// (exit 1, nothing on stdout, no usage); a wrong command line is a usage
// error (exit 2, the usage after the message).
func TestAdminErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := newGoldenEnv(t)
	api := g.srv.EKS(t)
	if _, err := api.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("idle"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	// The example private add-on with a schema that refuses its own example.
	brokenAddon := privateAddon(t, "acme-agent")
	schema := filepath.Join(brokenAddon, "v1.1.0", "schema.json")
	b, err := os.ReadFile(schema) //nolint:gosec // G304: the test's own copy
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, schema, strings.Replace(string(b), `"logLevel": "debug"`, `"logLevel": "verbose"`, 1))
	policy := filepath.Join(dir, "policy.json")
	writeFile(t, policy, `{"Version":"2012-10-17","Statement":[]}`)
	for _, tt := range []struct {
		name string
		args []string
		code int
		// line is stderr's first line; usage says the usage follows it.
		line  string
		usage bool
	}{
		{"cluster", []string{"cluster", "get", "nosuch"}, exitError,
			"ResourceNotFoundException: No cluster found for name: nosuch.", false},
		{"addon", []string{"addon", "get", "idle", "nosuch"}, exitError,
			"ResourceNotFoundException: No addon: nosuch found in cluster: idle", false},
		{"delivery", []string{"delivery", "drain-executor", "idle"}, exitError,
			"InvalidRequestException: Cluster idle has no executor to drain.", false},
		{"account", []string{"account", "create", "12345"}, exitError,
			`InvalidParameterException: account id "12345": must be 12 digits.`, false},
		{"service", []string{"service", "put-policy", "bad/name", policy}, exitError,
			`InvalidParameterException: service name "bad/name"`, false},
		{"a local failure", []string{"service", "put-policy", "ci", missing}, exitError,
			"saltbush: policy document: open " + missing + ": no such file or directory", false},
		{"cert", []string{"cert", "revoke", "not-hex"}, exitError,
			`InvalidParameterException: Certificate serial "not-hex" is not lower-case hex.`, false},
		{"addon publish: a version the directory breaks", []string{"addon", "publish", brokenAddon}, exitError,
			"saltbush: " + brokenAddon + ": addon acme-agent version v1.1.0: schema.json: examples[0] does not satisfy the schema", false},
		{"addon retire", []string{"addon", "retire", "acme-agent", "v9.0.0"}, exitError,
			"ResourceNotFoundException: No published version v9.0.0 of addon acme-agent.", false},
		{"etcd", []string{"etcd", "snapshot", "status", missing}, exitError,
			"saltbush: snapshot " + missing + ": ", false},
		{"missing argument", []string{"cluster", "get"}, exitUsage,
			"saltbush: accepts 1 arg(s), received 0", true},
		{"value outside the fixed ones", []string{"cluster", "set-status", "idle", "RUNNING"}, exitUsage,
			`saltbush: status "RUNNING": want one of ACTIVE, FAILED`, true},
		{"unknown command", []string{"clsuter", "get", "idle"}, exitUsage,
			`saltbush: unknown command "clsuter" for "saltbush admin"; did you mean "cluster"?`, true},
		{"unknown flag", []string{"cluster", "get", "idle", "--colour"}, exitUsage,
			"saltbush: unknown flag: --colour", true},
		{"unknown output form", []string{"-o", "xml", "cluster", "get", "idle"}, exitUsage,
			`saltbush: --output "xml": want one of table, json, yaml`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := g.admin(ctx, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstderr: %s", code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			first, rest, _ := strings.Cut(stderr, "\n")
			if !strings.HasPrefix(first, tt.line) {
				t.Errorf("stderr's first line %q, want %q", first, tt.line)
			}
			if hasUsage := strings.HasPrefix(rest, "Usage:"); hasUsage != tt.usage {
				t.Errorf("usage after the error: %v, want %v\nstderr: %s", hasUsage, tt.usage, stderr)
			}
			if !tt.usage && rest != "" {
				t.Errorf("stderr has more than one line: %q", stderr)
			}
		})
	}
}

// TestCompletion: `saltbush completion SHELL` prints cobra's script for
// each shell, and the fixed values of positional arguments complete.
func TestCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"bash", []string{"completion", "bash"}, []string{"# bash completion V2 for saltbush"}},
		{"zsh", []string{"completion", "zsh"}, []string{"#compdef saltbush"}},
		{"fish", []string{"completion", "fish"}, []string{"# fish completion for saltbush"}},
		{"output forms", []string{"__complete", "admin", "-o", ""}, []string{"table", "json", "yaml"}},
		{"cluster status", []string{"__complete", "admin", "cluster", "set-status", "demo", ""}, []string{"ACTIVE", "FAILED"}},
		{"report phase", []string{"__complete", "admin", "addon", "report", "demo", "coredns", ""}, []string{"APPLIED", "READY", "FAILED", "REMOVED"}},
		{"update outcome", []string{"__complete", "admin", "cluster", "complete-update", "demo", "id", ""}, []string{"Successful", "Failed", "Cancelled"}},
		{"key status", []string{"__complete", "admin", "account", "set-key-status", "AKIA", ""}, []string{"Active", "Inactive"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(ctx, tt.args, &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			lines := strings.Split(stdout.String(), "\n")
			for _, w := range tt.want {
				if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
					t.Errorf("no line starting %q in:\n%s", w, stdout.String())
				}
			}
		})
	}
}
