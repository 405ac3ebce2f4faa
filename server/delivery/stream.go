package delivery

import (
	"context"
	"sync/atomic"
	"time"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
)

// agentStream is one admitted stream. As in etcd's watch server, two
// goroutines serve it — sendLoop (the stream's handler goroutine) and
// recvLoop (one of its own) — and every field belongs to one of them or
// is handed over explicitly:
//
//   - Set by newAgentStream before either loop starts, then only read:
//     s, stream, watch, changed, uid, instance, session and the channels.
//   - sendLoop's own (no other goroutine touches them): what the agent was
//     told (role, epoch, sentRole, digest, drainFenced, lastSentAt), the
//     session ownership check (verified, unsure, recheck). Only sendLoop
//     calls stream.Send.
//   - recvLoop's own: stream.Recv and the writes an agent message causes
//     (reports, the session's acknowledged set). It hands its answers to
//     sendLoop on out, its end on recvErr, and then closes received (the
//     session is retired only after that: no write of the receiver can
//     follow the retirement).
//   - Shared, as atomics written by one loop and read by the other: heard,
//     applied and ownWrite (recvLoop writes); lastSet and executor
//     (sendLoop writes); leaving (sendLoop sets it before a removed
//     member's Fence, recvLoop clears it and closes left when the FenceAck
//     removed the session).
//   - replaced is closed by Service.register, under the Service's lock,
//     when a newer stream of the instance opened on this replica.
type agentStream struct {
	s      *Service
	stream deliveryv1.DeliveryService_ConnectServer
	// watch is the cluster's on this replica; changed is signalled
	// whenever its snapshot changes (coalesced).
	watch   *clusterWatch
	changed <-chan struct{}
	// uid is the cluster incarnation's. The stream keeps no cluster
	// record: the watch's snapshot has the current one, shared by the
	// cluster's streams (a record with many members is large).
	uid      string
	instance string
	session  *session

	// out carries recvLoop's answers (report results, fences) to sendLoop.
	out chan *deliveryv1.HostMessage
	// recvErr carries recvLoop's end to sendLoop; received closes after it.
	recvErr  chan error
	received chan struct{}
	// left closes when a removed member's FenceAck removed its session.
	left chan struct{}
	// replaced closes when a newer stream of the instance opened on this
	// replica.
	replaced chan struct{}

	// heard is when the agent last sent anything (monoClock instant).
	heard atomic.Int64
	// lastSet is the last desired set sent (its Addons left out), for
	// the Ack that names its nonce.
	lastSet atomic.Pointer[deliveryv1.DesiredSet]
	// applied is the set the agent has (version and digest): what its
	// Hello claimed, then what it acknowledged.
	applied atomic.Pointer[deliveryv1.DesiredSet]
	// executor is whether the stream's last assignment made it the
	// executor (its acknowledgements are the cluster's metrics then).
	executor atomic.Bool
	// leaving is 1 + the epoch of the Fence sent to a member that was
	// removed (0: none).
	leaving atomic.Int64
	// ownWrite is the revision of the receiver's last write of the
	// session (an Ack), which holds this stream's session by construction.
	ownWrite atomic.Int64

	// sendLoop's own, from here on.
	//
	// role and epoch are the last Assignment sent (sentRole: one was).
	role     deliveryv1.Role
	epoch    int64
	sentRole bool
	// digest is the content digest of the desired set the agent has or
	// was last sent: a set with the same digest is not sent again.
	digest string
	// drainFenced is the epoch whose drain was last fenced.
	drainFenced int64
	// lastSentAt is when anything was last sent (an idle stream sends a
	// heartbeat).
	lastSentAt time.Time
	// verified is the mod revision at which the session key was last
	// found to hold this stream's session.
	verified int64
	// unsure: etcd could not say whether the session is still this
	// stream's; nothing but a Fence is sent until it can.
	unsure bool
	// recheck asks for the snapshot to be handled again (an ownership
	// check etcd could not answer is retried every heartbeat interval).
	recheck chan struct{}
}

