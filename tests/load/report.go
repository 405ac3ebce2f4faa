package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// verdict is whether memory stayed flat over the second half of a run: the
// least-squares slope of RSS and of the live heap over the samples of the
// second half, against a threshold in percent of their mean per minute.
// Go seldom returns freed pages at once, so RSS alone would mislead both
// ways; the live heap (marked by the last GC) says what is held.
type verdict struct {
	judged bool
	// why says why it was not judged, when not for want of samples.
	why          string
	samples      int
	span         time.Duration
	rssSlope     float64 // MiB per minute
	rssMean      float64 // MiB
	heapSlope    float64
	heapMean     float64
	threshold    float64 // percent per minute
	flat         bool
	goroutinesAt [2]int // first and last sample of the second half
}

func judgeMemory(samples []sample, pct float64) verdict {
	v := verdict{threshold: pct}
	if len(samples) == 0 {
		return v
	}
	end := samples[len(samples)-1].At
	var half []sample
	for _, s := range samples {
		if s.At >= end/2 {
			half = append(half, s)
		}
	}
	v.samples = len(half)
	if len(half) < 3 {
		return v
	}
	v.judged = true
	v.span = half[len(half)-1].At - half[0].At
	v.rssSlope, v.rssMean = slope(half, func(s sample) float64 { return mib(s.RSS) })
	v.heapSlope, v.heapMean = slope(half, func(s sample) float64 { return mib(s.HeapLive) })
	v.goroutinesAt = [2]int{half[0].Goroutines, half[len(half)-1].Goroutines}
	v.flat = v.rssSlope <= pct/100*v.rssMean && v.heapSlope <= pct/100*v.heapMean
	return v
}

// slope is the least-squares slope of y over time, per minute, and the
// mean of y.
func slope(ss []sample, y func(sample) float64) (perMinute, mean float64) {
	var sx, sy, sxx, sxy float64
	n := float64(len(ss))
	for _, s := range ss {
		x := s.At.Minutes()
		v := y(s)
		sx, sy, sxx, sxy = sx+x, sy+v, sxx+x*x, sxy+x*v
	}
	mean = sy / n
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, mean
	}
	return (n*sxy - sx*sy) / den, mean
}

func (v verdict) String() string {
	if !v.judged && v.why != "" {
		return "not judged: " + v.why
	}
	if !v.judged {
		return fmt.Sprintf("not judged: %d samples in the second half, 3 needed (a longer -duration or a shorter -sample)", v.samples)
	}
	word := "FLAT"
	if !v.flat {
		word = "NOT FLAT"
	}
	return fmt.Sprintf("%s — over the second half (%d samples, %.0fs): RSS %+.2f MiB/min (%+.2f %%/min of its mean %.1f MiB), "+
		"live heap %+.2f MiB/min (%+.2f %%/min of %.1f MiB); threshold %.2g %%/min; goroutines %d → %d",
		word, v.samples, v.span.Seconds(), v.rssSlope, 100*v.rssSlope/v.rssMean, v.rssMean,
		v.heapSlope, 100*v.heapSlope/v.heapMean, v.heapMean, v.threshold, v.goroutinesAt[0], v.goroutinesAt[1])
}

// printCrossing says, for each replica count of a sweep, between which
// rates the p99 of all SDK calls, of the reads and of the writes first
// went above limit.
func printCrossing(w io.Writer, rs []*result, limit time.Duration) {
	_, _ = fmt.Fprintf(w, "\n== where the p99 crosses %s ==\n", limit)
	byReplicas := map[int][]*result{}
	var counts []int
	for _, r := range rs {
		if _, ok := byReplicas[r.replicas]; !ok {
			counts = append(counts, r.replicas)
		}
		byReplicas[r.replicas] = append(byReplicas[r.replicas], r)
	}
	for _, n := range counts {
		for _, k := range []struct {
			name string
			of   func(*result) opSummary
		}{
			{"all SDK calls", func(r *result) opSummary { return r.all }},
			{"reads", func(r *result) opSummary { return r.reads }},
			{"writes", func(r *result) opSummary { return r.writes }},
		} {
			_, _ = fmt.Fprintf(w, "%s, %s: %s\n", replicaWord(n), k.name, crossing(byReplicas[n], k.of, limit))
		}
	}
}

