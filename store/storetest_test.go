package store_test

// Test harness: every test runs against real embedded etcd. Most tests share
// one member started by TestMain and stay apart through a unique root prefix
// each; tests that compact the keyspace, restart a member or need a cluster
// start their own with startEtcd / embedetcd.StartCluster.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// eventTimeout bounds every wait for something etcd does asynchronously
// (watch delivery, lease expiry, reconnection). It is generous: it only
// matters when a test is failing.
const eventTimeout = 20 * time.Second

// shared is the member TestMain starts for every test that does not need a
// server of its own.
var shared struct {
	srv    *embedetcd.Server
	client *clientv3.Client
}

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "saltbush-store-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "remove temp dir:", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := embedetcd.Start(ctx, serverConfig(dir))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		return 1
	}
	defer srv.Close()
	client, err := newClient(srv.Endpoints()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd client:", err)
		return 1
	}
	defer func() { _ = client.Close() }()
	shared.srv, shared.client = srv, client
	return m.Run()
}

// serverConfig is the configuration of a test member in dir: no fsync, no
// logs (etcd logs expected errors when a member stops). There is no
// short CompactionRetention: tests that need compaction compact explicitly,
// so that no test's watch from a revision is compacted under it by accident.
func serverConfig(dir string) embedetcd.Config {
	return embedetcd.Config{Dir: dir, UnsafeNoFsync: true, Logger: zap.NewNop()}
}

// startEtcd starts a member of the test's own, in t.TempDir() unless cfg
// names a directory. It returns the member and a stop function that closes
// it once; stop also runs when the test ends.
func startEtcd(t testing.TB, cfg embedetcd.Config) (*embedetcd.Server, func()) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.UnsafeNoFsync = true
	if cfg.Logger == nil {
		// etcd logs expected errors (closed listeners) when a member stops.
		cfg.Logger = zap.NewNop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(srv.Close) }
	t.Cleanup(stop)
	return srv, stop
}

func newClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// clientFor returns a client on endpoints, closed when the test ends.
func clientFor(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := newClient(endpoints...)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// uniquePrefix is a root prefix no other test uses, and that is not a prefix
// of any other test's (the sequence number is followed by a dash).
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/test/%d-%s/", prefixSeq.Add(1), name)
}

// newStore returns a Store on the shared member under a fresh prefix.
func newStore(t testing.TB) *store.Store {
	t.Helper()
	return newStoreAt(t, shared.client, uniquePrefix(t))
}

func newStoreAt(t testing.TB, client *clientv3.Client, prefix string) *store.Store {
	t.Helper()
	s, err := store.New(testContext(t), client, store.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("store.New(%q): %v", prefix, err)
	}
	return s
}

// testContext is a context that ends with the test (or after a minute).
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cluster returns a small, valid cluster record.
func cluster(name string) *storagev1.ClusterRecord {
	return &storagev1.ClusterRecord{
		Uid:               "uid-" + name,
		AccountId:         "111122223333",
		Name:              name,
		Arn:               "arn:aws:eks:us-east-1:111122223333:cluster/" + name,
		KubernetesVersion: "1.33",
		Status:            storagev1.ClusterStatus_CLUSTER_STATUS_CREATING,
		Tags:              map[string]string{"team": "storage"},
	}
}

func mustCreate(t testing.TB, s *store.Store, key string, rec proto.Message) int64 {
	t.Helper()
	rev, err := s.Create(testContext(t), key, rec)
	if err != nil {
		t.Fatalf("Create(%s): %v", key, err)
	}
	return rev
}

func mustCommit(t testing.TB, s *store.Store, txn *store.Txn) store.Result {
	t.Helper()
	res, err := s.Commit(testContext(t), txn)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return res
}

// getCluster reads a cluster record and its mod revision.
func getCluster(t testing.TB, s *store.Store, key string) (*storagev1.ClusterRecord, int64) {
	t.Helper()
	rec := &storagev1.ClusterRecord{}
	rev, err := s.Get(testContext(t), key, rec)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return rec, rev
}

// requireAbsent fails unless key does not exist.
func requireAbsent(t testing.TB, s *store.Store, key string) {
	t.Helper()
	if _, err := s.Get(testContext(t), key, &storagev1.ClusterRecord{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%s) = %v, want ErrNotFound", key, err)
	}
}

// nextEvent waits for the next watch event.
func nextEvent(t testing.TB, ch <-chan store.Event) store.Event {
	t.Helper()
	timer := time.NewTimer(eventTimeout)
	defer timer.Stop()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-timer.C:
		t.Fatalf("no watch event within %s", eventTimeout)
	}
	panic("unreachable")
}

// expectPut waits for the next event and checks it is a Put of key.
func expectPut(t testing.TB, ch <-chan store.Event, key string) store.Event {
	t.Helper()
	ev := nextEvent(t, ch)
	if ev.Type != store.EventPut || ev.Key != key {
		t.Fatalf("event = %s, want put %s", describe(ev), key)
	}
	if len(ev.Value) == 0 || ev.Revision == 0 {
		t.Fatalf("put event without value or revision: %s", describe(ev))
	}
	return ev
}

// expectDelete waits for the next event and checks it is a Delete of key.
func expectDelete(t testing.TB, ch <-chan store.Event, key string) store.Event {
	t.Helper()
	ev := nextEvent(t, ch)
	if ev.Type != store.EventDelete || ev.Key != key {
		t.Fatalf("event = %s, want delete %s", describe(ev), key)
	}
	if ev.Value != nil || ev.Revision == 0 {
		t.Fatalf("delete event with value or without revision: %s", describe(ev))
	}
	return ev
}

// expectSnapshot waits for the next event, checks it is a snapshot holding
// exactly keys (relative to the root prefix, in order) and returns it.
func expectSnapshot(t testing.TB, ch <-chan store.Event, keys ...string) store.Event {
	t.Helper()
	ev := nextEvent(t, ch)
	if ev.Type != store.EventSnapshot {
		t.Fatalf("event = %s, want snapshot", describe(ev))
	}
	var got []string
	for _, kv := range ev.Snapshot {
		got = append(got, kv.Key)
		if kv.ModRev == 0 || kv.ModRev > ev.Revision {
			t.Fatalf("snapshot entry %s has mod revision %d, snapshot revision %d", kv.Key, kv.ModRev, ev.Revision)
		}
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("snapshot keys = %q, want %q", got, keys)
	}
	return ev
}

func describe(ev store.Event) string {
	switch ev.Type {
	case store.EventPut:
		return fmt.Sprintf("put %s@%d", ev.Key, ev.Revision)
	case store.EventDelete:
		return fmt.Sprintf("delete %s@%d", ev.Key, ev.Revision)
	case store.EventSnapshot:
		return fmt.Sprintf("snapshot of %d@%d", len(ev.Snapshot), ev.Revision)
	}
	return fmt.Sprintf("event type %d", ev.Type)
}

// eventually retries f until it succeeds or the deadline passes (for the
// moments right after a member stops or restarts, when a request can still
// land on a dead connection). It never retries a write whose outcome is
// ambiguous: callers pass reads or Ping only.
func eventually(t testing.TB, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, eventTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
