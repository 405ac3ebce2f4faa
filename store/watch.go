package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EventType says what a watch event means.
type EventType int

const (
	// EventPut means Key was created or changed to Value.
	EventPut EventType = iota + 1
	// EventDelete means Key was removed.
	EventDelete
	// EventSnapshot means the consumer must replace everything it knows under the
	// prefix with Snapshot. Sent first when watching from revision 0, and
	// again whenever the watch fell behind a compaction and had to re-list.
	EventSnapshot
)

// Event is one change seen by Watch.
type Event struct {
	Type EventType
	// Key is relative to the root prefix (Put and Delete).
	Key   string
	Value []byte
	// Revision is the mod revision of the change, or the revision the
	// snapshot was read at.
	Revision int64
	// Snapshot is the full state under the prefix (Snapshot events).
	Snapshot []KV
}

// Watch streams changes under prefix after revision fromRev; with fromRev 0
// it starts with a snapshot of the current state. The watch survives what
// etcd's own watch does not hide: a lost leader or member (the stream is
// reopened from the last revision seen, so nothing is skipped or repeated)
// and compaction (the prefix is re-listed and sent as a snapshot, then the
// watch continues after it). The channel closes when ctx ends.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan Event {
	out := make(chan Event, 64)
	go s.watch(ctx, prefix, fromRev, out)
	return out
}

func (s *Store) watch(ctx context.Context, prefix string, fromRev int64, out chan<- Event) {
	defer close(out)
	send := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	relist := func() (int64, bool) {
		for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			snap, rev, err := s.snapshot(ctx, prefix)
			if err == nil {
				return rev + 1, send(Event{Type: EventSnapshot, Revision: rev, Snapshot: snap})
			}
			if !sleep(ctx, jitter(backoff)) {
				return 0, false
			}
		}
	}

	next := fromRev + 1
	if fromRev == 0 {
		var ok bool
		if next, ok = relist(); !ok {
			return
		}
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if s.client.Ctx().Err() != nil {
			// The client was closed: no reconnect can succeed.
			return
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.client.Watch(wctx, s.Key(prefix), clientv3.WithPrefix(), clientv3.WithRev(next),
			clientv3.WithProgressNotify())
		compacted := false
		for resp := range wch {
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				compacted = true
				break
			}
			if resp.Err() != nil {
				break
			}
			backoff = 50 * time.Millisecond
			for _, ev := range resp.Events {
				e := Event{Key: s.rel(ev.Kv.Key), Value: ev.Kv.Value, Revision: ev.Kv.ModRevision}
				if ev.Type == mvccpb.DELETE {
					e.Type, e.Value = EventDelete, nil
				} else {
					e.Type = EventPut
				}
				if !send(e) {
					cancel()
					return
				}
				next = ev.Kv.ModRevision + 1
			}
			if resp.IsProgressNotify() && resp.Header.Revision+1 > next {
				next = resp.Header.Revision + 1
			}
		}
		cancel()
		if compacted {
			var ok bool
			if next, ok = relist(); !ok {
				return
			}
			continue
		}
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// snapshot reads everything under prefix at one revision.
func (s *Store) snapshot(ctx context.Context, prefix string) ([]KV, int64, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, s.Key(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, mapErr(err, prefix)
	}
	s.observe(resp.Header.Revision)
	kvs := make([]KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rel := s.rel(kv.Key)
		kvs = append(kvs, KV{Key: rel, Name: rel[len(prefix):], Value: kv.Value, ModRev: kv.ModRevision})
	}
	return kvs, resp.Header.Revision, nil
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter spreads retries; nothing depends on it being unpredictable
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
