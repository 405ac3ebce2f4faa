package review

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/store"
)

// View answers what reviews ask of etcd (the cluster record of an agent's
// cluster, the access entry of a principal) from memory, per replica, for
// the clusters whose agents are asking. It follows the key store's mirror
// (iam.Cache): a review costs no etcd round trip, and a change (an entry
// deleted or edited, a policy disassociated, the cluster DELETING, a
// member removed) takes effect on every replica as soon as etcd's watch
// delivers it.
//
// A cluster incarnation's view is started by the first review that etcd
// answered for it (so the record is known to exist, with that uid), and
// watches two things: the cluster record's key and the incarnation's
// access entries (clusters/{uid}/access/). Add-ons, updates and delivery
// sessions, which change far more often, are not watched. A view nobody
// asked for during the idle period is dropped.
//
// Until a view has loaded its first snapshot, or when it does not hold
// what is asked (no view for the cluster yet, the record gone or not
// decodable), the review reads etcd as before: the view never answers
// from state that may be behind what etcd has for a cluster it has not
// got. A missing entry is answered from a loaded view: it has seen every
// write under the prefix up to its revision, as a serializable read of the
// replica's etcd member would have.
type View struct {
	store *store.Store
	idle  time.Duration
	log   *slog.Logger
	// starts asks Run for a cluster's view; full means Run is busy or
	// not running, and the review that asked simply reads etcd.
	starts chan viewStart

	reads *prometheus.CounterVec
	// The four series of reads, resolved once: a review must not pay a
	// label lookup.
	clusterFromView, clusterFromEtcd, entryFromView, entryFromEtcd prometheus.Counter
	held                                                           prometheus.Gauge

	mu sync.RWMutex
	// clusters is written by Run only; reviews read it.
	clusters map[string]*clusterView
}

// DefaultViewIdle is how long a cluster's view is kept with no review
// asking about the cluster.
const DefaultViewIdle = 10 * time.Minute

type viewStart struct{ uid, account, name string }

// NewView returns a view over st; Run keeps it current. Its metrics are
// registered on reg.
func NewView(st *store.Store, idle time.Duration, reg prometheus.Registerer, log *slog.Logger) (*View, error) {
	if idle <= 0 {
		idle = DefaultViewIdle
	}
	v := &View{
		store: st, idle: idle, log: log,
		starts:   make(chan viewStart, 64),
		clusters: map[string]*clusterView{},
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_review_view_reads_total",
			Help: "What token and access reviews read, by record (cluster, entry) and source (view: the watch-fed memory view; etcd: a read, because the view did not hold it yet).",
		}, []string{"record", "source"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "saltbush_review_views",
			Help: "Clusters whose record and access entries this replica keeps in memory for reviews.",
		}),
	}
	v.clusterFromView, v.clusterFromEtcd = v.reads.WithLabelValues("cluster", "view"), v.reads.WithLabelValues("cluster", "etcd")
	v.entryFromView, v.entryFromEtcd = v.reads.WithLabelValues("entry", "view"), v.reads.WithLabelValues("entry", "etcd")
	if reg != nil {
		for _, c := range []prometheus.Collector{v.reads, v.held} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("review view metrics: %w", err)
			}
		}
	}
	return v, nil
}

// clusterView mirrors one cluster incarnation. Its state is written only
// by its run goroutine (and stopped by the reaper in Run).
type clusterView struct {
	uid, account, name string
	cancel             context.CancelFunc
	// used is when a review last asked (unix nanoseconds).
	used atomic.Int64

	mu sync.RWMutex
	// stopped: the watches are gone; nothing here may be trusted.
	stopped      bool
	recordReady  bool
	entriesReady bool
	// record is nil when the key holds no record of this incarnation
	// (deleted, replaced, or not decodable).
	record  *storagev1.ClusterRecord
	entries map[string]viewEntry
}

type viewEntry struct {
	b   access.Binding
	err error
}

// Run starts and drops cluster views until ctx ends, then stops them all
// and waits for their goroutines.
func (v *View) Run(ctx context.Context) {
	var wg sync.WaitGroup
	tick := time.NewTicker(v.idle / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			v.mu.Lock()
			for uid, c := range v.clusters {
				c.stop()
				delete(v.clusters, uid)
			}
			v.mu.Unlock()
			v.held.Set(0)
			wg.Wait()
			return
		case s := <-v.starts:
			v.mu.RLock()
			_, ok := v.clusters[s.uid]
			v.mu.RUnlock()
			if ok {
				continue
			}
			cctx, cancel := context.WithCancel(ctx)
			c := &clusterView{uid: s.uid, account: s.account, name: s.name, cancel: cancel, entries: map[string]viewEntry{}}
			c.used.Store(time.Now().UnixNano())
			v.mu.Lock()
			v.clusters[s.uid] = c
			n := len(v.clusters)
			v.mu.Unlock()
			v.held.Set(float64(n))
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.run(cctx, v.store, v.log)
			}()
		case now := <-tick.C:
			v.reap(now)
		}
	}
}

// reap drops the views that were idle for the idle period or whose watches
// ended.
func (v *View) reap(now time.Time) {
	v.mu.Lock()
	for uid, c := range v.clusters {
		c.mu.RLock()
		stopped := c.stopped
		c.mu.RUnlock()
		if stopped || now.Sub(time.Unix(0, c.used.Load())) > v.idle {
			c.stop()
			delete(v.clusters, uid)
		}
	}
	n := len(v.clusters)
	v.mu.Unlock()
	v.held.Set(float64(n))
}

