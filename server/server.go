// Package server assembles saltbush: etcd (embedded or external), the store,
// the resource services, the gRPC server and the HTTP façade, and runs them
// until told to stop. Tests start it in-process exactly as `saltbush serve`
// does, on free ports.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/saltbush/saltbush/api/openapi"
	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/gateway"
	"github.com/saltbush/saltbush/gateway/sigv4"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/eksauth"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/insight"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/server/published"
	"github.com/saltbush/saltbush/server/review"
	"github.com/saltbush/saltbush/server/sts"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/server/throttle"
	"github.com/saltbush/saltbush/server/token"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/version"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// Config is everything `saltbush serve` can be told.
type Config struct {
	// HTTPAddr is the façade's listen address.
	HTTPAddr string
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string
	// DataDir holds the embedded etcd's data (DataDir/etcd).
	DataDir string
	// EtcdEndpoints selects an external etcd; the embedded one runs when empty.
	EtcdEndpoints []string
	// EtcdPrefix is the root of saltbush's keyspace.
	EtcdPrefix string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile secure the connection to an
	// external etcd: the CA that signed etcd's server certificate, and the
	// client certificate and key saltbush presents.
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// EtcdUsername and EtcdPassword authenticate to an etcd with auth on.
	EtcdUsername, EtcdPassword string
	// EtcdUnsafeNoFsync makes the embedded etcd skip fsync (tests only).
	EtcdUnsafeNoFsync bool
	// EtcdElectionTimeout is the embedded etcd's raft election timeout
	// (etcd's default when zero); tests shorten it to start faster.
	EtcdElectionTimeout time.Duration
	// DevAccount is the account the first start on an empty store creates,
	// with an administrator user whose access key it prints.
	DevAccount string
	// MasterKey seals access-key secrets and CA keys (32 bytes). When nil,
	// MasterKeyFile is read; when that is empty too, the embedded etcd's
	// data directory keeps a generated key (DataDir/master.key).
	MasterKey []byte
	// MasterKeyFile holds the base64 master key.
	MasterKeyFile string
	// ThrottleRate and ThrottleBurst are each account's token bucket
	// (requests per second, burst); a rate <= 0 disables throttling.
	ThrottleRate  float64
	ThrottleBurst int
	// AuditLog is where audit records go: "" for the log, else a file
	// that receives JSON lines.
	AuditLog string
	// GRPCServerNames are extra DNS names or IPs for the gRPC port's
	// certificate (the listen host, localhost and the host name are in
	// it already).
	GRPCServerNames []string
	// CertTTL is the default validity of issued gRPC client certificates.
	CertTTL time.Duration
	// MaxBodyBytes limits façade request bodies.
	MaxBodyBytes int64
	// ShutdownTimeout bounds graceful shutdown.
	ShutdownTimeout time.Duration
	// ReadinessInterval is how often gRPC health follows etcd reachability.
	ReadinessInterval time.Duration
	// Cluster configures the cluster service.
	Cluster cluster.Config
	// Addon configures the add-on service. Its Region and IdempotencyTTL
	// must equal the cluster service's (serve sets both from one flag).
	Addon addon.Config
	// STSHosts are host names accepted in `aws eks get-token` tokens
	// besides AWS's STS endpoints (a private cloud's own STS name).
	STSHosts []string
	// Delivery is the agent streams' timing (validated: fence-after plus
	// the safety margin must be below the session TTL).
	Delivery delivery.Config
	// ReplicaName names this replica in the add-on sweeper election.
	ReplicaName string
	// Catalog is the add-on catalogue; the embedded one (catalog.Load) when
	// nil. Loading checks every bundle by rendering it, so tests that start
	// many servers share one.
	Catalog *catalog.Catalog
	// Logger receives structured logs.
	Logger *slog.Logger
	// Authenticator authenticates façade requests; nil is SigV4 against
	// the key store, what saltbush serve runs. A program that embeds
	// saltbush behind a front end that has authenticated the caller
	// already sets its own (benchmarks do, to measure what SigV4 costs).
	Authenticator gateway.Authenticator
	// Banner receives the development access key the first start on an
	// empty store creates (serve: stderr); nothing is shown when nil.
	Banner io.Writer
}

