package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The read view (docs/architecture.md, "Read view") is a replica's
// watch-fed, in-memory copy of the records callers read most: cluster
// records and everything a cluster incarnation owns (add-ons, updates,
// access entries, pod identity associations, delivery executor and
// sessions). It is built like Kubernetes' watch cache: one list of the held
// prefixes at one revision, then one watch from the next revision whose
// events are applied to the copy (never re-read), and a new list when etcd
// compacted past the watch.
//
// Reads through it (Read, ReadList, GetSerializable) are read-your-writes
// on this replica: the store remembers the highest revision any of its
// requests has seen (every write it committed, every read it made), and a
// view read first waits until the view has applied that revision. Writes
// never consult the view: their transactions compare against etcd itself,
// so a stale view can only make a guarded write fail its compare and retry.
//
// When the view cannot answer at once, the read goes to etcd instead: before
// the first list has loaded ("not synced"), and when the view lags ("a read
// waited MaxWait for a revision in vain"; until the view reaches that
// revision, reads go to etcd without waiting).

// DefaultViewMaxWait bounds how long a read waits for the view to catch up
// with this replica's writes before it reads etcd instead. The watch
// delivers a commit in about a millisecond on a healthy replica; waiting
// longer than this means something is wrong with the watch, and etcd
// answers for it.
const DefaultViewMaxWait = time.Second

// ViewFreshness bounds how old the view's last confirmation from etcd may
// be for it to answer. Every quarter of it the view makes one cheap
// linearizable read (it needs a quorum) and records its revision as seen,
// so reads wait for the view to reach it; a view without a confirmation
// for longer (cut off from etcd, or its member in a minority) answers
// nothing, and reads go to etcd and fail there as they would without the
// view. A replica cut off from etcd answers from memory for at most this
// long, and what it answers is at most about this stale.
const ViewFreshness = time.Second

// viewListPage is how many keys one request of the view's list reads.
const viewListPage = 1000

// viewPrefixes are the relative prefixes the view holds: the cluster
// records of every account, every cluster incarnation's children, and the
// add-on versions operators published (read on every catalogue lookup).
var viewPrefixes = [...]string{"accounts/", "clusters/", PublishedAddonsPrefix}

// ViewOptions configure a View.
type ViewOptions struct {
	// MaxWait bounds how long a read waits for the view; DefaultViewMaxWait
	// when zero.
	MaxWait time.Duration
	// Client, when set, is the etcd client the view lists and watches
	// through, instead of the store's (a test puts a slow link there).
	Client *clientv3.Client
	// Logger receives the view's re-lists and watch errors.
	Logger *slog.Logger
}

type viewItem struct {
	key    string
	value  []byte
	modRev int64
	// shared holds the record decoded once, for ReadShared; a change of
	// the key makes a new item and so a new, empty holder.
	shared *viewShared
}

// viewShared is the one decoded copy of a view item's record that every
// ReadShared reader of that version gets. Decoding a record is most of
// what a read from memory costs, so it is done once per version rather
// than once per read.
type viewShared struct {
	rec atomic.Pointer[sharedRecord]
}

type sharedRecord struct{ msg proto.Message }

func newViewItem(key string, value []byte, modRev int64) viewItem {
	return viewItem{key: key, value: value, modRev: modRev, shared: &viewShared{}}
}

func viewLess(a, b viewItem) bool { return a.key < b.key }

// viewState is one published version of the view: a tree that is never
// changed again (the next version is a copy-on-write clone) and the
// revision it reflects. Readers load it without a lock.
type viewState struct {
	tree *btree.BTreeG[viewItem]
	// rev: every change up to and including rev is in tree.
	rev int64
}

// View is a replica's read view. NewView attaches it to its store; Run
// keeps it current.
type View struct {
	st      *Store
	client  *clientv3.Client
	maxWait time.Duration
	log     *slog.Logger

	// state is nil until the first list has loaded.
	state atomic.Pointer[viewState]

	mu sync.Mutex
	// changed is closed (and replaced) whenever a new state is published.
	changed chan struct{}
	// lagRev is a revision a read waited MaxWait for in vain (0: none).
	// Until the view reaches it, reads go to etcd without waiting.
	lagRev int64
	// lagSince is when lagRev was set.
	lagSince time.Time

	// progress asks Run to request a progress notification from etcd, so
	// a revision that changed nothing the view watches (a write outside
	// the root prefix) still reaches the view.
	progress chan struct{}
	// waiting counts reads waiting for the view to reach a revision.
	waiting atomic.Int64
	// heard is when etcd last answered a linearizable read of the view
	// (its list, or a confirmation), in unix nanoseconds; confirming is
	// set while a confirmation is in flight.
	heard      atomic.Int64
	confirming atomic.Bool

	stats viewCounters
}

