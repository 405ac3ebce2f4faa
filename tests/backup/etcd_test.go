package backup

// A three-member etcd cluster laid out as docs/operations.md ("Scale-out")
// and docs/examples/etcd@.service lay it out: TLS with client certificates
// on the client port, TLS with peer certificates between members, one CA.
// It runs in this process (go.etcd.io/etcd/server/v3/embed: real etcd),
// because store/embedetcd has no peer TLS; its members can be stopped,
// wiped and restored from a snapshot with etcdutl's snapshot package, as
// `etcdutl snapshot restore` does.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/saltbush/saltbush/tests/etcdtls"
	"github.com/saltbush/saltbush/tests/loopport"
)

// clusterToken is --initial-cluster-token: the restore must name the same
// one as the members' configuration (docs/operations.md, "Backup and
// restore").
const clusterToken = "saltbush-etcd"

// member is one etcd member: its data directory, URLs and certificates.
type member struct {
	name                 string
	dir                  string
	clientURL, peerURL   string
	serverCert, serverKy string
	peerCert, peerKey    string
	etcd                 *embed.Etcd
}

// etcdCluster is three members over TLS, and the client certificate
// saltbush and the test present to them.
type etcdCluster struct {
	t                     *testing.T
	pki                   *etcdtls.CA
	members               []*member
	initialCluster        string
	clientCert, clientKey string
}

func newEtcdCluster(t *testing.T, dir string, size int) *etcdCluster {
	t.Helper()
	pkiDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &etcdCluster{t: t, pki: etcdtls.NewCA(t, pkiDir)}
	var initial []string
	for i := range size {
		m := &member{name: fmt.Sprintf("etcd-%d", i), dir: filepath.Join(dir, fmt.Sprintf("etcd-%d", i))}
		for _, u := range []*string{&m.clientURL, &m.peerURL} {
			*u = loopport.URL(t, "https")
		}
		m.serverCert, m.serverKy = c.pki.Issue(t, m.name+"-server", x509.ExtKeyUsageServerAuth)
		m.peerCert, m.peerKey = c.pki.Issue(t, m.name+"-peer", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	c.initialCluster = strings.Join(initial, ",")
	c.clientCert, c.clientKey = c.pki.Issue(t, "saltbush-client", x509.ExtKeyUsageClientAuth)
	t.Cleanup(c.stop)
	return c
}

func (c *etcdCluster) config(m *member) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, m.dir
	cu, err := url.Parse(m.clientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: m.serverCert, KeyFile: m.serverKy, TrustedCAFile: c.pki.File, ClientCertAuth: true}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: m.peerCert, KeyFile: m.peerKey, TrustedCAFile: c.pki.File, ClientCertAuth: true}
	cfg.InitialCluster, cfg.InitialClusterToken = c.initialCluster, clusterToken
	// "new" on an empty directory; a member with data (a restored one
	// included) ignores the initial cluster and rejoins what its WAL says.
	cfg.ClusterState = embed.ClusterStateFlagNew
	// Tests only: no fsync, and a short election so three members elect a
	// leader quickly (etcd's 100 ms ticks and 1 s election by default).
	cfg.UnsafeNoFsync = true
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg, nil
}

// start starts every member (at once: each waits for a quorum) and waits
// until all serve clients.
func (c *etcdCluster) start(ctx context.Context) error {
	errs := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() {
			cfg, err := c.config(m)
			if err != nil {
				errs <- err
				return
			}
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs <- fmt.Errorf("start %s: %w", m.name, err)
				return
			}
			m.etcd = e
			select {
			case <-e.Server.ReadyNotify():
				errs <- nil
			case err := <-e.Err():
				errs <- fmt.Errorf("%s: %w", m.name, err)
			case <-ctx.Done():
				errs <- fmt.Errorf("%s not ready: %w", m.name, ctx.Err())
			}
		}()
	}
	var all []error
	for range c.members {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// stop stops every member cleanly; their data stays.
func (c *etcdCluster) stop() {
	for _, m := range c.members {
		if m.etcd != nil {
			m.etcd.Close()
			m.etcd = nil
		}
	}
}

// wipe is the disaster: every member stopped and its data directory gone.
func (c *etcdCluster) wipe() {
	c.t.Helper()
	c.stop()
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			c.t.Fatal(err)
		}
	}
}

// restore writes a fresh data directory for every member from one
// snapshot file, as `etcdutl snapshot restore` does on each member's host:
// the member's own name and peer URL, the whole initial cluster and the
// cluster token. bump > 0 adds --bump-revision bump --mark-compacted.
func (c *etcdCluster) restore(snapshotFile string, bump uint64) error {
	for _, m := range c.members {
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snapshotFile, Name: m.name, OutputDataDir: m.dir, PeerURLs: []string{m.peerURL},
			InitialCluster: c.initialCluster, InitialClusterToken: clusterToken,
			RevisionBump: bump, MarkCompacted: bump > 0,
		})
		if err != nil {
			return fmt.Errorf("restore %s: %w", m.name, err)
		}
	}
	return nil
}

func (c *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

func (c *etcdCluster) clientTLS() *tls.Config {
	c.t.Helper()
	cfg, err := (&transport.TLSInfo{CertFile: c.clientCert, KeyFile: c.clientKey, TrustedCAFile: c.pki.File}).ClientConfig()
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

// clientConfig reaches the given endpoints (all members when none).
func (c *etcdCluster) clientConfig(eps ...string) clientv3.Config {
	if len(eps) == 0 {
		eps = c.endpoints()
	}
	return clientv3.Config{Endpoints: eps, TLS: c.clientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
}

// client is the test's own client of the cluster, closed when the test
// ends.
func (c *etcdCluster) client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(c.clientConfig())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}