// crossing describes where, in rs (one replica count, rates ascending as
// given), the p99 that of reads first exceeds limit.
func crossing(rs []*result, of func(*result) opSummary, limit time.Duration) string {
	at := func(r *result) string {
		return fmt.Sprintf("%s (%.1f succeeded/s, p99 %.1f ms)", rateText(r.rate), float64(r.all.Count)/r.elapsed.Seconds(), ms2(of(r).P99))
	}
	for i, r := range rs {
		if of(r).P99 <= limit {
			continue
		}
		if i == 0 {
			return "above it already at " + at(r)
		}
		return "between " + at(rs[i-1]) + " and " + at(r)
	}
	return "not crossed; the last rate was " + at(rs[len(rs)-1])
}

// label names a result: its replicas, and in a sweep its rate.
func (r *result) label() string {
	if len(r.o.rates) > 1 {
		return replicaWord(r.replicas) + ", " + rateText(r.rate)
	}
	return replicaWord(r.replicas)
}

func replicaWord(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", n)
}

// printResult prints one run's results.
func printResult(w io.Writer, r *result) {
	o := r.o
	secs := r.elapsed.Seconds()
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	p("\n== results: %s ==\n", r.label())
	p("machine: %d CPUs (%s), GOMAXPROCS %d, %s; load average before setup %s, after the load %s, mean of the samples %.2f\n",
		runtime.NumCPU(), cpuModel(), runtime.GOMAXPROCS(0), runtime.Version(), r.loadBefore, r.loadAfter, meanLoad(r.samples))
	p("setup %.1fs: %d ACTIVE clusters over %d accounts, %d/%d agents connected (%d streams reopened during setup), %d add-ons and %d access entries per cluster prefilled; etcd fsync %v\n",
		r.setup.Seconds(), r.clusters, o.accounts, r.connected, r.agents, r.setupReconnects, min(o.prefillAddons, len(loadAddons)), o.prefillEntries, o.fsync)
	p("load: %.1fs, %d SDK clients, %s; throttle %g/s burst %d per account; executors repeat reports every %s\n",
		secs, o.clients, rateText(r.rate), o.throttleRate, o.throttleBurst, o.reportEvery)
	calls := r.all.Count + r.all.Unexpected + r.all.Predicted
	p("throughput: %d SDK calls = %.1f calls/s (%.1f/s succeeded); agents: %d reports of new generations, %d repeated, %d ReportResults = %.1f/s; %d desired sets received, %d acks; %d streams reopened\n",
		calls, float64(calls)/secs, float64(r.all.Count)/secs, r.reports, r.repeats, reportResults(r), float64(reportResults(r))/secs, r.sets, r.acks, r.reconnects)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "operation\tok\tok/s\tp50 ms\tp99 ms\tmax ms\terrors\tunexpected\t")
	row := func(s opSummary) {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.2f\t%.1f\t%d\t%d\t\n", s.Op, s.Count, float64(s.Count)/secs,
			ms2(s.P50), ms2(s.P99), ms2(s.Max), s.Unexpected+s.Predicted, s.Unexpected)
	}
	for _, s := range r.ops {
		if s.Op != opStream {
			row(s)
		}
	}
	row(r.all)
	_ = tw.Flush()
	p("(latencies are of successful calls, as the client saw them: SigV4, HTTP, the façade, etcd; agent Report is a Report until its ReportResult)\n")

	p("errors by type (retryable: the AWS SDK's standard retryer would have retried the call; the load's clients retry nothing):\n")
	var unexpected int64
	anyErr := false
	for _, s := range r.ops {
		for _, e := range s.Errors {
			anyErr = true
			what := "UNEXPECTED"
			if e.Expected {
				what = "expected: " + expectedWhy(s.Op, e.Kind)
			} else {
				unexpected += e.N
			}
			retry := "" // the agents' are not SDK calls
			if slices.Contains(opNames(), s.Op) {
				retry = "not retryable"
				if e.Retryable {
					retry = "retryable"
				}
			}
			p("  %-30s %-40s %7d  %-13s  %s\n", s.Op, e.Kind, e.N, retry, what)
			if !e.Expected && e.Example != "" {
				p("    e.g. %q\n", e.Example)
			}
		}
	}
	if !anyErr {
		p("  none\n")
	}
	for _, code := range sortedKeys(r.streamEnds) {
		if code == "Fence" {
			p("  agent fenced, e.g. %q\n", r.streamEnds[code])
			continue
		}
		p("  agent stream ended %s, e.g. %q\n", code, r.streamEnds[code])
	}
	p("unexpected errors: %d\n", unexpected)
	p("replica log records at WARN and above, setup and load:")
	if len(r.logs) == 0 {
		p(" none\n")
	} else {
		p("\n")
		for _, l := range r.logs {
			p("  %6d × %s\n", l.N, l.Kind)
		}
	}
	if o.compactEvery > 0 {
		p("etcd compactions: %d (%d failed)\n", r.compactions, r.compactErrs)
	}
	printRoll(p, r)
	p("agents with a stream up at the end: %d/%d\n", r.agentsUp, r.agents)
	if len(r.reassigned) == 0 {
		p("delivery executors: every cluster's first (epoch 1) still\n")
	} else {
		p("delivery executors reassigned or rewritten, setup and load:\n")
		for _, s := range r.reassigned {
			p("  %s\n", s)
		}
	}
	if n := len(r.samples); n > 0 {
		a, b := r.samples[0], r.samples[n-1]
		p("resources, start → end of the load: RSS %.1f → %.1f MiB, live heap %.1f → %.1f MiB (in use %.1f → %.1f), stacks %.1f → %.1f MiB, goroutines %d → %d, "+
			"etcd DB %.1f → %.1f MiB (in use %.1f → %.1f), keys %d → %d, process CPU %.2f cores on average\n",
			mib(a.RSS), mib(b.RSS), mib(a.HeapLive), mib(b.HeapLive), mib(a.HeapInuse), mib(b.HeapInuse), mib(a.StackInuse), mib(b.StackInuse), a.Goroutines, b.Goroutines,
			mib(uint64(max(a.DBSize, 0))), mib(uint64(max(b.DBSize, 0))), mib(uint64(max(a.DBInUse, 0))), mib(uint64(max(b.DBInUse, 0))),
			a.Keys, b.Keys, meanCPU(r.samples, func(s sample) float64 { return s.CPU }))
		if r.o.apart {
			p("processes (-apart): the figures above are the replicas' (saltbush serve) summed; the etcd members' process used %.2f cores "+
				"on average (RSS %.1f → %.1f MiB), this harness process (clients, agents, sampler) %.2f\n",
				meanCPU(r.samples, func(s sample) float64 { return s.EtcdCPU }), mib(a.EtcdRSS), mib(b.EtcdRSS),
				meanCPU(r.samples, func(s sample) float64 { return s.LoadCPU }))
		}
	}
	p("memory: %s\n", r.memory)
}

