// Package readiness follows whether a replica can serve, which is whether
// it reaches etcd: /readyz asks etcd on every probe, gRPC health follows a
// periodic probe (NOT_SERVING while etcd does not answer, so gRPC load
// balancers and probes stop sending requests the replica cannot serve),
// and saltbush_etcd_reachable says what the last probe of either found, so
// an alert need not infer it from error ratios.
package readiness

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultInterval is how often gRPC health follows etcd when Config sets no
// interval.
const DefaultInterval = 5 * time.Second

// probeTimeout bounds one probe of etcd.
const probeTimeout = 2 * time.Second

// Config is what a Tracker probes and reports to.
type Config struct {
	// Ping reaches etcd (a linearizable read: store.Ping).
	Ping func(context.Context) error
	// Detail is added to /readyz's answer when etcd answered (the read
	// view's state); nil adds nothing.
	Detail func(context.Context) string
	// Interval is how often Run probes; DefaultInterval when <= 0.
	Interval time.Duration
	// Registerer receives the saltbush_etcd_reachable gauge.
	Registerer prometheus.Registerer
	// Logger receives the transitions Run sees.
	Logger *slog.Logger
}

// Tracker is a replica's readiness: the gRPC health service, /readyz and
// the saltbush_etcd_reachable gauge.
type Tracker struct {
	cfg       Config
	health    *health.Server
	reachable prometheus.Gauge
}

// New makes the tracker and registers its gauge, at 1: the store has just
// read its metadata.
func New(cfg Config) *Tracker {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	t := &Tracker{
		cfg:    cfg,
		health: health.NewServer(),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "saltbush_etcd_reachable",
			Help: "1 while this replica's last readiness probe (a linearizable etcd read) succeeded, else 0.",
		}),
	}
	t.reachable.Set(1)
	cfg.Registerer.MustRegister(t.reachable)
	return t
}

// Health is the gRPC health service the service table registers.
func (t *Tracker) Health() *health.Server { return t.health }

// Serving sets gRPC health SERVING, once both ports serve (Run or
// Shutdown change it after).
func (t *Tracker) Serving() {
	t.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// Shutdown sets gRPC health NOT_SERVING for good, first thing in a
// shutdown, and ignores later changes.
func (t *Tracker) Shutdown() { t.health.Shutdown() }

// ServeHTTP is /readyz: 200 while etcd answers (with Detail), 503 naming
// the error while it does not.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	if err := t.cfg.Ping(ctx); err != nil {
		t.reachable.Set(0)
		http.Error(w, "etcd unreachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	t.reachable.Set(1)
	answer := "ok\n"
	if t.cfg.Detail != nil {
		answer += t.cfg.Detail(ctx) + "\n"
	}
	_, _ = w.Write([]byte(answer))
}

// Run keeps gRPC health in step with /readyz, probing every Interval,
// until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	serving := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pingCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := t.cfg.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && serving:
			t.cfg.Logger.Warn("etcd unreachable: gRPC health NOT_SERVING", "err", err)
			t.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		case err == nil && !serving:
			t.cfg.Logger.Info("etcd reachable again: gRPC health SERVING")
			t.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		}
		serving = err == nil
		if serving {
			t.reachable.Set(1)
		} else {
			t.reachable.Set(0)
		}
	}
}