// DefaultConfig is what `saltbush serve` runs with when given no flags.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:          "127.0.0.1:8080",
		GRPCAddr:          "127.0.0.1:9090",
		DataDir:           "./data",
		EtcdPrefix:        store.DefaultPrefix,
		DevAccount:        "000000000000",
		ThrottleRate:      50,
		ThrottleBurst:     100,
		CertTTL:           90 * 24 * time.Hour,
		MaxBodyBytes:      1 << 20,
		ShutdownTimeout:   15 * time.Second,
		ReadinessInterval: 5 * time.Second,
		Cluster:           cluster.DefaultConfig(),
		Addon:             addon.DefaultConfig(),
		Delivery:          delivery.DefaultConfig(),
	}
}

// Validate checks the configuration before anything starts.
func (c Config) Validate() error {
	var errs []error
	if err := identity.ValidateAccountID(c.DevAccount); err != nil {
		errs = append(errs, fmt.Errorf("dev account: %w", err))
	}
	if c.MasterKey != nil && len(c.MasterKey) != iam.MasterKeySize {
		errs = append(errs, fmt.Errorf("master key must be %d bytes", iam.MasterKeySize))
	}
	if c.MasterKey == nil && c.MasterKeyFile == "" && len(c.EtcdEndpoints) > 0 {
		errs = append(errs, errors.New("with an external etcd every replica needs the same master key: set --master-key-file or SALTBUSH_MASTER_KEY"))
	}
	if c.ThrottleRate > 0 && c.ThrottleBurst < 1 {
		errs = append(errs, errors.New("throttle burst must be at least 1"))
	}
	if len(c.EtcdEndpoints) == 0 && c.DataDir == "" {
		errs = append(errs, errors.New("a data directory is required for the embedded etcd"))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("max body bytes must be positive"))
	}
	errs = append(errs, c.Cluster.Validate(), c.Addon.Validate(), c.Delivery.Validate())
	if c.Addon.Region != c.Cluster.Region {
		errs = append(errs, fmt.Errorf("add-on region %q differs from cluster region %q", c.Addon.Region, c.Cluster.Region))
	}
	return errors.Join(errs...)
}

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
	health *health.Server
	// etcdReachable follows the readiness probes: 1 while the last one
	// reached etcd, so an alert need not infer it from error ratios.
	etcdReachable prometheus.Gauge
	httpServer    *http.Server
	grpcLis       net.Listener
	httpLis       net.Listener

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
	auditSink, err := s.openAudit()
	if err != nil {
		return nil, err
	}
	d, err := s.newDomain(keyCache)
	if err != nil {
		return nil, err
	}
	authorizer := authz.New(keyCache)
	limiter := throttle.New(cfg.ThrottleRate, cfg.ThrottleBurst)

	// The service table drives both ports and the access classes.
	s.access = &grpcAccess{authz: authorizer, throttle: limiter, audit: auditSink}
	s.grpcServer = s.newGRPCServer()
	s.health = health.NewServer()
	s.etcdReachable = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "saltbush_etcd_reachable",
		Help: "1 while this replica's last readiness probe (a linearizable etcd read) succeeded, else 0.",
	})
	s.etcdReachable.Set(1) // the store has just read its metadata
	s.registry.MustRegister(s.etcdReachable)
	table := serviceTable(d, authorizer, s.health, s.grpcServer)
	for _, svc := range table {
		svc.register(s.grpcServer)
	}
	if s.access.methods, err = methodTable(table); err != nil {
		return nil, err
	}
	facade, err := s.newFacade(ctx, registerFacade(table), keyCache, limiter, auditSink)
	if err != nil {
		return nil, err
	}
	issuers := oidc.NewIssuers(s.store)
	query, err := s.newQueryAPI(keyCache, authorizer, limiter, auditSink, issuers)
	if err != nil {
		return nil, err
	}
	podCredentials := s.newEKSAuth(keyCache, authorizer, limiter, auditSink, issuers, d.pods)
	s.httpServer = s.newHTTPServer(facade, query, podCredentials, oidc.NewHandler(issuers, facade, s.log.With("component", "oidc")))

	if err := s.listen(); err != nil {
		return nil, err
	}
	if err := s.bootstrap(ctx, s.keys, s.ca); err != nil {
		return nil, fmt.Errorf("bootstrap identities: %w", err)
	}
	return s, nil
}