// printRoll prints a rolling run's upgrade, front and checks after the
// load.
func printRoll(p func(format string, args ...any), r *result) {
	if rl := r.roll; rl != nil {
		p("rolling upgrade, %s → %s: began %.1fs into the load", rl.from, rl.to, rl.began.Seconds())
		if rl.err == nil {
			p(", ended at %.1fs; %d SDK calls succeeded after it", rl.ended.Seconds(), rl.okAfter)
		}
		p("\n")
		for _, st := range rl.steps {
			p("  %s: down at %.1fs, exited %.1fs after SIGTERM", st.replica, st.at.Seconds(), st.stopped.Seconds())
			if st.ready {
				p(", ready again %.1fs after it", st.down.Seconds())
			}
			p(" (%s → %s)\n", st.from, st.to)
			if st.stopErr != "" {
				p("    did not stop cleanly: %s\n", st.stopErr)
			}
		}
		if rl.err != nil {
			p("  did not finish: %v\n", rl.err)
		}
	}
	if r.front.Conns > 0 {
		p("front, during the load: %d connections, %d dials of a replica that failed passed over, %d connections that no replica took\n",
			r.front.Conns, r.front.Skipped, r.front.Stranded)
	}
	a := r.after
	if a == nil {
		return
	}
	p("after the load: %d/%d agents with a stream up (waited %.1fs); ", a.agentsUp, r.agents, a.agentsUpIn.Seconds())
	if len(a.stuck) == 0 {
		p("no add-on in transition (waited %.1fs)\n", a.settledIn.Seconds())
	} else {
		p("%d add-ons STUCK in transition after %s:\n", len(a.stuck), a.settledIn.Round(time.Second))
		for _, s := range a.stuck {
			p("  %s\n", s)
		}
	}
	if a.keyspace != "" {
		p("keyspace check (tests/invariants): %s\n", a.keyspace)
	}
	for _, v := range a.violations {
		p("  VIOLATION %s\n", v)
	}
}

