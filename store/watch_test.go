package store_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
)

// watch starts a watch that ends with the test.
func watch(t testing.TB, s *store.Store, prefix string, fromRev int64) <-chan store.Event {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return s.Watch(ctx, prefix, fromRev)
}

func put(t testing.TB, s *store.Store, key, name string) int64 {
	t.Helper()
	return mustCommit(t, s, store.NewTxn().Put(key, cluster(name))).Revision
}

func del(t testing.TB, s *store.Store, key string) int64 {
	t.Helper()
	res := mustCommit(t, s, store.NewTxn().DeleteRange(key))
	if res.Deleted != 1 {
		t.Fatalf("delete %s removed %d keys", key, res.Deleted)
	}
	return res.Revision
}

func TestWatch(t *testing.T) {
	t.Parallel()

	t.Run("SnapshotThenEvents", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		put(t, s, "w/a", "a")
		put(t, s, "w/b", "b")
		last := put(t, s, "w/c", "c")
		put(t, s, "wx/sibling", "sibling")
		ch := watch(t, s, "w/", 0)
		snap := expectSnapshot(t, ch, "w/a", "w/b", "w/c")
		if snap.Revision < last {
			t.Fatalf("snapshot at %d, before the last write %d", snap.Revision, last)
		}
		for _, kv := range snap.Snapshot {
			rec := &storagev1.ClusterRecord{}
			if err := store.Decode(kv.Value, rec); err != nil || "w/"+rec.GetName() != kv.Key || kv.Name != rec.GetName() {
				t.Fatalf("snapshot entry %+v: %v %v", kv, rec, err)
			}
		}

		r1 := put(t, s, "w/d", "d")
		put(t, s, "wx/ignored", "ignored") // sibling prefix: not delivered
		r2 := put(t, s, "w/a", "a2")
		r3 := del(t, s, "w/b")
		if ev := expectPut(t, ch, "w/d"); ev.Revision != r1 {
			t.Fatalf("put revision %d, want %d", ev.Revision, r1)
		}
		ev := expectPut(t, ch, "w/a")
		rec := &storagev1.ClusterRecord{}
		if err := store.Decode(ev.Value, rec); err != nil || rec.GetName() != "a2" || ev.Revision != r2 {
			t.Fatalf("update event %s carries %v (%v)", describe(ev), rec, err)
		}
		if ev := expectDelete(t, ch, "w/b"); ev.Revision != r3 {
			t.Fatalf("delete revision %d, want %d", ev.Revision, r3)
		}
	})

	t.Run("EmptySnapshot", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ch := watch(t, s, "w/", 0)
		expectSnapshot(t, ch)
		put(t, s, "w/a", "a")
		expectPut(t, ch, "w/a")
	})

	t.Run("FromRevisionReplays", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		r1 := put(t, s, "w/a", "a")
		r2 := put(t, s, "w/b", "b")
		r3 := del(t, s, "w/a")
		ch := watch(t, s, "w/", r1)
		// Events strictly after r1, no snapshot.
		if ev := expectPut(t, ch, "w/b"); ev.Revision != r2 {
			t.Fatalf("replayed put at %d, want %d", ev.Revision, r2)
		}
		if ev := expectDelete(t, ch, "w/a"); ev.Revision != r3 {
			t.Fatalf("replayed delete at %d, want %d", ev.Revision, r3)
		}
		put(t, s, "w/c", "c")
		expectPut(t, ch, "w/c")
	})

	t.Run("TransactionEventsShareARevision", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		put(t, s, "w/old", "old")
		ch := watch(t, s, "w/", 0)
		expectSnapshot(t, ch, "w/old")
		res := mustCommit(t, s, store.NewTxn().Create("w/a", cluster("a")).Put("w/b", cluster("b")).DeleteRange("w/old"))
		for _, want := range []struct {
			typ store.EventType
			key string
		}{{store.EventPut, "w/a"}, {store.EventPut, "w/b"}, {store.EventDelete, "w/old"}} {
			ev := nextEvent(t, ch)
			if ev.Type != want.typ || ev.Key != want.key || ev.Revision != res.Revision {
				t.Fatalf("event %s, want %v %s@%d", describe(ev), want.typ, want.key, res.Revision)
			}
		}
	})

	t.Run("ClosesWithContext", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch := s.Watch(ctx, "w/", 0)
		expectSnapshot(t, ch)
		cancel()
		timer := time.NewTimer(eventTimeout)
		defer timer.Stop()
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-timer.C:
				t.Fatal("watch channel still open after its context ended")
			}
		}
	})
}

