// Package servertest starts a real saltbush in-process for tests and
// benchmarks: embedded etcd (no fsync) in a temporary directory, the gRPC
// server and the façade on free loopback ports, and clients for both: the
// unmodified AWS SDK for Go v2 EKS client (endpoint override, the
// development administrator's access key, real SigV4 signing) and a gRPC
// connection over mTLS with the admin service's certificate.
package servertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tlsclient"
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

	// etcdMu guards the test's own client of the server's etcd and the
	// store over it, made on first use and closed when the test ends.
	etcdMu sync.Mutex
	etcd   *clientv3.Client
	store  *store.Store
}

// Option adjusts the configuration before start.
type Option func(*server.Config)

// WithEtcdEndpoints points the server at an external etcd instead of an
// embedded one.
func WithEtcdEndpoints(eps []string) Option {
	return func(c *server.Config) { c.EtcdEndpoints = eps }
}

// testMasterKey seals test secrets; it is not a secret.
var testMasterKey = sha256.Sum256([]byte("saltbush test master key"))

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
	// Tests drive one account hard; the throttling tests turn it on.
	cfg.ThrottleRate = 0
	// One key for every test server, so replicas over one external etcd
	// open each other's secrets (as production replicas must).
	cfg.MasterKey = testMasterKey[:]
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
		s.etcdMu.Lock()
		defer s.etcdMu.Unlock()
		if s.etcd != nil {
			_ = s.etcd.Close()
		}
	})
	return s
}