func reportResults(r *result) int64 {
	for _, s := range r.ops {
		if s.Op == opReport {
			return s.Count + s.Unexpected + s.Predicted
		}
	}
	return 0
}

func expectedWhy(op, kind string) string {
	switch {
	case kind == "ThrottlingException":
		return "the offered rate per account is above the throttle"
	case op == opDescribeAddon:
		return "the add-on was deleted"
	case op == opReport:
		return "the add-on changed while the report was on its way"
	case op == opStream:
		return "its replica was stopped (rolling upgrade)"
	default:
		return "predicted by the client's model"
	}
}

func meanLoad(ss []sample) float64 {
	if len(ss) == 0 {
		return 0
	}
	var t float64
	for _, s := range ss {
		t += s.Load1
	}
	return t / float64(len(ss))
}

// meanCPU is the mean over the samples (the baseline left out) of the
// cores cpu reads from each.
func meanCPU(ss []sample, cpu func(sample) float64) float64 {
	var t, d float64
	for _, s := range ss[min(1, len(ss)):] {
		t += cpu(s) * s.Interval.Seconds()
		d += s.Interval.Seconds()
	}
	if d == 0 {
		return 0
	}
	return t / d
}

// cpuModel is /proc/cpuinfo's model name.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// printComparison puts the runs side by side.
func printComparison(w io.Writer, rs []*result) {
	_, _ = fmt.Fprintf(w, "\n== comparison ==\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "\t"
	for _, r := range rs {
		head += r.label() + "\t"
	}
	_, _ = fmt.Fprintln(tw, head)
	line := func(name string, f func(r *result) string) {
		s := name + "\t"
		for _, r := range rs {
			s += f(r) + "\t"
		}
		_, _ = fmt.Fprintln(tw, s)
	}
	line("SDK calls/s (succeeded)", func(r *result) string {
		return fmt.Sprintf("%.1f", float64(r.all.Count)/r.elapsed.Seconds())
	})
	line("SDK p50 / p99 ms", func(r *result) string { return fmt.Sprintf("%.2f / %.2f", ms2(r.all.P50), ms2(r.all.P99)) })
	line("reads (Describe, List) p50 / p99 ms", func(r *result) string {
		return fmt.Sprintf("%.2f / %.2f", ms2(r.reads.P50), ms2(r.reads.P99))
	})
	line("writes p50 / p99 ms", func(r *result) string {
		return fmt.Sprintf("%.2f / %.2f", ms2(r.writes.P50), ms2(r.writes.P99))
	})
	for _, op := range []string{opDescribeAddon, opCreateAddon, opUpdateAddon, opCreateAccessEntry, opAssociatePolicy, opReport} {
		line(op+" p50 / p99 ms", func(r *result) string {
			for _, s := range r.ops {
				if s.Op == op {
					return fmt.Sprintf("%.2f / %.2f", ms2(s.P50), ms2(s.P99))
				}
			}
			return "-"
		})
	}
	line("unexpected errors", func(r *result) string {
		var n int64
		for _, s := range r.ops {
			n += s.Unexpected
		}
		return strconv.FormatInt(n, 10)
	})
	line("RSS start → end MiB", func(r *result) string {
		if len(r.samples) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f → %.0f", mib(r.samples[0].RSS), mib(r.samples[len(r.samples)-1].RSS))
	})
	line("live heap start → end MiB", func(r *result) string {
		if len(r.samples) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f → %.0f", mib(r.samples[0].HeapLive), mib(r.samples[len(r.samples)-1].HeapLive))
	})
	line("goroutines start → end", func(r *result) string {
		if len(r.samples) == 0 {
			return "-"
		}
		return fmt.Sprintf("%d → %d", r.samples[0].Goroutines, r.samples[len(r.samples)-1].Goroutines)
	})
	line("memory", func(r *result) string {
		switch {
		case !r.memory.judged:
			return "not judged"
		case r.memory.flat:
			return fmt.Sprintf("flat (RSS %+.1f MiB/min)", r.memory.rssSlope)
		default:
			return fmt.Sprintf("NOT flat (RSS %+.1f MiB/min)", r.memory.rssSlope)
		}
	})
	line("mean load average", func(r *result) string { return fmt.Sprintf("%.2f", meanLoad(r.samples)) })
	_ = tw.Flush()
}

// writeCSV writes every run's samples, one row each.
func writeCSV(path string, rs []*result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	ops := append(opNames(), opReport)
	head := []string{"replicas", "rate", "t_s", "rss_mib", "heap_live_mib", "heap_inuse_mib", "stack_mib", "goroutines", "etcd_db_mib", "etcd_db_in_use_mib", "etcd_keys",
		"etcd_writes_per_s", "load1", "cpu_cores", "etcd_cpu_cores", "load_cpu_cores", "sdk_ok", "sdk_ok_per_s", "sdk_p50_ms", "sdk_p99_ms", "errors"}
	for _, op := range ops {
		key := strings.ReplaceAll(op, " ", "_")
		head = append(head, key+"_ok", key+"_p50_ms", key+"_p99_ms", key+"_errors")
	}
	_ = w.Write(head)
	ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, r := range rs {
		for _, s := range r.samples {
			perSec := 0.0
			if s.At > 0 && s.Interval > 0 {
				perSec = float64(s.SDKOps) / s.Interval.Seconds()
			}
			row := []string{strconv.Itoa(r.replicas), ff(r.rate), ff(s.At.Seconds()), ff(mib(s.RSS)), ff(mib(s.HeapLive)), ff(mib(s.HeapInuse)), ff(mib(s.StackInuse)),
				strconv.Itoa(s.Goroutines), ff(mib(uint64(max(s.DBSize, 0)))), ff(mib(uint64(max(s.DBInUse, 0)))), strconv.FormatInt(s.Keys, 10),
				ff(s.Writes), ff(s.Load1), ff(s.CPU), ff(s.EtcdCPU), ff(s.LoadCPU), strconv.FormatInt(s.SDKOps, 10), ff(perSec), ff(ms2(s.P50)), ff(ms2(s.P99)), strconv.FormatInt(s.Errs, 10)}
			for _, op := range ops {
				iv := s.PerOp[op]
				row = append(row, strconv.FormatInt(iv.hist.n, 10), ff(ms2(iv.hist.quantile(0.5))), ff(ms2(iv.hist.quantile(0.99))), strconv.FormatInt(iv.errs, 10))
			}
			_ = w.Write(row)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