// newAgentStream is the stream of an admitted agent whose Hello was hello
// and whose session is ss, on the cluster's watch w (changed: its
// subscription); received is closed when its recvLoop has ended.
func newAgentStream(s *Service, stream deliveryv1.DeliveryService_ConnectServer, w *clusterWatch, changed <-chan struct{},
	ss *session, hello *deliveryv1.Hello, received chan struct{}) *agentStream {
	a := &agentStream{s: s, stream: stream, watch: w, changed: changed, uid: w.uid, instance: hello.GetInstanceId(), session: ss,
		out: make(chan *deliveryv1.HostMessage, 16), recvErr: make(chan error, 1), received: received,
		left: make(chan struct{}), replaced: make(chan struct{}), recheck: make(chan struct{}, 1),
		// What the agent says it has: a set with this digest is not sent.
		digest: hello.GetDesiredDigest(), lastSentAt: time.Now(), verified: ss.revision}
	a.heard.Store(s.clock.now())
	a.applied.Store(&deliveryv1.DesiredSet{Version: hello.GetDesiredVersion(), Digest: hello.GetDesiredDigest()})
	return a
}

func (s *Service) connect(stream deliveryv1.DeliveryService_ConnectServer) error {
	ctx := stream.Context()
	who, ok := identity.FromContext(ctx)
	if !ok || who.Agent == nil {
		return errdefs.AccessDenied("Only guest agents may connect.")
	}
	hello, err := s.hello(ctx, stream)
	if err != nil {
		return err
	}
	if s.shuttingDown() {
		// Refused before its session is written: taken over here, only
		// for the stream to end at once, the agent's session would move
		// onto a lease nobody is going to renew. Refused before the host
		// says a word, the agent's link tries the next replica.
		return errShuttingDown
	}
	c, clusterRev, err := s.admit(ctx, who.Agent, hello)
	if err != nil {
		s.log.WarnContext(ctx, "agent refused", "cluster_uid", who.Agent.ClusterUID, "instance", who.Agent.Instance,
			"claimed_cluster", hello.GetCluster().GetName(), "claimed_instance", hello.GetInstanceId(), "err", err)
		return err
	}
	session, err := s.openSession(ctx, c, clusterRev, hello)
	if err != nil {
		return err
	}
	// The session is renewed while the stream lives, then lasts out its
	// TTL: the time the agent has to stop applying on its own before a
	// successor may be assigned.
	received := make(chan struct{})
	defer s.closeSession(session, received)
	s.streams.Inc()
	defer s.streams.Dec()
	s.log.InfoContext(ctx, "agent connected", "cluster", c.GetName(), "cluster_uid", c.GetUid(), "instance", hello.GetInstanceId())

	w, changed := s.subscribe(c, hello.GetInstanceId())
	defer s.unsubscribe(w, changed)
	a := newAgentStream(s, stream, w, changed, session, hello, received)
	// A newer stream of the instance on this replica ends an older one
	// (its session now is the newer stream's; on another replica the
	// session's lease tells).
	s.register(a)
	defer s.unregister(a)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go a.recvLoop(ctx)
	return a.sendLoop(ctx)
}

// register records a as its instance's stream on this replica, ending the
// older one it replaces.
func (s *Service) register(a *agentStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := a.uid + "/" + a.instance
	old := s.live[key]
	if old != nil && old.session.revision > a.session.revision {
		// Registered late: the other stream's session is the newer one,
		// and it is this stream that was replaced.
		close(a.replaced)
		return
	}
	if old != nil {
		close(old.replaced)
	}
	s.live[key] = a
}

// unregister forgets a when it ends, and the executor metrics it set.
func (s *Service) unregister(a *agentStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := a.uid + "/" + a.instance
	if s.live[key] == a {
		delete(s.live, key)
	}
	s.forgetExecutorLocked(a)
}

// sendLoop is the stream's only sender, run by its handler goroutine:
// assignments and desired sets as the cluster's snapshot changes, fences,
// report results, heartbeats. Each event's step returns an ending when
// the agent may no longer be connected; stop then tells it to stop and
// ends the stream.
func (a *agentStream) sendLoop(ctx context.Context) error {
	heartbeat := time.NewTicker(a.s.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			err = contextEnded(ctx)
		case <-a.session.lease.lost:
			err = endSessionExpired
		case <-a.replaced:
			err = endReplaced
		case <-a.s.closing:
			err = endShuttingDown
		case rerr := <-a.recvErr:
			err = receiverEnded(rerr)
		case m := <-a.out:
			err = a.put(m)
		case <-heartbeat.C:
			err = a.onHeartbeat()
		case <-a.changed:
			err = a.onSnapshot(ctx)
		case <-a.recheck:
			err = a.onSnapshot(ctx)
		}
		if err != nil {
			return a.stop(ctx, err)
		}
	}
}

