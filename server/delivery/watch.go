package delivery

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// snapshot is one consistent read of what a cluster's streams act on, all
// at one etcd revision.
type snapshot struct {
	revision int64
	// cluster is nil when the incarnation is gone (purged or recreated).
	cluster    *storagev1.ClusterRecord
	clusterRev int64
	// executor is nil when none is assigned.
	executor    *storagev1.ExecutorRecord
	executorRev int64
	// sessions holds the live sessions' instances and each key's mod
	// revision (a stream checks its own session again when it moved).
	sessions map[string]int64
	// sessionsCreated holds each live session key's create revision: a
	// key created after the executor record was written is a session
	// that lapsed and came back (assign). A newer stream taking a
	// session over writes the key in place and keeps its creation.
	sessionsCreated map[string]int64
	desired         *deliveryv1.DesiredSet
	// members indexes cluster's member instances (nil: scan the record).
	members map[string]bool
	// lastReport is when the latest accepted report of any add-on was
	// made (zero: none).
	lastReport time.Time
}

// concerns reports whether the stream of instance may act otherwise on
// sn than on prev, the snapshot published before it. A stream reads only
// the cluster record (serving, members), the executor record (role,
// epoch, drain), the desired set and its own session of a snapshot, so a
// snapshot that changed other instances' sessions alone (a connect storm
// of a large cluster writes one per member, then their Acks) wakes only
// the streams whose sessions changed, not every stream of the cluster.
// The desired set is compared by its digest, all a stream compares of it.
func (sn *snapshot) concerns(prev *snapshot, instance string) bool {
	if prev == nil || sn.clusterRev != prev.clusterRev || (sn.cluster == nil) != (prev.cluster == nil) ||
		sn.executorRev != prev.executorRev || sn.desired.GetDigest() != prev.desired.GetDigest() {
		return true
	}
	rev, ok := sn.sessions[instance]
	prevRev, prevOK := prev.sessions[instance]
	return ok != prevOK || rev != prevRev || sn.sessionsCreated[instance] != prev.sessionsCreated[instance]
}

// executorOrNil is the executor of a snapshot that may be nil.
func (sn *snapshot) executorOrNil() *storagev1.ExecutorRecord {
	if sn == nil {
		return nil
	}
	return sn.executor
}

// member reports whether instance is a member of the cluster.
func (sn *snapshot) member(instance string) bool {
	if sn.members != nil {
		return sn.members[instance]
	}
	return sn.cluster != nil && slices.ContainsFunc(sn.cluster.GetMembers(), func(m *storagev1.ClusterMember) bool {
		return m.GetInstanceId() == instance
	})
}

// serving reports whether the cluster may have an executor at all.
func (sn *snapshot) serving() bool {
	if sn.cluster == nil {
		return false
	}
	switch sn.cluster.GetStatus() {
	case storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, storagev1.ClusterStatus_CLUSTER_STATUS_FAILED:
		return false
	}
	return true
}

// clusterWatch is the one etcd watch of a cluster incarnation on this
// replica, shared by the cluster's streams here. Every change under the
// cluster's keys (or of its record) triggers one consistent re-read; the
// streams are told, coalesced: each takes the latest snapshot when it gets
// to it.
//
// One goroutine, run, owns the etcd watches and the reads (trigger asks
// it for one); what it read reaches the streams under mu (publish).
type clusterWatch struct {
	s                  *Service
	uid, account, name string
	cancel             context.CancelFunc
	done               chan struct{}

	trigger chan struct{}

	// run's own, from here on.
	//
	// last is run's latest snapshot: a cluster record that did not
	// change is not read again, add-ons whose incarnation and generation
	// are unchanged are not rendered again.
	last *snapshot
	// children and record are the etcd watches of the cluster's keys and
	// of its record (nil: not started yet, or broken); stopWatches ends
	// them (nil: none started).
	children, record clientv3.WatchChan
	stopWatches      context.CancelFunc

	// Shared with the streams, under mu.
	mu sync.Mutex
	// subs are the streams' channels, each with its stream's instance.
	subs  map[chan struct{}]string
	state *snapshot
	err   error
	// next closes when state next changes (publish), for readers waiting
	// for a snapshot at least as new as a revision (snapshotAtLeast);
	// made when first needed, as a context's Done channel is.
	next chan struct{}
}

// poke asks for a re-read (coalesced).
func (w *clusterWatch) poke() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// subscribe returns the watch of c's incarnation (starting it if this is
// the replica's first stream of it) and a channel that is signalled at
// once and then whenever a snapshot changes what concerns the stream of
// instance; unsubscribe when the stream ends.
func (s *Service) subscribe(c *storagev1.ClusterRecord, instance string) (*clusterWatch, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.watches[c.GetUid()]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		w = &clusterWatch{s: s, uid: c.GetUid(), account: c.GetAccountId(), name: c.GetName(), cancel: cancel,
			done: make(chan struct{}), subs: map[chan struct{}]string{}, trigger: make(chan struct{}, 1)}
		s.watches[c.GetUid()] = w
		go w.run(ctx)
	}
	// Signalled at once: the stream acts on the latest snapshot if it
	// already holds its session; later snapshots signal it only when
	// they change what concerns it.
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	w.mu.Lock()
	w.subs[ch] = instance
	w.mu.Unlock()
	// A new stream's session was just written: read again, so its first
	// assignment comes from a view that includes it.
	w.poke()
	return w, ch
}