// EtcdEndpoints are the client URLs of the server's etcd: the ones the
// test passed (WithEtcdEndpoints), else the embedded etcd's, which the
// server writes to its data directory when it starts.
func (s *Server) EtcdEndpoints(tb testing.TB) []string {
	tb.Helper()
	if len(s.Config.EtcdEndpoints) > 0 {
		return s.Config.EtcdEndpoints
	}
	b, err := os.ReadFile(s.Config.EtcdEndpointsFile())
	if err != nil {
		tb.Fatalf("the embedded etcd's endpoints: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), ",")
}

// Etcd returns the test's own client of the server's etcd (with the
// server's TLS and credentials), for tests that look at or change the
// keyspace beneath the server. It outlives Stop and is closed when the
// test ends.
func (s *Server) Etcd(tb testing.TB) *clientv3.Client {
	tb.Helper()
	s.etcdMu.Lock()
	defer s.etcdMu.Unlock()
	if s.etcd != nil {
		return s.etcd
	}
	var tlsCfg *tls.Config
	if c := s.Config; c.EtcdCAFile != "" || c.EtcdCertFile != "" || c.EtcdKeyFile != "" {
		info := transport.TLSInfo{CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile, TrustedCAFile: c.EtcdCAFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			tb.Fatalf("etcd TLS: %v", err)
		}
	}
	eps := s.EtcdEndpoints(tb)
	client, err := clientv3.New(clientv3.Config{
		Endpoints: eps, TLS: tlsCfg, Username: s.Config.EtcdUsername, Password: s.Config.EtcdPassword,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("connect to etcd %v: %v", eps, err)
	}
	s.etcd = client
	return client
}

// Store returns a store over the server's keyspace (its prefix), on the
// test's own etcd client (Etcd).
func (s *Server) Store(tb testing.TB) *store.Store {
	tb.Helper()
	client := s.Etcd(tb)
	s.etcdMu.Lock()
	defer s.etcdMu.Unlock()
	if s.store != nil {
		return s.store
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.New(ctx, client, store.Options{Prefix: s.Config.EtcdPrefix})
	if err != nil {
		tb.Fatalf("open store %s: %v", s.Config.EtcdPrefix, err)
	}
	s.store = st
	return st
}

// SweeperLeader reports whether this server leads the add-on deadline
// sweeper election, as its /metrics says (saltbush_addon_sweeper_leader).
func (s *Server) SweeperLeader(tb testing.TB) bool {
	tb.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		tb.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "saltbush_addon_sweeper_leader "); ok {
			return strings.TrimSpace(v) == "1"
		}
	}
	tb.Fatalf("GET /metrics: no saltbush_addon_sweeper_leader")
	return false
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

// Creds are an access key.
type Creds struct {
	AccessKeyID, SecretAccessKey, AccountID, PrincipalARN string
	// SessionToken is set for a role session's temporary credentials.
	SessionToken string
}

// Dev returns the development administrator's key: the one this server
// created on its empty store, or a new key for the same user when the
// store was bootstrapped by another replica.
func (s *Server) Dev(tb testing.TB) Creds {
	tb.Helper()
	if d := s.DevCredentials(); d != nil {
		return Creds{AccessKeyID: d.AccessKeyID, SecretAccessKey: d.SecretAccessKey, AccountID: d.AccountID, PrincipalARN: d.UserARN}
	}
	arn := "arn:aws:iam::" + s.Config.DevAccount + ":user/" + server.DevUserName
	return s.NewKey(tb, arn)
}

// NewKey makes an access key for a principal (an IAM user or role, or an
// account root).
func (s *Server) NewKey(tb testing.TB, principalARN string) Creds {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	akid, secret, err := s.IAM().CreateAccessKey(ctx, principalARN)
	if err != nil {
		tb.Fatalf("create access key for %s: %v", principalARN, err)
	}
	acct := strings.Split(principalARN, ":")[4]
	return Creds{AccessKeyID: akid, SecretAccessKey: secret, AccountID: acct, PrincipalARN: principalARN}
}

// NewAccount records an account (if new) and returns a key of its root.
func (s *Server) NewAccount(tb testing.TB, account string) Creds {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.IAM().CreateAccount(ctx, account, "test"); err != nil && !errdefs.IsException(err, errdefs.ResourceInUseException) {
		tb.Fatalf("create account %s: %v", account, err)
	}
	return s.NewKey(tb, identity.RootARN(account))
}

// NewUser records an IAM user (account must exist) with one policy
// document attached (none when policy is "") and returns a key of it.
func (s *Server) NewUser(tb testing.TB, arn, policy string) Creds {
	tb.Helper()
	s.newPrincipal(tb, arn, policy)
	return s.NewKey(tb, arn)
}

// NewRole records an IAM role (account must exist) with its trust policy
// and one policy document attached (none when policy is "").
func (s *Server) NewRole(tb testing.TB, arn, trust, policy string) {
	tb.Helper()
	s.newPrincipal(tb, arn, policy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.IAM().UpdateRole(ctx, arn, iam.RoleUpdate{TrustPolicy: &trust}); err != nil {
		tb.Fatalf("trust policy of %s: %v", arn, err)
	}
}

func (s *Server) newPrincipal(tb testing.TB, arn, policy string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.IAM().CreatePrincipal(ctx, arn); err != nil {
		tb.Fatalf("create principal %s: %v", arn, err)
	}
	if policy != "" {
		acct := strings.Split(arn, ":")[4]
		name := "p-" + strings.NewReplacer("/", "-", ":", "-").Replace(arn[strings.LastIndex(arn, ":")+1:])
		if _, err := s.IAM().PutPolicy(ctx, acct, name, policy); err != nil {
			tb.Fatalf("put policy %s: %v", name, err)
		}
		if err := s.IAM().AttachPolicy(ctx, arn, name); err != nil {
			tb.Fatalf("attach policy %s to %s: %v", name, arn, err)
		}
	}
}

// EKS returns an unmodified AWS SDK EKS client for the façade, signing with
// SigV4 as the development administrator.
func (s *Server) EKS(tb testing.TB, optFns ...func(*eks.Options)) *eks.Client {
	tb.Helper()
	return s.EKSAs(tb, s.Dev(tb), optFns...)
}

// EKSAs returns an EKS client signing with c.
func (s *Server) EKSAs(tb testing.TB, c Creds, optFns ...func(*eks.Options)) *eks.Client {
	tb.Helper()
	return eks.New(eks.Options{
		Region:       s.Config.Cluster.Region,
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	}, optFns...)
}

// Sign signs a raw façade request with SigV4 as c (body is the exact
// payload sent), for tests that speak HTTP without the SDK.
func (s *Server) Sign(tb testing.TB, req *http.Request, body []byte, c Creds) {
	tb.Helper()
	sum := sha256.Sum256(body)
	err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken},
		req, hex.EncodeToString(sum[:]), "eks", s.Config.Cluster.Region, time.Now())
	if err != nil {
		tb.Fatalf("sign request: %v", err)
	}
}

// Do sends a raw façade request signed as the development administrator.
func (s *Server) Do(tb testing.TB, method, path string, body []byte) *http.Response {
	tb.Helper()
	return s.DoAs(tb, s.Dev(tb), method, path, body)
}

// DoAs sends a raw façade request signed as c.
func (s *Server) DoAs(tb testing.TB, c Creds, method, path string, body []byte) *http.Response {
	tb.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	s.Sign(tb, req, body, c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// ClientTLS returns the TLS configuration of the admin CLI's certificate
// the server wrote to its data directory.
func (s *Server) ClientTLS(tb testing.TB) *tls.Config {
	tb.Helper()
	dir := s.Config.TLSDir()
	cfg, err := tlsclient.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"), "127.0.0.1")
	if err != nil {
		tb.Fatalf("admin credentials: %v", err)
	}
	return cfg
}

// GRPC returns a gRPC connection to the server with the admin service's
// certificate, acting for the development account on the EKS services;
// closed when the test ends.
func (s *Server) GRPC(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	return s.GRPCWith(tb, s.ClientTLS(tb), s.Config.DevAccount)
}

// GRPCWith returns a gRPC connection presenting tlsCfg's certificate and,
// when account is not empty, asking to act for it on the EKS services.
func (s *Server) GRPCWith(tb testing.TB, tlsCfg *tls.Config, account string) *grpc.ClientConn {
	tb.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg))}
	if account != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(server.ActForAccount(account)))
	}
	conn, err := grpc.NewClient(s.GRPCAddr(), opts...)
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

// AgentConn returns a gRPC connection presenting a guest agent's
// certificate for instance of cluster incarnation clusterUID, issued by
// the server's CA; closed when the test ends.
func (s *Server) AgentConn(tb testing.TB, clusterUID, instance string) *grpc.ClientConn {
	tb.Helper()
	conn, _ := s.AgentConnSerial(tb, clusterUID, instance)
	return conn
}

// AgentConnSerial is AgentConn, also returning the certificate's serial
// (to revoke it).
func (s *Server) AgentConnSerial(tb testing.TB, clusterUID, instance string) (*grpc.ClientConn, string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	certPEM, keyPEM, serial, err := s.Authority().IssueLocal(ctx, identity.AgentID(clusterUID, instance), time.Hour)
	if err != nil {
		tb.Fatalf("issue agent certificate: %v", err)
	}
	bundle, _ := s.Authority().Bundle()
	cfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		tb.Fatalf("agent TLS: %v", err)
	}
	return s.GRPCWith(tb, cfg, ""), serial
}
