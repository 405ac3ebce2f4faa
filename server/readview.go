package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/saltbush/saltbush/store"
)

// startReadView attaches the replica's read view to its store
// (docs/architecture.md, "Read view") and keeps it current until Close.
// Until its first list has loaded, reads go to etcd.
func (s *Server) startReadView() error {
	v := store.NewView(s.store, store.ViewOptions{Logger: s.log.With("component", "read-view")})
	go v.Run(s.background)
	return s.registerReadViewMetrics()
}

// registerReadViewMetrics exports the view's state and counters. They are
// read when scraped, so a read pays no metric update.
func (s *Server) registerReadViewMetrics() error {
	gauge := func(name, help string, f func(store.ViewStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(s.store.View().Stats()) })
	}
	counter := func(name, help string, labels prometheus.Labels, f func(store.ViewStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(s.store.View().Stats())) })
	}
	const readsHelp = "Reads that answer callers (Describe, List, authorization lookups), by source: view (the replica's watch-fed read view) or etcd, with why the view could not answer (not_synced: before its first list; lagging: known to lag; timed_out: the read waited for it in vain; stale: the view heard nothing from etcd for a second)."
	collectors := []prometheus.Collector{
		gauge("saltbush_read_view_synced", "1 once the read view's first list has loaded.", func(st store.ViewStats) float64 { return b2f(st.Synced) }),
		gauge("saltbush_read_view_lagging", "1 while the read view lags (a read waited for it in vain) and reads go to etcd.", func(st store.ViewStats) float64 { return b2f(st.Lagging) }),
		gauge("saltbush_read_view_revision", "The etcd revision the read view reflects.", func(st store.ViewStats) float64 { return float64(st.Revision) }),
		gauge("saltbush_read_view_behind_revisions", "How many revisions the read view is behind the highest one this replica has seen.", func(st store.ViewStats) float64 { return float64(max(0, st.Seen-st.Revision)) }),
		gauge("saltbush_read_view_keys", "Records held by the read view.", func(st store.ViewStats) float64 { return float64(st.Keys) }),
		counter("saltbush_read_view_reads_total", readsHelp, prometheus.Labels{"source": "view", "reason": ""}, func(st store.ViewStats) int64 { return st.FromView }),
		counter("saltbush_read_view_reads_total", readsHelp, prometheus.Labels{"source": "etcd", "reason": "not_synced"}, func(st store.ViewStats) int64 { return st.NotSynced }),
		counter("saltbush_read_view_reads_total", readsHelp, prometheus.Labels{"source": "etcd", "reason": "lagging"}, func(st store.ViewStats) int64 { return st.LaggingReads }),
		counter("saltbush_read_view_reads_total", readsHelp, prometheus.Labels{"source": "etcd", "reason": "timed_out"}, func(st store.ViewStats) int64 { return st.TimedOut }),
		counter("saltbush_read_view_reads_total", readsHelp, prometheus.Labels{"source": "etcd", "reason": "stale"}, func(st store.ViewStats) int64 { return st.Stale }),
		counter("saltbush_read_view_lists_total", "Full lists of the read view: the first, and one per compaction its watch fell behind.", nil, func(st store.ViewStats) int64 { return st.Relists }),
		counter("saltbush_read_view_watch_restarts_total", "Read view watches that ended with an error and were reopened.", nil, func(st store.ViewStats) int64 { return st.WatchErrors }),
	}
	for _, c := range collectors {
		if err := s.registry.Register(c); err != nil {
			return fmt.Errorf("register read view metrics: %w", err)
		}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readViewStatus says, for /readyz, whether the read view has caught up
// with what this replica has seen (a readiness probe has just read etcd).
// A view that has not does not make the replica unready: its reads go to
// etcd, linearizably, until it catches up.
func (s *Server) readViewStatus(ctx context.Context) string {
	v := s.store.View()
	synced := v.Sync(ctx)
	st := v.Stats()
	switch {
	case !st.Synced:
		return "read view: not synced yet; reads go to etcd"
	case !synced || st.Lagging:
		since := ""
		if st.Lagging {
			since = fmt.Sprintf(" for %s", time.Since(st.LagSince).Round(time.Millisecond))
		}
		return fmt.Sprintf("read view: lagging%s at revision %d, %d behind; reads go to etcd", since, st.Revision, max(0, st.Seen-st.Revision))
	}
	return fmt.Sprintf("read view: synced at revision %d", st.Revision)
}
