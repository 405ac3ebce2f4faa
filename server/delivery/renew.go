package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// monoClock reads the monotonic clock as nanoseconds since it was made,
// so instants fit an atomic int64 without the wall clock: a stepped
// system clock must not stretch or shrink a session's freshness or its
// retirement deadline.
type monoClock struct{ start time.Time }

func newMonoClock() monoClock { return monoClock{start: time.Now()} }

// now is the current instant.
func (c monoClock) now() int64 { return int64(time.Since(c.start)) }

// since is the time elapsed from instant t.
func (c monoClock) since(t int64) time.Duration { return time.Duration(c.now() - t) }

// at is instant t as a time.Time carrying a monotonic reading.
func (c monoClock) at(t int64) time.Time { return c.start.Add(time.Duration(t)) }

// replicaLease is the etcd lease the sessions of this replica's open
// streams live on. One lease per replica, renewed by one goroutine every
// heartbeat interval, keeps any number of sessions alive at the cost of
// one keepalive: renewing a lease per session asked etcd for a
// linearizable leadership check per session per interval, which at
// thousands of agents cost more than everything else the agents do.
//
// A session whose stream ends must not live on with the replica: it is
// moved to a lease of its own that is never renewed (retire).
type replicaLease struct {
	id clientv3.LeaseID
	// renewed is when the last successful renewal (or the grant) was sent
	// (monoClock instant): the lease lasts at least a TTL from then.
	renewed atomic.Int64
	// lost closes when etcd no longer has the lease: every session on it
	// is gone.
	lost chan struct{}
	// users counts the open streams with sessions on it (under the
	// renewer's lock).
	users int
}

// errLeaseTooSlow: etcd answers this replica too slowly for a session
// lease to be kept fresh.
var errLeaseTooSlow = errors.New("etcd too slow to keep a session lease fresh")

// renewer grants and renews the replica's lease. It renews while streams
// use the lease; when the last one ends it stops, and the lease (with any
// session whose retirement has not gone through yet) runs out its TTL.
type renewer struct {
	client   *clientv3.Client
	clock    monoClock
	ttl      time.Duration
	interval time.Duration
	// bound is how long one grant or renewal may take: the freshness
	// window (Config.freshWindow). A renewal that answers later than the
	// interval but within the window still keeps every session fresh;
	// cut off at the interval, a loaded etcd (or a loaded replica) that
	// answers in a little more than an interval would never renew at
	// all, the lease would run out and every stream on this replica
	// would end, to come back and load it further.
	bound time.Duration
	log   *slog.Logger

	// granting serializes grants, so that streams connecting while etcd
	// is slow wait for one grant rather than each making its own; it is
	// never held with mu, so release and renewal never wait for etcd.
	granting sync.Mutex
	mu       sync.Mutex
	current  *replicaLease
}

func newRenewer(client *clientv3.Client, clock monoClock, cfg Config, log *slog.Logger) *renewer {
	return &renewer{client: client, clock: clock, ttl: cfg.SessionTTL, interval: cfg.HeartbeatInterval, bound: cfg.freshWindow(), log: log}
}

// take counts a user of the current lease, if there is one.
func (r *renewer) take() *replicaLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.current; l != nil {
		l.users++
		return l
	}
	return nil
}

// acquire returns the lease a new session goes on, granting one when
// there is none (or the last was lost); release it when the stream ends.
func (r *renewer) acquire(ctx context.Context) (*replicaLease, error) {
	if l := r.take(); l != nil {
		return l, nil
	}
	r.granting.Lock()
	defer r.granting.Unlock()
	if l := r.take(); l != nil {
		return l, nil // granted while this one waited
	}
	// The lease runs from when etcd grants it, so freshness counts from
	// before the request.
	sent := r.clock.now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := r.client.Grant(ctx, int64(r.ttl/time.Second))
	if err != nil {
		return nil, err
	}
	if took := r.clock.since(sent); took >= r.bound {
		// Granted too late to be fresh: a session on it could promise
		// its agent nothing. Nobody uses it; it runs out by itself.
		return nil, fmt.Errorf("lease grant took %s, the renewal bound is %s: %w", took.Round(time.Millisecond), r.bound, errLeaseTooSlow)
	}
	l := &replicaLease{id: g.ID, lost: make(chan struct{}), users: 1}
	l.renewed.Store(sent)
	r.mu.Lock()
	r.current = l
	r.mu.Unlock()
	go r.renew(l)
	return l, nil
}

// release says a stream with a session on l ended.
func (r *renewer) release(l *replicaLease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.users--
}

