package main

// -apart: the system under test in processes of its own. The etcd members
// run in a child of this program (roleEnv), each replica is the real
// `saltbush serve` over them, and this process keeps only the harness:
// the SDK clients, the agents and the sampler. A replica's CPU, memory,
// garbage collections and profiles are then its own, not shared with the
// 2 100 agent streams' other ends or the clients' SigV4 signing.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/saltbush/saltbush/profiling"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/saltbushbin"
)

const (
	// roleEnv, set to etcdMembersRole in a child's environment, makes
	// this program (or the package's test binary: TestMain looks too)
	// the etcd members' process of an -apart run.
	roleEnv         = "SALTBUSH_LOAD_ROLE"
	etcdMembersRole = "etcd-members"

	// childStartTimeout bounds a child's start: etcd's first election,
	// a replica's catalogue check and bootstrap, on a loaded machine.
	childStartTimeout = 2 * time.Minute
	// childStopTimeout is how long a SIGTERM may take before SIGKILL: a
	// replica's graceful shutdown (--shutdown-timeout 10s) and etcd's.
	childStopTimeout = 30 * time.Second
)

// runRole runs this program as the child roleEnv names and returns its
// exit code.
func runRole(role string, args []string) int {
	if role != etcdMembersRole {
		fmt.Fprintf(os.Stderr, "load: %s=%q: unknown role\n", roleEnv, role)
		return 2
	}
	if err := runEtcdMembers(args); err != nil {
		fmt.Fprintln(os.Stderr, "load: etcd members:", err)
		return 1
	}
	return 0
}

