package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/saltbush/saltbush/store"
)

// sample is one point of the time series: the process's resources, etcd's
// size, and what the SDK clients and agents did in the interval that ended
// at At.
type sample struct {
	At time.Duration // since the load started
	// RSS, the heap, stacks, goroutines and CPU are saltbush's: this whole
	// process (etcd members, replicas, clients, agents), or with -apart
	// the replicas' processes summed.
	RSS       uint64 // bytes
	HeapInuse uint64
	// HeapLive is the heap the last GC marked live: what the program
	// holds, without the garbage the next GC frees (HeapInuse swings by
	// that much between cycles).
	HeapLive   uint64
	StackInuse uint64
	Goroutines int
	DBSize     int64 // etcd's backend file, the largest member's
	DBInUse    int64
	Keys       int64   // keys under saltbush's prefix
	Revision   int64   // etcd's revision: the writes since it started
	Writes     float64 // etcd writes per second over the interval (revisions)
	Load1      float64 // the machine's 1-minute load average
	CPU        float64 // CPU over the interval, in cores
	// EtcdCPU and LoadCPU are, with -apart, the etcd members' process's
	// and this one's (the harness's) CPU over the interval; EtcdRSS the
	// members' resident set.
	EtcdCPU, LoadCPU float64
	EtcdRSS          uint64

	Interval time.Duration
	SDKOps   int64
	// Errs is every failure of the interval, the SDK clients' and the
	// agents'.
	Errs     int64
	P50, P99 time.Duration // over every SDK operation of the interval
	Reports  int64
	PerOp    map[string]intervalSnapshot
}

// procStats is what a sample reads of a process (or of several, summed).
type procStats struct {
	RSS, HeapLive, HeapInuse, StackInuse uint64
	Goroutines                           int
	CPU                                  time.Duration // user + system, so far
}

// sampler takes a sample every period, prints it, and keeps the series
// (a few hundred points at most: it is not what a long run grows by).
type sampler struct {
	cli     *clientv3.Client
	members []string
	rec     *recorder
	sdkOps  []string
	out     io.Writer
	// procs are the -apart run's other processes; nil when everything
	// runs in this one.
	procs *system

	start                             time.Time
	last                              time.Time
	lastCPU, lastEtcdCPU, lastSelfCPU time.Duration
	lastRev                           int64
	samples                           []sample
}

func newSampler(cli *clientv3.Client, members []string, procs *system, rec *recorder, sdkOps []string, out io.Writer) *sampler {
	return &sampler{cli: cli, members: members, procs: procs, rec: rec, sdkOps: sdkOps, out: out}
}

// saltbush reads saltbush's figures: this process's, or with -apart the
// replicas'.
func (s *sampler) saltbush(ctx context.Context) procStats {
	if s.procs != nil {
		return s.procs.replicasStats(ctx)
	}
	return selfStats()
}

// begin takes the baseline (t = 0, no operations) and starts the clock.
func (s *sampler) begin(ctx context.Context) {
	s.start = time.Now()
	s.last = s.start
	s.lastCPU = s.saltbush(ctx).CPU
	if s.procs != nil {
		s.lastEtcdCPU, s.lastSelfCPU = s.procs.etcd.cpu(), processCPU()
	}
	s.rec.takeInterval()
	apart := ""
	if s.procs != nil {
		apart = fmt.Sprintf(" %6s %6s", "etcd", "load")
	}
	_, _ = fmt.Fprintf(s.out, "%7s %8s %8s %6s %8s %7s %8s %6s %5s%s %6s %7s %7s %7s %6s\n",
		"t", "RSS MiB", "live MiB", "gorout", "etcd MiB", "keys", "writes/s", "load1", "CPU", apart, "ops/s", "p50 ms", "p99 ms", "reports", "errors")
	s.take(ctx)
}

// run samples every period until ctx ends.
func (s *sampler) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.take(ctx)
		}
	}
}

