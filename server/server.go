// Package server assembles saltbush: etcd (embedded or external), the store,
// the resource services, the gRPC server and the HTTP façade, and runs them
// until told to stop. Tests start it in-process exactly as `saltbush serve`
// does, on free ports.
//
// New reads as the list of its steps; each step is in the file named for
// what it builds:
//
//	config.go     Config, its defaults and its validation
//	store.go      etcd and the store (internal/etcdstore); readview.go, the store's read view
//	identity.go   the key store, its mirror and the gRPC port's CA; credentials.go, the master key and the development credentials
//	gate.go       authorization, throttling and audit, which both ports share
//	domain.go     the resource services
//	services.go   the service table: every service served, on which port, and who may call it
//	grpc.go       the gRPC port (interceptors.go, grpc_access.go)
//	http.go       the façade's port and what it routes where (facade.go, the façade)
//	readiness.go  /readyz, gRPC health and saltbush_etcd_reachable (internal/readiness)
//	serve.go      binding the ports (internal/listen), Serve and what runs while it serves
//	shutdown.go   the order a server stops in, and Close
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/internal/readiness"
	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/token"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// Server is a running saltbush.
type Server struct {
	cfg      Config
	log      *slog.Logger
	etcd     *embedetcd.Server
	client   *clientv3.Client
	store    *store.Store
	registry *prometheus.Registry
	sweeper  *addon.Sweeper
	keys     *iam.Service
	ca       *pki.Authority
	dev      *DevCredentials
	// tokens verifies `aws eks get-token` tokens; once the façade is
	// bound, its own address is added to the hosts it accepts.
	tokens   *token.Verifier
	auditLog *audit.JSONLines
	// background runs the watches that keep identities current; Close
	// ends it.
	background     context.Context
	stopBackground context.CancelFunc

	grpcServer *grpc.Server
	// access decides what a gRPC caller may call (by the method classes
	// of the service table).
	access *grpcAccess
	// ready is gRPC health, /readyz and saltbush_etcd_reachable.
	ready      *readiness.Tracker
	httpServer *http.Server
	grpcLis    net.Listener
	httpLis    net.Listener

	closeOnce sync.Once

	// deliveries is the delivery service: Serve's stop ends its agent
	// streams.
	deliveries *delivery.Service
}

// New starts etcd (unless external), connects the store, builds the
// services and binds both listeners. Serve runs them.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.logger(), registry: newRegistry()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// The watches that keep identities and views current run until Close.
	s.background, s.stopBackground = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	keyCache, err := s.startIdentity(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.newGate(keyCache)
	if err != nil {
		return nil, err
	}
	d, err := s.newDomain(keyCache)
	if err != nil {
		return nil, err
	}
	s.ready = s.newReadiness()
	// The service table drives both ports and the access classes.
	s.grpcServer = s.newGRPCServer(g)
	table := serviceTable(d, g.authz, s.ready.Health(), s.grpcServer)
	if err := s.registerGRPC(table); err != nil {
		return nil, err
	}
	if s.httpServer, err = s.newHTTPServer(ctx, table, g, d.pods); err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	if err := s.bootstrap(ctx, s.keys, s.ca); err != nil {
		return nil, fmt.Errorf("bootstrap identities: %w", err)
	}
	return s, nil
}

// newRegistry is the registry /metrics serves, with the Go and process
// collectors. Besides the Go collector's defaults it exports the heap the
// last GC found live (go_gc_heap_live_bytes): what the process holds,
// without the garbage the next cycle frees, which the in-use figures swing
// by between cycles.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// HTTPAddr is the bound façade address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// DevCredentials returns the development key this server created on an
// empty store, or nil when the store had been bootstrapped before.
func (s *Server) DevCredentials() *DevCredentials { return s.dev }

// ReadView returns the replica's read view (docs/architecture.md, "Read
// view").
func (s *Server) ReadView() *store.View { return s.store.View() }

// IAM returns the key store.
func (s *Server) IAM() *iam.Service { return s.keys }

// Authority returns the gRPC port's certificate authority.
func (s *Server) Authority() *pki.Authority { return s.ca }
