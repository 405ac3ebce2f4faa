package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// addMember is an update that appends a control-plane member.
func addMember(id string) store.UpdateFunc {
	return func(cur proto.Message, _ *store.Txn) error {
		rec := cur.(*storagev1.ClusterRecord)
		rec.Members = append(rec.Members, &storagev1.ClusterMember{InstanceId: id})
		return nil
	}
}

func TestGuaranteedUpdate(t *testing.T) {
	t.Parallel()

	t.Run("Mutation", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "c", cluster("c"))
		into := &storagev1.ClusterRecord{}
		rev, err := s.GuaranteedUpdate(testContext(t), "c", into, func(cur proto.Message, _ *store.Txn) error {
			rec := cur.(*storagev1.ClusterRecord)
			rec.Status = storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE
			rec.KubernetesVersion = "1.34"
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		got, modRev := getCluster(t, s, "c")
		if got.GetStatus() != storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE || got.GetKubernetesVersion() != "1.34" {
			t.Fatalf("stored %v", got)
		}
		if modRev != rev {
			t.Fatalf("returned revision %d, stored mod revision %d", rev, modRev)
		}
		if !proto.Equal(into, got) {
			t.Fatalf("into = %v, stored %v", into, got)
		}
	})

	t.Run("NoOpSkipsWrite", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		into := &storagev1.ClusterRecord{Name: "stale contents"}
		got, err := s.GuaranteedUpdate(testContext(t), "c", into, func(cur proto.Message, _ *store.Txn) error {
			// Setting a field to the value it has is no change.
			cur.(*storagev1.ClusterRecord).Name = "c"
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		if got != rev {
			t.Fatalf("no-op update returned revision %d, want %d", got, rev)
		}
		if _, modRev := getCluster(t, s, "c"); modRev != rev {
			t.Fatalf("no-op update wrote: mod revision %d -> %d", rev, modRev)
		}
		if !proto.Equal(into, cluster("c")) {
			t.Fatalf("into = %v", into)
		}
	})

	t.Run("ConcurrentUpdatersLoseNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "c", cluster("c"))
		const n = 16
		var calls atomic.Int64
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				add := addMember(fmt.Sprintf("i-%02d", i))
				_, errs[i] = s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
					calls.Add(1)
					return add(cur, txn)
				})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("updater %d: %v", i, err)
			}
		}
		got, _ := getCluster(t, s, "c")
		seen := map[string]bool{}
		for _, m := range got.GetMembers() {
			if seen[m.GetInstanceId()] {
				t.Fatalf("member %s added twice", m.GetInstanceId())
			}
			seen[m.GetInstanceId()] = true
		}
		if len(seen) != n {
			t.Fatalf("%d members after %d concurrent updates: %v", len(seen), n, got.GetMembers())
		}
		t.Logf("%d updates took %d update calls", n, calls.Load())
	})

	t.Run("ConcurrentUpdatersWithDerivedCreates", func(t *testing.T) {
		// Each update appends a member and writes an update-log entry whose
		// key derives from the record (its sequence number), as a real
		// update log does. A loser of the race finds its log key taken by
		// the winner; that must be retried on the fresh record like any
		// other lost race, not surface as ErrExists.
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "c", cluster("c"))
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("i-%02d", i)
				_, errs[i] = s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
					rec := cur.(*storagev1.ClusterRecord)
					rec.Members = append(rec.Members, &storagev1.ClusterMember{InstanceId: id})
					txn.Create(fmt.Sprintf("log/%03d", len(rec.Members)), &storagev1.ClusterRecord{Name: id})
					return nil
				})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("updater %d: %v", i, err)
			}
		}
		got, _ := getCluster(t, s, "c")
		if len(got.GetMembers()) != n {
			t.Fatalf("%d members, want %d", len(got.GetMembers()), n)
		}
		// The log agrees with the record: entry k names the k-th member.
		for k, m := range got.GetMembers() {
			entry, _ := getCluster(t, s, fmt.Sprintf("log/%03d", k+1))
			if entry.GetName() != m.GetInstanceId() {
				t.Fatalf("log entry %d names %s, member %d is %s", k+1, entry.GetName(), k+1, m.GetInstanceId())
			}
		}
	})

	t.Run("UpdateErrorAborts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		boom := errors.New("boom")
		_, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
			cur.(*storagev1.ClusterRecord).Name = "changed"
			txn.Put("side", cluster("side"))
			return fmt.Errorf("validation: %w", boom)
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the update's error", err)
		}
		got, modRev := getCluster(t, s, "c")
		if got.GetName() != "c" || modRev != rev {
			t.Fatalf("aborted update wrote: %v @%d", got, modRev)
		}
		requireAbsent(t, s, "side")
	})

	guards := []struct {
		name  string
		guard func(txn *store.Txn)
	}{
		{"ModRevision", func(txn *store.Txn) { txn.RequireModRevision("executor", 1) }},
		{"Absent", func(txn *store.Txn) { txn.RequireModRevision("executor", 0) }},
		{"Value", func(txn *store.Txn) { txn.RequireValue("executor", epoch(1)) }},
		{"Exists", func(txn *store.Txn) { txn.RequireExists("no-such-key") }},
	}
	for _, tc := range guards {
		t.Run("FailingGuardConflicts/"+tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			rev := mustCreate(t, s, "c", cluster("c"))
			mustCreate(t, s, "executor", epoch(2))
			var calls atomic.Int64
			_, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
				calls.Add(1)
				cur.(*storagev1.ClusterRecord).Name = "fenced"
				tc.guard(txn)
				txn.Put("side", cluster("side"))
				return nil
			})
			wanterr.Is(t, err, store.ErrConflict)
			if calls.Load() != 1 {
				t.Fatalf("a failing guard was retried: %d calls", calls.Load())
			}
			got, modRev := getCluster(t, s, "c")
			if got.GetName() != "c" || modRev != rev {
				t.Fatalf("fenced update wrote: %v @%d", got, modRev)
			}
			requireAbsent(t, s, "side")
		})
	}

	t.Run("PassingGuardCommits", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "c", cluster("c"))
		execRev := mustCreate(t, s, "executor", epoch(1))
		rev, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
			cur.(*storagev1.ClusterRecord).Name = "reported"
			txn.RequireValue("executor", epoch(1)).RequireModRevision("executor", execRev)
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		if got, modRev := getCluster(t, s, "c"); got.GetName() != "reported" || modRev != rev {
			t.Fatalf("stored %v @%d, returned %d", got, modRev, rev)
		}
	})

	t.Run("MissingKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		called := false
		_, err := s.GuaranteedUpdate(testContext(t), "missing", &storagev1.ClusterRecord{}, func(proto.Message, *store.Txn) error {
			called = true
			return nil
		})
		wanterr.Is(t, err, store.ErrNotFound)
		if called {
			t.Fatal("update called for a missing key")
		}
	})

	t.Run("DeletedDuringUpdate", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		_, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, _ *store.Txn) error {
			// A racing writer deletes the record under the update.
			if _, err := s.Commit(testContext(t), store.NewTxn().Delete("c", rev)); err != nil {
				return err
			}
			cur.(*storagev1.ClusterRecord).Name = "changed"
			return nil
		})
		wanterr.Is(t, err, store.ErrNotFound)
		requireAbsent(t, s, "c")
	})

	t.Run("RetriesOnFreshState", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		var seen []string
		_, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
			rec := cur.(*storagev1.ClusterRecord)
			seen = append(seen, rec.GetStatusReason())
			if len(seen) == 1 {
				// A racing writer wins between our read and our write.
				racer := cluster("c")
				racer.StatusReason = "racer"
				if _, err := s.Commit(testContext(t), store.NewTxn().Update("c", racer, rev)); err != nil {
					return err
				}
			}
			rec.KubernetesVersion = "1.35"
			txn.Put("side", cluster(fmt.Sprintf("attempt %d", len(seen))))
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		if len(seen) != 2 || seen[0] != "" || seen[1] != "racer" {
			t.Fatalf("update saw %q, want a retry on the racer's record", seen)
		}
		got, _ := getCluster(t, s, "c")
		if got.GetStatusReason() != "racer" || got.GetKubernetesVersion() != "1.35" {
			t.Fatalf("stored %v: an update was lost", got)
		}
		if side, _ := getCluster(t, s, "side"); side.GetName() != "attempt 2" {
			t.Fatalf("side write from %q, want only the committed attempt's", side.GetName())
		}
	})

	t.Run("ExtraOpsAtomic", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		mustCreate(t, s, "c", cluster("c"))
		mustCreate(t, s, "old/1", cluster("old"))
		rev, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
			cur.(*storagev1.ClusterRecord).Status = storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING
			txn.Create("updates/1", cluster("update-1")).DeleteRange("old/")
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		_, recRev := getCluster(t, s, "c")
		_, logRev := getCluster(t, s, "updates/1")
		if recRev != rev || logRev != rev {
			t.Fatalf("record @%d, log @%d, returned %d: not one transaction", recRev, logRev, rev)
		}
		requireAbsent(t, s, "old/1")
	})

	t.Run("ExtraOpsOnlyStillWrite", func(t *testing.T) {
		// The record is unchanged but the update adds a write: not a no-op.
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		got, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(_ proto.Message, txn *store.Txn) error {
			txn.Put("touched", cluster("t"))
			return nil
		})
		if err != nil {
			t.Fatalf("GuaranteedUpdate: %v", err)
		}
		if got <= rev {
			t.Fatalf("returned revision %d, created at %d", got, rev)
		}
		getCluster(t, s, "touched")
	})

	t.Run("ExtraCreateCollisionAborts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		rev := mustCreate(t, s, "c", cluster("c"))
		mustCreate(t, s, "updates/1", cluster("taken"))
		var calls atomic.Int64
		_, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, txn *store.Txn) error {
			calls.Add(1)
			cur.(*storagev1.ClusterRecord).Name = "changed"
			txn.Create("updates/1", cluster("mine"))
			return nil
		})
		wanterr.Is(t, err, store.ErrExists)
		if calls.Load() != 1 {
			t.Fatalf("collision retried: %d calls", calls.Load())
		}
		if got, modRev := getCluster(t, s, "c"); got.GetName() != "c" || modRev != rev {
			t.Fatalf("record written despite the collision: %v @%d", got, modRev)
		}
	})

	t.Run("CorruptRecord", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if _, err := s.Client().Put(testContext(t), s.Key("bad"), "\x0a\xff"); err != nil {
			t.Fatal(err)
		}
		_, err := s.GuaranteedUpdate(testContext(t), "bad", &storagev1.ClusterRecord{}, addMember("i-1"))
		wanterr.Is(t, err, store.ErrCorrupt)
	})

	t.Run("AttemptsBounded", func(t *testing.T) {
		// An updater that always loses the race gives up with ErrConflict
		// after MaxUpdateAttempts.
		t.Parallel()
		prefix := uniquePrefix(t)
		s, err := store.New(testContext(t), shared.client, store.Options{Prefix: prefix, MaxUpdateAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, "c", cluster("c"))
		var calls atomic.Int64
		_, err = s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, func(cur proto.Message, _ *store.Txn) error {
			n := calls.Add(1)
			// Someone else always writes first.
			if _, err := s.GuaranteedUpdate(testContext(t), "c", &storagev1.ClusterRecord{}, addMember(fmt.Sprintf("racer-%d", n))); err != nil {
				return err
			}
			cur.(*storagev1.ClusterRecord).Name = "never"
			return nil
		})
		wanterr.Is(t, err, store.ErrConflict)
		if calls.Load() != 3 {
			t.Fatalf("%d attempts, want 3", calls.Load())
		}
		if got, _ := getCluster(t, s, "c"); got.GetName() != "c" || len(got.GetMembers()) != 3 {
			t.Fatalf("stored %v", got)
		}
	})
}

