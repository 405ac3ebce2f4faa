// Command load runs saltbush under a realistic mix for a while and says
// what it did: throughput and latency per operation, errors by type, and
// the process's memory, goroutines and etcd's size over time, with a
// verdict on whether memory stayed flat. It starts everything in this
// process: a 3-member embedded etcd (store/embedetcd), one or two saltbush
// replicas over it (server.New, as `saltbush serve --etcd-endpoints` builds
// them), AWS SDK for Go v2 clients signing with SigV4 against the façade,
// and protocol-level guest agents (tests/fakeagent) holding delivery
// streams. docs/performance.md has the measurements and how to reproduce
// them.
//
//	go run ./tests/load                          # 1 replica, 3 minutes
//	go run ./tests/load -replicas both -duration 5m -csv load.csv -png load.png
//	go run ./tests/load -apart -replicas 2 -saltbush-from OLD -roll-at 30s   # a rolling upgrade under load
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	"golang.org/x/time/rate"

	"github.com/saltbush/saltbush/profiling"
)

// options are the flags.
type options struct {
	replicas string
	duration time.Duration
	sample   time.Duration
	clients  int
	rateSpec string
	// rates are -rate's: one, or several for a sweep.
	rates          []float64
	accounts       int
	clusters       int
	agents         int
	prefillAddons  int
	prefillEntries int
	reportEvery    time.Duration
	compactEvery   time.Duration
	fsync          bool
	throttleRate   float64
	throttleBurst  int
	mixSpec        string
	csv, png, dir  string
	keep, verbose  bool
	pprof          string
	apart          bool
	saltbushBin    string
	// saltbushFrom is -saltbush-from: the replicas start as it and are
	// upgraded to saltbushBin rollAt into the first rate's load.
	saltbushFrom string
	rollAt       time.Duration
	childGODEBUG string
	childPprof   string
	seed         uint64
	flatPct      float64

	mix *mix
}

