package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

func TestCreate(t *testing.T) {
	t.Parallel()

	t.Run("CreateThenGet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rec := fullCluster()
		rev := mustCreate(t, s, "a", rec)
		got, modRev := getCluster(t, s, "a")
		if modRev != rev {
			t.Fatalf("Get mod revision %d, Create revision %d", modRev, rev)
		}
		if !proto.Equal(got, rec) {
			t.Fatalf("Get = %v, want %v", got, rec)
		}
	})

	t.Run("SecondCreateExists", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "a", cluster("first"))
		_, err := s.Create(testContext(t), "a", cluster("second"))
		wanterr.Is(t, err, store.ErrExists)
		got, modRev := getCluster(t, s, "a")
		if got.GetName() != "first" || modRev != rev {
			t.Fatalf("second Create changed the record: %v @%d", got, modRev)
		}
	})

	t.Run("ConcurrentCreatesOneWinner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const n = 20
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Create(testContext(t), "contended", cluster(fmt.Sprintf("c%d", i)))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("creates %d and %d both succeeded", winner, i)
				}
				winner = i
			case !errors.Is(err, store.ErrExists):
				t.Fatalf("create %d: %v, want ErrExists", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no create succeeded")
		}
		got, _ := getCluster(t, s, "contended")
		if got.GetName() != fmt.Sprintf("c%d", winner) {
			t.Fatalf("stored record %q, winner was c%d", got.GetName(), winner)
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.Get(testContext(t), "missing", &storagev1.ClusterRecord{})
		wanterr.Is(t, err, store.ErrNotFound)
	})

	t.Run("GetCorrupt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if _, err := s.Client().Put(testContext(t), s.Key("bad"), "\x0a\xff"); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(testContext(t), "bad", &storagev1.ClusterRecord{})
		wanterr.Is(t, err, store.ErrCorrupt)
	})

	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		if err := newStore(t).Ping(testContext(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Get(ctx, "a", &storagev1.ClusterRecord{})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Get with a canceled context: %v, want ErrUnavailable and context.Canceled", err)
		}
	})
}

