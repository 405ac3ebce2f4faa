// Package fakeagent is the guest agent of protocol tests: it speaks the
// delivery protocol (docs/delivery-protocol.md) over real gRPC with the
// agent's own mTLS certificate, and applies nothing (there is no K3s side;
// tests/agent runs the real agent for that). Stream is one Connect stream:
// Hello, heartbeats, sends and receives. Session is the agent's side of the
// protocol on one stream, as the rules require it and no kinder: it
// acknowledges desired sets (and refuses one older than the set it
// applied), acknowledges the Fence of its epoch, and as an unfenced
// executor reports every add-on of the applied set READY (REMOVED for a
// tombstone), level triggered.
//
// Tests that script every message use a Stream alone; tests that need an
// agent that keeps the protocol by itself feed a Session what the Stream
// receives and send what it answers.
package fakeagent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// Heartbeats is how a Stream keeps the host hearing from it: saltbush ends
// the stream of an agent it has heard nothing from for fence-after.
type Heartbeats int

const (
	// WhenIdle sends a Heartbeat whenever the stream has sent nothing for
	// the heartbeat interval of the Assignment, as the real agent does.
	WhenIdle Heartbeats = iota
	// Ticker sends a Heartbeat every HeartbeatEvery, busy or not.
	Ticker
	// ByCaller sends none: the caller sends them (one loop for a fleet of
	// agents, or its own ticker).
	ByCaller
)

// Options configure a Stream.
type Options struct {
	// Hello is the first message; it names the cluster and instance.
	Hello *deliveryv1.Hello
	// Heartbeats chooses how heartbeats are sent (WhenIdle by default).
	Heartbeats Heartbeats
	// HeartbeatEvery is the Ticker's period.
	HeartbeatEvery time.Duration
	// HostHeartbeats makes Recv return the host's heartbeats too (an agent
	// that tracks when it last heard from the host needs them); by
	// default they are skipped.
	HostHeartbeats bool
}

// Stream is one Connect stream of an agent. Send is safe for concurrent
// use; Recv is for one goroutine.
type Stream struct {
	instance string
	opts     Options
	cs       deliveryv1.DeliveryService_ConnectClient
	cancel   context.CancelFunc

	mu       sync.Mutex // Send
	lastSent atomic.Int64
	interval atomic.Int64 // the Assignment's heartbeat interval
}

// Connect opens a stream on conn (a connection with an agent certificate)
// and says Hello. The stream lives until ctx ends or Close.
func Connect(ctx context.Context, conn *grpc.ClientConn, opts Options) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs, err := deliveryv1.NewDeliveryServiceClient(conn).Connect(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s: Connect: %w", opts.Hello.GetInstanceId(), err)
	}
	s := &Stream{instance: opts.Hello.GetInstanceId(), opts: opts, cs: cs, cancel: cancel}
	if err := s.Send(HelloMsg(opts.Hello)); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: send Hello: %w", s.instance, err)
	}
	switch opts.Heartbeats {
	case WhenIdle:
		go s.heartbeat(ctx, 100*time.Millisecond, true)
	case Ticker:
		go s.heartbeat(ctx, opts.HeartbeatEvery, false)
	}
	return s, nil
}

// Instance is the instance the stream's Hello named.
func (s *Stream) Instance() string { return s.instance }

// Close ends the stream from the agent's side.
func (s *Stream) Close() { s.cancel() }

// Send sends m; an error means the stream is ending (Recv says why).
func (s *Stream) Send(m *deliveryv1.AgentMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSent.Store(time.Now().UnixNano())
	return s.cs.Send(m)
}

// Recv returns the next host message (heartbeats skipped unless
// Options.HostHeartbeats), or the stream's end.
func (s *Stream) Recv() (*deliveryv1.HostMessage, error) {
	for {
		m, err := s.cs.Recv()
		if err != nil {
			return nil, err
		}
		if as := m.GetAssignment(); as != nil {
			s.interval.Store(int64(as.GetTiming().GetHeartbeatInterval().AsDuration()))
		}
		if m.GetHeartbeat() != nil && !s.opts.HostHeartbeats {
			continue
		}
		return m, nil
	}
}

// Received is one host message and when it arrived, or the stream's end
// (Msg nil, Err set).
type Received struct {
	At  time.Time
	Msg *deliveryv1.HostMessage
	Err error
}

// Receive starts a goroutine that receives into the returned channel
// (buffered to buffer); its last value carries the stream's end, and then
// the channel is closed.
func (s *Stream) Receive(buffer int) <-chan Received {
	ch := make(chan Received, buffer)
	go func() {
		defer close(ch)
		for {
			m, err := s.Recv()
			ch <- Received{At: time.Now(), Msg: m, Err: err}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func (s *Stream) heartbeat(ctx context.Context, tick time.Duration, idleOnly bool) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if idleOnly {
			iv := time.Duration(s.interval.Load())
			if iv <= 0 || time.Since(time.Unix(0, s.lastSent.Load())) < iv {
				continue
			}
		}
		if s.Send(HeartbeatMsg()) != nil {
			return
		}
	}
}
