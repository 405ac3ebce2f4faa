package bench

// `saltbush serve` as a child process of the benchmark, for
// BenchmarkServerProcess (process_test.go): the server and its embedded
// etcd in one process whose CPU time the benchmark reads from /proc, the
// load generators in this one.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/tests/saltbushbin"
	"github.com/saltbush/saltbush/tlsclient"
)

// ServerBinaryEnv names a saltbush binary BenchmarkServerProcess runs
// instead of building cmd/saltbush into a temporary directory.
const ServerBinaryEnv = "SALTBUSH_BENCH_SERVER_BINARY"

const (
	// childStartTimeout bounds the child's start: etcd's first election
	// (1 s on a fresh member), the catalogue check, bootstrap.
	childStartTimeout = 2 * time.Minute
	// childStopTimeout is how long a SIGTERM may take before SIGKILL:
	// serve's graceful shutdown (--shutdown-timeout) plus etcd's stop.
	childStopTimeout = 30 * time.Second
	// childBuildTimeout bounds `go build` on a loaded machine.
	childBuildTimeout = 10 * time.Minute
)

// serverBinary returns the saltbush binary: $SALTBUSH_BENCH_SERVER_BINARY,
// else cmd/saltbush built into a directory of b (without the race
// detector, as `make build` builds it).
func serverBinary(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv(ServerBinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			b.Fatalf("%s: %v", ServerBinaryEnv, err)
		}
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), childBuildTimeout)
	defer cancel()
	bin := filepath.Join(b.TempDir(), "saltbush")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/saltbush/saltbush/cmd/saltbush")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build saltbush: %v\n%s", err, out)
	}
	return bin
}

// serverChild is a running `saltbush serve` and what a client needs to
// reach it, all read from what serve itself writes: the listen addresses
// from its "saltbush serving" log line, the embedded etcd's client URLs
// from DATA_DIR/etcd-endpoints (server.Config.EtcdEndpointsFile), the
// development administrator's access key from the AWS profile it writes
// on the first start (DATA_DIR/aws/credentials) and the admin CLI's mTLS
// certificate from DATA_DIR/pki (server.Config.TLSDir).
type serverChild struct {
	cmd      *exec.Cmd
	pid      int
	cfg      server.Config // the flags it was given, for its paths
	url      string        // the façade's base URL
	grpcAddr string
	etcd     []string
	creds    aws.Credentials
	tls      *tls.Config
	log      *childLog

	exited  chan struct{} // closed when the process has exited
	waitErr error         // cmd.Wait's result, set before exited closes
	mu      sync.Mutex
}

// startServerChild starts `saltbush serve` on free loopback ports with a
// fresh data directory, fsync off unless fsync, throttling off (the
// benchmark drives one account hard, as servertest does), and waits until
// its /readyz answers. It is stopped when b ends.
func startServerChild(b *testing.B, bin string, fsync bool) *serverChild {
	b.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = b.TempDir()
	args := []string{"serve",
		"--data-dir", cfg.DataDir,
		// Port 0: the kernel picks free ports; the log line says which.
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--dev-account", cfg.DevAccount, "--region", cfg.Cluster.Region,
		"--throttle-rate", "0",
		// JSON lines, so the listen addresses are parsed, not scraped.
		"--log-json", "--log-level", "info",
		"--shutdown-timeout", "5s",
	}
	if !fsync {
		args = append(args, "--etcd-unsafe-no-fsync")
	}
	cmd := exec.Command(bin, args...)
	// serve reads SALTBUSH_<FLAG> for every flag not given (bindEnv in
	// cmd/saltbush/main.go) and SALTBUSH_MASTER_KEY: none of the caller's
	// may reach the child, or its configuration would not be the one above.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SALTBUSH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A benchmark binary that dies (a -timeout panic skips cleanups) takes
	// its server with it (as tests/kubetest/process.go explains).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout = io.Discard
	c := &serverChild{cmd: cmd, cfg: cfg, log: &childLog{}, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", bin, err)
	}
	c.pid = cmd.Process.Pid
	serving := make(chan servingLine, 1)
	go c.log.read(stderr, serving)
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(c.exited)
	}()
	b.Cleanup(func() { c.stop(b) })

	ctx, cancel := context.WithTimeout(context.Background(), childStartTimeout)
	defer cancel()
	var addrs servingLine
	select {
	case addrs = <-serving:
	case <-c.exited:
		b.Fatalf("saltbush serve exited before serving (%v); its log ends:\n%s", c.exitErr(), c.log)
	case <-ctx.Done():
		b.Fatalf("saltbush serve not serving within %s; its log ends:\n%s", childStartTimeout, c.log)
	}
	c.url, c.grpcAddr = "http://"+addrs.HTTP, addrs.GRPC
	if err := saltbushbin.WaitReady(ctx, c.url, c.exited); err != nil {
		if errors.Is(err, saltbushbin.ErrExited) {
			err = fmt.Errorf("%w (%v)", err, c.exitErr())
		}
		b.Fatalf("saltbush serve: %v; its log ends:\n%s", err, c.log)
	}
	if err := c.readCredentials(); err != nil {
		b.Fatalf("saltbush serve: %v", err)
	}
	return c
}