func TestTxn(t *testing.T) {
	t.Parallel()

	t.Run("MultiOpCommit", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCommit(t, s, store.NewTxn().Put("c/1", cluster("c1")).Put("c/2", cluster("c2")).Put("c/3", cluster("c3")).Put("cx", cluster("cx")))
		res := mustCommit(t, s, store.NewTxn().
			Create("a", cluster("a")).
			Put("b", cluster("b")).
			DeleteRange("c/"))
		if res.Deleted != 3 {
			t.Fatalf("Deleted = %d, want 3", res.Deleted)
		}
		_, revA := getCluster(t, s, "a")
		_, revB := getCluster(t, s, "b")
		if revA != res.Revision || revB != res.Revision {
			t.Fatalf("a@%d b@%d, commit revision %d: not one transaction", revA, revB, res.Revision)
		}
		for _, k := range []string{"c/1", "c/2", "c/3"} {
			requireAbsent(t, s, k)
		}
		getCluster(t, s, "cx") // a sibling of the range survives
	})

	// Each case sets up a store, then commits a multi-op transaction in
	// which exactly one compare fails: nothing at all may be written.
	failing := []struct {
		name  string
		setup func(t *testing.T, s *store.Store)
		guard func(txn *store.Txn) *store.Txn
		want  error
	}{
		{
			name:  "CreateCollision",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", cluster("g")) },
			guard: func(txn *store.Txn) *store.Txn { return txn.Create("g", cluster("other")) },
			want:  store.ErrExists,
		},
		{
			name:  "StaleModRevision",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", cluster("g")) },
			guard: func(txn *store.Txn) *store.Txn { return txn.RequireModRevision("g", 1) },
			want:  store.ErrConflict,
		},
		{
			name:  "MustBeAbsent",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", cluster("g")) },
			guard: func(txn *store.Txn) *store.Txn { return txn.RequireModRevision("g", 0) },
			want:  store.ErrConflict,
		},
		{
			name:  "RequireExistsMissing",
			setup: func(t *testing.T, s *store.Store) {},
			guard: func(txn *store.Txn) *store.Txn { return txn.RequireExists("g") },
			want:  store.ErrConflict,
		},
		{
			name:  "RequireValueChanged",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", epoch(2)) },
			guard: func(txn *store.Txn) *store.Txn { return txn.RequireValue("g", epoch(1)) },
			want:  store.ErrConflict,
		},
		{
			name:  "RequireValueMissing",
			setup: func(t *testing.T, s *store.Store) {},
			guard: func(txn *store.Txn) *store.Txn { return txn.RequireValue("g", &storagev1.ClusterRecord{}) },
			want:  store.ErrConflict,
		},
		{
			name:  "UpdateStale",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", cluster("g")) },
			guard: func(txn *store.Txn) *store.Txn { return txn.Update("g", cluster("new"), 1) },
			want:  store.ErrConflict,
		},
		{
			name:  "DeleteStale",
			setup: func(t *testing.T, s *store.Store) { mustCreate(t, s, "g", cluster("g")) },
			guard: func(txn *store.Txn) *store.Txn { return txn.Delete("g", 1) },
			want:  store.ErrConflict,
		},
	}
	for _, tc := range failing {
		t.Run("FailedCompareWritesNothing/"+tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			mustCreate(t, s, "c/1", cluster("c1"))
			tc.setup(t, s)
			before := snapshotAll(t, s)
			txn := store.NewTxn().
				Create("a", cluster("a")).
				Put("b", cluster("b")).
				DeleteRange("c/")
			_, err := s.Commit(testContext(t), tc.guard(txn))
			wanterr.Is(t, err, tc.want)
			if after := snapshotAll(t, s); after != before {
				t.Fatalf("a failed transaction changed the store:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	t.Run("UpdateCurrentModRevision", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "a", cluster("a"))
		res := mustCommit(t, s, store.NewTxn().Update("a", cluster("b"), rev))
		got, modRev := getCluster(t, s, "a")
		if got.GetName() != "b" || modRev != res.Revision {
			t.Fatalf("after Update: %v @%d, commit @%d", got, modRev, res.Revision)
		}
	})

	t.Run("DeleteStaleKeepsKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "a", cluster("a"))
		rev2 := mustCommit(t, s, store.NewTxn().Update("a", cluster("a2"), rev)).Revision
		_, err := s.Commit(testContext(t), store.NewTxn().Delete("a", rev))
		wanterr.Is(t, err, store.ErrConflict)
		got, modRev := getCluster(t, s, "a")
		if got.GetName() != "a2" || modRev != rev2 {
			t.Fatalf("stale delete touched the key: %v @%d", got, modRev)
		}
		res := mustCommit(t, s, store.NewTxn().Delete("a", rev2))
		if res.Deleted != 1 {
			t.Fatalf("Deleted = %d, want 1", res.Deleted)
		}
		requireAbsent(t, s, "a")
	})

	t.Run("DeleteRangeCounts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		txn := store.NewTxn()
		for i := range 7 {
			txn.Put(fmt.Sprintf("r/%d", i), cluster("r"))
		}
		txn.Put("r", cluster("not under r/")).Put("rs/0", cluster("sibling"))
		mustCommit(t, s, txn)
		if res := mustCommit(t, s, store.NewTxn().DeleteRange("r/")); res.Deleted != 7 {
			t.Fatalf("Deleted = %d, want 7", res.Deleted)
		}
		if res := mustCommit(t, s, store.NewTxn().DeleteRange("r/")); res.Deleted != 0 {
			t.Fatalf("second DeleteRange Deleted = %d, want 0", res.Deleted)
		}
		getCluster(t, s, "r")
		getCluster(t, s, "rs/0")
		// Delete and DeleteRange counts add up in one transaction.
		mustCommit(t, s, store.NewTxn().Put("x/1", cluster("x")).Put("x/2", cluster("x")))
		_, rev := getCluster(t, s, "r")
		if res := mustCommit(t, s, store.NewTxn().Delete("r", rev).DeleteRange("x/")); res.Deleted != 3 {
			t.Fatalf("Delete+DeleteRange Deleted = %d, want 3", res.Deleted)
		}
	})

	t.Run("DeleteRangeStaysInsideTheKeyspace", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		other := newStore(t)
		mustCreate(t, s, "k", cluster("mine"))
		mustCreate(t, other, "k", cluster("theirs"))
		if res := mustCommit(t, s, store.NewTxn().DeleteRange("")); res.Deleted < 1 {
			t.Fatalf("Deleted = %d", res.Deleted)
		}
		getCluster(t, other, "k")
	})

	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "executor", epoch(1))
		// While the executor record names epoch 1, epoch 1's reports land.
		report := store.NewTxn().RequireValue("executor", epoch(1)).Put("status", cluster("from epoch 1"))
		mustCommit(t, s, report)
		_, statusRev := getCluster(t, s, "status")
		// A new epoch takes over; the old epoch's next report is fenced off.
		mustCommit(t, s, store.NewTxn().Update("executor", epoch(2), rev))
		late := store.NewTxn().RequireValue("executor", epoch(1)).Put("status", cluster("late report")).Create("log/1", cluster("log"))
		_, err := s.Commit(testContext(t), late)
		wanterr.Is(t, err, store.ErrConflict)
		got, modRev := getCluster(t, s, "status")
		if got.GetName() != "from epoch 1" || modRev != statusRev {
			t.Fatalf("fenced report was written: %v @%d", got, modRev)
		}
		requireAbsent(t, s, "log/1")
	})

	t.Run("CreateWithTTLExpires", func(t *testing.T) {
		t.Parallel()
		// No lease reuse: the key's lease is exactly its TTL.
		s, err := store.New(testContext(t), shared.client, store.Options{Prefix: uniquePrefix(t), LeaseReuseWindow: -1})
		if err != nil {
			t.Fatal(err)
		}
		mustCommit(t, s, store.NewTxn().CreateWithTTL("idem", cluster("idem"), time.Second).Put("durable", cluster("d")))
		getCluster(t, s, "idem")
		lease := leaseOf(t, s, "idem")
		if lease == 0 {
			t.Fatal("CreateWithTTL key has no lease")
		}
		if leaseOf(t, s, "durable") != 0 {
			t.Fatal("the other key of the transaction got the lease")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := s.Get(testContext(t), "idem", &storagev1.ClusterRecord{})
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatal("key with a 1s TTL still present after 10s")
			}
			time.Sleep(100 * time.Millisecond)
		}
		getCluster(t, s, "durable")
	})

	t.Run("CreateWithTTLSharesLeases", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ttl := uniqueTTL()
		granted := ttl + int64(time.Minute/time.Second) // TTL plus the reuse window
		for i := 0; i < 5; i++ {
			mustCommit(t, s, store.NewTxn().CreateWithTTL(fmt.Sprintf("idem-%d", i), cluster("x"), time.Duration(ttl)*time.Second))
		}
		ids := leasesWithTTL(t, s, granted)
		if len(ids) != 1 {
			t.Fatalf("5 creates within the reuse window used leases %x, want one", ids)
		}
		for i := 0; i < 5; i++ {
			if got := leaseOf(t, s, fmt.Sprintf("idem-%d", i)); got != int64(ids[0]) {
				t.Errorf("idem-%d has lease %x, want the shared %x", i, got, ids[0])
			}
		}
	})

	t.Run("CreateWithTTLExists", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "idem", cluster("first"))
		ttl := uniqueTTL()
		for i := 0; i < 3; i++ {
			_, err := s.Commit(testContext(t), store.NewTxn().CreateWithTTL("idem", cluster("second"), time.Duration(ttl)*time.Second))
			wanterr.Is(t, err, store.ErrExists)
		}
		if leaseOf(t, s, "idem") != 0 {
			t.Fatal("a failed CreateWithTTL attached a lease")
		}
		// Retries of a failing request do not leak a lease each: they share
		// the pooled one.
		if ids := leasesWithTTL(t, s, ttl+int64(time.Minute/time.Second)); len(ids) > 1 {
			t.Fatalf("3 failed CreateWithTTL left leases %x, want at most one", ids)
		}
	})

	t.Run("CreateWithTTLGuardFails", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ttl := uniqueTTL()
		_, err := s.Commit(testContext(t), store.NewTxn().
			CreateWithTTL("idem", cluster("first"), time.Duration(ttl)*time.Second).
			CreateWithTTL("idem2", cluster("second"), time.Duration(ttl)*time.Second).
			RequireExists("missing"))
		wanterr.Is(t, err, store.ErrConflict)
		requireAbsent(t, s, "idem")
		requireAbsent(t, s, "idem2")
	})

	t.Run("EncodeErrorWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.Commit(testContext(t), store.NewTxn().Put("a", cluster("a")).Put("b", &storagev1.ClusterRecord{Name: "\xff"}))
		if err == nil {
			t.Fatal("Commit of an unencodable record succeeded")
		}
		requireAbsent(t, s, "a")
	})

	t.Run("EmptyTxn", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		txn := store.NewTxn()
		if !txn.Empty() {
			t.Fatal("NewTxn not Empty")
		}
		if txn.RequireExists("x"); !txn.Empty() {
			t.Fatal("a guard made the transaction non-empty")
		}
		if txn.Put("x", cluster("x")); txn.Empty() {
			t.Fatal("a Put left the transaction Empty")
		}
		if _, err := s.Commit(testContext(t), store.NewTxn()); err != nil {
			t.Fatalf("empty Commit: %v", err)
		}
	})
}

