package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/netproxy"
)

// runView attaches a view to s and runs it until the test ends, waiting
// for its first list.
func runView(t testing.TB, s *store.Store, opts store.ViewOptions) *store.View {
	t.Helper()
	v := store.NewView(s, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := s.Ping(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := v.Await(testContext(t), v.Stats().Seen); err != nil {
		t.Fatalf("view did not sync: %v", err)
	}
	return v
}

// readCluster reads key through the view path (Read).
func readCluster(t testing.TB, s *store.Store, key string) (*storagev1.ClusterRecord, int64, error) {
	t.Helper()
	rec := &storagev1.ClusterRecord{}
	rev, err := s.Read(testContext(t), key, rec)
	return rec, rev, err
}

func TestViewReadYourWrites(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	v := runView(t, s, store.ViewOptions{MaxWait: time.Minute})

	// Every read right after a write through the same store sees it, for
	// each kind of write the services make.
	steps := []struct {
		name  string
		write func() int64
		key   string
		want  string // name in the record read, "" for absent
	}{
		{"create", func() int64 { return mustCreate(t, s, store.ClusterKey("111122223333", "a"), cluster("a")) }, store.ClusterKey("111122223333", "a"), "a"},
		{"put", func() int64 { return put(t, s, store.ClusterKey("111122223333", "a"), "a2") }, store.ClusterKey("111122223333", "a"), "a2"},
		{"child", func() int64 { return put(t, s, store.AddonKey("uid-a", "vpc-cni"), "vpc-cni") }, store.AddonKey("uid-a", "vpc-cni"), "vpc-cni"},
		{"delete", func() int64 { return del(t, s, store.ClusterKey("111122223333", "a")) }, store.ClusterKey("111122223333", "a"), ""},
		{"delete range", func() int64 {
			return mustCommit(t, s, store.NewTxn().DeleteRange(store.ClusterChildrenPrefix("uid-a"))).Revision
		}, store.AddonKey("uid-a", "vpc-cni"), ""},
	}
	for i := 0; i < 50; i++ {
		for _, st := range steps {
			wrote := st.write()
			rec, modRev, err := readCluster(t, s, st.key)
			switch {
			case st.want == "" && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("round %d %s: Read after the write at %d = %v, %v; want not found", i, st.name, wrote, rec, err)
			case st.want != "" && (err != nil || rec.GetName() != st.want || modRev != wrote):
				t.Fatalf("round %d %s: Read = %q at %d, %v; want %q at %d", i, st.name, rec.GetName(), modRev, err, st.want, wrote)
			}
			shared, sharedRev, err := store.ReadShared(testContext(t), s, st.key, newClusterRecord)
			if (st.want == "") != errors.Is(err, store.ErrNotFound) || (st.want != "" && (shared.GetName() != st.want || sharedRev != wrote)) {
				t.Fatalf("round %d %s: ReadShared = %q at %d, %v; want %q at %d", i, st.name, shared.GetName(), sharedRev, err, st.want, wrote)
			}
		}
	}
	// Every read is answered by the view, but for one the view declines
	// because its last confirmation from etcd is older than ViewFreshness:
	// a wall-clock bound a machine whose cores another process saturates
	// can overrun, and then etcd answers, as the checks above saw. No read
	// may fall back because the view lagged the write.
	stats := v.Stats()
	if stats.FromView+stats.Stale < int64(2*50*len(steps)) || stats.NotSynced+stats.TimedOut+stats.LaggingReads != 0 {
		t.Fatalf("view stats %+v: want every read answered by the view (or declined as not fresh)", stats)
	}
	if stats.FromView == 0 {
		t.Fatalf("view stats %+v: the view answered no read", stats)
	}
}

func newClusterRecord() *storagev1.ClusterRecord { return &storagev1.ClusterRecord{} }

// TestViewReadSharedDecodesOncePerVersion: ReadShared hands every reader
// of one version the same decoded record, a new one after a change, and
// never one of another type; Read and a store without a view decode a
// copy each time.
func TestViewReadSharedDecodesOncePerVersion(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	key := store.ClusterKey("111122223333", "a")
	mustCreate(t, s, key, cluster("a"))
	read := func() *storagev1.ClusterRecord {
		t.Helper()
		rec, _, err := store.ReadShared(testContext(t), s, key, newClusterRecord)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if first, second := read(), read(); first == second {
		t.Fatal("without a view, two ReadShared calls returned one record; want a copy each")
	}

	runView(t, s, store.ViewOptions{MaxWait: time.Minute})
	first := read()
	if again := read(); again != first || first.GetName() != "a" {
		t.Fatalf("two reads of one version: %p %q and %p; want one shared record named a", first, first.GetName(), again)
	}
	if own, _, err := readCluster(t, s, key); err != nil || own == first || !proto.Equal(own, first) {
		t.Fatalf("Read = %p, %v; want a copy equal to the shared %p", own, err, first)
	}
	// Another type for the same bytes is decoded on its own (into
	// whatever those bytes mean to it), not handed the cached record.
	if other, _, err := store.ReadShared(testContext(t), s, key, func() *storagev1.AddonRecord { return &storagev1.AddonRecord{} }); err != nil || other == nil {
		t.Fatalf("ReadShared as an add-on record = %v, %v", other, err)
	}
	if again := read(); again != first {
		t.Fatal("a read of another type replaced the shared record")
	}

	put(t, s, key, "a2")
	changed := read()
	if changed == first || changed.GetName() != "a2" || first.GetName() != "a" {
		t.Fatalf("after a change: shared %q (was %q, still %q); want a new record named a2 and the old one untouched",
			changed.GetName(), "a", first.GetName())
	}
	if again := read(); again != changed {
		t.Fatal("two reads of the changed version returned different records")
	}
}

func TestViewListMatchesEtcd(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	runView(t, s, store.ViewOptions{MaxWait: time.Minute})
	for i := range 57 {
		put(t, s, store.AddonKey("uid-l", fmt.Sprintf("addon-%03d", i)), fmt.Sprintf("addon-%03d", i))
	}
	put(t, s, store.AddonKey("uid-l2", "other"), "other")     // a sibling incarnation
	put(t, s, store.AddonUpdateKey("uid-l", "x", "u1"), "u1") // another child of the same one

	for _, tc := range []struct {
		name     string
		limit    int
		keysOnly bool
	}{
		{"pages of 10", 10, false},
		{"pages of 10, keys only", 10, true},
		{"one page", 0, false},
		{"pages of 1", 1, true},
		{"exact fit", 57, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := store.ListOptions{Prefix: store.AddonsPrefix("uid-l"), Scope: "ListAddons/uid-l", Limit: tc.limit, KeysOnly: tc.keysOnly}
			var fromView, fromEtcd []store.Page
			for {
				vp, err := s.ReadList(testContext(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				ep, err := s.List(testContext(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				fromView, fromEtcd = append(fromView, vp), append(fromEtcd, ep)
				if vp.NextToken != ep.NextToken {
					t.Fatalf("page %d: view token %q, etcd token %q", len(fromView), vp.NextToken, ep.NextToken)
				}
				if vp.NextToken == "" {
					break
				}
				opts.Token = vp.NextToken
			}
			for i := range fromView {
				if len(fromView[i].Items) != len(fromEtcd[i].Items) {
					t.Fatalf("page %d: %d items from the view, %d from etcd", i, len(fromView[i].Items), len(fromEtcd[i].Items))
				}
				for j, kv := range fromView[i].Items {
					e := fromEtcd[i].Items[j]
					if kv.Key != e.Key || kv.Name != e.Name || kv.ModRev != e.ModRev || string(kv.Value) != string(e.Value) {
						t.Fatalf("page %d item %d: view %+v, etcd %+v", i, j, kv, e)
					}
				}
			}
		})
	}

	t.Run("tampered token", func(t *testing.T) {
		opts := store.ListOptions{Prefix: store.AddonsPrefix("uid-l"), Scope: "ListAddons/uid-l", Limit: 10}
		p, err := s.ReadList(testContext(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []store.ListOptions{
			{Prefix: opts.Prefix, Scope: "ListAddons/uid-l2", Limit: 10, Token: p.NextToken}, // another listing's
			{Prefix: opts.Prefix, Scope: opts.Scope, Limit: 10, Token: p.NextToken[:len(p.NextToken)-2] + "AA"},
		} {
			if _, err := s.ReadList(testContext(t), bad); !errors.Is(err, store.ErrInvalidToken) {
				t.Fatalf("ReadList with %q = %v, want ErrInvalidToken", bad.Token, err)
			}
		}
		if _, err := s.ReadList(testContext(t), store.ListOptions{Prefix: opts.Prefix, Limit: store.MaxPageSize + 1}); err == nil || errors.Is(err, store.ErrInvalidToken) {
			t.Fatalf("ReadList with page size %d = %v, want a size error", store.MaxPageSize+1, err)
		}
	})
}

// An unsynced view answers nothing: reads go to etcd, and are still
// current.
func TestViewNotSyncedReadsEtcd(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	v := store.NewView(s, store.ViewOptions{}) // never run
	key := store.ClusterKey("111122223333", "n")
	wrote := put(t, s, key, "n")
	rec, rev, err := readCluster(t, s, key)
	if err != nil || rec.GetName() != "n" || rev != wrote {
		t.Fatalf("Read = %v at %d, %v; want n at %d", rec, rev, err, wrote)
	}
	p, err := s.ReadList(testContext(t), store.ListOptions{Prefix: store.ClustersPrefix("111122223333"), Scope: "x"})
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("ReadList = %+v, %v", p, err)
	}
	if st := v.Stats(); st.Synced || st.NotSynced != 2 || st.FromView != 0 {
		t.Fatalf("stats %+v: want 2 reads not synced, none from the view", st)
	}
}

// A view that stops hearing from etcd lags: reads wait at most MaxWait,
// then go to etcd (and are current), and go there at once until the view
// has caught up again; then the view answers again.
func TestViewLagFallsBackToEtcd(t *testing.T) {
	t.Parallel()
	link := netproxy.Start(t, strings.TrimPrefix(shared.srv.Endpoints()[0], "http://"))
	viewClient := clientFor(t, "http://"+link.Addr())
	s := newStore(t)
	const maxWait = 200 * time.Millisecond
	v := runView(t, s, store.ViewOptions{MaxWait: maxWait, Client: viewClient})
	key := store.ClusterKey("111122223333", "lag")
	put(t, s, key, "before")
	if rec, _, err := readCluster(t, s, key); err != nil || rec.GetName() != "before" {
		t.Fatalf("Read = %v, %v", rec, err)
	}

	link.Partition()
	wrote := put(t, s, key, "during")
	start := time.Now()
	rec, rev, err := readCluster(t, s, key)
	waited := time.Since(start)
	if err != nil || rec.GetName() != "during" || rev != wrote {
		t.Fatalf("Read while the view is cut off = %v at %d, %v; want during at %d", rec, rev, err, wrote)
	}
	if waited < maxWait {
		t.Fatalf("first read while lagging took %v, less than MaxWait %v: it cannot have waited for the view", waited, maxWait)
	}
	st := v.Stats()
	if !st.Lagging || st.TimedOut != 1 || st.Revision >= wrote {
		t.Fatalf("stats %+v: want lagging, one read timed out, view behind %d", st, wrote)
	}
	// Now reads go to etcd without waiting for the view.
	for i := range 5 {
		wrote = put(t, s, key, fmt.Sprintf("during-%d", i))
		if rec, rev, err := readCluster(t, s, key); err != nil || rev != wrote {
			t.Fatalf("Read = %v at %d, %v; want the write at %d", rec, rev, err, wrote)
		}
	}
	if st := v.Stats(); st.LaggingReads != 5 || st.TimedOut != 1 {
		t.Fatalf("stats %+v: want 5 reads sent to etcd as lagging, still one timed out", st)
	}

	link.Heal()
	ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
	defer cancel()
	if err := v.Await(ctx, wrote); err != nil {
		t.Fatal(err)
	}
	before := v.Stats().FromView
	if rec, rev, err := readCluster(t, s, key); err != nil || rev != wrote || rec.GetName() != "during-4" {
		t.Fatalf("Read after healing = %v at %d, %v", rec, rev, err)
	}
	if st := v.Stats(); st.Lagging || st.FromView != before+1 {
		t.Fatalf("stats %+v: want the view caught up and answering", st)
	}
}

// A view whose watch fell behind a compaction lists again, and holds what
// etcd holds.
func TestViewRelistsAfterCompaction(t *testing.T) {
	t.Parallel()
	srv, _ := startEtcd(t, embedetcd.Config{})
	client := clientFor(t, srv.Endpoints()...)
	link := netproxy.Start(t, strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	s := newStoreAt(t, client, uniquePrefix(t))
	v := runView(t, s, store.ViewOptions{MaxWait: 100 * time.Millisecond, Client: clientFor(t, "http://"+link.Addr())})
	put(t, s, store.ClusterKey("111122223333", "gone"), "gone")
	kept := put(t, s, store.ClusterKey("111122223333", "kept"), "kept")
	// Await, not Sync: Sync gives up after MaxWait, which a loaded
	// machine can exceed; here the view must hold both records before
	// it is cut off, however long that takes.
	if err := v.Await(testContext(t), kept); err != nil {
		t.Fatalf("view did not sync: %v", err)
	}

	// Cut the view off, change things, and compact the history it missed.
	link.Reset()
	del(t, s, store.ClusterKey("111122223333", "gone"))
	put(t, s, store.ClusterKey("111122223333", "new"), "new")
	last := put(t, s, store.ClusterKey("111122223333", "kept"), "kept2")
	if _, err := client.Compact(testContext(t), last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	link.Heal()
	ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
	defer cancel()
	if err := v.Await(ctx, last); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Relists != 2 {
		t.Fatalf("stats %+v: want a second list after the compaction", st)
	}
	p, err := s.ReadList(testContext(t), store.ListOptions{Prefix: store.ClustersPrefix("111122223333"), Scope: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range p.Items {
		rec := &storagev1.ClusterRecord{}
		if err := store.Decode(kv.Value, rec); err != nil {
			t.Fatal(err)
		}
		names = append(names, kv.Name+"="+rec.GetName())
	}
	if got, want := strings.Join(names, ","), "kept=kept2,new=new"; got != want {
		t.Fatalf("view holds %s, want %s", got, want)
	}
}

// Writes outside the root prefix move etcd's revision without an event the
// view's watch carries; a read that saw such a revision is still answered
// by the view (a progress notification brings it there), not by waiting
// out MaxWait.
func TestViewProgressPastForeignWrites(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	v := runView(t, s, store.ViewOptions{MaxWait: time.Minute})
	key := store.ClusterKey("111122223333", "p")
	put(t, s, key, "p")
	for i := range 20 {
		resp, err := shared.client.Put(testContext(t), fmt.Sprintf("/foreign/%s/%d", t.Name(), i), "x")
		if err != nil {
			t.Fatal(err)
		}
		// A linearizable read through the store sees the foreign revision.
		if _, err := s.Get(testContext(t), key, &storagev1.ClusterRecord{}); err != nil {
			t.Fatal(err)
		}
		if st := v.Stats(); st.Seen < resp.Header.Revision {
			t.Fatalf("store saw %d, after a foreign write at %d", st.Seen, resp.Header.Revision)
		}
		if _, _, err := readCluster(t, s, key); err != nil {
			t.Fatal(err)
		}
	}
	if st := v.Stats(); st.TimedOut != 0 || st.FromView < 20 {
		t.Fatalf("stats %+v: want every read from the view, none timed out", st)
	}
}

// Two replicas (two stores, two views) on one etcd: a write through one is
// seen by the other's view once etcd's watch delivers it.
func TestViewAcrossReplicas(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	a, b := newStoreAt(t, shared.client, prefix), newStoreAt(t, shared.client, prefix)
	runView(t, a, store.ViewOptions{})
	vb := runView(t, b, store.ViewOptions{})
	var worst time.Duration
	for i := range 20 {
		key := store.ClusterKey("111122223333", fmt.Sprintf("r%d", i))
		wrote := put(t, a, key, "x")
		start := time.Now()
		ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
		err := vb.Await(ctx, wrote)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		rec := &storagev1.ClusterRecord{}
		if _, err := b.GetSerializable(testContext(t), key, rec); err != nil || !proto.Equal(rec, cluster("x")) {
			t.Fatalf("replica b reads %v, %v after its view reached %d", rec, err, wrote)
		}
	}
	t.Logf("replica b's view reached replica a's writes at most %v after they returned", worst)
}
