package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tests/compat"
	"github.com/saltbush/saltbush/tests/saltbushbin"
)

// TestRollingUpgrade runs the load program with two replicas that start
// as the oldest release of the upgrade window (docs/contracts.md,
// "Upgrades"; built from the repository's history by tests/compat) and are
// upgraded one at a time to this commit's saltbush while the SDK clients
// and the agents keep calling, as an operator's rolling upgrade behind a
// load balancer goes.
//
// It checks that both replicas came back ready on the new binary; that
// every failed SDK call was either predicted by the clients' model or one
// the SDK's standard retryer retries (an application with the SDK's
// defaults would not have seen it); that calls succeeded after the roll;
// that every agent has its stream again; that no add-on was left in
// transition; and that the keyspace checker finds nothing. It checks no
// timing: how long each replica was down is logged, not judged.
func TestRollingUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, old := range releasesToRollFrom(ctx, t) {
		t.Run(fmt.Sprintf("from baseline %d", old.Baseline.Number), func(t *testing.T) { rollingUpgrade(ctx, t, old) })
	}
}

func rollingUpgrade(ctx context.Context, t *testing.T, old compat.Binaries) {
	newBin := saltbushbin.Path(t)

	dir := t.TempDir()
	var stderr bytes.Buffer
	// A fixed rate, well under what two replicas serve on a small
	// machine: the roll's processes start and stop beside the load, and
	// a replica that is starved says nothing about the upgrade. -roll-at
	// leaves the first seconds to the old binaries alone. -duration
	// leaves the roll time to finish, with load after it: the old
	// release takes its whole --shutdown-timeout (10s) to stop, its
	// gRPC graceful stop waiting on the agents' streams, so the roll
	// takes about 21s and ends near 24s; a start slowed by a loaded
	// machine eats into the 16s after it (and a roll that outlasts
	// -duration extends the load until it ends).
	o, err := parseFlags([]string{
		"-apart", "-replicas", "2", "-saltbush-from", old.Saltbush, "-saltbush", newBin,
		"-duration", "40s", "-roll-at", "3s", "-rate", "60", "-sample", "5s",
		"-clusters", "6", "-agents", "12", "-clients", "4", "-accounts", "2",
		"-throttle-rate", "0", "-prefill-addons", "2", "-prefill-entries", "1", "-report-every", "2s", "-compact", "5s",
		"-dir", dir,
	}, &stderr)
	if err != nil {
		t.Fatalf("flags: %v\n%s", err, stderr.String())
	}
	var out bytes.Buffer
	results, err := runAll(ctx, o, &out, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	r := results[0]
	checkRoll(t, o, r, old.Saltbush, newBin)
}

// compatAll is the compatibility suite's long form (`make compat-all`):
// roll from every release of the upgrade window, not only the oldest.
var compatAll = flag.Bool("compat.all", false, "roll from every release in the upgrade window, not only the oldest")

// releasesToRollFrom are the releases a binary built from HEAD must
// upgrade from, oldest first: the oldest of the upgrade window, or with
// -compat.all each, built once and kept (tests/compat).
func releasesToRollFrom(ctx context.Context, t *testing.T) []compat.Binaries {
	t.Helper()
	repo, err := compat.OpenRepo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, err := compat.ReadChangelog(filepath.Join(repo.Root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	window, err := repo.InWindow(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if !*compatAll {
		window = window[len(window)-1:]
	}
	var out []compat.Binaries
	for i := len(window) - 1; i >= 0; i-- {
		bins, err := repo.Build(ctx, window[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bins)
	}
	return out
}

// checkRoll checks a rolling run's result.
func checkRoll(t *testing.T, o *options, r *result, from, to string) {
	t.Helper()
	rl := r.roll
	if rl == nil {
		t.Fatal("the result has no rolling upgrade")
	}
	if len(rl.steps) != 2 {
		t.Errorf("%d replicas upgraded, want 2", len(rl.steps))
	}
	for _, st := range rl.steps {
		t.Logf("%s: down at %.1fs into the load, exited %.1fs after SIGTERM, ready again %.1fs after it",
			st.replica, st.at.Seconds(), st.stopped.Seconds(), st.down.Seconds())
		if !st.ready || st.from != from || st.to != to {
			t.Errorf("%s: ready %v, %s → %s; want ready, %s → %s", st.replica, st.ready, st.from, st.to, from, to)
		}
		if st.stopErr != "" {
			t.Errorf("%s did not stop cleanly on SIGTERM: %s", st.replica, st.stopErr)
		}
	}
	t.Logf("the roll took %.1fs (%.1fs to %.1fs of the load); %d SDK calls succeeded after it",
		(rl.ended - rl.began).Seconds(), rl.began.Seconds(), rl.ended.Seconds(), rl.okAfter)
	if rl.okAfter == 0 {
		t.Error("no SDK call succeeded after the roll")
	}

	sdkOps := map[string]bool{}
	for _, op := range opNames() {
		sdkOps[op] = true
	}
	for _, s := range r.ops {
		for _, e := range s.Errors {
			switch {
			case !sdkOps[s.Op] && e.Expected:
				t.Logf("%s: %d × %s (expected)", s.Op, e.N, e.Kind)
			case !sdkOps[s.Op]:
				// As in TestLoadSmoke: an agent's stream that ends outside
				// the roll, or a report refused for a stale epoch, says a
				// session or an executor was lost.
				t.Errorf("%s: %d × %s, which no replica's restart explains", s.Op, e.N, e.Kind)
			case e.Expected || e.Retryable:
				t.Logf("%s: %d × %s (expected %v, retryable %v) %s", s.Op, e.N, e.Kind, e.Expected, e.Retryable, e.Example)
			default:
				t.Errorf("%s: %d × %s, which neither the clients' model predicted nor the SDK's standard retryer retries: %s", s.Op, e.N, e.Kind, e.Example)
			}
		}
	}

	if r.agentsUp != o.agents {
		t.Errorf("%d of %d agents have a stream up at the end", r.agentsUp, o.agents)
	}
	a := r.after
	if a == nil {
		t.Fatal("the result has no checks after the load")
	}
	for _, s := range a.stuck {
		t.Errorf("add-on stuck in transition %s after the load: %s", settleTimeout, s)
	}
	t.Logf("keyspace: %s", a.keyspace)
	for _, v := range a.violations {
		t.Errorf("keyspace: %s", v)
	}
}

// TestRollFlags checks that the rolling upgrade's flags are refused where
// they cannot work, saying why.
func TestRollFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-saltbush-from", "/old/saltbush"}, "-saltbush-from needs -apart"},
		{[]string{"-apart", "-roll-at", "5s"}, "-roll-at needs -saltbush-from"},
		{[]string{"-apart", "-saltbush-from", "/old/saltbush", "-duration", "10s", "-roll-at", "10s"}, "must be within -duration"},
	} {
		var stderr bytes.Buffer
		_, err := parseFlags(tc.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-apart", "-saltbush-from", "/old/saltbush", "-duration", "10s", "-roll-at", "2s"}, io.Discard); err != nil {
		t.Errorf("a rolling run's flags: %v", err)
	}
}