func parseFlags(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.replicas, "replicas", "1", "saltbush replicas sharing the etcd: 1, 2, or both (1 then 2, each on a fresh etcd, results side by side)")
	fs.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the load runs (after setup)")
	fs.DurationVar(&o.sample, "sample", 10*time.Second, "how often RSS, heap, goroutines, etcd's size and the interval's latencies are sampled and printed")
	fs.IntVar(&o.clients, "clients", 48, "concurrent AWS SDK clients (spread over the accounts and the replicas); each owns some of its account's clusters")
	fs.StringVar(&o.rateSpec, "rate", "100", "SDK calls per second over all clients; 0 runs them closed loop (each calls again as soon as it has an answer). "+
		"A list (e.g. 100,200,400,800) sweeps: each rate runs for -duration on the same world, one after the other, and the results say where the p99 crosses 100 ms")
	fs.IntVar(&o.accounts, "accounts", 6, "AWS accounts (tenants), each with an IAM user whose policy allows eks:*; the clusters are spread over them")
	fs.IntVar(&o.clusters, "clusters", 700, "ACTIVE clusters")
	fs.IntVar(&o.agents, "agents", 2100, "guest agents, each holding one delivery stream; agent i is a member of cluster i mod -clusters")
	fs.IntVar(&o.prefillAddons, "prefill-addons", 2, "add-ons each cluster gets before the load starts (at most 6)")
	fs.IntVar(&o.prefillEntries, "prefill-entries", 2, "access entries each cluster gets before the load starts, besides its creator's")
	fs.DurationVar(&o.reportEvery, "report-every", 30*time.Second, "each executor repeats the READY reports of its add-ons this often (level-triggered reports, as after a reconnect); 0 reports only what changed")
	fs.DurationVar(&o.compactEvery, "compact", time.Minute, "compact etcd's history every this long, to the revision of the previous compaction (0 leaves etcd's hourly auto-compaction)")
	fs.BoolVar(&o.fsync, "fsync", false, "etcd fsyncs its writes (off by default: the WAL on a shared disk would measure the disk)")
	fs.Float64Var(&o.throttleRate, "throttle-rate", 50, "per-account request rate of saltbush's throttle (saltbush serve's default); 0 turns it off")
	fs.IntVar(&o.throttleBurst, "throttle-burst", 100, "per-account burst of saltbush's throttle")
	fs.StringVar(&o.mixSpec, "mix", "", "operation weights to change, e.g. 'DescribeAddon=40,UpdateAddon=0' (operations: "+strings.Join(opNames(), ", ")+")")
	fs.StringVar(&o.csv, "csv", "", "write the time series (every sample, every operation's interval p50/p99) to this CSV file")
	fs.StringVar(&o.png, "png", "", "write a plot of latency (p50/p99 per interval) and RSS over time to this PNG file")
	fs.StringVar(&o.dir, "dir", "", "parent of the run's data directory (etcd members, replicas); the system's temporary directory when empty")
	fs.BoolVar(&o.keep, "keep", false, "keep the data directory after the run")
	fs.BoolVar(&o.verbose, "v", false, "print the replicas' warnings and errors as they are logged (they are counted either way)")
	fs.StringVar(&o.pprof, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060) while the program runs, to profile the replicas under load")
	fs.BoolVar(&o.apart, "apart", false, "run the etcd members in a child process and each replica as `saltbush serve`, so that their CPU, memory and profiles are theirs alone, not shared with the clients and agents")
	fs.StringVar(&o.saltbushBin, "saltbush", "", "with -apart, the saltbush binary the replicas run ($SALTBUSH_BIN, else cmd/saltbush built into the run's directory)")
	fs.StringVar(&o.saltbushFrom, "saltbush-from", "", "with -apart, an older saltbush binary the replicas start as: -roll-at into the (first) rate's load they are upgraded to -saltbush "+
		"one at a time (SIGTERM, wait for the exit, start -saltbush on the same data directory and ports, wait until ready), while the SDK clients go through "+
		"a TCP balancer over every replica and each agent has every replica as an endpoint; the result says what each replica took, "+
		"which errors the SDK's standard retryer would have retried, and checks the add-ons and the keyspace after the load")
	fs.DurationVar(&o.rollAt, "roll-at", 30*time.Second, "with -saltbush-from, how long into the (first) rate's load the rolling upgrade starts")
	fs.StringVar(&o.childGODEBUG, "child-godebug", "", "with -apart, GODEBUG of the etcd members' and the replicas' processes (e.g. gctrace=1: their logs in the run's directory show each GC)")
	fs.StringVar(&o.childPprof, "child-pprof", "", "with -apart, serve the etcd members' profiles on this address and replica i's on its port + 1 + i (saltbush serve --profiling-addr)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the clients' random choices")
	fs.Float64Var(&o.flatPct, "flat", 1, "memory counts as flat when RSS and heap grow by at most this percent of their mean per minute over the second half")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(errOut, "usage: go run ./tests/load [flags]\n\n"+
			"Starts a 3-member embedded etcd and saltbush replicas in this process, drives AWS SDK clients and\n"+
			"delivery agents against them for -duration, and prints throughput, latency per operation, errors by\n"+
			"type and memory over time (docs/performance.md).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var errs []error
	switch o.replicas {
	case "1", "2", "both":
	default:
		errs = append(errs, fmt.Errorf("-replicas must be 1, 2 or both, not %q", o.replicas))
	}
	if o.duration <= 0 || o.sample <= 0 {
		errs = append(errs, errors.New("-duration and -sample must be positive"))
	}
	if o.accounts < 1 || o.clusters < 1 || o.clients < 1 || o.agents < 0 {
		errs = append(errs, errors.New("-accounts, -clusters and -clients must be at least 1, -agents not negative"))
	}
	for _, f := range strings.Split(o.rateSpec, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r < 0 {
			errs = append(errs, fmt.Errorf("-rate: %q is not a rate (calls per second, 0 or more)", f))
			continue
		}
		o.rates = append(o.rates, r)
	}
	if o.clients < o.accounts || o.clusters < o.accounts {
		errs = append(errs, fmt.Errorf("every account needs a client and a cluster: -clients %d and -clusters %d must be at least -accounts %d", o.clients, o.clusters, o.accounts))
	}
	if !o.apart && (o.saltbushBin != "" || o.childGODEBUG != "" || o.childPprof != "") {
		errs = append(errs, errors.New("-saltbush, -child-godebug and -child-pprof need -apart"))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.saltbushFrom != "" && !o.apart:
		errs = append(errs, errors.New("-saltbush-from needs -apart: only replicas running as processes of their own can be stopped and started as another binary"))
	case o.saltbushFrom == "" && set["roll-at"]:
		errs = append(errs, errors.New("-roll-at needs -saltbush-from: there is no upgrade to start"))
	case o.saltbushFrom != "" && (o.rollAt < 0 || o.rollAt >= o.duration):
		errs = append(errs, fmt.Errorf("-roll-at %s must be within -duration %s: the roll starts during the load", o.rollAt, o.duration))
	}
	var err error
	if o.mix, err = parseMix(o.mixSpec); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.pprof != "" {
		if err := profiling.Serve(ctx, o.pprof); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
	}
	results, err := runAll(ctx, o, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if err := writeOutputs(o, results, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// runAll runs the replica counts -replicas asks for, one after the other,
// and prints each result and, for both, the comparison.
func runAll(ctx context.Context, o *options, out, progress io.Writer) ([]*result, error) {
	if o.apart && o.saltbushBin == "" {
		bin, cleanup, err := saltbushBinary(o.dir, progress)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		o.saltbushBin = bin
	}
	counts := map[string][]int{"1": {1}, "2": {2}, "both": {1, 2}}[o.replicas]
	var results []*result
	for i, n := range counts {
		if i > 0 {
			// The next run starts from what this process holds: give back
			// what the last one left.
			runtime.GC()
			debug.FreeOSMemory()
		}
		res, err := runOnce(ctx, o, n, out, progress)
		results = append(results, res...)
		if err != nil {
			return results, fmt.Errorf("%d replica(s): %w", n, err)
		}
	}
	if len(results) > 1 {
		printComparison(out, results)
	}
	if len(o.rates) > 1 {
		printCrossing(out, results, 100*time.Millisecond)
	}
	return results, nil
}

func writeOutputs(o *options, results []*result, out io.Writer) error {
	if o.csv != "" {
		if err := writeCSV(o.csv, results); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "time series written to %s\n", o.csv)
	}
	if o.png != "" {
		if err := writePNG(o.png, results); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "plot written to %s\n", o.png)
	}
	return nil
}

// result is what one run measured.
type result struct {
	replicas   int
	o          *options
	setup      time.Duration
	elapsed    time.Duration
	loadBefore string
	loadAfter  string
	clusters   int
	agents     int
	connected  int
	ops        []opSummary
	all        opSummary // every SDK operation together
	// reads are the Describe and List operations together, writes the
	// others.
	reads, writes opSummary
	// rate is the offered rate (calls per second; 0 closed loop).
	rate       float64
	samples    []sample
	sets, acks int64
	reports    int64
	repeats    int64
	reconnects int64
	// setupReconnects are the streams the host ended during setup.
	setupReconnects int64
	streamEnds      map[string]string
	logs            []errCount
	compactions     int
	compactErrs     int
	memory          verdict
	// reassigned are the clusters whose executor is past epoch 1 after
	// the load (env.reassignedExecutors).
	reassigned []string
	// agentsUp is the agents with a stream up at the end (after the
	// settling of a rolling run).
	agentsUp int
	// roll is the rolling upgrade (-saltbush-from), in the rate it ran
	// in; nil otherwise.
	roll *rollReport
	// after is what a rolling run checked after each rate's load; front
	// what its front did during the load.
	after *afterRoll
	front frontCounts
}

// runOnce sets up a world with n replicas, runs the load on it for
// -duration at each of -rate's rates in turn, and tears it down. It
// prints each rate's result as it ends.
func runOnce(ctx context.Context, o *options, n int, out, progress io.Writer) (_ []*result, err error) {
	setup := &result{replicas: n, o: o, loadBefore: loadAverages(), clusters: o.clusters, agents: o.agents}
	rates := make([]string, len(o.rates))
	for i, r := range o.rates {
		rates[i] = rateText(r)
	}
	_, _ = fmt.Fprintf(out, "\n== saltbush load, %d replica(s): %d clusters, %d agents, %d SDK clients, %s ==\n",
		n, o.clusters, o.agents, o.clients, strings.Join(rates, ", then "))
	_, _ = fmt.Fprintf(out, "load average before setup: %s\n", setup.loadBefore)
	dir, err := os.MkdirTemp(o.dir, "saltbush-load-")
	if err != nil {
		return nil, err
	}
	if !o.keep {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	t0 := time.Now()
	e, err := startEnv(ctx, o, n, dir, progress)
	if err != nil {
		return nil, err
	}
	defer e.close()

	rec := newRecorder(append(opNames(), opReport, opStream))
	agentCtx, stopAgents := context.WithCancel(ctx)
	f := newFleet(rec, o.reportEvery)
	defer func() {
		stopAgents()
		f.close()
	}()
	done := stepper(progress)(fmt.Sprintf("%d agents connected and assigned", o.agents))
	if err := f.connectAll(agentCtx, e, o.duration*time.Duration(len(o.rates))+time.Hour); err != nil {
		return nil, err
	}
	done()

	clients := makeClients(e, o, rec)
	done = stepper(progress)(fmt.Sprintf("prefill: %d add-ons and %d access entries per cluster", o.prefillAddons, o.prefillEntries))
	if err := prefill(ctx, o, clients, f, e, progress); err != nil {
		return nil, err
	}
	done()
	setup.setup = time.Since(t0)
	setup.connected = f.connected()
	setup.setupReconnects = f.reconnects.Load()

	var results []*result
	for i, r := range o.rates {
		res := *setup
		res.rate = r
		// The roll happens once, in the first rate's load: the others run
		// on the upgraded replicas.
		err := measure(ctx, o, e, f, clients, rec, &res, i == 0 && o.saltbushFrom != "", out, progress)
		if res.elapsed > 0 {
			// The load ran: what it measured says what went wrong too.
			printResult(out, &res)
			results = append(results, &res)
		}
		if err != nil {
			return results, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	done = stepper(progress)("shutdown")
	stopAgents()
	f.close()
	e.close()
	done()
	return results, nil
}

// measure runs the load at res.rate for -duration and fills in res with
// what it measured. With roll, the replicas are upgraded during the load
// (roll.go), which goes on until the roll has ended if that takes longer.
// A rolling run checks the add-ons and the keyspace after each load.
func measure(ctx context.Context, o *options, e *env, f *fleet, clients []*client, rec *recorder, res *result, roll bool, out, progress io.Writer) error {
	rec.reset()
	f.reset()
	var limiter *rate.Limiter
	if res.rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(res.rate), 1)
	}
	_, _ = fmt.Fprintf(out, "load at %s for %s (setup took %.1fs):\n", rateText(res.rate), o.duration, res.setup.Seconds())
	smp := newSampler(e.etcdCli, e.etcdEndpoints, e.procs, rec, opNames(), out)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	// The series ends when the load does: the calls still finishing
	// after it count in the totals only.
	sampleCtx, stopSampling := context.WithCancel(runCtx)
	defer stopSampling()
	smp.begin(runCtx)
	cmp := &compactor{cli: e.etcdCli}
	var bg, load sync.WaitGroup
	bg.Go(func() { smp.run(sampleCtx, o.sample) })
	if o.compactEvery > 0 {
		bg.Go(func() { cmp.run(sampleCtx, o.compactEvery) })
	}
	start := time.Now()
	for _, c := range clients {
		c.limiter = limiter
		c.throttleExpected = o.throttleRate > 0 && (res.rate == 0 || res.rate/float64(o.accounts) > o.throttleRate)
		load.Go(func() { c.run(runCtx) })
	}
	var frontBefore frontCounts // setup's and the earlier rates' are not this load's
	if e.front != nil {
		frontBefore = e.front.counts()
	}
	rolled := make(chan struct{})
	if roll {
		res.roll = &rollReport{from: o.saltbushFrom, to: o.saltbushBin}
		go func() {
			defer close(rolled)
			runRoll(ctx, o, e.procs, f, start, rec, res.roll)
		}()
	} else {
		close(rolled)
	}
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	select {
	case <-rolled:
	default:
		// The load after the roll is what says the replicas came back;
		// the roll's own steps are bounded (childStopTimeout,
		// childStartTimeout).
		_, _ = fmt.Fprintln(progress, "the rolling upgrade outlasted -duration: the load goes on until it ends")
		<-rolled
	}
	stopSampling()
	bg.Wait()
	if last := smp.samples[len(smp.samples)-1]; time.Since(smp.start)-last.At > o.sample/4 {
		smp.take(context.WithoutCancel(ctx)) // the partial last interval
	}
	stopRun()
	load.Wait()
	res.elapsed = time.Since(start)
	// What the replicas logged under load, not what shutting down makes
	// them log.
	res.logs = e.logs.top()
	if ctx.Err() != nil {
		_, _ = fmt.Fprintln(progress, "interrupted: the results cover the load until now")
	}

	res.loadAfter = loadAverages()
	res.ops = rec.summary()
	res.all = rec.merged(opNames())
	res.reads, res.writes = rec.merged(readOpNames()), rec.merged(writeOpNames())
	res.samples = smp.samples
	res.sets, res.acks, res.reports, res.repeats, res.reconnects = f.sets.Load(), f.acks.Load(), f.reports.Load(), f.repeats.Load(), f.reconnects.Load()
	f.mu.Lock()
	res.streamEnds = maps.Clone(f.examples)
	f.mu.Unlock()
	res.compactions, res.compactErrs = cmp.runs, cmp.errs
	res.memory = judgeMemory(res.samples, o.flatPct)
	if roll {
		// The replicas' processes were replaced: their memory starts
		// again, and the series says nothing about a leak.
		res.memory = verdict{threshold: o.flatPct, why: "the replicas were restarted during the load (rolling upgrade)"}
	}
	if e.front != nil {
		res.front = e.front.counts().since(frontBefore)
	}
	if res.roll != nil && ctx.Err() == nil {
		if res.roll.err != nil {
			return fmt.Errorf("rolling upgrade: %w", res.roll.err)
		}
		res.roll.okAfter = res.all.Count - res.roll.okAtEnd
	}
	res.agentsUp = f.up()
	if e.rolling && ctx.Err() == nil {
		a, err := checkAfterRoll(ctx, e, f)
		res.after = a
		if err != nil {
			return fmt.Errorf("after the rolling upgrade: %w", err)
		}
		res.agentsUp = a.agentsUp
	}
	var err error
	res.reassigned, err = e.reassignedExecutors(context.WithoutCancel(ctx))
	return err
}

func rateText(r float64) string {
	if r <= 0 {
		return "closed loop"
	}
	return fmt.Sprintf("%g calls/s", r)
}

// makeClients makes -clients SDK clients: client i signs as account
// i mod -accounts and calls replica i mod replicas (in a rolling run, the
// front over them all); each account's clusters are dealt out among its
// clients.
func makeClients(e *env, o *options, rec *recorder) []*client {
	clients := make([]*client, o.clients)
	byTenant := map[*tenant][]*client{}
	for i := range clients {
		t := e.tenants[i%len(e.tenants)]
		clients[i] = &client{
			sdk: e.sdk(t, e.facade(i), 4), tenant: t, rec: rec, mix: o.mix,
			rng: rand.New(rand.NewPCG(o.seed, uint64(i))), //nolint:gosec // G404: the mix's choices, not secrets
		}
		byTenant[t] = append(byTenant[t], clients[i])
	}
	dealt := map[*tenant]int{}
	for _, c := range e.clusters {
		cs := byTenant[c.tenant]
		owner := cs[dealt[c.tenant]%len(cs)]
		dealt[c.tenant]++
		owner.clusters = append(owner.clusters, newClusterModel(c.name))
	}
	return clients
}

// prefill creates the clusters' first add-ons and entries (recorded apart
// from the run, with the SDK's retries) and waits until the executors
// have reported the add-ons, so the load starts from a settled world.
func prefill(ctx context.Context, o *options, clients []*client, f *fleet, e *env, progress io.Writer) error {
	setup := newRecorder(opNames())
	sdks := make([]*eks.Client, len(clients))
	for i, c := range clients {
		c.rec, sdks[i], c.sdk = setup, c.sdk, e.setupSDK(c.tenant, e.facade(i))
	}
	err := parallel(ctx, len(clients), 8, func(i int) error {
		clients[i].prefill(ctx, o.prefillAddons, o.prefillEntries)
		return nil
	})
	for i, c := range clients {
		c.rec, c.sdk = f.rec, sdks[i]
	}
	if err != nil {
		return err
	}
	// A failed prefill call leaves a smaller data set, which the load
	// fills again; say so, and go on.
	for _, s := range setup.summary() {
		for _, ec := range s.Errors {
			_, _ = fmt.Fprintf(progress, "\nprefill: %d × %s failed with %s", ec.N, s.Op, ec.Kind)
		}
	}
	withAgents := 0
	for _, c := range e.clusters {
		if len(c.members) > 0 {
			withAgents++
		}
	}
	want := int64(withAgents * min(o.prefillAddons, len(loadAddons)))
	deadline := time.Now().Add(2 * time.Minute)
	for f.reports.Load() < want {
		if time.Now().After(deadline) {
			_, _ = fmt.Fprintf(progress, "\nprefill: the executors reported %d of %d add-ons within 2m; the load starts anyway", f.reports.Load(), want)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