// stop marks the view untrustworthy before its watches end, so no review
// reads state that has stopped following etcd.
func (c *clusterView) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
}

// run applies the two watches until ctx ends (or the etcd client closes).
func (c *clusterView) run(ctx context.Context, st *store.Store, log *slog.Logger) {
	key := store.ClusterKey(c.account, c.name)
	prefix := store.AccessEntriesPrefix(c.uid)
	records := st.Watch(ctx, key, 0)
	entries := st.Watch(ctx, prefix, 0)
	defer func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
	}()
	for {
		select {
		case ev, ok := <-records:
			if !ok {
				return
			}
			c.applyRecord(key, ev, log)
		case ev, ok := <-entries:
			if !ok {
				return
			}
			c.applyEntry(ev, log)
		}
	}
}

// applyRecord applies a change of the cluster key. The watch is on a
// prefix, so a cluster whose name extends this one's is ignored.
func (c *clusterView) applyRecord(key string, ev store.Event, log *slog.Logger) {
	var value []byte
	present := false
	switch ev.Type {
	case store.EventSnapshot:
		for _, kv := range ev.Snapshot {
			if kv.Key == key {
				value, present = kv.Value, true
			}
		}
	case store.EventPut:
		if ev.Key != key {
			return
		}
		value, present = ev.Value, true
	case store.EventDelete:
		if ev.Key != key {
			return
		}
	}
	var rec *storagev1.ClusterRecord
	if present {
		rec = &storagev1.ClusterRecord{}
		if err := store.Decode(value, rec); err != nil {
			log.Warn("review view: cluster record not decodable; reviews read etcd", "cluster", c.name, "uid", c.uid, "error", err)
			rec = nil
		} else if rec.GetUid() != c.uid {
			rec = nil
		}
	}
	c.mu.Lock()
	c.record, c.recordReady = rec, true
	c.mu.Unlock()
	if ev.Type != store.EventSnapshot {
		log.Debug("review view: cluster record changed", "cluster", c.name, "uid", c.uid, "revision", ev.Revision,
			"status", rec.GetStatus().String(), "members", len(rec.GetMembers()))
	}
}

func decodeEntry(value []byte, key string) viewEntry {
	b, err := access.DecodeBinding(value)
	if err != nil {
		return viewEntry{err: fmt.Errorf("access entry %s: %w", key, err)}
	}
	return viewEntry{b: b}
}

func (c *clusterView) applyEntry(ev store.Event, log *slog.Logger) {
	switch ev.Type {
	case store.EventSnapshot:
		m := make(map[string]viewEntry, len(ev.Snapshot))
		for _, kv := range ev.Snapshot {
			m[kv.Key] = decodeEntry(kv.Value, kv.Key)
		}
		c.mu.Lock()
		c.entries, c.entriesReady = m, true
		c.mu.Unlock()
		return
	case store.EventPut:
		e := decodeEntry(ev.Value, ev.Key)
		c.mu.Lock()
		c.entries[ev.Key] = e
		c.mu.Unlock()
	case store.EventDelete:
		c.mu.Lock()
		delete(c.entries, ev.Key)
		c.mu.Unlock()
	}
	log.Debug("review view: access entry changed", "cluster", c.name, "uid", c.uid, "key", ev.Key, "revision", ev.Revision)
}

// get returns the view of a cluster incarnation, marking it used.
func (v *View) get(uid string) *clusterView {
	v.mu.RLock()
	c := v.clusters[uid]
	v.mu.RUnlock()
	if c != nil {
		c.used.Store(time.Now().UnixNano())
	}
	return c
}

// cluster returns the record of incarnation uid, which agents name as
// account/name, when a loaded view holds it.
func (v *View) cluster(uid, account, name string) (*storagev1.ClusterRecord, bool) {
	if v == nil {
		return nil, false
	}
	c := v.get(uid)
	if c == nil || c.account != account || c.name != name {
		v.clusterFromEtcd.Inc()
		return nil, false
	}
	c.mu.RLock()
	rec, ok := c.record, c.recordReady && !c.stopped && c.record != nil
	c.mu.RUnlock()
	if !ok {
		v.clusterFromEtcd.Inc()
		return nil, false
	}
	v.clusterFromView.Inc()
	return rec, true
}

// binding returns the binding of p on incarnation uid; held is false when
// no loaded view has the incarnation's entries (read etcd).
func (v *View) binding(uid string, p access.Principal) (b access.Binding, found, held bool, err error) {
	if v == nil {
		return access.Binding{}, false, false, nil
	}
	c := v.get(uid)
	if c == nil {
		v.entryFromEtcd.Inc()
		return access.Binding{}, false, false, nil
	}
	key := store.AccessEntryKey(uid, p.Canonical())
	c.mu.RLock()
	e, found := c.entries[key]
	held = c.entriesReady && !c.stopped
	c.mu.RUnlock()
	if !held {
		v.entryFromEtcd.Inc()
		return access.Binding{}, false, false, nil
	}
	v.entryFromView.Inc()
	if e.err != nil {
		return access.Binding{}, false, true, fmt.Errorf("access entry of %s on cluster %s: %w", p.Canonical(), uid, e.err)
	}
	return e.b, found, true, nil
}

// want asks Run for a view of a cluster incarnation etcd has just shown
// to exist at account/name.
func (v *View) want(uid, account, name string) {
	if v == nil {
		return
	}
	v.mu.RLock()
	_, ok := v.clusters[uid]
	v.mu.RUnlock()
	if ok {
		return
	}
	select {
	case v.starts <- viewStart{uid: uid, account: account, name: name}:
	default:
	}
}
