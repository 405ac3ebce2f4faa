package store

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// defaultLeaseReuseWindow is how long one granted lease is handed to every
// key of the same TTL. Granting a lease per key would double the raft writes
// of an idempotent create (kube-apiserver reuses leases for events the same
// way, --lease-reuse-duration-seconds).
const defaultLeaseReuseWindow = time.Minute

// leasePool hands out shared leases: a key that must live at least ttl gets
// a lease of ttl + window granted at most window ago.
type leasePool struct {
	client *clientv3.Client
	now    func() time.Time
	window time.Duration

	// lock guards leases: a one-slot semaphore rather than a mutex, so a
	// writer waiting behind another's Grant (etcd slow or unreachable)
	// gives up with its own request's context instead of queueing past
	// its deadline.
	lock   chan struct{}
	leases map[time.Duration]pooledLease
}

type pooledLease struct {
	id      clientv3.LeaseID
	granted time.Time
}

func newLeasePool(client *clientv3.Client, window time.Duration) *leasePool {
	switch {
	case window == 0:
		window = defaultLeaseReuseWindow
	case window < 0:
		window = 0
	}
	return &leasePool{client: client, now: time.Now, window: window, lock: make(chan struct{}, 1), leases: map[time.Duration]pooledLease{}}
}

// get returns a lease under which a key lives at least ttl.
func (p *leasePool) get(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-p.lock }()
	now := p.now()
	if l, ok := p.leases[ttl]; ok && now.Sub(l.granted) < p.window {
		return l.id, nil
	}
	// Granted while holding the lock: concurrent writers wait for one grant
	// instead of each granting their own.
	seconds := int64((ttl + p.window + time.Second - 1) / time.Second)
	resp, err := p.client.Grant(ctx, seconds)
	if err != nil {
		return 0, err
	}
	p.leases[ttl] = pooledLease{id: resp.ID, granted: now}
	return resp.ID, nil
}

// reset forgets every pooled lease.
func (p *leasePool) reset() {
	p.lock <- struct{}{}
	defer func() { <-p.lock }()
	clear(p.leases)
}