// logger is the configured logger, or one that discards.
func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// newRegistry is the registry /metrics serves, with the Go and process
// collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// openStore starts the embedded etcd unless the configuration names an
// external one, connects to it and opens the store.
func (s *Server) openStore(ctx context.Context) error {
	endpoints := s.cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		var err error
		if endpoints, err = s.startEmbeddedEtcd(ctx); err != nil {
			return err
		}
	}
	etcdTLS, err := s.cfg.etcdTLS()
	if err != nil {
		return err
	}
	s.client, err = clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         etcdTLS,
		Username:    s.cfg.EtcdUsername,
		Password:    s.cfg.EtcdPassword,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		// Keep a dead member from stalling requests on a healthy cluster.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	if s.store, err = store.New(ctx, s.client, store.Options{Prefix: s.cfg.EtcdPrefix}); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	return s.startReadView()
}

// startEmbeddedEtcd starts the single-member etcd in DataDir/etcd and
// returns its client URLs.
func (s *Server) startEmbeddedEtcd(ctx context.Context) ([]string, error) {
	dir := filepath.Join(s.cfg.DataDir, "etcd")
	var err error
	s.etcd, err = embedetcd.Start(ctx, embedetcd.Config{
		Name:            "saltbush",
		Dir:             dir,
		UnsafeNoFsync:   s.cfg.EtcdUnsafeNoFsync,
		ElectionTimeout: s.cfg.EtcdElectionTimeout,
	})
	if err != nil {
		return nil, err
	}
	endpoints := s.etcd.Endpoints()
	s.log.Info("embedded etcd started", "dir", dir, "endpoints", strings.Join(endpoints, ","))
	// The embedded etcd listens on a free loopback port; the file says
	// which, so etcdctl (a snapshot backup, an inspection) can reach it.
	path := s.cfg.EtcdEndpointsFile()
	if err := os.WriteFile(path, []byte(strings.Join(endpoints, ",")+"\n"), 0o644); err != nil { //nolint:gosec // G306: loopback URLs for etcdctl, not a secret
		return nil, fmt.Errorf("write the embedded etcd's endpoints to %s: %w", path, err)
	}
	return endpoints, nil
}

// EtcdEndpointsFile is where a server with the embedded etcd writes its
// client URLs (comma-separated, as etcdctl --endpoints takes them) each
// time it starts.
func (c Config) EtcdEndpointsFile() string { return filepath.Join(c.DataDir, "etcd-endpoints") }

// sweeperLeaderGauge says whether this replica leads the add-on deadline
// sweeper election: summed over replicas it is 1, and which one sweeps is
// what an operator looks for when deadlines do not fire.
func sweeperLeaderGauge(sweeper *addon.Sweeper) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "saltbush_addon_sweeper_leader",
		Help: "1 while this replica leads the add-on deadline sweeper election, else 0.",
	}, func() float64 {
		if sweeper.Leader() {
			return 1
		}
		return 0
	})
}

// startIdentity opens the key store and starts its in-memory mirror
// (authentication, throttling and authorization cost no etcd round trip)
// and the gRPC port's CA. It returns once the mirror holds every identity.
func (s *Server) startIdentity(ctx context.Context) (*iam.Cache, error) {
	masterKey, err := s.cfg.masterKey()
	if err != nil {
		return nil, err
	}
	// The key store's clock (Cluster.Now, the one tests move) decides
	// when role sessions expire; signatures' dates are checked against
	// the real time.
	if s.keys, err = iam.NewService(s.store, masterKey, s.cfg.Cluster.Now); err != nil {
		return nil, err
	}
	keyCache := s.keys.NewCache()
	cacheReady := make(chan struct{})
	go keyCache.Run(s.background, cacheReady)
	if s.ca, err = pki.New(s.store, pki.Config{MasterKey: masterKey, DefaultTTL: s.cfg.CertTTL, Logger: s.log.With("component", "pki")}); err != nil {
		return nil, err
	}
	if _, err := s.ca.Init(ctx); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	if err := s.ca.Start(s.background); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	select {
	case <-cacheReady:
		return keyCache, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("load identities: %w", ctx.Err())
	}
}

// openAudit returns where audit records go: the log, or the configured
// JSON-lines file (closed by Close).
func (s *Server) openAudit() (audit.Sink, error) {
	if s.cfg.AuditLog == "" {
		return audit.LogSink{Logger: s.log.With("component", "audit")}, nil
	}
	var err error
	if s.auditLog, err = audit.OpenFile(s.cfg.AuditLog); err != nil {
		return nil, err
	}
	return s.auditLog, nil
}

