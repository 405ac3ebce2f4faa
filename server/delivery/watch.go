package delivery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
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
	// recent holds the session changes the watch applied since sessions
	// and sessionsCreated were read (or last folded): it overrides them
	// (a zero mod revision: deleted). nil: none.
	recent map[string]sessionRevs
	// live counts the live sessions when recent is set.
	live    int
	desired *deliveryv1.DesiredSet
	// members indexes cluster's member instances (nil: scan the record).
	members map[string]bool
	// lastReport is when the latest accepted report of any add-on was
	// made (zero: none).
	lastReport time.Time
	// recordRead is the revision the cluster record was last read at:
	// the watch applies session changes without reading it again, so the
	// record may be older than revision (its own watch brings a change).
	recordRead int64
}

// sessionRevs are a session key's mod and create revisions and, for a
// change the watch applied, the record it wrote and its lease (rec nil:
// not known).
type sessionRevs struct {
	mod, created int64
	rec          *storagev1.AgentSessionRecord
	lease        int64
}

// sessionWritten returns the record instance's session key holds at its
// mod revision, and its lease, when the watch event that wrote it is
// still in recent (ok false otherwise: ask etcd).
func (sn *snapshot) sessionWritten(instance string) (*storagev1.AgentSessionRecord, clientv3.LeaseID, bool) {
	r, ok := sn.recent[instance]
	if !ok || r.mod == 0 || r.rec == nil {
		return nil, 0, false
	}
	return r.rec, clientv3.LeaseID(r.lease), true
}

// session returns the mod and create revisions of instance's live session
// key.
func (sn *snapshot) session(instance string) (mod, created int64, ok bool) {
	if r, ok := sn.recent[instance]; ok {
		return r.mod, r.created, r.mod != 0
	}
	mod, ok = sn.sessions[instance]
	return mod, sn.sessionsCreated[instance], ok
}

// sessionCount is the number of live sessions.
func (sn *snapshot) sessionCount() int {
	if sn.recent == nil {
		return len(sn.sessions)
	}
	return sn.live
}

// eachSession calls f with every live session's instance.
func (sn *snapshot) eachSession(f func(instance string)) {
	for instance, r := range sn.recent {
		if r.mod != 0 {
			f(instance)
		}
	}
	for instance := range sn.sessions {
		if _, ok := sn.recent[instance]; !ok {
			f(instance)
		}
	}
}

// foldRecentAt is how many changes recent holds before they are folded
// into new maps: a change costs a copy of recent, a fold a copy of every
// session, so a connect storm of a 1000-member cluster copies some dozens
// of entries per connect rather than a thousand.
const foldRecentAt = 64

// withSessions is sn with the session changes of watch events applied
// (in order; a zero mod revision deletes), at revision rev, which is past
// every change; the rest of sn is kept.
func (sn *snapshot) withSessions(changes []sessionChange, rev int64) *snapshot {
	next := *sn
	next.revision = rev
	next.recent = make(map[string]sessionRevs, len(sn.recent)+len(changes))
	for instance, r := range sn.recent {
		next.recent[instance] = r
	}
	next.live = sn.sessionCount()
	for _, c := range changes {
		_, _, was := next.session(c.instance)
		switch {
		case was && c.revs.mod == 0:
			next.live--
		case !was && c.revs.mod != 0:
			next.live++
		}
		next.recent[c.instance] = c.revs
	}
	if len(next.recent) < foldRecentAt {
		return &next
	}
	next.sessions, next.sessionsCreated = make(map[string]int64, next.live), make(map[string]int64, next.live)
	sn.eachSessionInto(&next)
	next.recent, next.live = nil, 0
	return &next
}

// eachSessionInto fills next's (new, empty) session maps from next.recent
// over sn's maps.
func (sn *snapshot) eachSessionInto(next *snapshot) {
	for instance, r := range next.recent {
		if r.mod != 0 {
			next.sessions[instance], next.sessionsCreated[instance] = r.mod, r.created
		}
	}
	for instance, mod := range sn.sessions {
		if _, ok := next.recent[instance]; !ok {
			next.sessions[instance], next.sessionsCreated[instance] = mod, sn.sessionsCreated[instance]
		}
	}
}