func TestWatchCompaction(t *testing.T) {
	// Compaction is keyspace-wide: this test has a member of its own.
	t.Parallel()
	srv, _ := startEtcd(t, embedetcd.Config{})
	client := clientFor(t, srv.Endpoints()...)
	s := newStoreAt(t, client, uniquePrefix(t))

	r1 := put(t, s, "w/a", "a")
	put(t, s, "w/b", "b")
	del(t, s, "w/a")
	last := put(t, s, "w/c", "c")
	if _, err := client.Compact(testContext(t), last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}

	// The history after r1 is gone: the watch re-lists and says so.
	ch := watch(t, s, "w/", r1)
	snap := expectSnapshot(t, ch, "w/b", "w/c")
	if snap.Revision < last {
		t.Fatalf("snapshot at %d, before the compaction at %d", snap.Revision, last)
	}
	// Then live events continue after the snapshot.
	r := put(t, s, "w/d", "d")
	if ev := expectPut(t, ch, "w/d"); ev.Revision != r {
		t.Fatalf("event at %d, want %d", ev.Revision, r)
	}
	del(t, s, "w/b")
	expectDelete(t, ch, "w/b")

	// Watching exactly from the compaction revision is still possible:
	// nothing after it was compacted, so no snapshot.
	ch2 := watch(t, s, "w/", last)
	expectPut(t, ch2, "w/d")
	expectDelete(t, ch2, "w/b")
}

func TestWatchResumesAfterRestart(t *testing.T) {
	t.Parallel()
	// Reserved: the restart binds them again.
	clientURL, peerURL := loopport.URL(t, "http"), loopport.URL(t, "http")
	cfg := embedetcd.Config{Dir: t.TempDir(), ClientURL: clientURL, PeerURL: peerURL}
	_, stop := startEtcd(t, cfg)
	client := clientFor(t, clientURL)
	prefix := uniquePrefix(t)
	s := newStoreAt(t, client, prefix)

	put(t, s, "w/a", "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := s.Watch(ctx, "w/", 0)
	expectSnapshot(t, ch, "w/a")
	put(t, s, "w/b", "b")
	put(t, s, "w/c", "c")
	expectPut(t, ch, "w/b")
	// w/c is left undelivered in the channel or the stream across the
	// restart: it must still arrive exactly once.

	// Closing a member waits up to etcd's request timeout (7s) for open
	// watch streams to end: the watch above makes this stop slow. The
	// final stop is quick because the watch ends first.
	stop()
	startEtcd(t, cfg)

	// Writes through another client (the watcher's own reconnects on its
	// own), after the restarted member answers.
	writer := newStoreAt(t, clientFor(t, clientURL), prefix)
	eventually(t, "ping the restarted member", writer.Ping)
	rd := put(t, writer, "w/d", "d")
	re := del(t, writer, "w/a")
	rf := put(t, writer, "w/c", "c2")

	expectPut(t, ch, "w/c")
	if ev := expectPut(t, ch, "w/d"); ev.Revision != rd {
		t.Fatalf("w/d at %d, want %d", ev.Revision, rd)
	}
	if ev := expectDelete(t, ch, "w/a"); ev.Revision != re {
		t.Fatalf("delete w/a at %d, want %d", ev.Revision, re)
	}
	if ev := expectPut(t, ch, "w/c"); ev.Revision != rf {
		t.Fatalf("w/c at %d, want %d", ev.Revision, rf)
	}
	// Nothing repeated: the next event is the next write.
	eventually(t, "ping through the watcher's client", s.Ping)
	rg := put(t, s, "w/g", "g")
	if ev := expectPut(t, ch, "w/g"); ev.Revision != rg {
		t.Fatalf("w/g at %d, want %d", ev.Revision, rg)
	}
	cancel()
	for range ch {
	}
}
