// Package agentproc builds the real saltbush-agent binary and runs it as a
// process for tests and benchmarks: with a certificate from an in-process
// saltbush's CA, a kubeconfig of the test's apiserver, and its status API
// on a free loopback port.
package agentproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/saltbush/saltbush/guest/agent"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/loopport"
)

// Build compiles cmd/saltbush-agent into dir (with the race detector when
// race) and returns the binary's path. A race build is linked by the Go
// linker alone, as `make unit` links the tests (see the Makefile's
// TEST_LDFLAGS): the agent's dependencies import package plugin, whose
// cgo would otherwise bring in the host linker for nothing.
func Build(dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "saltbush-agent")
	// -buildvcs=auto: the binary says the commit it was built from
	// (package release), whatever GOFLAGS the environment sets.
	args := []string{"build", "-buildvcs=auto", "-o", bin}
	if race {
		args = append(args, "-race", "-ldflags=-linkmode=internal")
	}
	cmd := exec.Command("go", append(args, "github.com/saltbush/saltbush/cmd/saltbush-agent")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build saltbush-agent: %v\n%s", err, out)
	}
	return bin, nil
}

// RaceBinaryEnv names a race-built agent binary that BuildTemp uses
// instead of building one: `make unit` builds it once for every test
// package that runs the agent, where each would otherwise link its own.
const RaceBinaryEnv = "SALTBUSH_AGENT_RACE_BIN"

// BuildTemp compiles cmd/saltbush-agent into a new temporary directory,
// as a test binary's TestMain does once for its tests; remove deletes the
// directory. A race build named by RaceBinaryEnv is used as it is (remove
// then leaves it).
func BuildTemp(race bool) (binary string, remove func(), err error) {
	if bin := os.Getenv(RaceBinaryEnv); race && bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("%s: %w", RaceBinaryEnv, err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "saltbush-agent-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	if binary, err = Build(dir, race); err != nil {
		remove()
		return "", nil, err
	}
	return binary, remove, nil
}

// Options say which member an agent is and where it connects.
type Options struct {
	// Binary is Build's result.
	Binary string
	// Dir holds the agent's credentials, log and (unless StateDir) state.
	Dir string
	// Server is a saltbush replica whose CA issues the certificate.
	Server *servertest.Server
	// Issuer issues it instead, when Server is nil: a saltbush running
	// as a process of its own.
	Issuer Issuer
	// Account, Cluster, UID and Instance name the member.
	Account, Cluster, UID, Instance string
	// Endpoints are the gRPC endpoints the agent dials.
	Endpoints []string
	// Kubeconfig is the agent's access to its apiserver.
	Kubeconfig string
	// StateDir reuses a state directory (a restart); Dir/state when "".
	StateDir string
	// Args are extra flags.
	Args []string
	// Without are flags of Start's own that the binary does not know (an
	// earlier release's agent), left out with their values.
	Without []string
}

// Issuer issues an agent's certificate for instance of the cluster uid,
// and gives the CA bundle that verifies saltbush's.
type Issuer interface {
	IssueAgent(ctx context.Context, uid, instance string) (certPEM, keyPEM, bundlePEM []byte, err error)
}

// serverIssuer is an in-process replica's CA.
type serverIssuer struct{ s *servertest.Server }