// sessionChange is one watch event of a session key.
type sessionChange struct {
	instance string
	revs     sessionRevs
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
// replica, shared by the cluster's streams here. A change of a session
// key is applied to the latest snapshot as the watch reports it; any
// other change under the cluster's keys (or of its record) triggers one
// consistent re-read. The streams a new snapshot concerns are told,
// coalesced: each takes the latest snapshot when it gets to it. A session
// that comes or goes concerns only its own instance's stream (and the
// assignment run makes): in a connect storm of a 1000-member cluster,
// re-reading every session and waking every stream on every connect made
// connecting O(members²).
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
	// are unchanged are not rendered again, session changes are applied
	// to it.
	last *snapshot
	// stale: an event since last needs a re-read (one is asked for);
	// until it is made, session events are not applied either (last
	// would claim their revision for keys it has not read).
	stale bool
	// children and record are the etcd watches of the cluster's keys and
	// of its record (nil: not started yet, or broken); stopWatches ends
	// them (nil: none started).
	children, record clientv3.WatchChan
	stopWatches      context.CancelFunc
	// sessionsPrefix is the absolute etcd prefix of the cluster's
	// sessions.
	sessionsPrefix string

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
// the replica's first stream of it) and a channel that is signalled
// whenever a snapshot concerns instance's stream; unsubscribe when the
// stream ends. The channel starts signalled: the stream looks at the
// latest snapshot first, and the watch brings the one with its new
// session (the session's event concerns it).
func (s *Service) subscribe(c *storagev1.ClusterRecord, instance string) (*clusterWatch, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.watches[c.GetUid()]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		w = &clusterWatch{s: s, uid: c.GetUid(), account: c.GetAccountId(), name: c.GetName(), cancel: cancel,
			done: make(chan struct{}), subs: map[chan struct{}]string{}, trigger: make(chan struct{}, 1),
			sessionsPrefix: s.store.Key(store.SessionsPrefix(c.GetUid()))}
		s.watches[c.GetUid()] = w
		go w.run(ctx)
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	w.mu.Lock()
	w.subs[ch] = instance
	w.mu.Unlock()
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
// signalled (coalesced: each takes the latest when it gets to it) — all
// of them unless only sessions changed since the last snapshot — and
// readers waiting for a newer snapshot wake.
func (w *clusterWatch) publish(sn *snapshot, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = err
		w.signalLocked(nil, true)
		return
	}
	prev := w.state
	w.state, w.err = sn, nil
	close(w.nextLocked())
	w.next = nil
	if prev == nil || !sameButSessions(prev, sn) {
		w.signalLocked(nil, true)
		return
	}
	var changed map[string]bool
	sn.eachSession(func(instance string) {
		now, _, _ := sn.session(instance)
		if was, _, _ := prev.session(instance); was != now {
			changed = setAdd(changed, instance)
		}
	})
	prev.eachSession(func(instance string) {
		if _, _, ok := sn.session(instance); !ok {
			changed = setAdd(changed, instance)
		}
	})
	w.signalLocked(changed, false)
}

// publishSessions records sn, last's snapshot with the session changes of
// the instances changed applied: only their streams are signalled.
func (w *clusterWatch) publishSessions(sn *snapshot, changed map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state, w.err = sn, nil
	close(w.nextLocked())
	w.next = nil
	w.signalLocked(changed, false)
}

// signalLocked signals the streams of the instances in changed, or every
// stream.
func (w *clusterWatch) signalLocked(changed map[string]bool, all bool) {
	for ch, instance := range w.subs {
		if !all && !changed[instance] {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// sameButSessions reports whether b differs from a in its sessions (and
// revisions) at most: what every stream acts on — the cluster record,
// the executor, the desired content — is the same.
func sameButSessions(a, b *snapshot) bool {
	return a.cluster == b.cluster && a.clusterRev == b.clusterRev && a.executorRev == b.executorRev &&
		(a.executor == nil) == (b.executor == nil) && a.desired.GetDigest() == b.desired.GetDigest() &&
		(a.desired == nil) == (b.desired == nil)
}

func setAdd(set map[string]bool, k string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[k] = true
	return set
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
			w.childrenChanged(ctx, resp, ok)
		case resp, ok := <-w.record:
			w.recordChanged(resp, ok)
		case <-w.trigger:
			w.reread(ctx)
		}
	}
}

// recordChanged handles an event of the cluster record's watch: a change
// since the last read asks for a re-read; a broken watch (etcd
// unreachable, compacted, no leader) is stopped, to be started again from
// the next read.
func (w *clusterWatch) recordChanged(resp clientv3.WatchResponse, ok bool) {
	if !ok || resp.Err() != nil {
		w.stopEtcdWatches()
		w.needRead()
		return
	}
	for _, ev := range resp.Events {
		if w.last == nil || ev.Kv.ModRevision > w.last.recordRead {
			w.needRead()
			return
		}
	}
}

// childrenChanged handles an event of the watch of the cluster's keys:
// changes of session keys only are applied to the latest snapshot (with
// those of every response already waiting: a connect storm's sessions
// come in bursts); any other change asks for a re-read. Events the last
// snapshot holds already are skipped.
func (w *clusterWatch) childrenChanged(ctx context.Context, resp clientv3.WatchResponse, ok bool) {
	var (
		changes []sessionChange
		rev     int64
	)
	for taken := 1; ; taken++ {
		if !ok || resp.Err() != nil {
			w.stopEtcdWatches()
			w.needRead()
			return
		}
		for _, ev := range resp.Events {
			if w.stale || w.last == nil {
				w.needRead()
				return
			}
			if ev.Kv.ModRevision <= w.last.revision {
				continue // read already
			}
			key := string(ev.Kv.Key)
			if !strings.HasPrefix(key, w.sessionsPrefix) {
				w.needRead()
				return
			}
			c := sessionChange{instance: key[len(w.sessionsPrefix):]}
			if ev.Type == mvccpb.PUT {
				c.revs = sessionRevs{mod: ev.Kv.ModRevision, created: ev.Kv.CreateRevision, lease: ev.Kv.Lease}
				// The record, so that its stream can tell its own
				// writes from a newer stream's without asking etcd
				// (ownsSession); undecodable, it asks.
				rec := &storagev1.AgentSessionRecord{}
				if store.Decode(ev.Kv.Value, rec) == nil {
					c.revs.rec = rec
				}
			}
			changes, rev = append(changes, c), max(rev, ev.Kv.ModRevision)
		}
		// Take the responses already waiting, without blocking (a
		// bounded batch: the streams of these sessions are waiting).
		if taken < maxBatchedResponses {
			select {
			case resp, ok = <-w.children:
				continue
			default:
			}
		}
		break
	}
	if len(changes) == 0 {
		return
	}
	sn := w.last.withSessions(changes, rev)
	if sn.serving() {
		if assigned, err := w.s.assign(ctx, sn); err != nil {
			w.s.log.WarnContext(ctx, "executor assignment", "cluster_uid", w.uid, "err", err)
		} else if assigned {
			// The watch brings the new executor record; read again then
			// (which reads these sessions too).
			w.needRead()
			return
		}
	}
	w.last = sn
	w.s.observe(w, sn)
	changed := make(map[string]bool, len(changes))
	for _, c := range changes {
		changed[c.instance] = true
	}
	w.publishSessions(sn, changed)
}

// maxBatchedResponses bounds the watch responses applied as one snapshot.
const maxBatchedResponses = 256

// needRead asks for a re-read, and applies no session event until it is
// made.
func (w *clusterWatch) needRead() {
	w.stale = true
	w.poke()
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
			w.stale = true
			return
		}
	}
	if err == nil {
		w.last, w.stale = sn, false
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
	sn := &snapshot{revision: resp.Header.Revision, recordRead: resp.Header.Revision, sessions: map[string]int64{}, sessionsCreated: map[string]int64{}}
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
		if prev != nil {
			previous = prev.desired
		}
		if sn.desired, sn.lastReport, err = s.desiredSet(sn.cluster, resp.Responses[3].GetResponseRange().GetKvs(),
			resp.Responses[4].GetResponseRange().GetKvs(), sn.revision, previous); err != nil {
			return nil, nil, err
		}
	}
	if !withRecords {
		return sn, nil, nil
	}
	return sn, &records{sessions: resp.Responses[2].GetResponseRange().GetKvs(), addons: resp.Responses[3].GetResponseRange().GetKvs()}, nil
}
