// Package embedetcd runs etcd inside the saltbush process: one member for
// `saltbush serve` on a single machine, or a multi-member cluster for tests
// that need member loss. It owns ports, data directories, compaction and
// clean shutdown; everything else talks to it through a normal etcd client.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config configures one embedded member.
type Config struct {
	// Name of the member; "default" when empty.
	Name string
	// Dir is the data directory; created if missing.
	Dir string
	// ClientURL and PeerURL are where the member listens; a free loopback
	// port is picked for each one left empty.
	ClientURL string
	PeerURL   string
	// InitialCluster is "name=peerURL,..." for multi-member clusters; empty
	// for a single member.
	InitialCluster string
	// UnsafeNoFsync skips fsync: for tests only, never for real data.
	UnsafeNoFsync bool
	// ElectionTimeout is raft's election timeout (heartbeat a tenth of it);
	// etcd's 1s when zero. A fresh single member waits about this long
	// before it elects itself, so tests that start many members shorten it.
	ElectionTimeout time.Duration
	// ClientTLS, when set, serves clients over TLS (ClientURL must then be
	// https); with ClientCertAuth, clients must present a certificate.
	ClientTLS *transport.TLSInfo
	// CompactionRetention keeps this much history (periodic auto-compaction);
	// one hour when zero.
	CompactionRetention time.Duration
	// StartTimeout bounds waiting for the member to be ready; 60s when zero.
	StartTimeout time.Duration
	// QuotaBackendBytes is the backend's space quota: past it etcd raises
	// the NOSPACE alarm and refuses every write until an operator frees
	// space and disarms the alarm (docs/operations.md). etcd's 2 GiB when
	// zero; tests set a few MiB to reach it quickly.
	QuotaBackendBytes int64
	// Logger receives etcd's logs; when nil, errors go to stderr (minus
	// clean-shutdown noise).
	Logger *zap.Logger
}

// Server is a running embedded member.
type Server struct {
	lock      *os.File
	etcd      *embed.Etcd
	name      string
	clientURL string
	peerURL   string
	closeOnce sync.Once
}

// Start starts a member and waits until it serves clients.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ec, err := buildConfig(cfg)
	if err != nil {
		return nil, err
	}
	// etcd itself waits forever for another process's lock on its backend
	// file, deaf to contexts and signals: claim the directory first, and
	// fail at once if it is taken.
	lock, err := lockDir(ec.Dir)
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(ec)
	// Ports picked here (FreeURL) are free when picked, not when etcd binds
	// them: another process may take one in between. Pick again then.
	for attempt := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) &&
		cfg.ClientURL == "" && cfg.PeerURL == "" && attempt < 3; attempt++ {
		if ec, err = buildConfig(cfg); err == nil {
			e, err = embed.StartEtcd(ec)
		}
	}
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("start embedded etcd %q in %s: %w", ec.Name, ec.Dir, err)
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("embedded etcd %q: %w", ec.Name, err)
	case <-t.C:
		e.Server.Stop()
		e.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("embedded etcd %q not ready after %s", ec.Name, timeout)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		_ = lock.Close()
		return nil, ctx.Err()
	}
	return &Server{
		lock:      lock,
		etcd:      e,
		name:      ec.Name,
		clientURL: ec.AdvertiseClientUrls[0].String(),
		peerURL:   ec.AdvertisePeerUrls[0].String(),
	}, nil
}

func buildConfig(cfg Config) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	if ec.Name == "" {
		ec.Name = "default"
	}
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd: data directory required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd data directory: %w", err)
	}
	ec.Dir = cfg.Dir
	if cfg.ElectionTimeout > 0 {
		ec.ElectionMs = uint(cfg.ElectionTimeout.Milliseconds()) //nolint:gosec // G115: ElectionTimeout > 0, so never negative
		ec.TickMs = max(ec.ElectionMs/10, 1)
	}
	clientURL, peerURL := cfg.ClientURL, cfg.PeerURL
	var err error
	if clientURL == "" {
		if clientURL, err = FreeURL(); err != nil {
			return nil, err
		}
	}
	if peerURL == "" {
		if peerURL, err = FreeURL(); err != nil {
			return nil, err
		}
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd client URL %q: %w", clientURL, err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd peer URL %q: %w", peerURL, err)
	}
	if cfg.ClientTLS != nil {
		if cu.Scheme != "https" {
			return nil, fmt.Errorf("embedded etcd: client TLS needs an https client URL, got %q", clientURL)
		}
		ec.ClientTLSInfo = *cfg.ClientTLS
	}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.Name + "=" + pu.String()
	}
	ec.InitialClusterToken = "saltbush"
	// A member restarted on an existing data dir rejoins; the initial
	// cluster settings are ignored then.
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	retention := cfg.CompactionRetention
	if retention <= 0 {
		retention = time.Hour
	}
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = retention.String()
	logger := cfg.Logger
	if logger == nil {
		logger = quietLogger()
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	// No metrics listener of etcd's own: saltbush exposes its metrics.
	ec.ListenMetricsUrls = nil
	return ec, nil
}

