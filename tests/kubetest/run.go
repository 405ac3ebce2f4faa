package kubetest

import "testing"

// RunTests is Main without the exit: it returns the tests' status, so a
// TestMain that set something up first can tear it down before exiting.
func RunTests(m *testing.M, opts Options) int { return runMain(m, opts) }