// readCredentials reads what serve wrote into its data directory before
// it started serving.
func (c *serverChild) readCredentials() error {
	eps, err := os.ReadFile(c.cfg.EtcdEndpointsFile())
	if err != nil {
		return fmt.Errorf("the embedded etcd's endpoints: %w", err)
	}
	c.etcd = strings.Split(strings.TrimSpace(string(eps)), ",")
	if c.creds, err = readAWSCredentials(filepath.Join(c.cfg.DataDir, "aws", "credentials")); err != nil {
		return err
	}
	dir := c.cfg.TLSDir()
	c.tls, err = tlsclient.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"), "127.0.0.1")
	if err != nil {
		return fmt.Errorf("the admin CLI's certificate: %w", err)
	}
	return nil
}

// readAWSCredentials reads the access key of the profile serve writes
// (server/credentials.go, writeAWSProfile: key = value lines).
func readAWSCredentials(path string) (aws.Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("the development access key: %w", err)
	}
	defer func() { _ = f.Close() }()
	var creds aws.Credentials
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "aws_access_key_id":
			creds.AccessKeyID = strings.TrimSpace(v)
		case "aws_secret_access_key":
			creds.SecretAccessKey = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return aws.Credentials{}, fmt.Errorf("%s: %w", path, err)
	}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		return aws.Credentials{}, fmt.Errorf("%s: no access key", path)
	}
	return creds, nil
}

// cpu is the child's user + system CPU time so far (/proc/PID/stat: every
// thread, etcd's and saltbush's alike, in 10 ms ticks).
func (c *serverChild) cpu(b *testing.B) time.Duration {
	b.Helper()
	select {
	case <-c.exited:
		b.Fatalf("saltbush serve exited (%v); its log ends:\n%s", c.exitErr(), c.log)
	default:
	}
	return procCPU(b, c.pid)
}

func (c *serverChild) exitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitErr
}

// stop ends the child with SIGTERM (serve's graceful shutdown) and waits,
// with SIGKILL after childStopTimeout. A child that exited on its own
// before stop fails the benchmark.
func (c *serverChild) stop(b *testing.B) {
	select {
	case <-c.exited:
		b.Errorf("saltbush serve exited during the benchmark (%v); its log ends:\n%s", c.exitErr(), c.log)
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(childStopTimeout)
	defer t.Stop()
	select {
	case <-c.exited:
		var exit *exec.ExitError
		if err := c.exitErr(); err != nil && !errors.As(err, &exit) {
			b.Errorf("saltbush serve: %v", err)
		} else if err != nil {
			b.Errorf("saltbush serve exited with %v after SIGTERM; its log ends:\n%s", err, c.log)
		}
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
		b.Errorf("saltbush serve did not stop within %s of SIGTERM; killed", childStopTimeout)
	}
}

// servingLine is the fields of serve's "saltbush serving" log line.
type servingLine struct {
	Msg  string `json:"msg"`
	HTTP string `json:"http"`
	GRPC string `json:"grpc"`
}

// childLog reads the child's stderr to its end (the pipe must be drained,
// or the child blocks on a full pipe: every create writes an audit
// record), keeps its last 8 KiB for error messages and reports the
// "saltbush serving" line.
type childLog struct {
	mu   sync.Mutex
	tail []byte
}

func (l *childLog) read(r io.Reader, serving chan<- servingLine) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Bytes()
		// The first start's banner shows the development key's secret
		// (server/credentials.go): not for benchmark output.
		if strings.Contains(string(line), "aws_secret_access_key") {
			continue
		}
		l.add(line)
		if sent {
			continue
		}
		var s servingLine
		if json.Unmarshal(line, &s) == nil && s.Msg == "saltbush serving" && s.HTTP != "" && s.GRPC != "" {
			serving <- s
			sent = true
		}
	}
	// Lines past bufio's limit end the scan; keep draining so the child
	// never blocks on its stderr.
	_, _ = io.Copy(io.Discard, r)
}

func (l *childLog) add(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = append(append(l.tail, line...), '\n')
	if len(l.tail) > 8<<10 {
		l.tail = l.tail[len(l.tail)-8<<10:]
	}
}

func (l *childLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.tail)
}