// epoch is a record standing for an executor's epoch in fencing tests.
func epoch(n int) *storagev1.ClusterRecord {
	return &storagev1.ClusterRecord{Name: "executor", StatusReason: fmt.Sprintf("epoch %d", n)}
}

// leaseOf returns the lease a key is attached to (0 for none).
func leaseOf(t testing.TB, s *store.Store, key string) int64 {
	t.Helper()
	resp, err := s.Client().Get(testContext(t), s.Key(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("%s missing", key)
	}
	return resp.Kvs[0].Lease
}

// uniqueTTL is a lease TTL, in seconds, that no other lease of the test
// process is granted, so leasesWithTTL finds only the leases of one test.
func uniqueTTL() int64 { return 100_000 + prefixSeq.Add(1) }

// leasesWithTTL lists the live leases granted with ttl seconds.
func leasesWithTTL(t testing.TB, s *store.Store, ttl int64) []clientv3.LeaseID {
	t.Helper()
	ctx := testContext(t)
	leases, err := s.Client().Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []clientv3.LeaseID
	for _, l := range leases.Leases {
		resp, err := s.Client().TimeToLive(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL == ttl && resp.TTL > 0 {
			ids = append(ids, l.ID)
		}
	}
	return ids
}

// snapshotAll describes every key of the store's keyspace with its mod
// revision, to compare before and after a transaction.
func snapshotAll(t testing.TB, s *store.Store) string {
	t.Helper()
	page, err := s.List(testContext(t), store.ListOptions{Prefix: "", Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for _, kv := range page.Items {
		out += fmt.Sprintf("%s@%d ", kv.Key, kv.ModRev)
	}
	return out
}
