// Package compat_test is the compatibility suite: saltbush binaries of
// earlier contract baselines, built from this repository's history
// (package compat), run against the current ones, with the real
// Kubernetes control plane of tests/kubetest and the AWS SDK. What it
// holds the releases to is docs/contracts.md, "Upgrades".
//
// `make test` runs the short form: the oldest baseline in the window.
// -compat.all (`make compat-all`) runs every baseline in the window, and
// the current binaries against themselves as the control.
package compat_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/release"
	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/compat"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/saltbushbin"
)

var all = flag.Bool("compat.all", false, "run every baseline in the window (and the current binaries against themselves), not only the oldest")

// suite is what TestMain prepares for every test.
var suite struct {
	repo compat.Repo
	// baselines are CHANGELOG.md's, newest first; window those the
	// current binaries must work with, newest first.
	baselines, window []compat.Baseline
	// current are the binaries of this tree, as make unit builds them
	// for every package: saltbush (saltbushbin) and the race-built
	// agent (agentproc.BuildTemp).
	current compat.Binaries
	// agentCommit is the commit the current agent says it was built
	// from (12 hex digits), which a current host records for its
	// sessions.
	agentCommit string
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var err error
	if suite.repo, err = compat.OpenRepo(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	if suite.baselines, err = compat.ReadChangelog(filepath.Join(suite.repo.Root, "CHANGELOG.md")); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	if suite.window, err = suite.repo.InWindow(ctx, suite.baselines); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	agent, remove, err := agentproc.BuildTemp(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	defer remove()
	saltbush, removeSaltbush, err := currentSaltbush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	defer removeSaltbush()
	suite.current = compat.Binaries{Saltbush: saltbush, Agent: agent}
	if suite.agentCommit, err = commitOf(ctx, agent); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		return 1
	}
	return kubetest.RunTests(m, kubetest.Options{})
}

// currentSaltbush is saltbushbin's binary (make unit's), else one built
// here.
func currentSaltbush() (string, func(), error) {
	if bin := os.Getenv(saltbushbin.Env); bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "compat-saltbush-")
	if err != nil {
		return "", nil, err
	}
	bin, err := saltbushbin.Build(dir)
	return bin, func() { _ = os.RemoveAll(dir) }, err
}

// old returns the baselines this run tests against, oldest first: the
// oldest of the window, or with -compat.all every one.
func old(t *testing.T) []compat.Binaries {
	t.Helper()
	pick := suite.window[len(suite.window)-1:]
	if *all {
		pick = suite.window
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out []compat.Binaries
	for i := len(pick) - 1; i >= 0; i-- {
		start := time.Now()
		bins, err := suite.repo.Build(ctx, pick[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: binaries in %s (%s)", pick[i], filepath.Dir(bins.Saltbush), time.Since(start).Round(time.Millisecond))
		out = append(out, bins)
	}
	return out
}

// TestChangelog: CHANGELOG.md's baselines are the repository's. Each
// section's commit holds the image it names; the newest is the image in
// the tree and the number release.ContractBaseline says. A baseline
// refreshed without its section (or the section without the constant)
// fails here.
func TestChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newest := suite.baselines[0]
	if newest.Number != release.ContractBaseline {
		t.Errorf("CHANGELOG.md's newest baseline is %d, release.ContractBaseline %d", newest.Number, release.ContractBaseline)
	}
	tree, err := os.ReadFile(filepath.Join(suite.repo.Root, "api/proto/baseline.binpb"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Hex(tree); got != newest.Image {
		t.Errorf("api/proto/baseline.binpb has SHA-256 %s; CHANGELOG.md's baseline %d names %s (a refreshed baseline needs its section)", got, newest.Number, newest.Image)
	}
	for _, b := range suite.baselines {
		got, err := suite.repo.ImageAt(ctx, b.Commit)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		if got != b.Image {
			t.Errorf("%s: the commit's image has SHA-256 %s, CHANGELOG.md says %s", b, got, b.Image)
		}
	}
}

// TestVersion: the current binaries say the commit they were built from
// and the contract baseline they start from.
func TestVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wantBaseline := fmt.Sprintf("contract baseline %d)", release.ContractBaseline)
	for _, bin := range []string{suite.current.Saltbush, suite.current.Agent} {
		out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		line := strings.TrimSpace(string(out))
		if !strings.HasSuffix(line, wantBaseline) {
			t.Errorf("%s version = %q, want it to end %q", filepath.Base(bin), line, wantBaseline)
		}
		// Built from this work tree: its HEAD, "+dirty" when changed.
		if !strings.Contains(line, "(commit "+suite.repo.Head[:12]) {
			t.Errorf("%s version = %q, want commit %s", filepath.Base(bin), line, suite.repo.Head[:12])
		}
	}
}

// commitOf is the commit a current binary's version command names.
func commitOf(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s version: %v: %s", bin, err, out)
	}
	_, rest, ok := strings.Cut(string(out), "(commit ")
	commit, _, _ := strings.Cut(rest, ",")
	commit = strings.TrimSuffix(commit, "+dirty")
	if !ok || len(commit) != 12 {
		return "", fmt.Errorf("%s version names no commit: %q", bin, out)
	}
	return commit, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
