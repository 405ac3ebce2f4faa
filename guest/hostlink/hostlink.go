// Package hostlink holds the agent's one delivery stream to saltbush
// (saltbush.delivery.v1.DeliveryService/Connect, docs/delivery-protocol.md):
// it dials the configured replicas in turn with mutual TLS, opens the
// stream with a Hello, hands every host message to the agent in order,
// sends the agent's messages, and keeps the stream alive with heartbeats
// when it has nothing else to say. When the stream breaks, or the host is
// silent for longer than its fence-after, it connects again — to the next
// endpoint, after a jittered exponential backoff — and the agent resumes by
// the desired version and digest in its Hello (never by nonce).
package hostlink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// Config configures a Link.
type Config struct {
	// Endpoints are the replicas' gRPC addresses, tried in turn.
	Endpoints []string
	// TLS is the client configuration (its callbacks may change the
	// identity between connections).
	TLS *tls.Config
	// BackoffInitial and BackoffMax bound the delay between attempts.
	BackoffInitial, BackoffMax time.Duration
	// OpenTimeout bounds connecting and hearing the first host message.
	OpenTimeout time.Duration
	Log         *slog.Logger
}

// Handler is the agent's side of a stream. Its methods are called from
// the link's goroutines, one stream at a time, in this order: Hello; then,
// once the host answered, Opened, Received for each host message in order,
// and Closed.
type Handler interface {
	// Hello is the Hello a new stream opens with.
	Hello() *deliveryv1.Hello
	// Opened says a stream is open on endpoint; Send puts messages on it.
	Opened(endpoint string)
	// Received is one host message.
	Received(m *deliveryv1.HostMessage)
	// Closed says the stream ended, and why.
	Closed(err error)
}

// Defaults of the protocol's timing until the host sends its own.
const (
	defaultHeartbeat  = 2 * time.Second
	defaultFenceAfter = 8 * time.Second
	// outboundQueue bounds the messages waiting to be sent on a stream.
	outboundQueue = 256
)

// Keepalive pings: every 15 s on an idle connection, which the server's
// enforcement policy (a ping at most every 10 s) permits; heartbeats keep
// a stream busier than that anyway.
var clientKeepalive = keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: false}

// flowWindow is the link's static HTTP/2 flow-control window, per stream
// and per connection. gRPC's default dynamic window estimates the
// bandwidth-delay product by pinging the peer after every data frame it
// receives while no such ping is out: on an idle stream, every host
// heartbeat cost the replica a ping to read and answer (with ten thousand
// agents, thousands a second). A desired set is the only large message
// the agent receives; 1 MiB in flight carries one at tens of MB/s even
// across a 50 ms round trip.
const flowWindow = 1 << 20

// errSilent ends a stream on which the host said nothing for fence-after.
var errSilent = errors.New("saltbush was silent for fence-after; connecting again")

// Link is the agent's connection to saltbush.
type Link struct {
	cfg Config

	// Timing heard in Assignments (nanoseconds), read by the sender.
	heartbeat  atomic.Int64
	fenceAfter atomic.Int64

	mu      sync.Mutex
	current *session
	// conns are the endpoints' client connections, made on first use by
	// Run's goroutine and kept (gRPC reconnects them); Conn reads them
	// from the webhooks' goroutines, hence under mu.
	conns map[string]*grpc.ClientConn
}

// session is one open stream's outbound side.
type session struct {
	endpoint string
	out      chan *deliveryv1.AgentMessage
	done     chan struct{}
}

// New returns a link; Run connects it.
func New(cfg Config) *Link {
	if cfg.OpenTimeout <= 0 {
		cfg.OpenTimeout = 10 * time.Second
	}
	l := &Link{cfg: cfg, conns: map[string]*grpc.ClientConn{}}
	l.heartbeat.Store(int64(defaultHeartbeat))
	l.fenceAfter.Store(int64(defaultFenceAfter))
	return l
}

// SetTiming adopts the host's heartbeat interval and fence-after (from
// an Assignment).
func (l *Link) SetTiming(t *deliveryv1.Timing) {
	if d := t.GetHeartbeatInterval().AsDuration(); d > 0 {
		l.heartbeat.Store(int64(d))
	}
	if d := t.GetFenceAfter().AsDuration(); d > 0 {
		l.fenceAfter.Store(int64(d))
	}
}

// Endpoint is the endpoint of the open stream, "" when none.
func (l *Link) Endpoint() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		return ""
	}
	return l.current.endpoint
}

// Conn is the client connection of the open stream's endpoint (nil when
// none), for the agent's other RPCs to the same replica.
func (l *Link) Conn() *grpc.ClientConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		return nil
	}
	return l.conns[l.current.endpoint]
}

// Send queues m on the open stream. It returns false when there is none
// (or it ends, or ctx does, first): the message is lost with the stream,
// which is why reports are level triggered.
func (l *Link) Send(ctx context.Context, m *deliveryv1.AgentMessage) bool {
	l.mu.Lock()
	s := l.current
	l.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case s.out <- m:
		return true
	case <-s.done:
	case <-ctx.Done():
	}
	return false
}

