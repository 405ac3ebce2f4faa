package servertest

import (
	"sync"
	"time"
)

// Clock is a server clock (server.Config's Cluster.Now) that tests move
// forward instead of sleeping: the real time plus an offset.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the real time plus every Advance so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