type viewCounters struct {
	fromView, notSynced, lagging, timedOut, stale, relists, watchErrors atomic.Int64
}

// ViewStats are the view's counters and state, for metrics.
type ViewStats struct {
	// Synced: the first list has loaded.
	Synced bool
	// Revision is the revision the view reflects.
	Revision int64
	// Seen is the highest revision this replica's store has seen.
	Seen int64
	// Lagging: a read waited MaxWait in vain and the view has not caught
	// up yet; LagSince is when that was noticed.
	Lagging  bool
	LagSince time.Time
	// Keys is how many records the view holds.
	Keys int
	// FromView counts reads the view answered; NotSynced, Lagging and
	// TimedOut count reads that went to etcd (view not loaded; view known
	// to lag; the read waited MaxWait in vain).
	FromView, NotSynced, LaggingReads, TimedOut int64
	// Stale counts reads that went to etcd because the view had heard
	// nothing from etcd for ViewFreshness.
	Stale int64
	// Relists counts full lists (the first one, and one per compaction
	// the watch fell behind); WatchErrors counts watches reopened.
	Relists, WatchErrors int64
}

// NewView returns a read view of st and attaches it: from now on st's
// Read, ReadList and GetSerializable consult it. Call Run to fill it.
func NewView(st *Store, opts ViewOptions) *View {
	v := &View{
		st:       st,
		client:   opts.Client,
		maxWait:  opts.MaxWait,
		log:      opts.Logger,
		changed:  make(chan struct{}),
		progress: make(chan struct{}, 1),
	}
	if v.client == nil {
		v.client = st.client
	}
	if v.maxWait <= 0 {
		v.maxWait = DefaultViewMaxWait
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	st.view.Store(v)
	return v
}

// Run lists the held prefixes and follows their changes until ctx ends or
// the etcd client is closed.
func (v *View) Run(ctx context.Context) {
	// The view's watch gets a gRPC stream of its own (the etcd client
	// shares one per distinct metadata): etcd answers a progress request
	// only when every watcher on the stream is in sync, and the view
	// should not wait on other watchers' backlogs.
	ctx = metadata.AppendToOutgoingContext(ctx, "saltbush-watch", fmt.Sprintf("read-view-%p", v))
	var rev int64
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil && v.client.Ctx().Err() == nil {
		if rev == 0 {
			r, err := v.relist(ctx)
			if err != nil {
				if ctx.Err() == nil {
					v.log.Warn("read view: list failed; retrying", "err", err)
				}
				if !sleep(ctx, jitter(backoff)) {
					return
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			rev = r
		}
		next, err := v.follow(ctx, rev)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			v.log.Info("read view: watch fell behind a compaction; listing again", "revision", rev)
			rev = 0
			continue
		case err != nil && ctx.Err() == nil:
			v.stats.watchErrors.Add(1)
			v.log.Warn("read view: watch ended; reopening", "revision", next, "err", err)
		}
		if next > rev {
			backoff = 50 * time.Millisecond
		}
		rev = next
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// relist reads every held prefix at one revision and publishes it.
func (v *View) relist(ctx context.Context) (int64, error) {
	tree := btree.NewG(32, viewLess)
	var rev int64
	for _, p := range viewPrefixes {
		from, end := v.st.Key(p), clientv3.GetPrefixRangeEnd(v.st.Key(p))
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(viewListPage)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			rctx, cancel := v.st.withTimeout(ctx)
			resp, err := v.client.Get(rctx, from, opts...)
			cancel()
			if err != nil {
				return 0, mapErr(err, p)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				tree.ReplaceOrInsert(newViewItem(v.st.rel(kv.Key), kv.Value, kv.ModRevision))
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	v.stats.relists.Add(1)
	v.heard.Store(time.Now().UnixNano())
	v.publish(&viewState{tree: tree, rev: rev})
	return rev, nil
}

// viewProgressInterval is how often a view that is waited for asks etcd
// for a progress notification again, in case the revision waited for
// changed nothing it watches and etcd dropped the first request.
const viewProgressInterval = 100 * time.Millisecond

// follow watches the root prefix after rev and applies what it holds. It
// returns the revision it reached and why the watch ended (ErrCompacted
// when etcd compacted past it).
func (v *View) follow(ctx context.Context, rev int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := v.client.Watch(wctx, v.st.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify())
	tick := time.NewTicker(viewProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev, ctx.Err()
		case <-v.progress:
			_ = v.client.RequestProgress(wctx)
		case <-tick.C:
			if time.Since(time.Unix(0, v.heard.Load())) > ViewFreshness/4 && !v.confirming.Load() {
				v.confirming.Store(true)
				go v.confirm(ctx)
			}
			// etcd drops a progress request while a watcher of the stream
			// is not in sync (or waits for a revision not yet written), so
			// ask again while anyone waits.
			if v.waiting.Load() > 0 || v.laggingNow() {
				_ = v.client.RequestProgress(wctx)
			}
		case resp, ok := <-wch:
			if !ok {
				return rev, errors.New("watch channel closed")
			}
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				return rev, rpctypes.ErrCompacted
			}
			if err := resp.Err(); err != nil {
				return rev, err
			}
			if resp.IsProgressNotify() {
				if resp.Header.Revision > rev {
					rev = resp.Header.Revision
					cur := v.state.Load()
					v.publish(&viewState{tree: cur.tree, rev: rev})
				}
				continue
			}
			rev = v.apply(resp.Events, rev)
		}
	}
}

// apply publishes a copy of the view with events applied. Events outside
// the held prefixes only move the revision.
func (v *View) apply(events []*clientv3.Event, rev int64) int64 {
	cur := v.state.Load()
	var tree *btree.BTreeG[viewItem]
	for _, ev := range events {
		rev = max(rev, ev.Kv.ModRevision)
		rel := v.st.rel(ev.Kv.Key)
		if !viewHolds(rel) {
			continue
		}
		if tree == nil {
			tree = cur.tree.Clone()
		}
		if ev.Type == mvccpb.DELETE {
			tree.Delete(viewItem{key: rel})
		} else {
			tree.ReplaceOrInsert(newViewItem(rel, ev.Kv.Value, ev.Kv.ModRevision))
		}
	}
	if tree == nil {
		tree = cur.tree
	}
	v.publish(&viewState{tree: tree, rev: rev})
	return rev
}

func viewHolds(rel string) bool {
	for _, p := range viewPrefixes {
		if strings.HasPrefix(rel, p) {
			return true
		}
	}
	return false
}

// confirm makes the linearizable read that keeps the view fresh.
func (v *View) confirm(ctx context.Context) {
	defer v.confirming.Store(false)
	ctx, cancel := context.WithTimeout(ctx, ViewFreshness/2)
	defer cancel()
	resp, err := v.client.Get(ctx, v.st.Key(metaKey), clientv3.WithCountOnly())
	if err != nil {
		return
	}
	v.st.observe(resp.Header.Revision)
	v.heard.Store(time.Now().UnixNano())
}

func (v *View) publish(s *viewState) {
	v.mu.Lock()
	v.state.Store(s)
	if v.lagRev != 0 && s.rev >= v.lagRev {
		v.log.Info("read view caught up", "revision", s.rev, "lagged", time.Since(v.lagSince).Round(time.Millisecond))
		v.lagRev = 0
	}
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

func (v *View) laggingNow() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lagRev != 0
}

func (v *View) askProgress() {
	select {
	case v.progress <- struct{}{}:
	default:
	}
}

// await returns a state that reflects at least revision want, or nil when
// the read must go to etcd. It waits at most MaxWait (and half of what is
// left of ctx's deadline, so the read from etcd still has time).
func (v *View) await(ctx context.Context, want int64) *viewState {
	s := v.state.Load()
	if s == nil {
		v.stats.notSynced.Add(1)
		return nil
	}
	if time.Since(time.Unix(0, v.heard.Load())) > ViewFreshness {
		v.stats.stale.Add(1)
		return nil
	}
	if s.rev >= want {
		v.stats.fromView.Add(1)
		return s
	}
	if v.laggingNow() {
		v.stats.lagging.Add(1)
		return nil
	}
	wait := v.maxWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	v.waiting.Add(1)
	defer v.waiting.Add(-1)
	asked := false
	for {
		v.mu.Lock()
		changed := v.changed
		v.mu.Unlock()
		if s = v.state.Load(); s.rev >= want {
			v.stats.fromView.Add(1)
			return s
		}
		if !asked {
			// The revision may belong to a write the view's watch will
			// not carry (outside the root prefix); a progress
			// notification brings the view to it.
			v.askProgress()
			asked = true
		}
		select {
		case <-changed:
		case <-timer.C:
			v.markLagging(want)
			v.stats.timedOut.Add(1)
			return nil
		case <-ctx.Done():
			v.stats.timedOut.Add(1)
			return nil
		}
	}
}

func (v *View) markLagging(want int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.state.Load(); s != nil && s.rev >= want {
		return
	}
	if v.lagRev == 0 {
		v.lagSince = time.Now()
		v.log.Warn("read view lags: reads go to etcd until it catches up", "revision", v.state.Load().rev, "want", want)
	}
	v.lagRev = max(v.lagRev, want)
}

// Sync waits until the view reflects every revision this replica has
// seen, bounded by MaxWait and ctx; it reports whether the view caught up.
// A readiness probe calls it after a linearizable read, so a lagging view
// is noticed (and reads go to etcd) even while nobody reads through it.
func (v *View) Sync(ctx context.Context) bool {
	return v.await(ctx, v.st.seen.Load()) != nil
}

// Await waits until the view reflects revision rev or ctx ends, without
// MaxWait's bound and without marking the view lagging: a caller that must
// see another replica's write (whose revision it knows) waits here.
func (v *View) Await(ctx context.Context, rev int64) error {
	v.waiting.Add(1)
	defer v.waiting.Add(-1)
	v.askProgress()
	for {
		v.mu.Lock()
		changed := v.changed
		v.mu.Unlock()
		if s := v.state.Load(); s != nil && s.rev >= rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("read view at revision %d, waiting for %d: %w", v.Stats().Revision, rev, ctx.Err())
		}
	}
}

// Stats returns the view's state and counters.
func (v *View) Stats() ViewStats {
	out := ViewStats{
		Seen:         v.st.seen.Load(),
		FromView:     v.stats.fromView.Load(),
		NotSynced:    v.stats.notSynced.Load(),
		LaggingReads: v.stats.lagging.Load(),
		TimedOut:     v.stats.timedOut.Load(),
		Stale:        v.stats.stale.Load(),
		Relists:      v.stats.relists.Load(),
		WatchErrors:  v.stats.watchErrors.Load(),
	}
	if s := v.state.Load(); s != nil {
		out.Synced, out.Revision, out.Keys = true, s.rev, s.tree.Len()
	}
	v.mu.Lock()
	out.Lagging, out.LagSince = v.lagRev != 0, v.lagSince
	v.mu.Unlock()
	return out
}

func (s *viewState) get(key string, into proto.Message) (int64, error) {
	it, ok := s.tree.Get(viewItem{key: key})
	if !ok {
		return 0, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err := Decode(it.value, into); err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return it.modRev, nil
}

// getShared returns key's record decoded once and shared: the caller must
// not change it. A reader asking for another type than the first one's
// gets its own copy.
func getShared[T proto.Message](s *viewState, key string, newRec func() T) (T, int64, error) {
	var zero T
	it, ok := s.tree.Get(viewItem{key: key})
	if !ok {
		return zero, 0, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if sr := it.shared.rec.Load(); sr != nil {
		if rec, ok := sr.msg.(T); ok {
			return rec, it.modRev, nil
		}
	}
	rec := newRec()
	if err := Decode(it.value, rec); err != nil {
		return zero, 0, fmt.Errorf("%s: %w", key, err)
	}
	// Two first readers may both decode; either copy is the same record.
	it.shared.rec.CompareAndSwap(nil, &sharedRecord{msg: rec})
	return rec, it.modRev, nil
}

// list is Store.List answered from the view: the same pages, the same
// continuation tokens.
func (s *viewState) list(st *Store, opts ListOptions, limit int) (Page, error) {
	start := opts.Prefix
	if opts.Token != "" {
		after, err := st.tokens.open(opts.Token, opts.Scope, opts.Prefix)
		if err != nil {
			return Page{}, err
		}
		start = opts.Prefix + after + "\x00"
	}
	// Sized for a usual page, so a page of ten costs one allocation rather
	// than the appends' four; a full page of a hundred grows it once.
	page := Page{Revision: s.rev, Items: make([]KV, 0, min(limit, 32))}
	s.tree.AscendGreaterOrEqual(viewItem{key: start}, func(it viewItem) bool {
		if !strings.HasPrefix(it.key, opts.Prefix) {
			return false
		}
		if len(page.Items) == limit {
			page.NextToken = st.tokens.seal(opts.Scope, opts.Prefix, page.Items[limit-1].Name)
			return false
		}
		kv := KV{Key: it.key, Name: it.key[len(opts.Prefix):], ModRev: it.modRev}
		if !opts.KeysOnly {
			kv.Value = it.value
		}
		page.Items = append(page.Items, kv)
		return true
	})
	return page, nil
}

// View returns the read view attached to s, or nil.
func (s *Store) View() *View { return s.view.Load() }

// viewFor returns the view state a read of key may be answered from, or
// nil when it must go to etcd.
func (s *Store) viewFor(ctx context.Context, key string) *viewState {
	v := s.view.Load()
	if v == nil || !viewHolds(key) {
		return nil
	}
	return v.await(ctx, s.seen.Load())
}

// Observe records that etcd answered a request made around the store (a
// caller's own transaction on Client) at revision rev: a later view read
// waits until the view has it, so what the view answers is no older than
// what the caller read.
func (s *Store) Observe(rev int64) { s.observe(rev) }

// observe records that etcd answered at revision rev: a later view read
// waits until the view has it.
func (s *Store) observe(rev int64) {
	for {
		cur := s.seen.Load()
		if rev <= cur || s.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// Read is Get for answering a caller: from the read view when it holds the
// key and has caught up with everything this replica has written or read,
// otherwise a linearizable Get. A record written through this replica is
// always found; one written through another replica a moment ago may not
// be yet (the view is as far behind as etcd's watch delivery).
func (s *Store) Read(ctx context.Context, key string, into proto.Message) (int64, error) {
	if vs := s.viewFor(ctx, key); vs != nil {
		return vs.get(key, into)
	}
	return s.Get(ctx, key, into)
}

// RecordReader is the shape of ReadShared, GetSerializableShared and
// GetRecord, so that a service can take whichever read its caller needs.
type RecordReader[T proto.Message] func(ctx context.Context, s *Store, key string, newRec func() T) (T, int64, error)

// ReadShared is Read for a caller that only looks at the record: from the
// view it returns the one decoded copy of the record's version that every
// such reader shares, so the caller must never change it, nor anything it
// holds (its maps, lists and messages). From etcd it is a fresh record.
func ReadShared[T proto.Message](ctx context.Context, s *Store, key string, newRec func() T) (T, int64, error) {
	if vs := s.viewFor(ctx, key); vs != nil {
		return getShared(vs, key, newRec)
	}
	return GetRecord(ctx, s, key, newRec)
}

// GetRecord is Get into a record of the caller's own, made by newRec: the
// linearizable counterpart of ReadShared, with the same signature.
func GetRecord[T proto.Message](ctx context.Context, s *Store, key string, newRec func() T) (T, int64, error) {
	rec := newRec()
	rev, err := s.Get(ctx, key, rec)
	return rec, rev, err
}

// GetSerializableShared is GetSerializable with ReadShared's contract: the
// record may be shared and must not be changed.
func GetSerializableShared[T proto.Message](ctx context.Context, s *Store, key string, newRec func() T) (T, int64, error) {
	if vs := s.viewFor(ctx, key); vs != nil {
		return getShared(vs, key, newRec)
	}
	rec := newRec()
	rev, err := s.get(ctx, key, rec, clientv3.WithSerializable())
	return rec, rev, err
}

// ReadList is List for answering a caller, from the read view as Read
// is. Pages and continuation tokens are the same either way, so a listing
// may move between the view and etcd from page to page.
func (s *Store) ReadList(ctx context.Context, opts ListOptions) (Page, error) {
	limit := opts.Limit
	if limit == 0 {
		limit = MaxPageSize
	}
	if limit < 0 || limit > MaxPageSize {
		return Page{}, fmt.Errorf("list %s: page size %d outside 1..%d", opts.Prefix, limit, MaxPageSize)
	}
	if vs := s.viewFor(ctx, opts.Prefix); vs != nil {
		return vs.list(s, opts, limit)
	}
	return s.List(ctx, opts)
}
