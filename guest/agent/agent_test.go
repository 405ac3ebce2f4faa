package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/config"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/hostlink"
	"github.com/saltbush/saltbush/guest/state"
)

// bare is an agent with no stream and no cluster: enough for how it takes
// desired sets.
func bare(t *testing.T) *Agent {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir, cfg.ClusterUID, cfg.InstanceID = t.TempDir(), "uid", "i-a"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := state.Load(cfg.StateDir, cfg.ClusterUID, cfg.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{cfg: cfg, log: log, grant: grant.New(), link: hostlink.New(hostlink.Config{Log: log}),
		st: st, addons: map[string]*addonState{}, metrics: newMetrics()}
}

func set(version int64, digest string, addons ...*deliveryv1.DesiredAddon) *deliveryv1.DesiredSet {
	return &deliveryv1.DesiredSet{Version: version, Digest: digest, Nonce: "n", Addons: addons}
}

// TestOlderSetRefused: a desired set older than the one held is refused
// (a lagging replica must not roll the cluster back); a newer one is
// taken, persisted, and the Hello of the next stream resumes from it.
func TestOlderSetRefused(t *testing.T) {
	a := bare(t)
	ctx := context.Background()
	a.received(ctx, set(10, "d10", &deliveryv1.DesiredAddon{Name: "coredns", Uid: "u", Generation: 2}))
	a.received(ctx, set(7, "d7"))
	if got := a.st.Desired.GetVersion(); got != 10 || len(a.addons) != 1 {
		t.Fatalf("after an older set: version %d, %d add-ons; want 10 and coredns kept", got, len(a.addons))
	}
	if h := a.hello(); h.GetDesiredVersion() != 10 || h.GetDesiredDigest() != "d10" {
		t.Fatalf("Hello resumes from %d/%s", h.GetDesiredVersion(), h.GetDesiredDigest())
	}
	st, err := state.Load(a.cfg.StateDir, "uid", "i-a")
	if err != nil || st.Desired.GetVersion() != 10 {
		t.Fatalf("persisted %v %v, want version 10", st.Desired, err)
	}
	a.received(ctx, set(12, "d12"))
	if a.st.Desired.GetVersion() != 12 || len(a.addons) != 0 {
		t.Fatalf("a newer set was not taken: version %d, %d add-ons", a.st.Desired.GetVersion(), len(a.addons))
	}
}

// TestAdoptKeepsUnchangedAddons: a new set that leaves an add-on as it
// was keeps its state (nothing to apply again); a changed one starts over.
func TestAdoptKeepsUnchangedAddons(t *testing.T) {
	a := bare(t)
	ctx := context.Background()
	same := &deliveryv1.DesiredAddon{Name: "a", Uid: "u", Generation: 1, Manifest: []byte("x")}
	changed := &deliveryv1.DesiredAddon{Name: "b", Uid: "u", Generation: 1, Manifest: []byte("x")}
	a.received(ctx, set(1, "d1", same, changed))
	a.addons["a"].needApply, a.addons["a"].applied = false, true
	a.received(ctx, set(2, "d2", same, &deliveryv1.DesiredAddon{Name: "b", Uid: "u", Generation: 2, Manifest: []byte("y")}))
	if s := a.addons["a"]; !s.applied || s.needApply {
		t.Errorf("an unchanged add-on must keep its state: %+v", s)
	}
	if s := a.addons["b"]; s.applied || !s.needApply || s.desired.GetGeneration() != 2 {
		t.Errorf("a changed add-on must be applied again: %+v", s)
	}
}

// TestStopIsLogged: the agent says when it begins to stop, why, which
// member it is and what it held, and when the stop is over, whether the
// grant ended and no write outlived it. The write held here is cut short by
// the grant's end, as a real one is when the stream closes.
func TestStopIsLogged(t *testing.T) {
	a := bare(t)
	var buf bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&buf, nil))
	a.cfg.ClusterName = "demo"
	a.grant.Connected()
	a.grant.Assign(&deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_EXECUTOR, Epoch: 3, ExecutorInstanceId: "i-a"})
	wctx, release, err := a.grant.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-wctx.Done(); release() }()

	began := a.logStopping(errors.New("terminated signal received"))
	a.grant.Disconnected(context.Canceled) // what the link does when its stream closes
	a.logStopped(began)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range [][]string{
		{"level=INFO", `msg="saltbush-agent stopping: closing the delivery stream, ending the grant"`,
			`reason="terminated signal received"`, "cluster=demo", "cluster_uid=uid", "instance=i-a",
			"role=ROLE_EXECUTOR", "epoch=3", "may_write=true"},
		{"level=INFO", `msg="saltbush-agent stopped"`, "took=", "grant_released=true", "writes_drained=true"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i+1, lines[i], w)
			}
		}
	}
}
