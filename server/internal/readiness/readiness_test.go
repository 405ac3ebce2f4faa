package readiness

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakeEtcd answers probes, or fails them while down.
type fakeEtcd struct{ down atomic.Bool }

func (f *fakeEtcd) ping(context.Context) error {
	if f.down.Load() {
		return errors.New("context deadline exceeded")
	}
	return nil
}

func newTracker(t *testing.T, etcd *fakeEtcd) *Tracker {
	t.Helper()
	return New(Config{
		Ping:       etcd.ping,
		Detail:     func(context.Context) string { return "read view: synced at revision 7" },
		Interval:   5 * time.Millisecond,
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.DiscardHandler),
	})
}

func TestReadyzFollowsEachProbe(t *testing.T) {
	etcd := &fakeEtcd{}
	tr := newTracker(t, etcd)
	if got := testutil.ToFloat64(tr.reachable); got != 1 {
		t.Fatalf("saltbush_etcd_reachable = %v before any probe, want 1", got)
	}
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		tr.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w
	}
	etcd.down.Store(true)
	if w := get(); w.Code != http.StatusServiceUnavailable || !strings.HasPrefix(w.Body.String(), "etcd unreachable: ") {
		t.Fatalf("/readyz with etcd down = %d %q", w.Code, w.Body)
	}
	if got := testutil.ToFloat64(tr.reachable); got != 0 {
		t.Fatalf("saltbush_etcd_reachable = %v after a failed probe, want 0", got)
	}
	etcd.down.Store(false)
	if w := get(); w.Code != http.StatusOK || w.Body.String() != "ok\nread view: synced at revision 7\n" {
		t.Fatalf("/readyz with etcd up = %d %q", w.Code, w.Body)
	}
	if got := testutil.ToFloat64(tr.reachable); got != 1 {
		t.Fatalf("saltbush_etcd_reachable = %v after a probe that answered, want 1", got)
	}
}

func TestHealthFollowsEtcdUntilShutdown(t *testing.T) {
	etcd := &fakeEtcd{}
	tr := newTracker(t, etcd)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tr.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tr.Serving()
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus, gauge float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			hc, err := tr.Health().Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && hc.GetStatus() == want && testutil.ToFloat64(tr.reachable) == gauge {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health = %v (%v), gauge = %v; want %v and %v", hc.GetStatus(), err, testutil.ToFloat64(tr.reachable), want, gauge)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING, 1)
	etcd.down.Store(true)
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING, 0)
	etcd.down.Store(false)
	waitFor(healthpb.HealthCheckResponse_SERVING, 1)
	// After Shutdown, health stays NOT_SERVING whatever the probes find.
	tr.Shutdown()
	time.Sleep(50 * time.Millisecond)
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING, 1)
}

// recordingGate records what the tracker told it.
type recordingGate struct {
	changes chan string
}

func (g *recordingGate) SetUnavailable(cause error) { g.changes <- "unavailable: " + cause.Error() }
func (g *recordingGate) SetAvailable()              { g.changes <- "available" }

// countingEtcd is fakeEtcd counting the probes that reached it, and
// those /readyz made (their context carries readyzProbe).
type countingEtcd struct {
	fakeEtcd
	pings, readyzPings atomic.Int64
}

type readyzProbe struct{}

func (c *countingEtcd) ping(ctx context.Context) error {
	c.pings.Add(1)
	if ctx.Value(readyzProbe{}) != nil {
		c.readyzPings.Add(1)
	}
	return c.fakeEtcd.ping(ctx)
}

func TestGateClosesOnlyAfterGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		// closes: the failing probes outlast the grace, so the gate
		// closes; else they are an election's worth, and it never does.
		closes bool
	}{
		{name: "failures shorter than the grace", grace: time.Hour},
		{name: "failures longer than the grace", grace: 20 * time.Millisecond, closes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etcd := &countingEtcd{}
			gate := &recordingGate{changes: make(chan string, 10)}
			tr := New(Config{
				Ping: etcd.ping, Interval: 5 * time.Millisecond, Grace: tc.grace, Gate: gate,
				Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); tr.Run(ctx) }()
			defer func() { cancel(); <-done }()
			readyz := func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
				tr.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), readyzProbe{}, true)))
				return w
			}

			etcd.down.Store(true)
			if !tc.closes {
				// Several failed probes in a row, then etcd answers again.
				for start := etcd.pings.Load(); etcd.pings.Load() < start+5; {
					time.Sleep(time.Millisecond)
				}
				etcd.down.Store(false)
				for start := etcd.pings.Load(); etcd.pings.Load() < start+2; {
					time.Sleep(time.Millisecond)
				}
				select {
				case c := <-gate.changes:
					t.Fatalf("the gate was told %q by failures shorter than the grace", c)
				default:
				}
				if got := testutil.ToFloat64(tr.refusing); got != 0 {
					t.Fatalf("saltbush_etcd_requests_refused = %v, want 0", got)
				}
				return
			}
			if c := <-gate.changes; c != "unavailable: context deadline exceeded" {
				t.Fatalf("the gate was told %q, want unavailable", c)
			}
			if got := testutil.ToFloat64(tr.refusing); got != 1 {
				t.Fatalf("saltbush_etcd_requests_refused = %v while closed, want 1", got)
			}
			// /readyz answers from the closed gate without asking etcd.
			w := readyz()
			if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "requests refused until it answers") {
				t.Fatalf("/readyz while closed = %d %q", w.Code, w.Body)
			}
			if n := etcd.readyzPings.Load(); n != 0 {
				t.Fatalf("/readyz probed etcd %d times while the gate was closed, want 0", n)
			}
			etcd.down.Store(false)
			if c := <-gate.changes; c != "available" {
				t.Fatalf("the gate was told %q after etcd answered, want available", c)
			}
			if got := testutil.ToFloat64(tr.refusing); got != 0 {
				t.Fatalf("saltbush_etcd_requests_refused = %v after etcd answered, want 0", got)
			}
			if w := readyz(); w.Code != http.StatusOK {
				t.Fatalf("/readyz after etcd answered = %d %q", w.Code, w.Body)
			}
		})
	}
}
