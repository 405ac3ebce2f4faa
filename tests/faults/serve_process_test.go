package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/invariants"
	"github.com/saltbush/saltbush/tlsclient"
)

type process struct {
	dataDir  string
	cmd      *exec.Cmd
	httpAddr string
	grpcAddr string
	done     chan error
}

// startServe runs `saltbush serve` on dataDir and waits for /readyz. The
// binary listens on port 0 itself and the test reads the addresses from its
// "saltbush serving" log line: a port picked here and handed over could be
// taken in between by another test binary running in parallel.
func startServe(t *testing.T, bin, dataDir string) *process {
	t.Helper()
	return startServeEnv(t, bin, dataDir, nil)
}

// startServeEnv is startServe with env added to the child's environment
// (serve reads every flag from SALTBUSH_<FLAG> too): the test's own
// environment stays as it is, so that tests run in parallel.
func startServeEnv(t *testing.T, bin, dataDir string, env []string) *process {
	t.Helper()
	p := &process{dataDir: dataDir, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--log-level", "info", "--log-json")
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = os.Stderr
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, HTTP, GRPC string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "saltbush serving" {
				serving <- [2]string{line.HTTP, line.GRPC}
			}
			fmt.Fprintln(os.Stderr, sc.Text())
		}
	}()
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done //nolint:errcheck // the exit error of a process just killed
		}
	})
	select {
	case addrs := <-serving:
		p.httpAddr, p.grpcAddr = addrs[0], addrs[1]
	case err := <-p.done:
		t.Fatalf("saltbush serve exited before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("saltbush serve did not log its addresses within 60s")
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.httpAddr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("saltbush serve not ready after 60s")
	return nil
}

// client signs with the development key the first start wrote to
// DATA_DIR/aws/credentials (read the way the AWS SDK reads that file).
func (p *process) client(t *testing.T) *eks.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithSharedConfigFiles([]string{filepath.Join(p.dataDir, "aws", "config")}),
		config.WithSharedCredentialsFiles([]string{filepath.Join(p.dataDir, "aws", "credentials")}),
		config.WithSharedConfigProfile("saltbush"))
	if err != nil {
		t.Fatalf("load the written AWS profile: %v", err)
	}
	return eks.NewFromConfig(cfg, func(o *eks.Options) {
		// The profile names the first start's address; this start may
		// listen elsewhere.
		o.BaseEndpoint = aws.String("http://" + p.httpAddr)
	})
}

// grpc dials the gRPC port with the admin certificate serve wrote to
// DATA_DIR/pki.
func (p *process) grpc(t *testing.T) *grpc.ClientConn {
	t.Helper()
	dir := filepath.Join(p.dataDir, "pki")
	tlsCfg, err := tlsclient.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (p *process) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(within):
		t.Fatalf("saltbush did not exit within %s", within)
		return nil
	}
}

// TestServeStopAndRestartKeepsData runs the real binary: SIGTERM shuts it
// down cleanly (exit 0), SIGKILL loses nothing that was acknowledged, and a
// restart on the same data directory serves every cluster created before.
func TestServeStopAndRestartKeepsData(t *testing.T) {
	t.Parallel()
	bin := buildSaltbush(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(c *eks.Client, name string) {
		t.Helper()
		if _, err := c.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
		}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	expect := func(c *eks.Client, names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(n)}); err != nil {
				t.Errorf("describe %s after restart: %v", n, err)
			}
		}
	}

	p := startServe(t, bin, dataDir)
	for i := 0; i < 3; i++ {
		create(p.client(t), fmt.Sprintf("term-%d", i))
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want a clean exit", err)
	}

	p = startServe(t, bin, dataDir)
	expect(p.client(t), "term-0", "term-1", "term-2")
	create(p.client(t), "kill-0")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if err := p.wait(t, 30*time.Second); !errors.As(err, &exitErr) {
		t.Fatalf("exit after SIGKILL: %v", err)
	}

	p = startServe(t, bin, dataDir)
	expect(p.client(t), "term-0", "term-1", "term-2", "kill-0")
	list, err := p.client(t).ListClusters(ctx, &eks.ListClustersInput{})
	if err != nil || len(list.Clusters) != 4 {
		t.Errorf("clusters after restarts = %v, %v; want 4", list, err)
	}
}

// killMidWrite lets the workload p serves run for a moment and until the
// server has acknowledged at least one of the writes acked records (then a
// random instant more), kills p with SIGKILL wherever its writes are,
// stops the workload and waits for it, and then opens the dead server's
// etcd data directly: check reads the keyspace it left and returns how
// many records (of what, for the log) it checked. None is a failure. The
// kill waits for an acknowledgement, not for a fixed time alone: on a busy
// machine a race-built server's first writes may take longer than that.
func killMidWrite(t *testing.T, ctx context.Context, p *process, dataDir, what string, acked *sync.Map,
	stopWork func(), wg *sync.WaitGroup, check func(*clientv3.Client) int) {
	t.Helper()
	start := time.Now()
	for !anyStored(acked) || time.Since(start) < 1500*time.Millisecond {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s acknowledged before the test's deadline", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(time.Duration(rand.Int64N(int64(300 * time.Millisecond))))
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if err := p.wait(t, 30*time.Second); !errors.As(err, &exitErr) {
		t.Fatalf("exit after SIGKILL: %v", err)
	}
	stopWork()
	wg.Wait()

	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: filepath.Join(dataDir, "etcd"), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("reopen the data directory: %v", err)
	}
	defer etcd.Close()
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	n := check(cli)
	// Beside the test's own checks, the whole keyspace's invariants
	// (tests/invariants): every record decodes, nothing orphaned, every
	// index consistent.
	rep, err := invariants.Check(ctx, cli, store.DefaultPrefix, nil)
	if err != nil {
		t.Fatalf("check the keyspace's invariants: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("after SIGKILL: %s", v)
	}
	if n == 0 {
		t.Fatalf("no %s survived: the workload wrote nothing before the kill", what)
	}
	t.Logf("checked %d %s after SIGKILL", n, what)
}

func anyStored(m *sync.Map) bool {
	found := false
	m.Range(func(any, any) bool { found = true; return false })
	return found
}