// Run holds a stream until ctx ends, connecting again whenever it breaks.
func (l *Link) Run(ctx context.Context, h Handler) error {
	defer func() {
		for _, c := range l.conns {
			_ = c.Close()
		}
	}()
	next, failures := 0, 0
	for {
		ep := l.cfg.Endpoints[next%len(l.cfg.Endpoints)]
		healthy, err := l.stream(ctx, ep, h)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if healthy {
			// The stream worked: the next attempt (same endpoint first,
			// a replica that ended one stream usually takes the next) is
			// quick.
			failures = 0
		} else {
			failures++
			next++
		}
		delay := backoff(l.cfg.BackoffInitial, l.cfg.BackoffMax, failures)
		l.cfg.Log.Warn("delivery stream ended", "endpoint", ep, "err", err, "retry_in", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// backoff is "equal jitter" exponential backoff: half the capped
// exponential delay plus a random part of the other half, so replicas'
// agents that lost the same replica do not come back in step.
func backoff(initial, maxDelay time.Duration, failures int) time.Duration {
	d := initial
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter spreads retries; nothing depends on it being unpredictable
}

func (l *Link) conn(ep string) (*grpc.ClientConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.conns[ep]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(ep,
		grpc.WithTransportCredentials(credentials.NewTLS(l.cfg.TLS)),
		grpc.WithKeepaliveParams(clientKeepalive),
		grpc.WithStaticStreamWindowSize(flowWindow), grpc.WithStaticConnWindowSize(flowWindow),
		// A replica that accepts TCP but never finishes the TLS handshake
		// (partitioned after accept) would otherwise hold the stream's
		// open for gRPC's 20 s minimum connect timeout, however short
		// OpenTimeout is, before the link tries the next replica.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.DefaultConfig, MinConnectTimeout: l.cfg.OpenTimeout}))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", ep, err)
	}
	l.conns[ep] = c
	return c, nil
}

// stream runs one stream on ep until it ends. healthy reports whether the
// host spoke on it (the endpoint works).
func (l *Link) stream(ctx context.Context, ep string, h Handler) (healthy bool, err error) {
	c, err := l.conn(ep)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	openCtx, openCancel := context.WithTimeout(sctx, l.cfg.OpenTimeout)
	stream, err := deliveryv1.NewDeliveryServiceClient(c).Connect(sctx)
	if err == nil {
		err = sendWithin(openCtx, stream, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Hello{Hello: h.Hello()}})
	}
	openCancel()
	if err != nil {
		return false, fmt.Errorf("open on %s: %w", ep, err)
	}

	s := &session{endpoint: ep, out: make(chan *deliveryv1.AgentMessage, outboundQueue), done: make(chan struct{})}

	var (
		heard    atomic.Int64 // monotonic nanoseconds since opened
		spoke    atomic.Bool
		opened   = time.Now()
		wg       sync.WaitGroup
		firstErr = make(chan error, 2)
	)
	heard.Store(0)
	wg.Add(2)
	go func() { // the receiver
		defer wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				firstErr <- err
				return
			}
			heard.Store(int64(time.Since(opened)))
			if !spoke.Load() {
				// The host answered the Hello: the stream is open (a
				// stream to an endpoint that says nothing never is).
				l.mu.Lock()
				l.current = s
				l.mu.Unlock()
				h.Opened(ep)
				spoke.Store(true)
			}
			h.Received(m)
		}
	}()
	go func() { // the sender: queued messages, heartbeats, the silence check
		defer wg.Done()
		firstErr <- l.send(sctx, stream, s, opened, &heard, &spoke)
	}()
	err = <-firstErr
	if errors.Is(err, errPeerEnded) {
		// saltbush ended the stream: why is the receiver's to say (a Send
		// only learns that it ended).
		select {
		case err = <-firstErr:
		case <-time.After(peerStatusWait):
			err = io.EOF
		}
	}
	cancel()
	l.mu.Lock()
	l.current = nil
	l.mu.Unlock()
	close(s.done)
	wg.Wait()
	if spoke.Load() {
		h.Closed(err)
	}
	return spoke.Load(), err
}

// errPeerEnded is a Send's io.EOF: saltbush ended the stream, and the
// status it ended it with comes to the receiver.
var errPeerEnded = errors.New("saltbush ended the stream")

// peerStatusWait bounds the wait for that status.
const peerStatusWait = 5 * time.Second

func sendError(err error) error {
	if errors.Is(err, io.EOF) {
		return errPeerEnded
	}
	return err
}

// send is a stream's only sender.
func (l *Link) send(ctx context.Context, stream deliveryv1.DeliveryService_ConnectClient, s *session,
	opened time.Time, heard *atomic.Int64, spoke *atomic.Bool) error {
	tick := time.NewTicker(time.Duration(l.heartbeat.Load()) / 2)
	defer tick.Stop()
	lastSent := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-s.out:
			if err := stream.Send(m); err != nil {
				return sendError(err)
			}
			lastSent = time.Now()
		case <-tick.C:
			sinceHeard := time.Since(opened) - time.Duration(heard.Load())
			switch {
			case !spoke.Load() && time.Since(opened) > l.cfg.OpenTimeout:
				return fmt.Errorf("saltbush said nothing within %s of the Hello", l.cfg.OpenTimeout)
			case spoke.Load() && sinceHeard > time.Duration(l.fenceAfter.Load()):
				return errSilent
			}
			if time.Since(lastSent) >= time.Duration(l.heartbeat.Load()) {
				if err := stream.Send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}}); err != nil {
					return sendError(err)
				}
				lastSent = time.Now()
			}
			tick.Reset(time.Duration(l.heartbeat.Load()) / 2)
		}
	}
}

// sendWithin sends one message, giving up when ctx ends (a Send on a
// stream whose peer does not read blocks on flow control).
func sendWithin(ctx context.Context, stream deliveryv1.DeliveryService_ConnectClient, m *deliveryv1.AgentMessage) error {
	done := make(chan error, 1)
	go func() { done <- stream.Send(m) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
