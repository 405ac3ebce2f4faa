package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serverStream is the least of a grpc.ServerStream the interceptors use:
// its context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

func TestStreamInterceptors(t *testing.T) {
	info := &grpc.StreamServerInfo{FullMethod: "/saltbush.delivery.v1.DeliveryService/Connect"}
	ss := serverStream{ctx: context.Background()}
	tests := []struct {
		name    string
		handler grpc.StreamHandler
		code    codes.Code
	}{
		{name: "ends cleanly", handler: func(any, grpc.ServerStream) error { return nil }, code: codes.OK},
		{name: "ends with an error", handler: func(any, grpc.ServerStream) error { return status.Error(codes.Aborted, "fenced") }, code: codes.Aborted},
		{name: "panics", handler: func(any, grpc.ServerStream) error { panic("a bug") }, code: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newGRPCMetrics(prometheus.NewRegistry())
			recover := recoverStream(slog.New(slog.DiscardHandler))
			var openDuring float64
			handler := func(srv any, s grpc.ServerStream) error {
				openDuring = testutil.ToFloat64(m.open.WithLabelValues(info.FullMethod))
				return tt.handler(srv, s)
			}
			// The server's order: recover outermost, then metrics.
			err := recover(nil, ss, info, func(srv any, s grpc.ServerStream) error {
				return m.stream(srv, s, info, handler)
			})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("stream ended with %s, want %s", got, tt.code)
			}
			if openDuring != 1 {
				t.Errorf("open streams while it ran: %v, want 1", openDuring)
			}
			if got := testutil.ToFloat64(m.open.WithLabelValues(info.FullMethod)); got != 0 {
				t.Errorf("open streams after it ended: %v, want 0", got)
			}
			// A panic unwinds through the metrics interceptor before
			// recover turns it into Internal: it is not counted as ended
			// with a code, only the gauge is released (deferred).
			want := 1.0
			if tt.code == codes.Internal {
				want = 0
			}
			if got := testutil.ToFloat64(m.handled.WithLabelValues(info.FullMethod, tt.code.String())); got != want {
				t.Errorf("ended streams with %s: %v, want %v", tt.code, got, want)
			}
		})
	}
}

// TestEveryMethodHasAClass walks every method the real server registers:
// a method without a class is refused to every caller (fail closed), so a
// service registered outside the service table, or a table row without a
// class, would be unreachable.
func TestEveryMethodHasAClass(t *testing.T) {
	s := startUnserved(t)
	for service, info := range registeredServices(t, s) {
		for _, m := range info.Methods {
			full := "/" + service + "/" + m.Name
			if s.access.methods[full].class == classDenied {
				t.Errorf("%s has no access class: give its service a row with a class in the service table (server/services.go)", full)
			}
		}
	}
}

// TestReadMethodsDeclareNoSideEffects: whether a call is audited comes
// from its method's proto (server/services.go, methodTable), so a read RPC
// that forgot to declare idempotency_level = NO_SIDE_EFFECTS would be
// audited as a change on every call. Methods named as reads must declare
// it; and the audit split of a few methods is pinned.
func TestReadMethodsDeclareNoSideEffects(t *testing.T) {
	s := startUnserved(t)
	for service, info := range registeredServices(t, s) {
		if !strings.HasPrefix(service, "saltbush.") {
			continue
		}
		for _, m := range info.Methods {
			full := "/" + service + "/" + m.Name
			for _, read := range []string{"Get", "List", "Describe", "Review"} {
				if strings.HasPrefix(m.Name, read) && !s.access.methods[full].readOnly {
					t.Errorf("%s reads but is audited as a change: declare option idempotency_level = NO_SIDE_EFFECTS on it in its proto", full)
				}
			}
		}
	}
	for full, readOnly := range map[string]bool{
		"/saltbush.eks.v1.ClusterService/CreateCluster":                             false,
		"/saltbush.eks.v1.ClusterService/DescribeCluster":                           true,
		"/saltbush.eks.v1.TagService/TagResource":                                   false, // IDEMPOTENT still changes state
		"/saltbush.control.v1.AddonControlService/EnsureAddon":                      false,
		"/saltbush.control.v1.IdentityControlService/GetCertificateAuthorityBundle": true,
		"/saltbush.delivery.v1.AccessReviewService/ReviewToken":                     true,
		"/saltbush.delivery.v1.DeliveryService/Connect":                             false,
		"/grpc.health.v1.Health/Check":                                              true,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":                 true,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo":            true,
	} {
		m, ok := s.access.methods[full]
		if !ok {
			t.Errorf("%s is not served", full)
			continue
		}
		if m.readOnly != readOnly {
			t.Errorf("%s: readOnly = %v, want %v", full, m.readOnly, readOnly)
		}
	}
}

// startUnserved builds a real server (embedded etcd in a temporary
// directory, nothing served).
func startUnserved(t *testing.T) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.EtcdUnsafeNoFsync = true
	cfg.EtcdElectionTimeout = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// registeredServices returns what the server's gRPC server registered.
func registeredServices(t *testing.T, s *Server) map[string]grpc.ServiceInfo {
	t.Helper()
	services := s.grpcServer.GetServiceInfo()
	if len(services) < 10 {
		t.Fatalf("the server registered %d services; the walk would prove little", len(services))
	}
	return services
}