// renew keeps l alive every heartbeat interval (etcd's own keepalive
// waits a third of the TTL, too long for the freshness a stream promises
// its agent) until no stream uses it, etcd has lost it, or the client is
// closed.
func (r *renewer) renew(l *replicaLease) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for range t.C {
		r.mu.Lock()
		if l.users == 0 || r.client.Ctx().Err() != nil {
			if r.current == l {
				r.current = nil
			}
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		sent := r.clock.now()
		ctx, cancel := context.WithTimeout(r.client.Ctx(), r.bound)
		_, err := r.client.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case err == nil:
			l.renewed.Store(sent)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			r.log.Warn("the replica's session lease expired: its streams end", "lease", int64(l.id))
			r.mu.Lock()
			if r.current == l {
				r.current = nil
			}
			r.mu.Unlock()
			close(l.lost)
			return
		default:
			r.log.Warn("session lease renewal", "lease", int64(l.id), "err", err)
		}
	}
}

// ownSession reads the stream's session record as stored: nil when the
// key holds another stream's session (a newer stream of the instance) or
// none. Ownership is the record's identity — instance, boot, replica and
// connect time, which no later write of the stream changes — not its
// value: a write whose outcome was unknown (applied, answer lost) leaves
// the stream unsure of the value, never of whose record it is.
func (s *Service) ownSession(ctx context.Context, ss *session) (*storagev1.AgentSessionRecord, *mvccpb.KeyValue, error) {
	resp, err := s.client.Get(ctx, s.store.Key(ss.key))
	if err != nil {
		return nil, nil, fmt.Errorf("session %s: %w", ss.key, err)
	}
	if len(resp.Kvs) != 1 {
		return nil, nil, nil
	}
	kv := resp.Kvs[0]
	rec := &storagev1.AgentSessionRecord{}
	if err := store.Decode(kv.Value, rec); err != nil {
		return nil, nil, fmt.Errorf("session %s: %w", ss.key, err)
	}
	if !ss.owns(rec) {
		return nil, nil, nil
	}
	return rec, kv, nil
}

// errNotOwnSession ends an update of a session key that holds another
// stream's session.
var errNotOwnSession = errors.New("the key holds another stream's session")

// owns reports whether rec, as stored at the session's key, is this
// stream's session (see ownSession).
func (ss *session) owns(rec *storagev1.AgentSessionRecord) bool {
	return rec.GetInstanceId() == ss.rec.GetInstanceId() && rec.GetBootId() == ss.rec.GetBootId() &&
		rec.GetReplica() == ss.rec.GetReplica() && proto.Equal(rec.GetConnectedAt(), ss.rec.GetConnectedAt())
}

// retire moves the session of an ended stream off the replica's lease
// onto one of its own that is never renewed, so it runs out exactly when
// it would have had its stream's replica stopped renewing at the end:
// the lease's last renewal before the end plus the TTL. A successor
// executor may be assigned only after that — the agent has stopped on
// its own by then (fence-after plus the margin after the last message it
// heard, which the stream sent only while that much of the lease was
// left). It retries until etcd answers; until then the session stays
// (later failover, never an earlier one). Nothing is moved when the key
// holds no session of this stream (a newer stream of the instance
// replaced it, the cluster was purged, the lease was lost) or it is on
// another lease already (an earlier attempt moved it, its answer lost).
func (s *Service) retire(ss *session) {
	deadline := s.clock.at(ss.lease.renewed.Load()).Add(s.cfg.SessionTTL)
	for backoff := 50 * time.Millisecond; s.client.Ctx().Err() == nil; backoff = min(2*backoff, s.cfg.HeartbeatInterval) {
		err := s.retireOnce(ss, deadline)
		if err == nil {
			return
		}
		// At shutdown the client closes under the attempt: the session
		// stays on the replica's lease, which is no longer renewed, and
		// runs out at the same deadline. Nothing to warn of.
		if !errors.Is(err, store.ErrConflict) && s.client.Ctx().Err() == nil {
			s.log.Warn("retire an ended stream's session", "session", ss.key, "err", err)
		}
		time.Sleep(backoff)
	}
}

func (s *Service) retireOnce(ss *session, deadline time.Time) error {
	ctx, cancel := context.WithTimeout(s.client.Ctx(), 5*time.Second)
	defer cancel()
	rec, kv, err := s.ownSession(ctx, ss)
	if err != nil || rec == nil || clientv3.LeaseID(kv.Lease) != ss.lease.id {
		return err
	}
	txn := store.NewTxn().RequireModRevision(ss.key, kv.ModRevision)
	// Rounded up to whole seconds (a lease's unit): never earlier.
	ttl := (time.Until(deadline) + time.Second - 1) / time.Second
	if ttl <= 0 {
		// Past the deadline already: the agent has stopped.
		txn.Remove(ss.key)
	} else {
		g, err := s.client.Grant(ctx, int64(ttl))
		if err != nil {
			return err
		}
		txn.PutWithLease(ss.key, rec, g.ID)
	}
	_, err = s.store.Commit(ctx, txn)
	return err
}
