package faults

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
)

// TestReadinessFollowsEtcd: with its etcd gone, saltbush reports not ready
// on /readyz, NOT_SERVING on gRPC health and saltbush_etcd_reachable 0
// (while /healthz, liveness, stays up), and recovers by itself when etcd is
// back.
func TestReadinessFollowsEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	clientURL, peerURL := loopport.URL(t, "http"), loopport.URL(t, "http")
	cfg := embedetcd.Config{Dir: dir, ClientURL: clientURL, PeerURL: peerURL, UnsafeNoFsync: true}
	etcd, err := embedetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { etcd.Close() }()

	srv := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()),
		servertest.WithReadinessInterval(100*time.Millisecond))
	health := healthpb.NewHealthClient(srv.GRPC(t))
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// reachable is the saltbush_etcd_reachable gauge /metrics exports.
	reachable := func() string {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "saltbush_etcd_reachable "); ok {
				return v
			}
		}
		return "(absent)"
	}
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus, readyz int) {
		t.Helper()
		gauge := "1"
		if readyz != http.StatusOK {
			gauge = "0"
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			hc, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && hc.GetStatus() == want && get("/readyz") == readyz && reachable() == gauge {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health = %v (%v), /readyz = %d, saltbush_etcd_reachable = %s; want %v, %d and %s",
					hc.GetStatus(), err, get("/readyz"), reachable(), want, readyz, gauge)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitFor(healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	etcd.Close()
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable)
	if get("/healthz") != http.StatusOK {
		t.Error("/healthz failed while only etcd is down")
	}
	etcd, err = embedetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(healthpb.HealthCheckResponse_SERVING, http.StatusOK)
}