// onHeartbeat runs every heartbeat interval: it ends the stream of an
// agent silent for fence-after, retries an ownership check etcd could not
// answer, and keeps an idle stream alive.
func (a *agentStream) onHeartbeat() error {
	if a.s.clock.since(a.heard.Load()) > a.s.cfg.FenceAfter {
		return endSilent
	}
	if a.unsure {
		select {
		case a.recheck <- struct{}{}:
		default:
		}
	}
	if time.Since(a.lastSentAt) >= a.s.cfg.HeartbeatInterval/2 {
		return a.put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}})
	}
	return nil
}

// put sends m if the session is fresh; otherwise the stream ends
// (endNotRenewed).
func (a *agentStream) put(m *deliveryv1.HostMessage) error {
	if a.unsure && m.GetFence() == nil {
		return nil // nothing but a Fence while ownership is unknown
	}
	if m.GetFence() == nil && !a.session.fresh(a.s.clock, a.s.cfg) {
		return endNotRenewed
	}
	a.lastSentAt = time.Now()
	return a.stream.Send(m)
}

// recvLoop is the stream's receiver, on a goroutine of its own: it hands
// its end to sendLoop (recvErr), then says it has stopped (received).
func (a *agentStream) recvLoop(ctx context.Context) {
	defer close(a.received)
	a.recvErr <- a.receive(ctx)
}

// receive reads the agent's messages until the stream ends or the agent
// breaks the protocol.
func (a *agentStream) receive(ctx context.Context) error {
	for {
		m, err := a.stream.Recv()
		if err != nil {
			return err
		}
		a.heard.Store(a.s.clock.now())
		if err := a.handle(ctx, m); err != nil {
			return err
		}
	}
}

// handle acts on one agent message; an error ends the stream.
func (a *agentStream) handle(ctx context.Context, m *deliveryv1.AgentMessage) error {
	switch msg := m.GetMessage().(type) {
	case *deliveryv1.AgentMessage_Report:
		return a.answerReport(ctx, msg.Report)
	case *deliveryv1.AgentMessage_ServiceAccountKeys:
		results, violation := a.serviceAccountKeys(ctx, msg.ServiceAccountKeys)
		return a.handOver(ctx, results, violation)
	case *deliveryv1.AgentMessage_Ack:
		if err := a.acked(ctx, msg.Ack); err != nil {
			a.s.log.WarnContext(ctx, "record ack", "cluster_uid", a.uid, "instance", a.instance, "err", err)
		}
	case *deliveryv1.AgentMessage_Nack:
		a.s.log.WarnContext(ctx, "agent refused a desired set", "cluster_uid", a.uid,
			"instance", a.instance, "version", msg.Nack.GetVersion(), "error", msg.Nack.GetError())
	case *deliveryv1.AgentMessage_FenceAck:
		if l := a.leaving.Load(); l != 0 && msg.FenceAck.GetEpoch() == l-1 {
			if err := a.leave(ctx); err != nil {
				a.s.log.WarnContext(ctx, "removed member's session", "cluster_uid", a.uid, "instance", a.instance, "err", err)
			}
			return nil
		}
		if err := a.fenceAcked(ctx, msg.FenceAck.GetEpoch()); err != nil {
			a.s.log.WarnContext(ctx, "fence acknowledgement", "cluster_uid", a.uid, "instance", a.instance, "err", err)
		}
	case *deliveryv1.AgentMessage_Heartbeat:
	case *deliveryv1.AgentMessage_Hello:
		return errdefs.InvalidParameter("Hello is only the first message of a stream.")
	}
	return nil
}

// answerReport judges one report and hands its answers (a result, maybe a
// Fence) to sendLoop, waiting for room on out rather than dropping any:
// an agent must hear the Fence of a report it sent. A report that breaks
// the protocol ends the stream once its answers are handed over.
func (a *agentStream) answerReport(ctx context.Context, r *deliveryv1.Report) error {
	results, violation := a.report(ctx, r)
	return a.handOver(ctx, results, violation)
}

// handOver puts a message's answers on out in order, then returns the
// violation that ends the stream, if any.
func (a *agentStream) handOver(ctx context.Context, results []*deliveryv1.HostMessage, violation error) error {
	for _, m := range results {
		select {
		case a.out <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return violation
}