// A no-op update whose guard no longer holds must fail: the guard is the
// point (a fencing compare), even when there is nothing to write.
func TestGuaranteedUpdateNoOpChecksGuards(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.Create(ctx, "rec", &storagev1.ClusterRecord{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, "fence", &storagev1.StoreMeta{TokenSigningKey: []byte("epoch-1")}); err != nil {
		t.Fatal(err)
	}
	guard := func(epoch string) store.UpdateFunc {
		return func(_ proto.Message, txn *store.Txn) error {
			txn.RequireValue("fence", &storagev1.StoreMeta{TokenSigningKey: []byte(epoch)})
			return nil
		}
	}
	into := &storagev1.ClusterRecord{}
	if _, err := st.GuaranteedUpdate(ctx, "rec", into, guard("epoch-1")); err != nil {
		t.Errorf("no-op with a holding guard: %v", err)
	}
	if _, err := st.GuaranteedUpdate(ctx, "rec", into, guard("epoch-0")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("no-op with a failed guard: %v, want ErrConflict", err)
	}
}

func TestUpdateTyped(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	mustCreate(t, s, "c", cluster("c"))
	into := &storagev1.ClusterRecord{}
	rev, err := store.Update(testContext(t), s, "c", into, func(rec *storagev1.ClusterRecord, _ *store.Txn) error {
		rec.KubernetesVersion = "1.35"
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	got, modRev := getCluster(t, s, "c")
	if got.GetKubernetesVersion() != "1.35" || modRev != rev || !proto.Equal(into, got) {
		t.Fatalf("stored %v at %d (returned %d), into %v", got, modRev, rev, into)
	}
}

func TestRetryOnConflict(t *testing.T) {
	t.Parallel()
	other := errors.New("other")
	cases := []struct {
		name      string
		fails     int           // attempts that fail with ErrConflict before one succeeds
		err       error         // what the attempt after them returns
		cancelled bool          // the context is cancelled before the first attempt
		deadline  time.Duration // the context's deadline, when not zero
		minCalls  int           // at least this many attempts (wantCalls is then ignored)
		wantCalls int
		want      error
	}{
		{name: "first try succeeds", fails: 0, wantCalls: 1},
		{name: "conflicts then success", fails: 3, wantCalls: 4},
		{name: "many conflicts then success", fails: 40, wantCalls: 41},
		{name: "another error is not retried", fails: 1, err: other, wantCalls: 2, want: other},
		// Retries end with the caller's deadline, not after a fixed count,
		// and what surfaces is the conflict, not the deadline.
		{name: "the deadline ends retrying with the conflict", fails: 1 << 30, deadline: 300 * time.Millisecond, minCalls: 3, want: store.ErrConflict},
		{name: "a cancelled context stops retrying", fails: 100, cancelled: true, wantCalls: 1, want: context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			if tc.deadline > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.deadline)
			}
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			calls, firsts := 0, 0
			err := store.RetryOnConflict(ctx, func(first bool) error {
				calls++
				if first {
					firsts++
				}
				if calls <= tc.fails {
					return fmt.Errorf("guard: %w", store.ErrConflict)
				}
				return tc.err
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v: the deadline leaked out as the cause", err)
			}
			if firsts != 1 {
				t.Fatalf("%d first attempts, want 1", firsts)
			}
			if tc.minCalls > 0 {
				if calls < tc.minCalls {
					t.Fatalf("%d calls before the deadline, want at least %d", calls, tc.minCalls)
				}
			} else if calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls, tc.wantCalls)
			}
		})
	}
}

