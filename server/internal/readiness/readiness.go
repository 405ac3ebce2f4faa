// Package readiness follows whether a replica can serve, which is whether
// it reaches etcd: /readyz asks etcd on every probe, gRPC health follows a
// periodic probe (NOT_SERVING while etcd does not answer, so gRPC load
// balancers and probes stop sending requests the replica cannot serve),
// and saltbush_etcd_reachable says what the last probe of either found, so
// an alert need not infer it from error ratios.
//
// When every probe has failed for longer than an etcd election takes
// (Config.Grace), the replica knows etcd has no quorum, or is out of its
// reach: it tells its Gate (the store), which then refuses requests at once
// rather than letting each wait out its deadline, /readyz answers 503 at
// once, and saltbush_etcd_requests_refused is 1. The first probe that
// succeeds again undoes all three: recovery needs no operator.
package readiness

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
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

// DefaultGrace is how long probes must fail before the replica refuses
// requests, when Config sets no grace: longer than an etcd election (a
// follower waits an election timeout, 1 s by default, before it stands,
// and a split vote costs another), so a change of leader in a healthy
// cluster never refuses a request.
const DefaultGrace = 3 * time.Second

// failingInterval is how often Run probes while probes fail, so that the
// replica sees the quorum return within a fraction of a second.
const failingInterval = 250 * time.Millisecond

// Gate is what refuses requests while etcd has no quorum (the store).
type Gate interface {
	// SetUnavailable refuses every request at once, naming cause.
	SetUnavailable(cause error)
	// SetAvailable lets requests reach etcd again.
	SetAvailable()
}

// Config is what a Tracker probes and reports to.
type Config struct {
	// Ping reaches etcd (a linearizable read: store.Ping).
	Ping func(context.Context) error
	// Detail is added to /readyz's answer when etcd answered (the read
	// view's state); nil adds nothing.
	Detail func(context.Context) string
	// Interval is how often Run probes while etcd answers;
	// DefaultInterval when <= 0.
	Interval time.Duration
	// Grace is how long every probe must have failed before Gate refuses
	// requests; DefaultGrace when <= 0.
	Grace time.Duration
	// Gate refuses requests while etcd has no quorum; nil refuses none.
	Gate Gate
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
	refusing  prometheus.Gauge
	// down is the error Run closed the gate with, nil while it is open:
	// /readyz answers it at once.
	down atomic.Pointer[error]
}

// New makes the tracker and registers its gauge, at 1: the store has just
// read its metadata.
func New(cfg Config) *Tracker {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	t := &Tracker{
		cfg:    cfg,
		health: health.NewServer(),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "saltbush_etcd_reachable",
			Help: "1 while this replica's last readiness probe (a linearizable etcd read) succeeded, else 0.",
		}),
	}
	t.refusing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "saltbush_etcd_requests_refused",
		Help: "1 while this replica refuses requests at once because every readiness probe has failed for longer than an etcd election takes, else 0.",
	})
	t.reachable.Set(1)
	cfg.Registerer.MustRegister(t.reachable, t.refusing)
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
// the error while it does not, at once while Run refuses requests.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if down := t.down.Load(); down != nil {
		http.Error(w, "etcd unreachable: requests refused until it answers: "+(*down).Error(), http.StatusServiceUnavailable)
		return
	}
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

// Run keeps gRPC health in step with /readyz, probing every Interval
// (every failingInterval while probes fail), and closes the gate once
// probes have failed for Grace, until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	p := prober{t: t, serving: true}
	timer := time.NewTimer(t.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		pingCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := t.cfg.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.observe(start, err)
		next := t.cfg.Interval
		if err != nil {
			next = min(next, failingInterval)
		}
		timer.Reset(next)
	}
}

// prober is Run's state between probes.
type prober struct {
	t       *Tracker
	serving bool
	// failingSince is when the first of the failing probes in a row
	// began; zero while the last one succeeded.
	failingSince time.Time
}

// observe takes the result of the probe begun at start.
func (p *prober) observe(start time.Time, err error) {
	t := p.t
	switch {
	case err != nil && p.serving:
		t.cfg.Logger.Warn("etcd unreachable: gRPC health NOT_SERVING", "err", err)
		t.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	case err == nil && !p.serving:
		t.cfg.Logger.Info("etcd reachable again: gRPC health SERVING")
		t.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
	p.serving = err == nil
	if err == nil {
		t.reachable.Set(1)
		p.failingSince = time.Time{}
		if t.down.Swap(nil) != nil {
			t.cfg.Logger.Info("etcd answers again: requests reach it again")
			t.refusing.Set(0)
			if t.cfg.Gate != nil {
				t.cfg.Gate.SetAvailable()
			}
		}
		return
	}
	t.reachable.Set(0)
	if p.failingSince.IsZero() {
		p.failingSince = start
	}
	if failing := time.Since(p.failingSince); failing >= t.cfg.Grace && t.down.Load() == nil {
		t.down.Store(&err)
		t.refusing.Set(1)
		t.cfg.Logger.Warn("etcd has answered no probe for longer than an election takes: requests refused at once until it answers",
			"failing_for", failing.Round(time.Millisecond), "err", err)
		if t.cfg.Gate != nil {
			t.cfg.Gate.SetUnavailable(err)
		}
	}
}
