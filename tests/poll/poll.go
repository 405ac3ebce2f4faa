// Package poll waits, in tests, for what another process makes true
// where no event of its own says so (an agent's status API, an object in
// the apiserver, a record a replica writes): it asks again every tick
// until the condition holds or the deadline passes.
package poll

import (
	"testing"
	"time"
)

// Tick is how often Until asks.
const Tick = 100 * time.Millisecond

// Until calls cond every Tick until it holds, and fails tb naming what
// and cond's last reason why not once d has passed.
func Until(tb testing.TB, d time.Duration, what string, cond func() (ok bool, why string)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s: %s", what, d, why)
		}
		<-tick.C
	}
}