// take records and prints one sample.
func (s *sampler) take(ctx context.Context) sample {
	now := time.Now()
	st := s.saltbush(ctx)
	sm := sample{
		At: now.Sub(s.start), RSS: st.RSS, HeapLive: st.HeapLive, HeapInuse: st.HeapInuse, StackInuse: st.StackInuse,
		Goroutines: st.Goroutines, Load1: loadAverage(), Interval: now.Sub(s.last),
	}
	if sm.Interval > 0 {
		sm.CPU = float64(st.CPU-s.lastCPU) / float64(sm.Interval)
	}
	s.lastCPU = st.CPU
	if s.procs != nil {
		etcdCPU, selfCPU := s.procs.etcd.cpu(), processCPU()
		if sm.Interval > 0 {
			sm.EtcdCPU = float64(etcdCPU-s.lastEtcdCPU) / float64(sm.Interval)
			sm.LoadCPU = float64(selfCPU-s.lastSelfCPU) / float64(sm.Interval)
		}
		s.lastEtcdCPU, s.lastSelfCPU = etcdCPU, selfCPU
		sm.EtcdRSS = s.procs.etcd.rss()
	}
	s.last = now
	sm.DBSize, sm.DBInUse, sm.Keys, sm.Revision = s.etcdSize(ctx)
	if s.lastRev > 0 && sm.Revision > 0 && sm.Interval > 0 {
		sm.Writes = float64(sm.Revision-s.lastRev) / sm.Interval.Seconds()
	}
	if sm.Revision > 0 {
		s.lastRev = sm.Revision
	}
	sm.PerOp = s.rec.takeInterval()
	var all histogram
	for _, op := range s.sdkOps {
		iv := sm.PerOp[op]
		all.merge(&iv.hist)
		sm.SDKOps += iv.hist.n
		sm.Errs += iv.errs
	}
	sm.P50, sm.P99 = all.quantile(0.50), all.quantile(0.99)
	rep := sm.PerOp[opReport]
	sm.Reports = rep.hist.n + rep.errs
	for _, op := range []string{opReport, opStream} {
		sm.Errs += sm.PerOp[op].errs
	}
	s.samples = append(s.samples, sm)
	opsPerSec := 0.0
	if sm.Interval > 0 && sm.At > 0 {
		opsPerSec = float64(sm.SDKOps) / sm.Interval.Seconds()
	}
	apart := ""
	if s.procs != nil {
		apart = fmt.Sprintf(" %6.2f %6.2f", sm.EtcdCPU, sm.LoadCPU)
	}
	_, _ = fmt.Fprintf(s.out, "%6.0fs %8.1f %8.1f %6d %8.1f %7d %8.1f %6.2f %5.2f%s %6.1f %7.2f %7.2f %7d %6d\n",
		sm.At.Seconds(), mib(sm.RSS), mib(sm.HeapLive), sm.Goroutines, mib(uint64(max(sm.DBSize, 0))), sm.Keys, sm.Writes, sm.Load1, sm.CPU,
		apart, opsPerSec, ms2(sm.P50), ms2(sm.P99), sm.Reports, sm.Errs)
	return sm
}

// etcdSize is the largest member's backend size and in-use size, the
// number of saltbush keys and the revision (-1 each when etcd did not
// answer in time).
func (s *sampler) etcdSize(ctx context.Context) (size, inUse, keys, rev int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	size, inUse, keys, rev = -1, -1, -1, -1
	for _, ep := range s.members {
		st, err := s.cli.Status(ctx, ep)
		if err != nil {
			continue
		}
		size, inUse = max(size, st.DbSize), max(inUse, st.DbSizeInUse)
	}
	if resp, err := s.cli.Get(ctx, store.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		keys, rev = resp.Count, resp.Header.Revision
	}
	return size, inUse, keys, rev
}

// compactor compacts etcd's history every period to the revision of the
// period before, as an operator's compaction job (or kube-apiserver's,
// every 5 minutes) does: without it etcd keeps every revision for its own
// hourly auto-compaction, and its memory grows with the run's writes, which
// would hide what saltbush's own memory does.
type compactor struct {
	cli        *clientv3.Client
	runs, errs int
}

func (c *compactor) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var prev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := c.cli.Get(cctx, "saltbush-load-revision-probe", clientv3.WithCountOnly())
		if err == nil && prev > 0 {
			_, err = c.cli.Compact(cctx, prev)
			c.runs++
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.errs++
			continue
		}
		prev = resp.Header.Revision
	}
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfStats is this process's figures.
func selfStats() procStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := procStats{
		RSS: statusRSS("/proc/self/status"), HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse,
		Goroutines: runtime.NumGoroutine(), CPU: processCPU(),
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		st.HeapLive = live[0].Value.Uint64()
	}
	return st
}

// statusRSS is the resident set a /proc/PID/status file gives, in bytes
// (0 when it cannot be read: the process has exited).
func statusRSS(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(string(f[0]), 64)
	return v
}

// loadAverages is /proc/loadavg's 1, 5 and 15-minute averages, as uptime
// prints them.
func loadAverages() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