// TestConflictBackoffGrows: the pause before a retry never exceeds its
// bound, and the bound grows with the number of races lost, up to a cap.
func TestConflictBackoffGrows(t *testing.T) {
	t.Parallel()
	for retry := 0; retry < 20; retry++ {
		bound := store.ConflictBackoffBound(retry)
		if retry > 2 && bound < store.ConflictBackoffBound(retry-1) {
			t.Errorf("bound(%d) = %v < bound(%d) = %v", retry, bound, retry-1, store.ConflictBackoffBound(retry-1))
		}
		for i := 0; i < 50; i++ {
			if d := store.ConflictBackoff(retry); d < 0 || d > bound {
				t.Fatalf("backoff(%d) = %v, outside [0, %v]", retry, d, bound)
			}
		}
	}
	if store.ConflictBackoffBound(1) != 0 {
		t.Errorf("the first retry waits up to %v, want none", store.ConflictBackoffBound(1))
	}
	if got := store.ConflictBackoffBound(30); got != 250*time.Millisecond {
		t.Errorf("bound after many losses = %v, want the 250ms cap", got)
	}
	if store.ConflictBackoffBound(5) <= store.ConflictBackoffBound(2) {
		t.Error("the bound does not grow with lost races")
	}
}

// GuaranteedUpdate changes a record's value, never its lifetime: a record
// on a lease (an agent's session) stays on it, also when the update is
// retried after a lost race, and a record on none is not put on one.
func TestGuaranteedUpdateKeepsLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		leased   bool
		raceOnce bool // another writer moves the record during the first attempt
	}{
		{name: "NoLease"},
		{name: "NoLeaseAfterLostRace", raceOnce: true},
		{name: "OnLease", leased: true},
		{name: "OnLeaseAfterLostRace", leased: true, raceOnce: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := testContext(t)
			var lease clientv3.LeaseID
			txn := store.NewTxn()
			if tc.leased {
				g, err := s.Client().Grant(ctx, 600)
				if err != nil {
					t.Fatalf("Grant: %v", err)
				}
				lease = g.ID
				t.Cleanup(func() { _, _ = s.Client().Revoke(context.Background(), lease) })
				txn.PutWithLease("c", cluster("c"), lease)
			} else {
				txn.Put("c", cluster("c"))
			}
			mustCommit(t, s, txn)

			var attempts atomic.Int32
			_, err := store.Update(ctx, s, "c", &storagev1.ClusterRecord{}, func(rec *storagev1.ClusterRecord, _ *store.Txn) error {
				if attempts.Add(1) == 1 && tc.raceOnce {
					// The rival keeps the record's lease, as an Ack does.
					rival := store.NewTxn()
					if tc.leased {
						rival.PutWithLease("c", cluster("rival"), lease)
					} else {
						rival.Put("c", cluster("rival"))
					}
					mustCommit(t, s, rival)
				}
				rec.KubernetesVersion = "1.35"
				return nil
			})
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			wantAttempts := int32(1)
			if tc.raceOnce {
				wantAttempts = 2
			}
			if got := attempts.Load(); got != wantAttempts {
				t.Errorf("update ran %d times, want %d", got, wantAttempts)
			}
			resp, err := s.Client().Get(ctx, s.Key("c"))
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("Get: %v (%d keys)", err, len(resp.Kvs))
			}
			if got := clientv3.LeaseID(resp.Kvs[0].Lease); got != lease {
				t.Errorf("record on lease %x, want %x", got, lease)
			}
			if got, _ := getCluster(t, s, "c"); got.GetKubernetesVersion() != "1.35" {
				t.Errorf("stored %v, want the update applied", got)
			}
		})
	}
}
