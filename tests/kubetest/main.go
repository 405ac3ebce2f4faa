package kubetest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// MainStartTimeout bounds Main's start of the shared cluster. Generous: a
// cold start on two busy cores takes well under a minute.
const MainStartTimeout = 3 * time.Minute

// shared is the cluster Main started for this test binary. It is the
// package's only global state: tests of a package reach the one cluster of
// their binary through Shared, as TestMain cannot hand them anything else.
var shared struct {
	mu      sync.Mutex
	cluster *Cluster
}

// Main starts one cluster for the test binary, runs its tests, stops the
// cluster and exits with the tests' status. Call it from TestMain; tests
// get the cluster with Shared. If the cluster does not start, Main prints
// why and exits 1 without running the tests.
func Main(m *testing.M, opts Options) {
	os.Exit(runMain(m, opts))
}

// runMain is Main without the exit, so the deferred Stop runs.
func runMain(m *testing.M, opts Options) int {
	ctx, cancel := context.WithTimeout(context.Background(), MainStartTimeout)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Stop()
	shared.mu.Lock()
	shared.cluster = c
	shared.mu.Unlock()
	defer func() {
		shared.mu.Lock()
		shared.cluster = nil
		shared.mu.Unlock()
	}()
	return m.Run()
}

// Shared returns the cluster Main started for this test binary. It fails
// the test if there is none (TestMain does not call Main) or if one of the
// control-plane programs has exited (quoting its log), since every later
// wait of the test would only time out.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	shared.mu.Lock()
	c := shared.cluster
	shared.mu.Unlock()
	if c == nil {
		tb.Fatal("kubetest.Shared: no cluster: the package's TestMain must call kubetest.Main")
	}
	if err := c.processesAlive(); err != nil {
		tb.Fatalf("kubetest.Shared: %v", err)
	}
	return c
}