func (i serverIssuer) IssueAgent(ctx context.Context, uid, instance string) (certPEM, keyPEM, bundlePEM []byte, err error) {
	certPEM, keyPEM, _, err = i.s.Authority().IssueLocal(ctx, identity.AgentID(uid, instance), time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	bundlePEM, _ = i.s.Authority().Bundle()
	return certPEM, keyPEM, bundlePEM, nil
}

// Process is one running agent.
type Process struct {
	Instance   string
	StateDir   string
	StatusAddr string
	LogPath    string
	cmd        *exec.Cmd
	done       chan error
}

// Start issues the agent's certificate and starts it.
func Start(ctx context.Context, o Options) (*Process, error) {
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.Dir, "state")
	}
	issuer := o.Issuer
	if o.Server != nil {
		issuer = serverIssuer{o.Server}
	}
	if issuer == nil {
		return nil, errors.New("agentproc: Options name neither a Server nor an Issuer")
	}
	certPEM, keyPEM, bundle, err := issuer.IssueAgent(ctx, o.UID, o.Instance)
	if err != nil {
		return nil, fmt.Errorf("issue agent certificate: %w", err)
	}
	for name, b := range map[string][]byte{"agent.crt": certPEM, "agent.key": keyPEM, "ca.crt": bundle, "none.yaml": nil} {
		if err := os.WriteFile(filepath.Join(o.Dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	// Held while the agent runs: the address is passed on before the
	// agent binds it.
	port, err := loopport.Reserve("127.0.0.1")
	if err != nil {
		return nil, err
	}
	p := &Process{Instance: o.Instance, StateDir: o.StateDir, StatusAddr: port.Addr(), done: make(chan error, 1),
		LogPath: filepath.Join(o.Dir, "agent-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".log")}
	args := append([]string{"run",
		"--config", filepath.Join(o.Dir, "none.yaml"), // an empty file: everything is a flag
		"--account-id", o.Account, "--cluster-name", o.Cluster, "--cluster-uid", o.UID, "--instance-id", o.Instance,
		"--endpoint", strings.Join(o.Endpoints, ","),
		"--cert", filepath.Join(o.Dir, "agent.crt"), "--key", filepath.Join(o.Dir, "agent.key"), "--ca", filepath.Join(o.Dir, "ca.crt"),
		"--kubeconfig", o.Kubeconfig, "--state-dir", o.StateDir, "--status-addr", p.StatusAddr, "--webhook-addr", "",
		"--pod-identity-webhook-addr", "",
		"--backoff-initial", "100ms", "--backoff-max", "2s", "--log-level", "debug",
	}, o.Args...)
	args = without(args, o.Without)
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		port.Release()
		return nil, err
	}
	p.cmd = exec.Command(o.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// A test binary that dies takes its agents with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		port.Release()
		return nil, fmt.Errorf("start agent %s: %w", o.Instance, err)
	}
	go func() {
		err := p.cmd.Wait()
		_ = logFile.Close()
		port.Release()
		p.done <- err
	}()
	return p, nil
}

// without is args with each flag of names (and its value) left out. The
// flags are Start's own, each "--name value".
func without(args, names []string) []string {
	out := args[:0:0]
	for i := 0; i < len(args); i++ {
		if slices.Contains(names, strings.TrimPrefix(args[i], "--")) {
			i++ // its value
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill ends the agent with SIGKILL: no cleanup of any kind.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err // later waits return at once
}

// Stop ends the agent with SIGTERM and waits (SIGKILL after 10 s).
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Log is the agent's log so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Status reads the agent's status API.
func (p *Process) Status(ctx context.Context) (agent.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.StatusAddr+"/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return agent.Status{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return agent.Status{}, errors.New(resp.Status)
	}
	var st agent.Status
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Memory is the process's resident memory, from /proc/PID/status: all of
// it, its anonymous part (heap, stacks) and its file-backed part (the
// binary's pages, shared with any other process running it).
func (p *Process) Memory() (rss, anon, file int64, err error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "RssAnon:":
			anon = kb << 10
		case "RssFile:":
			file = kb << 10
		}
	}
	return rss, anon, file, nil
}

// Usage is the process's resident memory and CPU time so far, from /proc.
func (p *Process) Usage() (rssBytes int64, cpu time.Duration, err error) {
	pid := strconv.Itoa(p.PID())
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rssBytes = kb << 10
		}
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command (which may hold spaces) start at ") ".
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return rssBytes, time.Duration(utime+stime) * time.Second / ticks, nil
}
