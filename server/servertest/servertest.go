// Package servertest starts a real saltbush in-process for tests and
// benchmarks: embedded etcd (no fsync) in a temporary directory, the gRPC
// server and the façade on free loopback ports, and clients for both: the
// unmodified AWS SDK for Go v2 EKS client (endpoint override, static
// credentials, real SigV4 signing) and a gRPC connection.
package servertest

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/catalog"
)

// Server is a running in-process saltbush.
type Server struct {
	*server.Server
	// URL is the façade's base URL.
	URL string
	// Config is what the server was started with.
	Config server.Config

	stopOnce sync.Once
	stop     func()
	done     chan error
	serveErr error
}

// Option adjusts the configuration before start.
type Option func(*server.Config)

// WithEtcdEndpoints points the server at an external etcd instead of an
// embedded one.
func WithEtcdEndpoints(eps []string) Option {
	return func(c *server.Config) { c.EtcdEndpoints = eps }
}

// embeddedCatalog is the add-on catalogue, loaded once per test binary: a
// catalogue is immutable once loaded, and loading renders every bundle.
var embeddedCatalog = sync.OnceValues(catalog.Load)

// Start starts saltbush and stops it when the test ends.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := server.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.DataDir = tb.TempDir()
	cfg.EtcdUnsafeNoFsync = true
	// A single member elects itself after one election timeout: 1s by
	// default, paid by every test that starts a server.
	cfg.EtcdElectionTimeout = 100 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	if os.Getenv("SALTBUSH_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cat, err := embeddedCatalog()
	if err != nil {
		tb.Fatalf("load the add-on catalogue: %v", err)
	}
	cfg.Catalog = cat
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := server.New(ctx, cfg)
	if err != nil {
		tb.Fatalf("start saltbush: %v", err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	s := &Server{Server: srv, URL: "http://" + srv.HTTPAddr(), Config: cfg, stop: stop, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(serveCtx) }()
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("saltbush serve: %v", err)
		}
	})
	return s
}

// Stop shuts the server down gracefully (as SIGTERM does) and returns what
// Serve returned. Later calls return the same.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stop()
		s.serveErr = <-s.done
	})
	return s.serveErr
}

// EKS returns an unmodified AWS SDK EKS client for the façade. Requests are
// signed with SigV4 using static test credentials.
func (s *Server) EKS(tb testing.TB, optFns ...func(*eks.Options)) *eks.Client {
	tb.Helper()
	return eks.New(eks.Options{
		Region:       s.Config.Cluster.Region,
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDSALTBUSHTEST", "test-secret", ""),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	}, optFns...)
}

// GRPC returns a gRPC connection to the server, closed when the test ends.
func (s *Server) GRPC(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("dial gRPC: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// WithReadinessInterval sets how often gRPC health follows etcd.
func WithReadinessInterval(d time.Duration) Option {
	return func(c *server.Config) { c.ReadinessInterval = d }
}

// WithConfig adjusts any part of the configuration.
func WithConfig(f func(*server.Config)) Option {
	return Option(f)
}
