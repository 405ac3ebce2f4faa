package faults

import (
	"context"
	"net/http"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// TestReadinessFollowsEtcd: with its etcd gone, saltbush reports not ready
// on /readyz and NOT_SERVING on gRPC health (while /healthz, liveness, stays
// up), and recovers by itself when etcd is back.
func TestReadinessFollowsEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	clientURL, _ := embedetcd.FreeURL()
	peerURL, _ := embedetcd.FreeURL()
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
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus, readyz int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			hc, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && hc.GetStatus() == want && get("/readyz") == readyz {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health = %v (%v), /readyz = %d; want %v and %d", hc.GetStatus(), err, get("/readyz"), want, readyz)
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
