package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/saltbush/saltbush/gateway"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/store"
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

// logger is the configured logger, or one that discards.
func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// EtcdEndpointsFile is where a server with the embedded etcd writes its
// client URLs (comma-separated, as etcdctl --endpoints takes them) each
// time it starts.
func (c Config) EtcdEndpointsFile() string { return filepath.Join(c.DataDir, "etcd-endpoints") }
