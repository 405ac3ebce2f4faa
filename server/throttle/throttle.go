// Package throttle limits each account's request rate with a token bucket
// (golang.org/x/time/rate), checked before a request does any etcd work, so
// one tenant's burst cannot starve the others or the store.
package throttle

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter holds one token bucket per account. It is safe for concurrent use.
type Limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
	// sweepAt is the bucket count at which idle buckets are dropped, so
	// memory follows the number of active accounts, not every account ever
	// seen.
	sweepAt int
}

type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

// New returns a limiter allowing perSecond requests per account with bursts
// of burst. perSecond <= 0 disables throttling.
func New(perSecond float64, burst int) *Limiter {
	if burst < 1 {
		burst = 1
	}
	return &Limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}, sweepAt: 1024}
}

// Allow takes one token from account's bucket; false means throttle.
func (l *Limiter) Allow(account string) bool {
	return l.AllowAt(account, time.Now())
}

// AllowAt is Allow at a given time (tests drive the clock).
func (l *Limiter) AllowAt(account string, now time.Time) bool {
	if l == nil || l.rate <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[account]
	if !ok {
		if len(l.buckets) >= l.sweepAt {
			l.sweep(now)
		}
		b = &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[account] = b
	}
	b.last = now
	return b.lim.AllowN(now, 1)
}

// sweep drops buckets idle long enough to have refilled: forgetting them
// changes no decision.
func (l *Limiter) sweep(now time.Time) {
	refill := time.Duration(float64(l.burst) / float64(l.rate) * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > refill {
			delete(l.buckets, k)
		}
	}
	l.sweepAt = max(1024, 2*len(l.buckets))
}

// Len is the number of buckets held (for tests and metrics).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