// newDomain builds the resource services over the store.
func (s *Server) newDomain(keyCache *iam.Cache) (domain, error) {
	d := domain{keys: s.keys, ca: s.ca}
	var err error
	if d.clusters, d.addons, d.published, err = s.newClustersAndAddons(keyCache); err != nil {
		return domain{}, err
	}
	d.updates = update.NewService(s.store, d.clusters, s.log.With("service", "update"))
	if d.versions, err = version.NewService(s.store, d.clusters, version.Config{
		Versions: s.cfg.Cluster.KubernetesVersions, Default: s.cfg.Cluster.DefaultKubernetesVersion,
		IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "version")); err != nil {
		return domain{}, err
	}
	d.insights = insight.NewService(s.store, d.clusters, d.versions, d.addons.Catalog(), s.cfg.Cluster.Now,
		s.log.With("service", "insight"))
	// A rollback is judged by the verdict the ROLLBACK_READINESS insight
	// renders; the insight service reads the versions, so it is given to
	// the version service once both exist.
	d.versions.SetRollbackReadiness(d.insights)
	policies := accesspolicy.NewCatalog()
	if d.entries, err = access.NewService(s.store, d.clusters, keyCache, policies, access.Config{
		Region: s.cfg.Cluster.Region, IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "access")); err != nil {
		return domain{}, err
	}
	if d.pods, err = podidentity.NewService(s.store, d.clusters, podidentity.Config{
		Region: s.cfg.Cluster.Region, IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "podidentity")); err != nil {
		return domain{}, err
	}
	if d.reviews, err = s.newReviews(d.clusters, keyCache, d.entries, policies); err != nil {
		return domain{}, err
	}
	d.tags = tagging.NewService(s.cfg.Cluster.Region, map[string]tagging.Resource{
		"cluster":           d.clusters.Tagging(),
		"addon":             d.addons.Tagging(),
		"access-entry":      d.entries.Tagging(),
		podidentity.ARNType: d.pods.Tagging(),
	}, s.log.With("service", "tagging"))
	if d.deliveries, err = s.newDelivery(d.clusters, d.addons, d.versions); err != nil {
		return domain{}, err
	}
	return d, nil
}

// newClustersAndAddons builds the cluster service and the add-on service
// over the configured (or embedded) catalogue and the versions operators
// published beside it.
func (s *Server) newClustersAndAddons(keyCache *iam.Cache) (*cluster.Service, *addon.Service, *published.Service, error) {
	clusterCfg := s.cfg.Cluster
	clusterCfg.RoleOfSession = keyCache.EffectivePrincipal
	clusters, err := cluster.NewService(s.store, clusterCfg, s.log.With("service", "cluster"))
	if err != nil {
		return nil, nil, nil, err
	}
	cat := s.cfg.Catalog
	if cat == nil {
		if cat, err = catalog.Load(); err != nil {
			return nil, nil, nil, fmt.Errorf("add-on catalogue: %w", err)
		}
	}
	pub := published.New(s.store, cat, s.cfg.Cluster.Now, s.log.With("service", "published"))
	addons, err := addon.NewService(s.store, clusters, pub, s.cfg.Addon, s.registry, s.log.With("service", "addon"))
	if err != nil {
		return nil, nil, nil, err
	}
	return clusters, addons, pub, nil
}

// newReviews builds the token and access reviews guest agents ask for.
func (s *Server) newReviews(clusters *cluster.Service, keyCache *iam.Cache, entries *access.Service, policies *accesspolicy.Catalog) (*review.Service, error) {
	// Reviews read cluster records and access entries from a watch-fed
	// view of the clusters whose agents ask, stopped with the server.
	view, err := review.NewView(s.store, review.DefaultViewIdle, s.registry, s.log.With("component", "review-view"))
	if err != nil {
		return nil, err
	}
	go view.Run(s.background)
	s.tokens = &token.Verifier{
		// AWS's STS hosts, saltbush's own region's (a private cloud may
		// name its region anything), and the configured ones; the
		// façade's own address (it answers STS) is added by listen.
		Hosts:         token.DefaultHosts(append([]string{"sts." + s.cfg.Cluster.Region + ".amazonaws.com"}, s.cfg.STSHosts...)...),
		Lookup:        secretLookup(keyCache),
		SessionLookup: sessionLookup(keyCache),
		Keys:          sigv4.NewSigningKeys(),
	}
	return review.NewService(clusters, keyCache, entries, view, s.tokens, policies, s.registry, s.log.With("service", "review"))
}

