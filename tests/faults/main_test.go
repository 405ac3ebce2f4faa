package faults

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/saltbush/saltbush/tests/saltbushbin"
)

// The tests that run the real `saltbush serve` as a child process, kill
// it and then check what its data directory holds (the *KillMidWrite
// tests, TestKillLoopKeepsInvariants, TestServeStopAndRestartKeepsData)
// share nothing and assert nothing about timing: they call t.Parallel, so
// they run after the others, -parallel at a time. The others stay serial:
// they assert on leases, fences and sessions kept within bounds, which two
// such tests in one process (one Go scheduler, the race detector's
// overhead) on a loaded machine broke.
//
// TestMain gives the tests that run the real `saltbush serve` one binary,
// built on first use and removed when the tests end: each of those tests
// building its own paid a link of the whole server every time.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	serveBinary.dir = dir
	return m.Run()
}

// serveBinary is the saltbush binary of this test binary: TestMain's
// directory, and the build done once by the first test that needs it.
// Like nodetest's environment, it is the package's only global state:
// TestMain cannot hand tests anything else.
var serveBinary struct {
	dir   string
	once  sync.Once
	path  string
	built error
}

// buildSaltbush returns the real binary, building it on the first call.
func buildSaltbush(t *testing.T) string {
	t.Helper()
	serveBinary.once.Do(func() {
		if bin := os.Getenv(saltbushbin.Env); bin != "" {
			serveBinary.path = bin
			return
		}
		serveBinary.path, serveBinary.built = saltbushbin.Build(serveBinary.dir)
	})
	if serveBinary.built != nil {
		t.Fatal(serveBinary.built)
	}
	return serveBinary.path
}
