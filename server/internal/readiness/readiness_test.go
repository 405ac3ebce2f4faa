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