// newDelivery builds the deadline sweeper (add-on deadlines, and rollback
// timeouts) and the delivery service, both named for this replica.
func (s *Server) newDelivery(clusters *cluster.Service, addons *addon.Service, versions *version.Service) (*delivery.Service, error) {
	replica := s.cfg.ReplicaName
	if replica == "" {
		host, _ := os.Hostname()
		replica = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	s.sweeper = addons.NewSweeper(replica, versions.SweepRollbackDeadlines)
	s.registry.MustRegister(sweeperLeaderGauge(s.sweeper))
	deliveryCfg := s.cfg.Delivery
	deliveryCfg.Replica = replica
	deliveries, err := delivery.NewService(s.store, clusters, addons, deliveryCfg, s.registry, s.log.With("service", "delivery"))
	s.deliveries = deliveries
	return deliveries, err
}

// flowWindow is the gRPC server's static HTTP/2 flow-control window, per
// stream and per connection.
const flowWindow = 1 << 20

// newGRPCServer is the public gRPC port, mTLS only. Identity comes from
// the verified client certificate (the pki interceptor), never from
// metadata; access decides what that identity may call.
func (s *Server) newGRPCServer() *grpc.Server {
	grpcMetrics := newGRPCMetrics(s.registry)
	return grpc.NewServer(
		grpc.Creds(credentials.NewTLS(s.ca.ServerTLSConfig(s.cfg.grpcHosts(s.cfg.GRPCAddr)))),
		grpc.ChainUnaryInterceptor(
			recoverUnary(s.log),
			grpcMetrics.unary,
			s.ca.UnaryInterceptor(),
			s.access.unary,
		),
		grpc.ChainStreamInterceptor(
			recoverStream(s.log),
			grpcMetrics.stream,
			s.ca.StreamInterceptor(),
			s.access.stream,
		),
		grpc.MaxRecvMsgSize(int(s.cfg.MaxBodyBytes)),
		// Every connection is TLS, and crypto/tls already buffers a whole
		// decrypted record, so gRPC's own 32 KiB read buffer per
		// connection only doubles the copy: with one long-lived stream per
		// guest agent it was the largest part of an idle stream's memory
		// (tests/bench: BenchmarkDeliveryStreams).
		grpc.ReadBufferSize(0),
		// Writes are batched in buffers from a shared pool, held from a
		// frame's write to the flush: with thousands of agents
		// heartbeating, thousands are held at once, and the pool keeps
		// them. One TLS record (16 KiB) per flush batches as well as the
		// default 32 KiB does.
		grpc.WriteBufferSize(16<<10),
		// Static flow-control windows, as the guest agent's link has:
		// gRPC's dynamic window sizing pings the peer after every data
		// frame a connection receives while no such ping is out, so every
		// agent heartbeat cost the replica a ping to write and its ack to
		// read. 1 MiB per stream and per connection carries requests at
		// tens of MB/s even across a 50 ms round trip.
		grpc.StaticStreamWindowSize(flowWindow), grpc.StaticConnWindowSize(flowWindow),
		// Find dead peers (agents on VMs that vanished) within a minute,
		// and refuse clients that ping more often than every 10s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
}

// newQueryAPI is the query-protocol endpoint beside the façade: STS
// (signing name sts, the serving region; AssumeRoleWithWebIdentity
// unsigned, its tokens verified with the hosted issuers' keys) and IAM's
// OIDC provider operations (signing name iam; IAM is global, so any region
// is taken).
func (s *Server) newQueryAPI(keyCache *iam.Cache, authorizer *authz.Authorizer, limiter *throttle.Limiter, auditSink audit.Sink,
	issuers *oidc.Issuers) (*sts.Handler, error) {
	return sts.New(sts.Config{
		STS:          sigV4Auth("sts", s.cfg.Cluster.Region, keyCache),
		IAM:          sigV4Auth("iam", "", keyCache),
		Throttle:     limiter.Allow,
		Audit:        auditSink,
		MaxBodyBytes: s.cfg.MaxBodyBytes,
		Keys:         s.keys,
		Authorizer:   authorizer,
		Issuers:      sts.AccountIssuers(s.store, s.keys),
		Hosted:       issuers,
		Logger:       s.log.With("component", "sts"),
	})
}

// newEKSAuth is EKS Auth beside the façade (signing name eks-auth, the
// serving region): AssumeRoleForPodIdentity for the node agents of EKS Pod
// Identity.
func (s *Server) newEKSAuth(keyCache *iam.Cache, authorizer *authz.Authorizer, limiter *throttle.Limiter, auditSink audit.Sink,
	issuers *oidc.Issuers, pods *podidentity.Service) *eksauth.Handler {
	now := s.cfg.Cluster.Now
	if now == nil {
		now = time.Now
	}
	return eksauth.NewHandler(eksauth.Config{
		Authenticator: sigV4Auth("eks-auth", s.cfg.Cluster.Region, keyCache),
		Throttle:      limiter.Allow,
		Audit:         auditSink,
		MaxBodyBytes:  s.cfg.MaxBodyBytes,
		Service: eksauth.NewService(s.store, issuers, pods, s.keys, authorizer, s.cfg.Cluster.Region, now,
			s.log.With("component", "eks-auth")),
		Logger: s.log.With("component", "eks-auth"),
	})
}

// newHTTPServer serves the façade and, beside it on the same address,
// the query-protocol endpoint (STS and IAM, told apart by the request's
// shape, sts.IsQueryRequest), EKS Auth (eksauth.IsRequest) and the hosted
// OIDC issuers' documents (oidc.IsRequest), with the health, readiness,
// metrics and OpenAPI endpoints.
func (s *Server) newHTTPServer(facade, query, podCredentials, issuers http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.Document)
	})
	// Only the four operational paths go through the ServeMux: it cleans a
	// path before matching and answers "/a/../b" or "//" with a redirect to
	// the cleaned one, which is not an AWS answer (and would act on a path
	// the client did not sign). Every other request reaches the façade or
	// an endpoint beside it with its path as sent, and is refused there in
	// AWS's words if it names nothing.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics", "/openapi.json":
			mux.ServeHTTP(w, r)
			return
		}
		switch {
		case sts.IsQueryRequest(r):
			query.ServeHTTP(w, r)
		case eksauth.IsRequest(r):
			podCredentials.ServeHTTP(w, r)
		case oidc.IsRequest(r):
			issuers.ServeHTTP(w, r)
		default:
			facade.ServeHTTP(w, r)
		}
	})
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// listen binds the gRPC and HTTP ports.
func (s *Server) listen() error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen gRPC on %s: %w", s.cfg.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen HTTP on %s: %w", s.cfg.HTTPAddr, err)
	}
	if s.tokens != nil {
		// Before serving: nothing reads the verifier yet.
		s.tokens.HTTPHosts = facadeHosts(s.HTTPAddr())
	}
	return nil
}