// Endpoints are the client URLs, for clientv3.Config.
func (s *Server) Endpoints() []string { return []string{s.clientURL} }

// Name is the member name.
func (s *Server) Name() string { return s.name }

// Client returns a new client connected to this member.
func (s *Server) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Close stops the member cleanly: in-flight requests finish, the WAL and
// backend are closed, the ports are released. Later calls do nothing (a
// test may stop a member on purpose and still defer its Close).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.etcd.Close()
		_ = s.lock.Close()
	})
}

// lockDir takes an exclusive, non-blocking lock on dir (released when the
// returned file is closed, or the process dies).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "saltbush.lock"), os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: the etcd data directory from the caller's Config
	if err != nil {
		return nil, fmt.Errorf("lock etcd data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("etcd data directory %s is in use by another process", dir)
		}
		return nil, fmt.Errorf("lock etcd data directory %s: %w", dir, err)
	}
	return f, nil
}

// FreeURL returns an http URL on a loopback port that was free a moment ago.
func FreeURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return "http://" + l.Addr().String(), nil
}

// Cluster is a multi-member embedded etcd cluster (for tests of member loss).
type Cluster struct {
	cfgs    []Config
	members []*Server
}

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	// Dir holds one data directory per member.
	Dir string
	// Size is the number of members; 3 when zero.
	Size          int
	UnsafeNoFsync bool
	Logger        *zap.Logger
	// URL picks each member's client and peer URL; FreeURL when nil.
	// FreeURL's port goes back to the kernel's ephemeral range until the
	// member binds it, and again while a stopped member waits to be
	// restarted on it, where any outgoing connection may take it as its
	// source port. Callers that stop and restart members pass ports they
	// hold for the cluster's life instead.
	URL func() (string, error)
}

// StartCluster starts Size members that form one cluster, and waits until
// all serve clients.
func StartCluster(ctx context.Context, cc ClusterConfig) (*Cluster, error) {
	n := cc.Size
	if n == 0 {
		n = 3
	}
	pick := cc.URL
	if pick == nil {
		pick = FreeURL
	}
	c := &Cluster{}
	var initial []string
	for i := 0; i < n; i++ {
		cu, err := pick()
		if err != nil {
			return nil, err
		}
		pu, err := pick()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		c.cfgs = append(c.cfgs, Config{
			Name: name, Dir: filepath.Join(cc.Dir, name), ClientURL: cu, PeerURL: pu,
			UnsafeNoFsync: cc.UnsafeNoFsync, Logger: cc.Logger,
		})
		initial = append(initial, name+"="+pu)
	}
	for i := range c.cfgs {
		c.cfgs[i].InitialCluster = strings.Join(initial, ",")
	}
	// Members block in ReadyNotify until a quorum exists, so start them
	// concurrently.
	type started struct {
		i   int
		srv *Server
		err error
	}
	ch := make(chan started, n)
	for i := range c.cfgs {
		go func(i int) {
			srv, err := Start(ctx, c.cfgs[i])
			ch <- started{i, srv, err}
		}(i)
	}
	c.members = make([]*Server, n)
	var errs []error
	for range c.cfgs {
		r := <-ch
		c.members[r.i] = r.srv
		errs = append(errs, r.err)
	}
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints are the client URLs of all members (stopped ones included, as a
// client configured before a failure would have them).
func (c *Cluster) Endpoints() []string {
	eps := make([]string, 0, len(c.cfgs))
	for _, cfg := range c.cfgs {
		eps = append(eps, cfg.ClientURL)
	}
	return eps
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.cfgs) }

// Leader returns the index of the member that leads, as the running
// members' own status says (a member that leads names itself). It fails
// when no running member names a leader among them, as during quorum loss
// or an election.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	var errs []error
	for i, m := range c.members {
		if m == nil {
			continue
		}
		lead, err := m.leads(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if lead {
			return i, nil
		}
	}
	if len(errs) > 0 {
		return -1, fmt.Errorf("no running member of the cluster leads: %w", errors.Join(errs...))
	}
	return -1, errors.New("no running member of the cluster leads")
}

// leads asks the member whether it is the leader.
func (s *Server) leads(ctx context.Context) (bool, error) {
	cli, err := s.Client()
	if err != nil {
		return false, err
	}
	defer func() { _ = cli.Close() }()
	st, err := cli.Status(ctx, s.clientURL)
	if err != nil {
		return false, fmt.Errorf("status of member %q: %w", s.name, err)
	}
	return st.Leader != 0 && st.Leader == st.Header.GetMemberId(), nil
}

// Stop stops member i (its data stays).
func (c *Cluster) Stop(i int) {
	if c.members[i] != nil {
		c.members[i].Close()
		c.members[i] = nil
	}
}

// Restart starts a stopped member i again on its data directory and ports.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if c.members[i] != nil {
		return nil
	}
	srv, err := Start(ctx, c.cfgs[i])
	if err != nil {
		return err
	}
	c.members[i] = srv
	return nil
}

// Close stops every member.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Stop(i)
	}
}
