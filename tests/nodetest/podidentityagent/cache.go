package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

const (
	// minCredentialTTL: credentials with less left are neither served
	// from the cache nor stored, as the real agent's minimum (15 s).
	minCredentialTTL = 15 * time.Second
	// retryAfter is how long credentials kept after a failed renewal are
	// served before the next attempt (the real agent: a minute).
	retryAfter = time.Minute
	// fetchTimeout bounds one fetch, whoever waits for it.
	fetchTimeout = 20 * time.Second
)

// credentialCache keeps the credentials of each service account token, as
// the real agent does, so that a pod's SDK asking again (and every
// container of a pod sharing a token) costs no call to EKS Auth.
//
// An entry is served until its renewal time, at half of the credentials'
// remaining lifetime when they were fetched but at most the retention
// (--max-credential-retention-before-renewal, 3 h by default): EKS's 6 h
// credentials are renewed after 3 h as by the real agent, and shorter ones
// well before they expire, so a pod never receives credentials about to
// lapse. The renewal is made by the request that finds the entry due (the
// real agent renews in the background; the outcome is the same):
//
//   - success replaces the entry;
//   - an irrecoverable error (InvalidToken, ExpiredToken,
//     ResourceNotFound, AccessDenied: the token or its association is gone)
//     removes it and is answered;
//   - any other error (throttling, a server error, the network) keeps the
//     old credentials while they have more than minCredentialTTL left,
//     serving them and trying again after retryAfter.
//
// The cache holds at most maxSize tokens (--max-cache-size); past that,
// expired entries go first, then the least recently used. Concurrent
// requests for one token share one fetch. A retention or size of 0
// disables caching, as on the real agent.
type credentialCache struct {
	fetch     func(ctx context.Context, token string) (Credentials, error)
	retention time.Duration
	maxSize   int
	now       func() time.Time

	mu       sync.Mutex
	entries  map[string]*cacheEntry
	inflight map[string]*flight
	stats    cacheStats
}

type cacheEntry struct {
	creds    Credentials
	renewAt  time.Time
	lastUsed time.Time
}

type flight struct {
	done  chan struct{}
	creds Credentials
	err   error
}

// cacheStats count what the cache did, for /metrics.
type cacheStats struct {
	Hits, Misses, Renewals, KeptAfterError, Evictions uint64
}

func newCredentialCache(fetch func(context.Context, string) (Credentials, error), retention time.Duration, maxSize int) *credentialCache {
	return &credentialCache{
		fetch: fetch, retention: retention, maxSize: maxSize, now: time.Now,
		entries: map[string]*cacheEntry{}, inflight: map[string]*flight{},
	}
}

func (c *credentialCache) enabled() bool { return c.retention > 0 && c.maxSize > 0 }

// renewAt is when credentials fetched at now and expiring at exp are due
// for renewal: half their remaining lifetime, at most retention.
func renewAt(now, exp time.Time, retention time.Duration) time.Time {
	wait := exp.Sub(now) / 2
	if retention > 0 && retention < wait {
		wait = retention
	}
	return now.Add(wait)
}

// usable reports whether credentials may still be handed out at now.
func usable(creds Credentials, now time.Time) bool {
	return creds.Expiration.Sub(now) > minCredentialTTL
}

// get returns the credentials for token, from the cache or from EKS Auth.
func (c *credentialCache) get(ctx context.Context, token string) (Credentials, error) {
	if !c.enabled() {
		fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		creds, err := c.fetch(fctx, token)
		if err == nil && !usable(creds, c.now()) {
			return Credentials{}, expiredError(creds, c.now())
		}
		return creds, err
	}
	c.mu.Lock()
	now := c.now()
	if e, ok := c.entries[token]; ok {
		switch {
		case !usable(e.creds, now):
			delete(c.entries, token)
			c.stats.Evictions++
		case now.Before(e.renewAt):
			e.lastUsed = now
			c.stats.Hits++
			c.mu.Unlock()
			return e.creds, nil
		}
	}
	f, ok := c.inflight[token]
	if !ok {
		f = &flight{done: make(chan struct{})}
		c.inflight[token] = f
		if _, renewing := c.entries[token]; renewing {
			c.stats.Renewals++
		} else {
			c.stats.Misses++
		}
		// The fetch outlives the request that started it: others may
		// wait for it.
		go c.run(context.WithoutCancel(ctx), token, f)
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.creds, f.err
	case <-ctx.Done():
		return Credentials{}, ctx.Err()
	}
}

func (c *credentialCache) run(ctx context.Context, token string, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	creds, err := c.fetch(ctx, token)
	c.mu.Lock()
	f.creds, f.err = c.settle(token, creds, err, c.now())
	delete(c.inflight, token)
	c.mu.Unlock()
	close(f.done)
}

// settle decides, with mu held, what a fetch's outcome means for the
// entry of token and for the requests waiting.
func (c *credentialCache) settle(token string, creds Credentials, err error, now time.Time) (Credentials, error) {
	prev := c.entries[token]
	switch {
	case err == nil && usable(creds, now):
		c.store(token, &cacheEntry{creds: creds, renewAt: renewAt(now, creds.Expiration, c.retention), lastUsed: now}, now)
		return creds, nil
	case err == nil:
		return Credentials{}, expiredError(creds, now)
	case irrecoverable(err):
		if prev != nil {
			delete(c.entries, token)
			c.stats.Evictions++
		}
		return Credentials{}, err
	case prev != nil && usable(prev.creds, now):
		next := now.Add(retryAfter)
		if last := prev.creds.Expiration.Add(-minCredentialTTL); last.Before(next) {
			next = last
		}
		prev.renewAt, prev.lastUsed = next, now
		c.stats.KeptAfterError++
		logger.Warn("renewal failed, keeping the cached credentials", "error", err,
			"expiration", prev.creds.Expiration, "retryAt", next)
		return prev.creds, nil
	}
	return Credentials{}, err
}

// store puts e in the cache, first making room: expired entries, then the
// least recently used one.
func (c *credentialCache) store(token string, e *cacheEntry, now time.Time) {
	if _, ok := c.entries[token]; !ok && len(c.entries) >= c.maxSize {
		for t, old := range c.entries {
			if !usable(old.creds, now) {
				delete(c.entries, t)
				c.stats.Evictions++
			}
		}
		for len(c.entries) >= c.maxSize {
			var lru string
			var at time.Time
			for t, old := range c.entries {
				if lru == "" || old.lastUsed.Before(at) {
					lru, at = t, old.lastUsed
				}
			}
			delete(c.entries, lru)
			c.stats.Evictions++
		}
	}
	c.entries[token] = e
}

func (c *credentialCache) snapshot() (cacheStats, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats, len(c.entries)
}

func expiredError(creds Credentials, now time.Time) error {
	return fmt.Errorf("fetched credentials are expired or will expire within the next %0.2f seconds",
		creds.Expiration.Sub(now).Seconds())
}