// facadeHosts are the host:port names a client reaches the bound façade
// by, as `aws eks get-token` puts them in a token when its STS endpoint
// URL is the façade's (the development profile's is): the bound address,
// for a loopback or wildcard listener the loopback names too, and for a
// wildcard listener the machine's host name.
func facadeHosts(bound string) token.Hosts {
	hosts := token.Hosts{bound: true}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return hosts
	}
	ip := net.ParseIP(host)
	if ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
			hosts[h+":"+port] = true
		}
	}
	if name, err := os.Hostname(); err == nil && ip != nil && ip.IsUnspecified() {
		// Listening on every address: clients may name the machine.
		hosts[net.JoinHostPort(name, port)] = true
	}
	return hosts
}

// etcdTLS is the client TLS configuration for an external etcd, or nil.
func (c Config) etcdTLS() (*tls.Config, error) {
	if c.EtcdCAFile == "" && c.EtcdCertFile == "" && c.EtcdKeyFile == "" {
		return nil, nil
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		return nil, errors.New("etcd TLS: a client certificate needs its key, and a key its certificate")
	}
	info := transport.TLSInfo{CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile, TrustedCAFile: c.EtcdCAFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	return cfg, nil
}

// secretLookup adapts the key store to sigv4.Lookup: the secret of an
// active access key.
func secretLookup(keys *iam.Cache) sigv4.Lookup {
	return func(ctx context.Context, akid string) (string, bool, error) {
		c, ok, err := keys.Lookup(ctx, akid)
		return c.Secret, ok, err
	}
}

// sessionLookup adapts the key store to sigv4.SessionLookup: the secret of
// a valid role session; an expired one is refused as expired.
func sessionLookup(keys *iam.Cache) sigv4.SessionLookup {
	return func(ctx context.Context, akid, token string) (string, bool, error) {
		c, ok, err := keys.LookupSession(ctx, akid, token)
		if errors.Is(err, iam.ErrSessionExpired) {
			return "", false, sigv4.ExpiredTokenError()
		}
		return c.Secret, ok, err
	}
}

// HTTPAddr is the bound façade address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// sweeperStopWait bounds how long shutdown waits for the add-on sweeper to
// resign its election.
const sweeperStopWait = 5 * time.Second

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

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.etcdReachable.Set(0)
		http.Error(w, "etcd unreachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.etcdReachable.Set(1)
	_, _ = w.Write([]byte("ok\n" + s.readViewStatus(ctx) + "\n"))
}

// Serve serves gRPC and HTTP until ctx ends or a server fails, then shuts
// both down gracefully (in-flight requests finish within ShutdownTimeout)
// and stops etcd.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() {
		if err := s.grpcServer.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	go func() {
		if err := s.httpServer.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server: %w", err)
		}
	}()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("saltbush serving", "http", s.HTTPAddr(), "grpc", s.GRPCAddr())
	watchCtx, stopWatch := context.WithCancel(ctx)
	go s.watchReadiness(watchCtx)
	go s.pruneCertificates(watchCtx)
	sweeperDone := make(chan struct{})
	go func() { defer close(sweeperDone); s.sweeper.Run(watchCtx) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopWatch()
	// Agent streams end first, at once: held open, each would keep gRPC's
	// graceful stop waiting for the whole shutdown timeout, and its agent
	// on a replica that is going away. Their agents connect to another
	// replica and take their sessions over there (docs/delivery-protocol.md).
	if s.deliveries != nil {
		s.deliveries.Shutdown()
	}
	// The sweeper resigns its election before the etcd client closes, so a
	// successor takes over at once. The wait is bounded: with etcd
	// unreachable, an interrupted Campaign resigns on the client's own
	// context (etcd's concurrency package does that), which ends only when
	// shutdown closes the client.
	select {
	case <-sweeperDone:
	case <-time.After(sweeperStopWait):
		s.log.Warn("add-on sweeper did not resign in time (etcd unreachable?); shutting down without it")
	}
	s.shutdown()
	return err
}