func (s *Service) unsubscribe(w *clusterWatch, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.mu.Lock()
	delete(w.subs, ch)
	last := len(w.subs) == 0
	w.mu.Unlock()
	if last && s.watches[w.uid] == w {
		delete(s.watches, w.uid)
		w.cancel()
		for _, g := range []*prometheus.GaugeVec{s.epochs, s.sessions, s.desired, s.lastReport, s.appliedVersion, s.inSync} {
			g.DeleteLabelValues(w.uid)
		}
		delete(s.executorGauges, w.uid)
	}
}

// current returns the latest snapshot (nil until the first read) and the
// last read error.
func (w *clusterWatch) current() (*snapshot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.err
}

// publish records a read: its snapshot sn, or the error that kept it from
// reading (the last snapshot stays). The streams sn concerns are
// signalled (every stream on an error; coalesced: each takes the latest
// when it gets to it), and readers waiting for a newer snapshot wake.
func (w *clusterWatch) publish(sn *snapshot, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.state
	if err != nil {
		w.err = err
	} else {
		w.state, w.err = sn, nil
		close(w.nextLocked())
		w.next = nil
	}
	for ch, instance := range w.subs {
		if err == nil && !sn.concerns(prev, instance) {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// nextLocked is the channel the next publish of a snapshot closes.
func (w *clusterWatch) nextLocked() chan struct{} {
	if w.next == nil {
		w.next = make(chan struct{})
	}
	return w.next
}

// snapshotAtLeast returns the latest snapshot once it is at revision rev
// or later, waiting for the watch to bring it; nil if ctx ends first (its
// deadline bounds the wait).
func (w *clusterWatch) snapshotAtLeast(ctx context.Context, rev int64) *snapshot {
	for {
		w.mu.Lock()
		sn, next := w.state, w.nextLocked()
		w.mu.Unlock()
		if sn != nil && sn.revision >= rev {
			return sn
		}
		select {
		case <-next:
		case <-ctx.Done():
			return nil
		}
	}
}

// run follows the cluster's keys until ctx ends: every event triggers a
// re-read (coalesced), an assignment attempt when one is due, and a
// signal to the streams. The watches start after the first read, from
// the revision after it, so no change between the two is missed; a
// broken or compacted watch is started again after the next read.
func (w *clusterWatch) run(ctx context.Context) {
	defer close(w.done)
	defer w.stopEtcdWatches()
	w.poke()
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-w.children:
			w.watched(resp, ok)
		case resp, ok := <-w.record:
			w.watched(resp, ok)
		case <-w.trigger:
			w.reread(ctx)
		}
	}
}

// watched handles an etcd watch event: an event newer than the latest
// snapshot asks for a re-read; a broken watch (etcd unreachable,
// compacted, no leader) is stopped, to be started again from the next
// read. Events the latest snapshot already holds (it was read at a later
// revision) need none: in a connect storm the watch delivers a thousand
// session writes one after another while a re-read made after the first
// of them has them all.
func (w *clusterWatch) watched(resp clientv3.WatchResponse, ok bool) {
	if !ok || resp.Err() != nil {
		w.stopEtcdWatches()
		w.poke()
		return
	}
	for _, ev := range resp.Events {
		if w.last == nil || ev.Kv.ModRevision > w.last.revision {
			w.poke()
			return
		}
	}
}

// startEtcdWatches watches the cluster's keys and its record from
// revision from on.
func (w *clusterWatch) startEtcdWatches(ctx context.Context, from int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w.stopWatches = cancel
	w.children = w.s.client.Watch(wctx, w.s.store.Key(store.ClusterChildrenPrefix(w.uid)), clientv3.WithPrefix(), clientv3.WithRev(from))
	w.record = w.s.client.Watch(wctx, w.s.store.Key(store.ClusterKey(w.account, w.name)), clientv3.WithRev(from))
}

func (w *clusterWatch) stopEtcdWatches() {
	if w.stopWatches != nil {
		w.stopWatches()
	}
	w.children, w.record, w.stopWatches = nil, nil, nil
}

// reread takes a snapshot, starts the etcd watches after the first one,
// assigns an executor when one is due, and publishes the snapshot.
func (w *clusterWatch) reread(ctx context.Context) {
	sn, err := w.s.read(ctx, w.uid, w.account, w.name, w.last)
	if err == nil && w.children == nil {
		w.startEtcdWatches(ctx, sn.revision+1)
	}
	if err == nil && sn.serving() {
		if assigned, aerr := w.s.assign(ctx, sn); aerr != nil {
			w.s.log.WarnContext(ctx, "executor assignment", "cluster_uid", w.uid, "err", aerr)
		} else if assigned {
			// The watch brings the new executor record; read again then.
			return
		}
	}
	if err == nil {
		w.last = sn
		w.s.observe(w, sn)
	}
	w.publish(sn, err)
	if err != nil && ctx.Err() == nil {
		// etcd unreachable: try again shortly rather than wait for an
		// event that a broken watch may not bring.
		time.AfterFunc(200*time.Millisecond, w.poke)
	}
}

// read takes one consistent snapshot of a cluster incarnation: its
// record, executor, sessions, add-ons and pod identity associations, in
// one etcd transaction.
func (s *Service) read(ctx context.Context, uid, account, name string, prev *snapshot) (*snapshot, error) {
	sn, _, err := s.readRecords(ctx, uid, account, name, prev, false)
	return sn, err
}

// records are the session and add-on records of a snapshot's
// transaction, for the status report.
type records struct {
	sessions, addons []*mvccpb.KeyValue
}

// readRecords is read, also returning the session and add-on records
// (with the sessions' values) when withRecords: in the same transaction,
// so that nothing is read at an older revision, which a compaction could
// have removed by then.
func (s *Service) readRecords(ctx context.Context, uid, account, name string, prev *snapshot, withRecords bool) (*snapshot, *records, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	clusterKey := s.store.Key(store.ClusterKey(account, name))
	// Keys only: etcd answers from its index, without reading values (a
	// 1,000-member cluster's connect storm re-reads them all on every
	// connect); that carries the revisions, not the lease.
	sessions := clientv3.OpGet(s.store.Key(store.SessionsPrefix(uid)), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if withRecords {
		sessions = clientv3.OpGet(s.store.Key(store.SessionsPrefix(uid)), clientv3.WithPrefix())
	}
	rest := []clientv3.Op{
		clientv3.OpGet(s.store.Key(store.ExecutorKey(uid))),
		sessions,
		clientv3.OpGet(s.store.Key(store.AddonsPrefix(uid)), clientv3.WithPrefix()),
		clientv3.OpGet(s.store.Key(store.PodIdentityAssociationsPrefix(uid)), clientv3.WithPrefix()),
	}
	// The cluster record (large with many members) is read and decoded
	// only when it changed since the previous snapshot: most events under
	// a cluster are sessions, acknowledgements and reports.
	var prevRev int64
	if prev != nil && prev.cluster != nil {
		prevRev = prev.clusterRev
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(clusterKey), "=", prevRev)).
		Then(append([]clientv3.Op{clientv3.OpGet(clusterKey, clientv3.WithKeysOnly())}, rest...)...).
		Else(append([]clientv3.Op{clientv3.OpGet(clusterKey)}, rest...)...).
		Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("read cluster %s: %w", uid, err)
	}
	sn := &snapshot{revision: resp.Header.Revision, sessions: map[string]int64{}, sessionsCreated: map[string]int64{}}
	switch kvs := resp.Responses[0].GetResponseRange().GetKvs(); {
	case len(kvs) == 1 && resp.Succeeded && prevRev != 0:
		sn.cluster, sn.clusterRev, sn.members = prev.cluster, prev.clusterRev, prev.members
	case len(kvs) == 1 && !resp.Succeeded:
		c := &storagev1.ClusterRecord{}
		if err := store.Decode(kvs[0].Value, c); err != nil {
			return nil, nil, fmt.Errorf("cluster %s/%s: %w", account, name, err)
		}
		if c.GetUid() == uid {
			sn.cluster, sn.clusterRev = c, kvs[0].ModRevision
			// Indexed once here: every stream of the cluster asks.
			sn.members = make(map[string]bool, len(c.GetMembers()))
			for _, m := range c.GetMembers() {
				sn.members[m.GetInstanceId()] = true
			}
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		e := &storagev1.ExecutorRecord{}
		if err := store.Decode(kvs[0].Value, e); err != nil {
			return nil, nil, fmt.Errorf("executor of cluster %s: %w", uid, err)
		}
		sn.executor, sn.executorRev = e, kvs[0].ModRevision
	}
	prefix := s.store.Key(store.SessionsPrefix(uid))
	for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
		instance := string(kv.Key[len(prefix):])
		sn.sessions[instance], sn.sessionsCreated[instance] = kv.ModRevision, kv.CreateRevision
	}
	if sn.cluster != nil {
		var previous *deliveryv1.DesiredSet
		var previousCluster *storagev1.ClusterRecord
		if prev != nil {
			previous, previousCluster = prev.desired, prev.cluster
		}
		// The catalogue is read through the read view (published
		// add-on versions); it must be no older than the add-on records
		// of this snapshot.
		s.store.Observe(sn.revision)
		if sn.desired, sn.lastReport, err = s.desiredSet(ctx, sn.cluster, resp.Responses[3].GetResponseRange().GetKvs(),
			resp.Responses[4].GetResponseRange().GetKvs(), sn.revision, previous, previousCluster); err != nil {
			return nil, nil, err
		}
	}
	if !withRecords {
		return sn, nil, nil
	}
	return sn, &records{sessions: resp.Responses[2].GetResponseRange().GetKvs(), addons: resp.Responses[3].GetResponseRange().GetKvs()}, nil
}
