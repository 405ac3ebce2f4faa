package grant

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func executor(epoch int64) *deliveryv1.Assignment {
	return &deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_EXECUTOR, Epoch: epoch, ExecutorInstanceId: "i-a",
		Timing: &deliveryv1.Timing{FenceAfter: durationpb.New(8 * time.Second)}}
}

func newGrant() (*Grant, *fakeClock) {
	clk := &fakeClock{t: time.Now()}
	g := New()
	g.now = clk.now
	return g, clk
}

func TestWritableOnlyAsFreshExecutor(t *testing.T) {
	tests := []struct {
		name    string
		steps   func(g *Grant, clk *fakeClock)
		writing bool
	}{
		{"nothing heard", func(g *Grant, clk *fakeClock) {}, false},
		{"connected, no assignment", func(g *Grant, clk *fakeClock) { g.Connected() }, false},
		{"executor", func(g *Grant, clk *fakeClock) { g.Connected(); g.Assign(executor(3)) }, true},
		{"standby", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(&deliveryv1.Assignment{Role: deliveryv1.Role_ROLE_STANDBY, Epoch: 3})
		}, false},
		{"lapsed after fence-after", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			clk.advance(8 * time.Second)
		}, false},
		{"renewed by a heartbeat", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			clk.advance(7 * time.Second)
			g.Heard()
			clk.advance(7 * time.Second)
		}, true},
		{"fenced at its epoch", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			g.Fence(&deliveryv1.Fence{Epoch: 3})
		}, false},
		{"an older fence is ignored", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			g.Fence(&deliveryv1.Fence{Epoch: 2})
		}, true},
		{"stream ended", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			g.Disconnected(errors.New("cut"))
		}, false},
		{"a new stream needs a new assignment", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			g.Disconnected(errors.New("cut"))
			g.Connected()
		}, false},
		{"reassigned on the new stream", func(g *Grant, clk *fakeClock) {
			g.Connected()
			g.Assign(executor(3))
			g.Disconnected(errors.New("cut"))
			g.Connected()
			g.Assign(executor(3))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := newGrant()
			tt.steps(g, clk)
			_, release, err := g.Hold(context.Background())
			if got := err == nil; got != tt.writing {
				t.Fatalf("Hold: err %v, want writable %v", err, tt.writing)
			}
			if err == nil {
				release()
			} else if !errors.Is(err, ErrNoGrant) {
				t.Fatalf("refusal %v is not ErrNoGrant", err)
			}
			if st := g.Snapshot(); st.Writable != tt.writing {
				t.Fatalf("snapshot writable %v, want %v", st.Writable, tt.writing)
			}
		})
	}
}

func TestHoldDeadlineIsTheLapse(t *testing.T) {
	g, clk := newGrant()
	g.Connected()
	g.Assign(executor(1))
	clk.advance(3 * time.Second)
	ctx, release, err := g.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	dl, ok := ctx.Deadline()
	if !ok {
		t.Fatal("a held write has no deadline")
	}
	// The grant started when the assignment was heard; the write must end
	// fence-after after that, not after the Hold.
	if want := clk.now().Add(5 * time.Second); !dl.Equal(want) {
		t.Fatalf("deadline %v, want %v", dl, want)
	}
}

func TestFenceCancelsWritesAndDrains(t *testing.T) {
	g, _ := newGrant()
	g.Connected()
	g.Assign(executor(4))
	ctx, release, err := g.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	passCtx, stopPass, err := g.Context(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stopPass()
	if !g.Fence(&deliveryv1.Fence{Epoch: 4, Reason: "drained"}) {
		t.Fatal("a fence for the grant's epoch did not end it")
	}
	<-ctx.Done() // cancelled at once, not at its deadline
	<-passCtx.Done()
	if !Refused(ctx.Err()) {
		t.Fatalf("write context error %v", ctx.Err())
	}
	drained := make(chan error, 1)
	go func() { drained <- g.Drain(context.Background()) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a write still held the grant", err)
	case <-time.After(10 * time.Millisecond):
	}
	release()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Hold(context.Background()); !errors.Is(err, ErrNoGrant) {
		t.Fatalf("a fenced agent may hold: %v", err)
	}
}

func TestNewEpochEndsTheOldGrant(t *testing.T) {
	g, _ := newGrant()
	g.Connected()
	g.Assign(executor(1))
	ctx, release, err := g.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	g.Assign(executor(2))
	<-ctx.Done()
	if _, rel, err := g.Hold(context.Background()); err != nil {
		t.Fatalf("the new epoch's grant refuses: %v", err)
	} else {
		rel()
	}
}
