package addon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// The deadline sweeper moves CREATING, UPDATING and DELETING generations
// whose deadline passed to *_FAILED with ClusterUnreachable. It runs on
// exactly one replica at a time: replicas campaign in an etcd election, and
// every write of the leader carries a compare on its election key, so a
// leader that lost its session (paused, partitioned) cannot write after a
// successor took over (the fencing token is the key's revision).

// electionPrefix is the election's key prefix, relative to the store root.
const electionPrefix = "elections/addon-deadlines"

// sessionTTL is the election session's lease TTL in seconds: how long a
// dead leader blocks a successor.
const sessionTTL = 10

// Sweeper is the elected deadline sweeper of one replica.
type Sweeper struct {
	svc  *Service
	name string
	// also are the other deadline sweeps the leader runs on every tick,
	// under the same fence (version.Service.SweepRollbackDeadlines): one
	// election for every deadline index.
	also   []func(ctx context.Context, fence func(*store.Txn)) error
	leader atomic.Bool
}

// NewSweeper returns the sweeper of the replica called name (it is the
// election value, for operators); also are further deadline sweeps its
// leader runs beside the add-on deadlines.
func (s *Service) NewSweeper(name string, also ...func(ctx context.Context, fence func(*store.Txn)) error) *Sweeper {
	return &Sweeper{svc: s, name: name, also: also}
}

// Leader reports whether this replica currently holds the election.
func (w *Sweeper) Leader() bool { return w.leader.Load() }

// Run campaigns and, while leader, sweeps every SweepInterval. It returns
// when ctx ends; a lost session is followed by a new campaign.
func (w *Sweeper) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.lead(ctx); err != nil && ctx.Err() == nil {
			w.svc.log.WarnContext(ctx, "add-on deadline sweeper lost or could not take the lead", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
		}
	}
}

func (w *Sweeper) lead(ctx context.Context) error {
	session, err := concurrency.NewSession(w.svc.store.Client(), concurrency.WithTTL(sessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	// A lease Close could not revoke expires after sessionTTL, ending the
	// leadership all the same.
	defer func() { _ = session.Close() }()
	election := concurrency.NewElection(session, w.svc.store.Key(electionPrefix))
	if err := election.Campaign(ctx, w.name); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	w.leader.Store(true)
	defer w.leader.Store(false)
	// The leader key is never re-proclaimed, so its mod revision is its
	// create revision: a successor's key is a different key, and this one is
	// deleted when the session ends. Comparing it is the fence.
	leaderKey := strings.TrimPrefix(election.Key(), w.svc.store.Prefix())
	leaderRev := election.Rev()
	fence := func(txn *store.Txn) { txn.RequireModRevision(leaderKey, leaderRev) }
	w.svc.log.InfoContext(ctx, "add-on deadline sweeper leading", "replica", w.name, "fence_revision", leaderRev)

	tick := time.NewTicker(w.svc.cfg.SweepInterval)
	defer tick.Stop()
	for {
		if _, err := w.svc.sweep(ctx, fence); err != nil && ctx.Err() == nil {
			w.svc.log.WarnContext(ctx, "add-on deadline sweep failed", "err", err)
		}
		for _, sweep := range w.also {
			if err := sweep(ctx, fence); err != nil && ctx.Err() == nil {
				w.svc.log.WarnContext(ctx, "deadline sweep failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			resignCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = election.Resign(resignCtx)
			cancel()
			return nil
		case <-session.Done():
			return errors.New("election session expired")
		case <-tick.C:
		}
	}
}

// hintDeadline adds to txn the deadline index entry of rec's generation,
// so the sweeper finds it without reading every add-on.
func hintDeadline(txn *store.Txn, rec *storagev1.AddonRecord) {
	if rec.GetDeadline() == nil {
		return
	}
	txn.Put(store.AddonDeadlineKey(rec.GetDeadline().AsTime(), rec.GetClusterUid(), rec.GetName()),
		&storagev1.AddonDeadlineHint{ClusterUid: rec.GetClusterUid(), AddonName: rec.GetName(), Generation: rec.GetGeneration()})
}

// sweep reads the deadline index up to now and expires every in-flight
// add-on generation whose deadline passed, each in its own transaction
// guarded by the record's revision and by fence; due hints that no longer
// describe an in-flight generation are deleted (under the same fence). It
// returns how many generations it expired. A record that changed meanwhile
// (a report arrived) is judged again on the next sweep.
func (s *Service) sweep(ctx context.Context, fence Fence) (int, error) {
	now := s.cfg.Now()
	expired := 0
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{
			Prefix: store.AddonDeadlinesPrefix, Scope: "addon-sweeper", Token: token,
		})
		if err != nil {
			return expired, fmt.Errorf("list add-on deadlines: %w", err)
		}
		for _, kv := range page.Items {
			due, err := store.AddonDeadlineOf(kv.Name)
			if err == nil && due.After(now) {
				return expired, nil // key order is deadline order: the rest are later
			}
			ok := false
			if err == nil {
				hint := &storagev1.AddonDeadlineHint{}
				if err = store.Decode(kv.Value, hint); err == nil {
					ok, err = s.expireOne(ctx, kv, hint, now, fence)
				}
			}
			if err != nil {
				if errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
					return expired, err
				}
				// One bad hint or record must not stop every later
				// deadline: log it and go on.
				s.sweepErrors.Inc()
				s.log.WarnContext(ctx, "add-on deadline hint skipped", "key", kv.Key, "err", err)
				continue
			}
			if ok {
				expired++
			}
		}
		if page.NextToken == "" {
			return expired, nil
		}
		token = page.NextToken
	}
}

// expireOne judges one due hint: it expires the add-on generation it
// names if that is still in flight past its deadline, and drops the hint in
// the same transaction either way.
func (s *Service) expireOne(ctx context.Context, hint store.KV, h *storagev1.AddonDeadlineHint, now time.Time, fence Fence) (bool, error) {
	key := store.AddonKey(h.GetClusterUid(), h.GetAddonName())
	rec := &storagev1.AddonRecord{}
	rev, err := s.store.Get(ctx, key, rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("expire %s: %w", key, err)
	}
	txn := store.NewTxn().Delete(hint.Key, hint.ModRev)
	live := err == nil && inFlight(rec.GetStatus()) && rec.GetDeadline() != nil && !now.Before(rec.GetDeadline().AsTime())
	var next *storagev1.AddonRecord
	if live {
		next = proto.Clone(rec).(*storagev1.AddonRecord)
		tr := expire(next, now)
		txn.Update(key, next, rev)
		if err := s.settleUpdate(ctx, txn, next, tr.update); err != nil {
			return false, err
		}
	}
	if fence != nil {
		fence(txn)
	}
	if _, err := s.store.Commit(ctx, txn); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		return false, fmt.Errorf("expire %s: %w", key, err)
	}
	if !live {
		return false, nil
	}
	s.expired.Inc()
	s.log.InfoContext(ctx, "add-on deadline passed", "cluster", rec.GetClusterName(), "addon", rec.GetName(),
		"generation", rec.GetGeneration(), "status", StatusName(next.GetStatus()))
	return true, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
