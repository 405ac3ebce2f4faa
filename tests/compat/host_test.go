package compat_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/saltbushbin"
	"github.com/saltbush/saltbush/tlsclient"
)

// Delivery timing of the hosts: short, so that a drain or a failover takes
// seconds (fence-after + margin + heartbeat < session TTL, as serve
// requires).
var deliveryTiming = []string{
	"--delivery-session-ttl", "8s", "--delivery-heartbeat-interval", "1s",
	"--delivery-fence-after", "4s", "--delivery-safety-margin", "2s",
}

// host is one saltbush replica running as `saltbush serve` of some
// release. Its ports are reserved for the test's length, so that a
// restart (another release's binary on the same data) listens where
// clients and agents already dial.
type host struct {
	t       *testing.T
	name    string
	dataDir string
	// etcd are external etcd endpoints; empty: serve's embedded etcd in
	// dataDir.
	etcd          []string
	masterKeyFile string
	http, grpc    *loopport.Reservation

	mu      sync.Mutex
	bin     string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string

	admin *grpc.ClientConn
}

type hostOptions struct {
	name string
	etcd []string
	// masterKeyFile is shared by replicas over one etcd.
	masterKeyFile string
}

// startHost runs bin as a replica and waits until it is ready.
func startHost(t *testing.T, bin string, o hostOptions) *host {
	t.Helper()
	if o.name == "" {
		o.name = "host"
	}
	h := &host{t: t, name: o.name, dataDir: filepath.Join(t.TempDir(), o.name), etcd: o.etcd, masterKeyFile: o.masterKeyFile}
	var err error
	if h.http, err = loopport.Reserve("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if h.grpc, err = loopport.Reserve("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.stop()
		if h.admin != nil {
			_ = h.admin.Close()
		}
		h.http.Release()
		h.grpc.Release()
	})
	h.start(bin)
	tlsDir := filepath.Join(h.dataDir, "pki")
	tlsCfg, err := tlsclient.Load(filepath.Join(tlsDir, "ca.crt"), filepath.Join(tlsDir, "admin.crt"), filepath.Join(tlsDir, "admin.key"), "127.0.0.1")
	if err != nil {
		t.Fatalf("%s: admin credentials: %v", h.name, err)
	}
	if h.admin, err = grpc.NewClient(h.grpcAddr(), grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg))); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) url() string      { return "http://" + h.http.Addr() }
func (h *host) grpcAddr() string { return h.grpc.Addr() }

// start runs bin on the host's data and ports and waits for /readyz.
func (h *host) start(bin string) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.MkdirAll(h.dataDir, 0o700); err != nil {
		h.t.Fatal(err)
	}
	args := append([]string{"serve", "--data-dir", h.dataDir, "--replica-name", h.name,
		"--http-addr", h.http.Addr(), "--grpc-addr", h.grpc.Addr(),
		"--log-json", "--log-level", "info", "--shutdown-timeout", "5s", "--throttle-rate", "0",
	}, deliveryTiming...)
	if len(h.etcd) > 0 {
		args = append(args, "--etcd-endpoints", strings.Join(h.etcd, ","), "--master-key-file", h.masterKeyFile)
	}
	h.bin = bin
	h.logPath = filepath.Join(h.dataDir, fmt.Sprintf("serve-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(h.logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	h.cmd = exec.Command(bin, args...)
	h.cmd.Stdout, h.cmd.Stderr = logFile, logFile
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	exited := make(chan struct{})
	h.exited = exited
	go func() {
		_ = h.cmd.Wait() // a replica stopped by the test exits non-zero
		_ = logFile.Close()
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := saltbushbin.WaitReady(ctx, h.url(), exited); err != nil {
		h.t.Fatalf("%s (%s): %v\n%s", h.name, bin, err, tail(h.logPath, 4000))
	}
}

// stop ends the replica with SIGTERM (SIGKILL after 20 s) and waits.
func (h *host) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(20 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
	h.cmd = nil
}

// restart stops the replica and starts bin on the same data, etcd and
// ports: an upgrade or a rollback of this replica.
func (h *host) restart(bin string) {
	h.t.Helper()
	h.stop()
	h.start(bin)
}

// errorLines are the ERROR lines of every log the replica wrote.
func (h *host) errorLines() []string {
	logs, _ := filepath.Glob(filepath.Join(h.dataDir, "serve-*.log"))
	var out []string
	for _, p := range logs {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct{ Level string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Level == "ERROR" {
				out = append(out, sc.Text())
			}
		}
		_ = f.Close()
	}
	return out
}

// IssueAgent issues an agent certificate through the replica's
// IdentityControlService, as `saltbush admin cert issue --agent` does.
func (h *host) IssueAgent(ctx context.Context, uid, instance string) (certPEM, keyPEM, bundlePEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := controlv1.NewIdentityControlServiceClient(h.admin).IssueCertificate(ctx, &controlv1.IssueCertificateRequest{
		CsrPem:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
		Subject: &controlv1.IssueCertificateRequest_Agent{Agent: &controlv1.AgentSubject{ClusterUid: uid, Instance: instance}},
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return []byte(out.GetCertificatePem()), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), []byte(out.GetCaBundlePem()), nil
}

// tail is the end of a file, for a failure's message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
