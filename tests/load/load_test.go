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
		{name: "one process"},
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
		"-rate", "0", "-throttle-rate", "0", "-prefill-addons", "1", "-prefill-entries", "1", "-report-every", "1s", "-compact", "2s",
		"-dir", dir, "-csv", csvPath, "-png", pngPath,
	}, extra...), &stderr)
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
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	r := results[0]
	if r.all.Count == 0 {
		t.Error("no SDK call succeeded")
	}
	if r.connected != 12 {
		t.Errorf("%d agents connected, want 12", r.connected)
	}
	for _, s := range r.ops {
		if s.Op == opReport && s.Count == 0 {
			t.Error("no agent report was answered")
		}
		for _, e := range s.Errors {
			if !e.Expected {
				t.Errorf("%s: %d × %s, which the clients' model did not predict", s.Op, e.N, e.Kind)
			}
		}
	}
	if last := r.samples[len(r.samples)-1]; last.RSS == 0 || last.Goroutines == 0 || last.HeapLive == 0 {
		t.Errorf("the last sample read no memory or goroutines of saltbush: RSS %d, live heap %d, goroutines %d", last.RSS, last.HeapLive, last.Goroutines)
	}
	if o.apart && meanCPU(r.samples, func(s sample) float64 { return s.EtcdCPU }) == 0 {
		t.Error("-apart: the etcd members' process used no CPU, as the samples read it")
	}
	if len(r.samples) < 3 {
		t.Errorf("%d samples, want at least 3 (one a second for 3s, and the baseline)", len(r.samples))
	}
	for _, p := range []string{csvPath, pngPath} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, size %d", p, err, sizeOf(st))
		}
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}