// runEtcdMembers starts a 3-member embedded etcd, prints "endpoints
// URL,URL,URL" on stdout once all serve, and stops them on SIGTERM.
func runEtcdMembers(args []string) error {
	fs := flag.NewFlagSet(etcdMembersRole, flag.ContinueOnError)
	dir := fs.String("dir", "", "the members' data directories' parent")
	fsync := fs.Bool("fsync", false, "the members fsync their writes")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *pprofAddr != "" {
		if err := profiling.Serve(ctx, *pprofAddr); err != nil {
			return err
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	cl, err := embedetcd.StartCluster(startCtx, embedetcd.ClusterConfig{Dir: *dir, Size: 3, UnsafeNoFsync: !*fsync})
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := fmt.Printf("endpoints %s\n", strings.Join(cl.Endpoints(), ",")); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// system is the processes of an -apart run besides this one.
type system struct {
	bin     string // saltbush
	dir     string // the run's data directory
	logs    *logCounter
	godebug string // GODEBUG of the children (-child-godebug)
	pprof   string // -child-pprof: etcd's address; replica i's is its port + 1 + i

	etcd          *child
	etcdEndpoints []string
	mu            sync.Mutex
	replicas      []*replicaProc
}

// replicaProc is a replica: its current process, which a rolling upgrade
// replaces (roll.go), and what starting one takes.
type replicaProc struct {
	name string
	args []string // serve and its flags, the same for every process
	// url and grpcAddr are where it serves: its "saltbush serving" line's
	// addresses, or in a rolling run the reserved ports, which every
	// process of it listens on.
	url, grpcAddr string
	// ports are a rolling run's reserved ports, HTTP's and gRPC's, held
	// until stop.
	ports []*loopport.Reservation

	mu  sync.Mutex
	cur *child // nil between a process's end and the next's start
	bin string // cur's binary
	// starts counts the processes started (their logs are apart).
	starts int
	// retiredCPU is the CPU time of the replica's processes that have
	// ended, so that its CPU over the run counts every one.
	retiredCPU time.Duration
}

// childEnv is this process's environment without SALTBUSH_ variables
// (serve reads SALTBUSH_<FLAG> for every flag not given: none of the
// caller's may change the children's configuration) and with GODEBUG as
// -child-godebug says, then extra.
func (s *system) childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SALTBUSH_") && !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	if s.godebug != "" {
		env = append(env, "GODEBUG="+s.godebug)
	}
	return append(env, extra...)
}

// childPprof is the profiling address of child i (0 etcd, 1+n replica n),
// or "" without -child-pprof.
func (s *system) childPprof(i int) (string, error) {
	if s.pprof == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(s.pprof)
	if err != nil {
		return "", fmt.Errorf("-child-pprof: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("-child-pprof: port %q: %w", port, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i)), nil
}

// startEtcd starts the etcd members' process and reads their endpoints.
func (s *system) startEtcd(ctx context.Context, fsync bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pp, err := s.childPprof(0)
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-dir", filepath.Join(s.dir, "etcd"), "-fsync="+strconv.FormatBool(fsync), "-pprof", pp)
	cmd.Env = s.childEnv(roleEnv + "=" + etcdMembersRole)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if s.etcd, err = startChild("etcd", cmd, filepath.Join(s.dir, "etcd.log"), func([]byte) {}); err != nil {
		return err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	ctx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	select {
	case line, ok := <-lines:
		eps, found := strings.CutPrefix(line, "endpoints ")
		if !ok || !found {
			s.stopEtcd()
			return fmt.Errorf("etcd members: no endpoints (%v); their log is %s", s.etcd.exitErr(), s.etcd.logPath)
		}
		s.etcdEndpoints = strings.Split(eps, ",")
		return nil
	case <-ctx.Done():
		s.stopEtcd()
		return fmt.Errorf("etcd members: not serving within %s; their log is %s", childStartTimeout, s.etcd.logPath)
	}
}

func (s *system) stopEtcd() {
	if err := s.etcd.stop(); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "load: etcd members: %v\n", err)
	}
}

// servingLine is the fields of serve's JSON log lines that the harness
// reads: the "saltbush serving" line's addresses, and the level, message
// and error of every line, to count warnings and errors.
type servingLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Err   string `json:"err"`
	HTTP  string `json:"http"`
	GRPC  string `json:"grpc"`
}

// startReplica starts replica i as `saltbush serve` over the etcd members,
// on ports the kernel picks (its "saltbush serving" line says which), and
// waits until its /readyz answers. In a rolling run (-saltbush-from) it
// runs the older binary, on ports reserved for the whole run: the process
// that replaces it listens where the front and the agents already dial.
func (s *system) startReplica(ctx context.Context, o *options, i int, masterKey []byte) (_ *replica, err error) {
	name := fmt.Sprintf("load-%d", i)
	dataDir := filepath.Join(s.dir, fmt.Sprintf("replica-%d", i))
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	// Every replica seals secrets with the same key, as a deployment's do.
	keyFile := filepath.Join(s.dir, "master.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(masterKey)+"\n"), 0o600); err != nil {
		return nil, err
	}
	pp, err := s.childPprof(1 + i)
	if err != nil {
		return nil, err
	}
	p := &replicaProc{name: name}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	bin, httpAddr, grpcAddr := s.bin, "127.0.0.1:0", "127.0.0.1:0"
	if o.saltbushFrom != "" {
		for range 2 {
			r, err := loopport.Reserve("127.0.0.1")
			if err != nil {
				return nil, fmt.Errorf("replica %s: %w", name, err)
			}
			p.ports = append(p.ports, r)
		}
		bin, httpAddr, grpcAddr = o.saltbushFrom, p.ports[0].Addr(), p.ports[1].Addr()
		p.url, p.grpcAddr = "http://"+httpAddr, grpcAddr
	}
	args := []string{"serve",
		"--data-dir", dataDir, "--etcd-endpoints", strings.Join(s.etcdEndpoints, ","), "--master-key-file", keyFile,
		"--http-addr", httpAddr, "--grpc-addr", grpcAddr, "--replica-name", name,
		"--throttle-rate", strconv.FormatFloat(o.throttleRate, 'f', -1, 64), "--throttle-burst", strconv.Itoa(o.throttleBurst),
		// Audit records to a file, as a deployment keeps them; the log
		// as JSON lines, so the harness parses rather than scrapes it.
		"--audit-log", filepath.Join(dataDir, "audit.log"), "--log-json", "--log-level", "info",
		"--shutdown-timeout", "10s",
	}
	if pp != "" {
		args = append(args, "--profiling-addr", pp)
	}
	p.args = args
	if err := s.start(ctx, p, bin); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.replicas = append(s.replicas, p)
	s.mu.Unlock()
	return &replica{name: name, url: p.url, grpcAddr: p.grpcAddr, tlsDir: server.Config{DataDir: dataDir}.TLSDir(), stop: p.stop}, nil
}

// start starts a process of p as bin and waits until its /readyz
// answers. The first learns p's addresses from its "saltbush serving"
// line, unless they were reserved. A process that does not become ready
// is stopped.
func (s *system) start(ctx context.Context, p *replicaProc, bin string) (err error) {
	p.mu.Lock()
	p.starts++
	logPath := filepath.Join(s.dir, p.name+".log")
	if p.starts > 1 {
		logPath = filepath.Join(s.dir, fmt.Sprintf("%s.%d.log", p.name, p.starts))
	}
	p.mu.Unlock()
	cmd := exec.Command(bin, p.args...)
	cmd.Env = s.childEnv()
	serving := make(chan servingLine, 1)
	c, err := startChild(p.name, cmd, logPath, func(line []byte) {
		var l servingLine
		if json.Unmarshal(line, &l) != nil {
			return
		}
		if l.Msg == "saltbush serving" && l.HTTP != "" && l.GRPC != "" {
			select {
			case serving <- l:
			default:
			}
		}
		if l.Level == "WARN" || l.Level == "ERROR" {
			s.logs.count(l.Level, l.Msg, l.Err, p.name+" "+string(line))
		}
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cur, p.bin = c, bin
	p.mu.Unlock()
	defer func() {
		if err != nil {
			p.retire(c)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	if p.url == "" {
		select {
		case l := <-serving:
			p.url, p.grpcAddr = "http://"+l.HTTP, l.GRPC
		case <-c.exited:
			return fmt.Errorf("replica %s exited before serving (%v); its log is %s", p.name, c.exitErr(), c.logPath)
		case <-ctx.Done():
			return fmt.Errorf("replica %s not serving within %s; its log is %s", p.name, childStartTimeout, c.logPath)
		}
	}
	if err := saltbushbin.WaitReady(ctx, p.url, c.exited); err != nil {
		return fmt.Errorf("replica %s: %w (exit: %v); its log is %s", p.name, err, c.exitErr(), c.logPath)
	}
	return nil
}

// retire stops c (if it still runs), p's current process, and counts its
// CPU time as the replica's past.
func (p *replicaProc) retire(c *child) {
	select {
	case <-c.exited:
	default:
		_ = c.stop() // the caller has the reason it goes
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retiredCPU += c.cpu()
	if p.cur == c {
		p.cur = nil
	}
}

// current is p's process (nil between two) and its binary.
func (p *replicaProc) current() (*child, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur, p.bin
}

// stop ends the replica's process at the run's end (a process that had
// exited by itself is reported) and gives its ports back.
func (p *replicaProc) stop() {
	if c, _ := p.current(); c != nil {
		if err := c.stop(); err != nil {
			_, _ = fmt.Fprintf(os.Stderr, "load: replica %s: %v\n", p.name, err)
		}
	}
	for _, r := range p.ports {
		r.Release()
	}
}

// saltbushBinary is $SALTBUSH_BIN, or else cmd/saltbush built into a
// temporary directory under parent, which cleanup removes.
func saltbushBinary(parent string, progress io.Writer) (bin string, cleanup func(), err error) {
	if bin := os.Getenv(saltbushbin.Env); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("%s: %w", saltbushbin.Env, err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp(parent, "saltbush-load-bin-")
	if err != nil {
		return "", nil, err
	}
	done := stepper(progress)("build cmd/saltbush")
	if bin, err = saltbushbin.Build(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	done()
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}

// child is a process this program started. Its stderr goes to a file in
// the run's directory (kept with -keep) and, a line at a time, to onLine.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string

	exited  chan struct{} // closed when the process has exited
	mu      sync.Mutex
	waitErr error // cmd.Wait's result, set before exited closes
}

func startChild(name string, cmd *exec.Cmd, logPath string, onLine func(line []byte)) (*child, error) {
	// A harness that dies takes its children with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return nil, err
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logf.Write(append(line, '\n'))
			onLine(line)
		}
		// A line past the scanner's limit ends the scan: the rest still
		// goes to the file, so the child never blocks on its stderr.
		_, _ = io.Copy(logf, stderr)
		_ = logf.Close()
		// Wait closes the pipe: only once it has been read to its end.
		err := cmd.Wait()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) exitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitErr
}

// stop ends the child with SIGTERM and waits, with SIGKILL after
// childStopTimeout. A child that had exited already, or that SIGTERM did
// not end cleanly, is an error.
func (c *child) stop() error {
	select {
	case <-c.exited:
		return fmt.Errorf("exited before it was stopped (%v); its log is %s", c.exitErr(), c.logPath)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(childStopTimeout)
	defer t.Stop()
	select {
	case <-c.exited:
		if err := c.exitErr(); err != nil {
			return fmt.Errorf("exited with %v after SIGTERM; its log is %s", err, c.logPath)
		}
		return nil
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("did not stop within %s of SIGTERM; killed", childStopTimeout)
	}
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go runs on).
const clockTick = 10 * time.Millisecond

// cpu is the child's user + system CPU time so far, every thread's, from
// /proc/PID/stat, or once it has exited the total that Wait got.
func (c *child) cpu() time.Duration {
	select {
	case <-c.exited:
		// ProcessState is set before exited closes.
		if ps := c.cmd.ProcessState; ps != nil {
			return ps.UserTime() + ps.SystemTime()
		}
		return 0
	default:
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields that follow it start
	// after its closing parenthesis, with the state (field 3).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return time.Duration(utime+stime) * clockTick
}

// rss is the child's resident set, in bytes (0 once it has exited).
func (c *child) rss() uint64 { return statusRSS(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)) }

// replicaMetrics are the Go runtime's figures of a replica, from its
// /metrics (the Go collector's).
func replicaMetrics(ctx context.Context, url string) (procStats, error) {
	// The last sample is taken as the run's context ends: it still reads.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil) //nolint:gosec // G704: the /metrics of a replica this program started on loopback
	if err != nil {
		return procStats{}, err
	}
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // G704: as above
	if err != nil {
		return procStats{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return procStats{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var st procStats
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			st.Goroutines = int(v)
		case "go_gc_heap_live_bytes":
			st.HeapLive = uint64(v)
		case "go_memstats_heap_inuse_bytes":
			st.HeapInuse = uint64(v)
		case "go_memstats_stack_inuse_bytes":
			st.StackInuse = uint64(v)
		}
	}
	return st, sc.Err()
}

// replicasStats is the replicas' figures summed: what saltbush itself
// holds and spends in an -apart run.
func (s *system) replicasStats(ctx context.Context) procStats {
	s.mu.Lock()
	procs := append([]*replicaProc(nil), s.replicas...)
	s.mu.Unlock()
	var sum procStats
	for _, p := range procs {
		p.mu.Lock()
		c, cpu := p.cur, p.retiredCPU
		p.mu.Unlock()
		sum.CPU += cpu
		if c == nil {
			continue // being restarted
		}
		m, _ := replicaMetrics(ctx, p.url+"/metrics") // a sample without them shows zeros
		sum.RSS += c.rss()
		sum.CPU += c.cpu()
		sum.HeapLive += m.HeapLive
		sum.HeapInuse += m.HeapInuse
		sum.StackInuse += m.StackInuse
		sum.Goroutines += m.Goroutines
	}
	return sum
}
