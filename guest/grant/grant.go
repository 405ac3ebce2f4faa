// Package grant is the agent's self-fencing (docs/delivery-protocol.md,
// "Guest self-fencing"). The agent may write to its cluster only while it
// holds a grant: the host assigned it the EXECUTOR role at an epoch, no
// Fence ended that epoch, the stream that carried the assignment is still
// open, and it heard from the host less than fence-after ago, on the
// monotonic clock. The host waits for the agent's session to run out
// (fence-after plus a safety margin later) before it assigns a successor,
// so an agent that keeps this rule has stopped before anyone else starts.
//
// Every write goes through Hold, which refuses without a grant and gives
// the write a context that ends when the grant would lapse and is
// cancelled the moment the grant is revoked, so no write of a fenced agent
// can still be running when the successor starts.
package grant

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// ErrNoGrant is returned by Hold when the agent may not write.
var ErrNoGrant = errors.New("no delivery grant: the agent is not the fenced executor")

// Grant is the agent's current right to write. Its zero value holds none.
// It is safe for concurrent use: the stream's receiver updates it, writers
// hold it.
type Grant struct {
	// now is the clock (time.Now, whose readings carry the monotonic
	// clock); tests replace it.
	now func() time.Time

	mu         sync.Mutex
	role       deliveryv1.Role
	epoch      int64
	executor   string
	fenceAfter time.Duration
	// heard is when the host was last heard from on the current stream.
	heard time.Time
	// connected is whether the stream that gave the assignment is open.
	connected bool
	// revoke cancels every write of the current grant.
	revoke   context.CancelCauseFunc
	grantCtx context.Context
	// inflight counts writes holding the grant; idle is closed when it
	// drops to zero.
	inflight int
	idle     chan struct{}
}

// New returns a grant that holds nothing.
func New() *Grant {
	g := &Grant{now: time.Now, fenceAfter: 8 * time.Second}
	g.grantCtx, g.revoke = context.WithCancelCause(context.Background())
	g.revoke(ErrNoGrant)
	return g
}

// State is a snapshot for status and metrics.
type State struct {
	Role             deliveryv1.Role
	Epoch            int64
	ExecutorInstance string
	// Writable is whether a write would be allowed now.
	Writable bool
	// Left is how long the grant lasts if nothing more is heard.
	Left time.Duration
}

// Snapshot reports the grant as it is now.
func (g *Grant) Snapshot() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := State{Role: g.role, Epoch: g.epoch, ExecutorInstance: g.executor}
	if g.writableLocked() {
		st.Writable = true
		st.Left = g.heard.Add(g.fenceAfter).Sub(g.now())
	}
	return st
}

func (g *Grant) writableLocked() bool {
	return g.role == deliveryv1.Role_ROLE_EXECUTOR && g.connected && g.grantCtx.Err() == nil &&
		g.now().Sub(g.heard) < g.fenceAfter
}

// Connected records that a new stream is open: nothing may be written on
// its account until it brings an Assignment.
func (g *Grant) Connected() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(errors.New("a new stream opened"))
	g.connected = true
	g.role, g.executor = deliveryv1.Role_ROLE_UNSPECIFIED, ""
}

// Disconnected ends the grant: a stream that is gone renews nothing.
func (g *Grant) Disconnected(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.connected = false
	g.endLocked(fmt.Errorf("the delivery stream ended: %w", cause))
}

// Heard extends the grant: the host spoke on the current stream now.
func (g *Grant) Heard() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heard = g.now()
}

// Assign applies an Assignment heard now. A new epoch or role ends the
// previous grant first (its writes are cancelled); an executor assignment
// then starts a new one.
func (g *Grant) Assign(a *deliveryv1.Assignment) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heard = g.now()
	if fa := a.GetTiming().GetFenceAfter().AsDuration(); fa > 0 {
		g.fenceAfter = fa
	}
	same := a.GetRole() == g.role && a.GetEpoch() == g.epoch && g.grantCtx.Err() == nil
	g.executor = a.GetExecutorInstanceId()
	if same {
		return
	}
	g.endLocked(fmt.Errorf("assigned %s at epoch %d", a.GetRole(), a.GetEpoch()))
	g.role, g.epoch = a.GetRole(), a.GetEpoch()
	if g.role == deliveryv1.Role_ROLE_EXECUTOR {
		g.grantCtx, g.revoke = context.WithCancelCause(context.Background())
	}
}

// Fence applies a Fence heard now. A Fence ends the epoch it names and
// every earlier one; an agent whose assignment is newer ignores it. It
// reports whether the fence ended this agent's grant (the caller then
// drains its writes and acknowledges).
func (g *Grant) Fence(f *deliveryv1.Fence) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heard = g.now()
	if f.GetEpoch() < g.epoch {
		return false
	}
	g.endLocked(fmt.Errorf("fenced at epoch %d: %s", f.GetEpoch(), f.GetReason()))
	g.role = deliveryv1.Role_ROLE_UNSPECIFIED
	return true
}

// endLocked cancels the current grant's writes.
func (g *Grant) endLocked(cause error) {
	g.revoke(cause)
}

// Context returns a context that ends when the current grant is revoked
// (not when it would lapse: waits may outlast fence-after while the host
// keeps renewing it), or ErrNoGrant. Long operations made of many writes
// run under it, so a Fence stops them between writes too.
func (g *Grant) Context(parent context.Context) (context.Context, context.CancelFunc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.writableLocked() {
		return nil, nil, ErrNoGrant
	}
	ctx, cancel := context.WithCancelCause(parent)
	granted := g.grantCtx
	stop := context.AfterFunc(granted, func() { cancel(context.Cause(granted)) })
	return ctx, func() { stop(); cancel(context.Canceled) }, nil
}

// Hold admits one write: it returns a context whose deadline is when the
// grant lapses unless the host is heard again, and which is cancelled if
// the grant is revoked first. Call release when the write returned.
func (g *Grant) Hold(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.writableLocked() {
		return nil, nil, ErrNoGrant
	}
	wctx, cancelDeadline := context.WithDeadline(ctx, g.heard.Add(g.fenceAfter))
	wctx, cancel := context.WithCancelCause(wctx)
	granted := g.grantCtx
	stop := context.AfterFunc(granted, func() { cancel(context.Cause(granted)) })
	if g.inflight == 0 {
		g.idle = make(chan struct{})
	}
	g.inflight++
	var once sync.Once
	release := func() {
		once.Do(func() {
			stop()
			cancel(context.Canceled)
			cancelDeadline()
			g.mu.Lock()
			defer g.mu.Unlock()
			g.inflight--
			if g.inflight == 0 {
				close(g.idle)
			}
		})
	}
	return wctx, release, nil
}

// Drain waits until no write holds a grant (after a revocation, the
// cancelled writes return promptly), or ctx ends.
func (g *Grant) Drain(ctx context.Context) error {
	g.mu.Lock()
	if g.inflight == 0 {
		g.mu.Unlock()
		return nil
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Refused reports whether err is a write refused or cut short because the
// grant ended (as opposed to the cluster refusing it).
func Refused(err error) bool {
	return errors.Is(err, ErrNoGrant) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
