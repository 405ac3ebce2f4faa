package conformance

// The identity commands of the admin CLI, end to end: the real binary
// against a real saltbush, with the credentials the server wrote to its
// TLS directory. What the CLI makes is then used the way its users use it:
// access keys with the AWS SDK on the façade, certificates on the gRPC port.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/smithy-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/saltbushbin"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// aidCLI runs `saltbush admin` against one server.
type aidCLI struct {
	bin, addr, tlsDir string
}

func newAIDCLI(t *testing.T, srv *servertest.Server) *aidCLI {
	t.Helper()
	return &aidCLI{bin: saltbushbin.Path(t), addr: srv.GRPCAddr(), tlsDir: srv.Config.TLSDir()}
}

// run runs `saltbush admin --grpc-addr ADDR --tls-dir DIR args...` with
// stdin, and returns its stdout, stderr and exit error.
func (c *aidCLI) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"admin", "--grpc-addr", c.addr, "--tls-dir", c.tlsDir, "--timeout", "5s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	// The CLI reads SALTBUSH_* from the environment: none must leak in.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SALTBUSH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// ok runs a command that must succeed and returns its JSON output.
func (c *aidCLI) ok(t *testing.T, stdin string, args ...string) map[string]any {
	t.Helper()
	stdout, stderr, err := c.run(t, stdin, args...)
	if err != nil {
		t.Fatalf("saltbush admin %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("saltbush admin %s: output is not JSON: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	return m
}

// fails runs a command that must fail: non-zero exit, nothing on stdout,
// and on stderr one line: the AWS exception the server's gRPC code carries
// and its message ("ResourceNotFoundException: …"), or "saltbush: …" for a
// failure before any call (code OK).
func (c *aidCLI) fails(t *testing.T, stdin string, code codes.Code, msg string, args ...string) {
	t.Helper()
	stdout, stderr, err := c.run(t, stdin, args...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("saltbush admin %s: exit %v, want a non-zero exit\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout, stderr)
		return
	}
	if strings.TrimSpace(stdout) != "" {
		t.Errorf("saltbush admin %s failed but printed %q", strings.Join(args, " "), stdout)
	}
	prefix := map[codes.Code]string{
		codes.OK:               "saltbush: ",
		codes.InvalidArgument:  errdefs.InvalidParameterException + ": ",
		codes.NotFound:         errdefs.ResourceNotFoundException + ": ",
		codes.AlreadyExists:    errdefs.ResourceInUseException + ": ",
		codes.PermissionDenied: errdefs.AccessDeniedException + ": ",
		codes.Unavailable:      errdefs.ServiceUnavailableException + ": ",
	}[code]
	if prefix == "" {
		t.Fatalf("fails: no exception for code %s", code)
	}
	if !strings.HasPrefix(stderr, prefix) || !strings.Contains(stderr, msg) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("saltbush admin %s: stderr %q, want one line starting %q with %q", strings.Join(args, " "), stderr, prefix, msg)
	}
}

// aidAPIError is the exception code of an SDK error ("" when none).
func aidAPIError(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// TestAdminIdentityCLI: an operator makes an account, a user with a
// read-only policy and an access key with the CLI; the key then reads but
// cannot write over the façade, and stops working once deactivated. A
// service certificate issued with the CLI may call health but no control
// method until its policy allows one, and nothing once revoked. Bad inputs
// exit non-zero with the server's message and create nothing.
func TestAdminIdentityCLI(t *testing.T) {
	srv := servertest.Start(t)
	cli := newAIDCLI(t, srv)
	ctx := ctxT(t)
	const acct = "222222222222"
	const opsARN = "arn:aws:iam::" + acct + ":user/ops"
	const readOnly = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:List*","eks:Describe*"],"Resource":"*"}]}`

	// Accounts, principals, policies, keys.
	if got := cli.ok(t, "", "account", "create", acct); got["accountId"] != acct {
		t.Errorf("account create: %v", got)
	}
	if got := cli.ok(t, "", "account", "create-principal", opsARN); got["arn"] != opsARN {
		t.Errorf("account create-principal: %v", got)
	}
	cli.ok(t, readOnly, "account", "put-policy", acct, "ro", "-")
	cli.ok(t, "", "account", "attach-policy", opsARN, "ro")
	key := cli.ok(t, "", "account", "create-key", opsARN)
	akid, _ := key["accessKeyId"].(string)
	secret, _ := key["secretAccessKey"].(string)
	if akid == "" || secret == "" || key["accountId"] != acct || key["principalArn"] != opsARN {
		t.Fatalf("account create-key: %v", key)
	}
	gidCreateIn(t, srv, srv.NewKey(t, identity.RootARN(acct)), "ops-one")
	ops := srv.EKSAs(t, servertest.Creds{AccessKeyID: akid, SecretAccessKey: secret, AccountID: acct, PrincipalARN: opsARN},
		func(o *eks.Options) { o.RetryMaxAttempts = 1 })

	t.Run("read-only key", func(t *testing.T) {
		list, err := ops.ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil || !slices.Equal(list.Clusters, []string{"ops-one"}) {
			t.Fatalf("ListClusters as ops: %v, %v; want [ops-one]", list, err)
		}
		if _, err := ops.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("ops-one")}); err != nil {
			t.Errorf("DescribeCluster as ops: %v", err)
		}
		in := createInput("by-ops")
		in.RoleArn = aws.String("arn:aws:iam::" + acct + ":role/eks-cluster")
		_, err = ops.CreateCluster(ctx, in)
		if aidAPIError(err) != errdefs.AccessDeniedException {
			t.Errorf("CreateCluster as ops: %v, want AccessDeniedException", err)
		}
		_, err = ops.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("ops-one")})
		if aidAPIError(err) != errdefs.AccessDeniedException {
			t.Errorf("DeleteCluster as ops: %v, want AccessDeniedException", err)
		}
		if got := gidClusters(t, srv, srv.NewKey(t, identity.RootARN(acct))); !slices.Equal(got, []string{"ops-one"}) {
			t.Errorf("clusters of %s after refused writes: %v", acct, got)
		}
	})

	t.Run("key status", func(t *testing.T) {
		cli.ok(t, "", "account", "set-key-status", akid, "Inactive")
		var last error
		gidEventually(t, "the deactivated key is refused", func() bool {
			_, last = ops.ListClusters(ctx, &eks.ListClustersInput{})
			return last != nil
		})
		if aidAPIError(last) != "UnrecognizedClientException" {
			t.Errorf("ListClusters with the deactivated key: %v, want UnrecognizedClientException", last)
		}
		cli.fails(t, "", codes.InvalidArgument, "Status must be Active or Inactive.", "account", "set-key-status", akid, "Disabled")
		cli.fails(t, "", codes.NotFound, "does not exist", "account", "set-key-status", "AKIAAAAAAAAAAAAAAAAA", "Active")
		cli.ok(t, "", "account", "set-key-status", akid, "Active")
		gidEventually(t, "the reactivated key works", func() bool {
			_, last = ops.ListClusters(ctx, &eks.ListClustersInput{})
			return last == nil
		})
	})

	t.Run("bad inputs", func(t *testing.T) {
		cli.fails(t, "", codes.InvalidArgument, `account id "12345": must be 12 digits.`, "account", "create", "12345")
		cli.fails(t, "", codes.AlreadyExists, "Account "+acct+" already exists.", "account", "create", acct)
		cli.fails(t, "", codes.InvalidArgument, `"arn:aws:iam::`+acct+`:bogus" is not an IAM user or role ARN.`,
			"account", "create-principal", "arn:aws:iam::"+acct+":bogus")
		cli.fails(t, "", codes.NotFound, "Account 333333333333 does not exist.", "account", "create-principal", "arn:aws:iam::333333333333:user/x")
		cli.fails(t, "", codes.AlreadyExists, "already exists", "account", "create-principal", opsARN)
		cli.fails(t, "{not json", codes.InvalidArgument, "Policy bad: policy document:", "account", "put-policy", acct, "bad", "-")
		cli.fails(t, readOnly, codes.InvalidArgument, "is not 1 to 128", "account", "put-policy", acct, "no/slash", "-")
		cli.fails(t, readOnly, codes.NotFound, "Account 333333333333 does not exist.", "account", "put-policy", "333333333333", "ro", "-")
		// A bad replacement leaves the attached policy as it was.
		cli.fails(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow"`, codes.InvalidArgument, "Policy ro:", "account", "put-policy", acct, "ro", "-")
		cli.fails(t, "", codes.NotFound, "does not exist", "account", "attach-policy", opsARN, "nosuch")
		cli.fails(t, "", codes.InvalidArgument, "is not an IAM user or role ARN, an assumed-role session or an account root.", "account", "create-key", "arn:aws:iam::"+acct+":group/x")
		cli.fails(t, "", codes.NotFound, "does not exist.", "account", "create-key", "arn:aws:iam::"+acct+":user/nobody")
		cli.fails(t, "", codes.OK, "policy document:", "account", "put-policy", acct, "ro", filepath.Join(t.TempDir(), "missing.json"))

		// Nothing was created: the refused account, principal and
		// policies do not exist.
		cli.ok(t, "", "account", "create", "333333333333")
		cli.fails(t, "", codes.NotFound, "does not exist.", "account", "create-key", "arn:aws:iam::333333333333:user/x")
		cli.fails(t, "", codes.NotFound, "does not exist", "account", "attach-policy", opsARN, "bad")
		cli.fails(t, "", codes.NotFound, "does not exist", "account", "attach-policy", opsARN, "no/slash")
		if _, err := srv.IAM().CreateAccount(ctx, "12345", ""); err == nil {
			t.Error("account 12345 could be created")
		}
		// ...and ops's policy is still read-only.
		if _, err := ops.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
			t.Errorf("ListClusters as ops after a refused policy replacement: %v", err)
		}
		in := createInput("by-ops")
		in.RoleArn = aws.String("arn:aws:iam::" + acct + ":role/eks-cluster")
		if _, err := ops.CreateCluster(ctx, in); aidAPIError(err) != errdefs.AccessDeniedException {
			t.Errorf("CreateCluster as ops after a refused policy replacement: %v, want AccessDeniedException", err)
		}
	})

	// Service certificates.
	if _, err := srv.EKS(t).CreateCluster(ctx, createInput("ci-target")); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(t.TempDir(), "ci")
	issued := cli.ok(t, "", "cert", "issue", "--service", "ci", "--out-dir", outDir, "--ttl", "1h")
	serial, _ := issued["serial"].(string)
	// The key, certificate and bundle go to files, not to the output: it
	// names the files, and no member is empty (it once printed
	// "caBundlePem": "" beside the CA file it wrote).
	out, _ := json.Marshal(issued)
	if serial == "" || issued["spiffeId"] != identity.ServiceID("ci") || strings.Contains(string(out), "BEGIN") {
		t.Fatalf("cert issue output: %v", issued)
	}
	for k, v := range issued {
		if v == "" {
			t.Errorf("cert issue printed %q empty: %s", k, out)
		}
	}
	for k, f := range map[string]string{"keyFile": "ci.key", "certificateFile": "ci.crt", "caBundleFile": "ca.crt"} {
		if issued[k] != filepath.Join(outDir, f) {
			t.Errorf("cert issue printed %s %v, want %s", k, issued[k], filepath.Join(outDir, f))
		}
	}
	var files [3][]byte
	for i, f := range []string{"ca.crt", "ci.crt", "ci.key"} {
		p := filepath.Join(outDir, f)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		files[i] = b
	}
	leaf := gidPEMCerts(t, files[1])[0]
	if leaf.SerialNumber.Text(16) != serial || len(leaf.URIs) != 1 || leaf.URIs[0].String() != identity.ServiceID("ci") {
		t.Errorf("ci.crt: serial %s, URIs %v; want %s and %s", leaf.SerialNumber.Text(16), leaf.URIs, serial, identity.ServiceID("ci"))
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > time.Hour+2*time.Minute {
		t.Errorf("ci.crt valid for %v, want about the 1h asked for", life)
	}
	ciConn := gidConn(t, srv, gidTLS(t, files[0], files[1], files[2]))
	ciControl := controlv1.NewClusterControlServiceClient(ciConn)
	target := &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: "ci-target"}
	asCI := []string{"--cacert", filepath.Join(outDir, "ca.crt"), "--cert", filepath.Join(outDir, "ci.crt"), "--key", filepath.Join(outDir, "ci.key")}
	getCluster := func(t *testing.T) error {
		t.Helper()
		_, err := ciControl.GetCluster(gidCall(t, nil), &controlv1.GetClusterRequest{Cluster: target})
		return err
	}

	t.Run("service certificate without a policy", func(t *testing.T) {
		if err := gidHealth(t, ciConn); err != nil {
			t.Fatalf("health as ci: %v", err)
		}
		wanterr.Status(t, getCluster(t), codes.PermissionDenied, errdefs.AccessDeniedException)
		cli.fails(t, "", codes.PermissionDenied, "saltbush:GetCluster", append(asCI, "cluster", "get", "ci-target")...)
		cli.fails(t, "", codes.PermissionDenied, "saltbush:CreateAccount", append(asCI, "account", "create", "444444444444")...)
		gidAccountFree(t, srv, "444444444444")
	})

	t.Run("service policy", func(t *testing.T) {
		policyFile := filepath.Join(t.TempDir(), "ci.json")
		if err := os.WriteFile(policyFile, []byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"saltbush:GetCluster","Resource":"*"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		cli.ok(t, "", "service", "put-policy", "ci", policyFile)
		var last error
		gidEventually(t, "ci may call GetCluster", func() bool { last = getCluster(t); return last == nil })
		if got := cli.ok(t, "", append(asCI, "cluster", "get", "ci-target")...); got["cluster"] == nil {
			t.Errorf("cluster get as ci: %v", got)
		}
		// Only GetCluster.
		cli.fails(t, "", codes.PermissionDenied, "saltbush:AddMember", append(asCI, "cluster", "add-member", "ci-target", "i-1")...)
		got, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).GetCluster(ctxT(t), &controlv1.GetClusterRequest{Cluster: target})
		if err != nil || len(got.GetCluster().GetMembers()) != 0 {
			t.Errorf("ci-target after a refused add-member: %v, %v", got, err)
		}
		// Bad documents and names are refused and change nothing.
		cli.fails(t, "{", codes.InvalidArgument, "Policy of service ci:", "service", "put-policy", "ci", "-")
		cli.fails(t, "{}", codes.InvalidArgument, `service name "bad/name"`, "service", "put-policy", "bad/name", "-")
		if err := getCluster(t); err != nil {
			t.Errorf("GetCluster as ci after a refused policy replacement: %v", err)
		}
	})

	t.Run("bad certificate requests", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "bad")
		cli.fails(t, "", codes.InvalidArgument, `service name "bad/name"`, "cert", "issue", "--service", "bad/name", "--out-dir", dir)
		cli.fails(t, "", codes.InvalidArgument, `cluster uid ".."`, "cert", "issue", "--agent", "../i-1", "--out-dir", dir)
		cli.fails(t, "", codes.OK, "exactly one of --service and --agent is required", "cert", "issue", "--out-dir", dir)
		cli.fails(t, "", codes.OK, "exactly one of --service and --agent is required", "cert", "issue", "--service", "a", "--agent", "u/i", "--out-dir", dir)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused issues wrote %s: %v", dir, err)
		}
		cli.fails(t, "", codes.InvalidArgument, "is not lower-case hex.", "cert", "revoke", "not-hex")
		cli.fails(t, "", codes.NotFound, "Certificate 8badf00d does not exist.", "cert", "revoke", "8badf00d")
		if err := getCluster(t); err != nil {
			t.Errorf("GetCluster as ci after refused revocations: %v", err)
		}
	})

	t.Run("revoke", func(t *testing.T) {
		cli.ok(t, "", "cert", "revoke", serial, "rotated out")
		var last error
		gidEventually(t, "ci's open connection is refused", func() bool {
			last = getCluster(t)
			return status.Code(last) == codes.Unauthenticated
		})
		if !strings.Contains(status.Convert(last).Message(), serial) {
			t.Errorf("refusal %v does not name %s", last, serial)
		}
		if err := gidHealth(t, gidConn(t, srv, gidTLS(t, files[0], files[1], files[2]))); status.Code(err) != codes.Unavailable {
			t.Errorf("health on a new connection as ci: %v, want Unavailable", err)
		}
		cli.fails(t, "", codes.Unavailable, "", append(asCI, "cluster", "get", "ci-target")...)
		// Revoking again is not an error.
		cli.ok(t, "", "cert", "revoke", serial)
	})
}

// TestAdminIdentityCertAfterCARemoval: after the CA that signed the admin
// CLI's certificate is rotated out and removed, a restart must leave a
// usable admin certificate in the TLS directory.
func TestAdminIdentityCertAfterCARemoval(t *testing.T) {
	dir := t.TempDir()
	sameDir := servertest.WithConfig(func(c *server.Config) { c.DataDir = dir })
	srv := servertest.Start(t, sameDir)
	ctx := ctxT(t)
	_, old := srv.Authority().Bundle()
	if _, err := srv.Authority().Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Authority().Remove(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	srv = servertest.Start(t, sameDir)
	_, err := controlv1.NewIdentityControlServiceClient(srv.GRPC(t)).GetCertificateAuthorityBundle(gidCall(t, nil), &controlv1.GetCertificateAuthorityBundleRequest{})
	if err != nil {
		t.Fatalf("admin CLI credentials after the restart: %v", err)
	}
}