// certificatePruneInterval is how often a replica drops the records of
// certificates that expired (any replica may; each delete is guarded).
const certificatePruneInterval = time.Hour

// pruneCertificates keeps pki/issued and pki/revoked from growing forever.
func (s *Server) pruneCertificates(ctx context.Context) {
	t := time.NewTicker(certificatePruneInterval)
	defer t.Stop()
	for {
		if n, err := s.ca.PruneExpired(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("prune expired certificate records", "err", err)
		} else if n > 0 {
			s.log.Info("pruned expired certificate records", "records", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchReadiness keeps gRPC health in step with /readyz: NOT_SERVING while
// etcd does not answer, so gRPC load balancers and probes stop sending
// requests this replica cannot serve.
func (s *Server) watchReadiness(ctx context.Context) {
	interval := s.cfg.ReadinessInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	serving := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.store.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && serving:
			s.log.Warn("etcd unreachable: gRPC health NOT_SERVING", "err", err)
			s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		case err == nil && !serving:
			s.log.Info("etcd reachable again: gRPC health SERVING")
			s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		}
		serving = err == nil
		if serving {
			s.etcdReachable.Set(1)
		} else {
			s.etcdReachable.Set(0)
		}
	}
}

func (s *Server) shutdown() {
	s.health.Shutdown()
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.httpServer.Shutdown(ctx); err != nil {
			s.log.Warn("HTTP shutdown", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { s.grpcServer.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcServer.Stop()
		}
	}()
	wg.Wait()
	s.Close()
	s.log.Info("saltbush stopped")
}

// Close releases everything without waiting for requests (Serve calls it
// after a graceful shutdown).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.grpcServer != nil {
			s.grpcServer.Stop()
		}
		if s.httpServer != nil {
			_ = s.httpServer.Close()
		}
		if s.grpcLis != nil {
			_ = s.grpcLis.Close()
		}
		if s.httpLis != nil {
			_ = s.httpLis.Close()
		}
		if s.stopBackground != nil {
			s.stopBackground()
		}
		if s.client != nil {
			_ = s.client.Close()
		}
		if s.auditLog != nil {
			_ = s.auditLog.Close()
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
	})
}
