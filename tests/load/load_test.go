package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tests/saltbushbin"
)

// TestMain lets -apart runs of this test binary start it again as the
// etcd members' process (apart.go, roleEnv).
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestLoadSmoke runs the load program for a few seconds with small numbers
// (one replica, a few clusters, agents and clients, closed loop) and checks
// that it measured something, that nothing failed that the clients' model
// did not predict, and that it wrote its CSV and PNG. It checks no timing:
// the figures are docs/performance.md's, from full runs.
//
// Its apart form runs the etcd members and the replica as processes of
// their own (-apart: this test binary again, and saltbush serve).
func TestLoadSmoke(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		// Two rates: the sweep, each step on the same world.
		{name: "one process", args: []string{"-rate", "200,0"}},
		{name: "apart", args: []string{"-apart", "-saltbush", saltbushbin.Path(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) { loadSmoke(t, tc.args) })
	}
}

func loadSmoke(t *testing.T, extra []string) {
	dir := t.TempDir()
	csvPath, pngPath := filepath.Join(dir, "load.csv"), filepath.Join(dir, "load.png")
	var stderr bytes.Buffer
	o, err := parseFlags(append([]string{
		"-replicas", "1", "-duration", "3s", "-sample", "1s", "-clusters", "6", "-agents", "12", "-clients", "3", "-accounts", "2",
		"-throttle-rate", "0", "-prefill-addons", "1", "-prefill-entries", "1", "-report-every", "1s", "-compact", "2s",
		"-dir", dir, "-csv", csvPath, "-png", pngPath,
	}, append([]string{"-rate", "0"}, extra...)...), &stderr)
	if err != nil {
		t.Fatalf("flags: %v\n%s", err, stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := runAll(ctx, o, &out, &out)
	if err == nil {
		err = writeOutputs(o, results, &out)
	}
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(o.rates) {
		t.Fatalf("%d results, want one per rate: %v", len(results), o.rates)
	}
	for i, r := range results {
		if r.rate != o.rates[i] {
			t.Errorf("result %d is of rate %g, want %g", i, r.rate, o.rates[i])
		}
		checkSmokeResult(t, o, r)
	}
	for _, p := range []string{csvPath, pngPath} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, size %d", p, err, sizeOf(st))
		}
	}
}

// checkSmokeResult checks one rate's result of a smoke run.
func checkSmokeResult(t *testing.T, o *options, r *result) {
	t.Helper()
	if r.all.Count == 0 || r.reads.Count == 0 || r.writes.Count == 0 {
		t.Errorf("%s: %d SDK calls succeeded, %d reads and %d writes; want some of each", r.label(), r.all.Count, r.reads.Count, r.writes.Count)
	}
	if r.connected != 12 {
		t.Errorf("%s: %d agents connected, want 12", r.label(), r.connected)
	}
	for _, s := range r.ops {
		if s.Op == opReport && s.Count == 0 {
			t.Errorf("%s: no agent report was answered", r.label())
		}
		for _, e := range s.Errors {
			if !e.Expected {
				t.Errorf("%s: %s: %d × %s, which the clients' model did not predict", r.label(), s.Op, e.N, e.Kind)
			}
		}
	}
	if len(r.samples) < 3 {
		t.Fatalf("%s: %d samples, want at least 3 (one a second for 3s, and the baseline)", r.label(), len(r.samples))
	}
	if last := r.samples[len(r.samples)-1]; last.RSS == 0 || last.Goroutines == 0 || last.HeapLive == 0 {
		t.Errorf("%s: the last sample read no memory or goroutines of saltbush: RSS %d, live heap %d, goroutines %d", r.label(), last.RSS, last.HeapLive, last.Goroutines)
	}
	if o.apart && meanCPU(r.samples, func(s sample) float64 { return s.EtcdCPU }) == 0 {
		t.Errorf("%s: -apart: the etcd members' process used no CPU, as the samples read it", r.label())
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}
