// Package access_test proves cluster access end to end: a token from the
// real `aws eks get-token` (AWS CLI) or the Go SDK's presigner, presented
// by the real kubectl to a real kube-apiserver whose authentication and
// authorization webhooks are the guest agent's, decided by the cluster's
// access entries (and its aws-auth ConfigMap) in saltbush.
package access_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tests/agentproc"
)

// agentBinary is the saltbush-agent built for this test binary.
var agentBinary string

// Each test starts a world of its own (accesstest.Start: a saltbush, a
// kube-apiserver and its controllers, an agent) and shares nothing with
// the others: every test calls t.Parallel, and -parallel bounds how many
// run at once. Most of a test's time is spent waiting on those processes
// and on caches' TTLs, not computing.

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	bin, remove, err := agentproc.BuildTemp(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	agentBinary = bin
	return m.Run()
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// clusterName is a cluster name for the test, unique per run.
func clusterName(t *testing.T) string {
	n := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(n) > 80 {
		n = n[:80]
	}
	return fmt.Sprintf("%s-%04x", n, rand.IntN(1<<16))
}
