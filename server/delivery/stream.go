package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/saltbush/saltbush/errdefs"
	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/identity"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// agentStream is one admitted stream.
type agentStream struct {
	s      *Service
	stream deliveryv1.DeliveryService_ConnectServer
	// uid is the cluster incarnation's. The stream keeps no cluster
	// record: the watch's snapshot has the current one, shared by the
	// cluster's streams (a record with many members is large).
	uid      string
	instance string
	session  *session
	out      chan *deliveryv1.HostMessage
	// heard is when the agent last sent anything (unix nanos).
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
	// removed (0: none); left closes when its FenceAck removed the
	// session.
	leaving atomic.Int64
	left    chan struct{}
	// replaced closes when a newer stream of the instance opened on this
	// replica.
	replaced chan struct{}
	// verified is the mod revision at which the session key was last
	// found to hold this stream's session (the sender's own).
	verified int64
	// ownWrite is the revision of the receiver's last write of the
	// session (an Ack), which holds this stream's session by construction.
	ownWrite atomic.Int64
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

	w, changed := s.subscribe(c)
	defer s.unsubscribe(w, changed)
	a := &agentStream{s: s, stream: stream, uid: c.GetUid(), instance: hello.GetInstanceId(), session: session,
		out: make(chan *deliveryv1.HostMessage, 16), left: make(chan struct{}), replaced: make(chan struct{})}
	a.heard.Store(s.clock.now())
	a.verified = session.revision
	// A newer stream of the instance on this replica ends an older one
	// (its session now is the newer stream's; on another replica the
	// session's lease tells).
	s.register(a)
	defer s.unregister(a)
	a.applied.Store(&deliveryv1.DesiredSet{Version: hello.GetDesiredVersion(), Digest: hello.GetDesiredDigest()})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		defer close(received)
		recvErr <- a.receive(ctx, w)
	}()
	return a.send(ctx, w, changed, hello, recvErr)
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

// ownsSession reports whether the session in snapshot sn is still this
// stream's, on the replica's lease: checked against etcd whenever the
// key's revision moved since it was last found to be (an Ack of this
// stream moves it too). known is false when etcd could not say.
func (a *agentStream) ownsSession(ctx context.Context, sn *snapshot) (owned, known bool) {
	rev, ok := sn.sessions[a.instance]
	switch {
	case !ok:
		return false, true
	case rev == a.verified:
		return true, true
	case rev == a.ownWrite.Load():
		a.verified = rev
		return true, true
	}
	ctx, cancel := context.WithTimeout(ctx, a.s.cfg.HeartbeatInterval)
	defer cancel()
	rec, kv, err := a.s.ownSession(ctx, a.session)
	switch {
	case err != nil:
		a.s.log.WarnContext(ctx, "check the stream's session", "cluster_uid", a.uid, "instance", a.instance, "err", err)
		return false, false
	case rec == nil || clientv3.LeaseID(kv.Lease) != a.session.lease.id:
		return false, true
	}
	a.verified = kv.ModRevision
	return true, true
}

// send is the stream's only sender: assignments and desired sets as the
// cluster's snapshot changes, fences, report results, heartbeats. It ends
// the stream when the agent may no longer be connected (removed member,
// cluster DELETING/FAILED or gone), after telling it to stop.
func (a *agentStream) send(ctx context.Context, w *clusterWatch, changed <-chan struct{}, hello *deliveryv1.Hello, recvErr <-chan error) error {
	heartbeat := time.NewTicker(a.s.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	var (
		role        deliveryv1.Role
		epoch       int64
		digest      = hello.GetDesiredDigest()
		sentRole    bool
		drainFenced int64
		lastSentAt  = time.Now()
		// unsure: etcd could not say whether the session is still this
		// stream's.
		unsure bool
	)
	// put sends m if the session is fresh; otherwise the agent is told
	// to stop and the stream ends (ErrSessionLost).
	put := func(m *deliveryv1.HostMessage) error {
		if unsure && m.GetFence() == nil {
			return nil // nothing but a Fence while ownership is unknown
		}
		if m.GetFence() == nil && !a.session.fresh(a.s.clock, a.s.cfg) {
			_ = a.stream.Send(fence(epoch, "saltbush could not renew the session"))
			return status.Error(codes.Unavailable, "delivery session not renewed in time; connect again")
		}
		lastSentAt = time.Now()
		return a.stream.Send(m)
	}
	// recheck asks for the snapshot to be handled again (an ownership
	// check etcd could not answer is retried every heartbeat interval).
	recheck := make(chan struct{}, 1)
	// onSnapshot acts on the watch's latest snapshot: ends the stream
	// (after a Fence) when the agent may no longer be connected, else
	// sends what changed — role, drain fence, desired set.
	onSnapshot := func() error {
		sn, err := w.current()
		if sn == nil || sn.revision < a.session.revision {
			// Nothing yet, or a view older than this stream's own
			// session: wait for the watch (a reconnecting agent must
			// not be told a role etcd has since given away).
			if err != nil {
				a.s.log.WarnContext(ctx, "delivery snapshot", "cluster_uid", a.uid, "err", err)
			}
			return nil
		}
		if !sn.serving() {
			reason := "the cluster is deleting, failed or gone"
			_ = put(fence(epoch, reason))
			return status.Error(codes.FailedPrecondition, "delivery ended: "+reason)
		}
		if !sn.member(a.instance) {
			reason := "the instance is no longer a member"
			a.leaving.Store(epoch + 1)
			_ = put(fence(epoch, reason))
			// An agent that acknowledges the fence has stopped, and its
			// session goes at once (the receiver removes it): a
			// successor need not wait for it to run out. One that does
			// not within fence-after has stopped on its own by then,
			// but its session runs out first.
			wait := time.NewTimer(a.s.cfg.FenceAfter)
			defer wait.Stop()
			for waiting := true; waiting; {
				select {
				case <-a.left:
					waiting = false
				case <-wait.C:
					waiting = false
				case <-recvErr:
					waiting = false
				case <-ctx.Done():
					waiting = false
				case m := <-a.out:
					// Answers to reports the agent sent before it heard
					// the fence: the receiver must not block on them,
					// or it never reads the FenceAck.
					_ = a.stream.Send(m)
				}
			}
			return status.Error(codes.FailedPrecondition, "delivery ended: "+reason)
		}
		owned, known := a.ownsSession(ctx, sn)
		if !known {
			// etcd could not say whose the session is: say nothing but a
			// Fence until it can (checked again every heartbeat interval);
			// the agent lapses meanwhile.
			unsure = true
			return nil
		}
		unsure = false
		if !owned {
			// The session is another stream's now (a newer stream of
			// the instance, on another replica), or gone: this stream
			// no longer keeps the agent's grant alive, so it must not
			// extend it.
			_ = put(fence(epoch, "the session is no longer this stream's"))
			return status.Error(codes.Aborted, "the session is no longer this stream's; connect again")
		}
		newRole, newEpoch := deliveryv1.Role_ROLE_STANDBY, sn.executor.GetEpoch()
		if sn.executor.GetInstanceId() == a.instance {
			newRole = deliveryv1.Role_ROLE_EXECUTOR
		}
		if !sentRole || newRole != role || newEpoch != epoch {
			if sentRole && role == deliveryv1.Role_ROLE_EXECUTOR && (newRole != role || newEpoch != epoch) {
				if err := put(fence(epoch, "another executor was assigned")); err != nil {
					return err
				}
			}
			role, epoch, sentRole = newRole, newEpoch, true
			a.executor.Store(role == deliveryv1.Role_ROLE_EXECUTOR)
			if role != deliveryv1.Role_ROLE_EXECUTOR {
				a.s.forgetExecutor(a)
			}
			if err := put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{
				Role: role, Epoch: epoch, ExecutorInstanceId: sn.executor.GetInstanceId(), Timing: a.s.cfg.timing(),
			}}}); err != nil {
				return err
			}
		}
		if role == deliveryv1.Role_ROLE_EXECUTOR && sn.executor.GetDraining() && drainFenced != epoch {
			drainFenced = epoch
			if err := put(fence(epoch, "drained by an operator")); err != nil {
				return err
			}
		}
		if sn.desired.GetDigest() != digest {
			set := &deliveryv1.DesiredSet{
				Version: sn.desired.GetVersion(), Nonce: nonce(), Epoch: epoch, Digest: sn.desired.GetDigest(),
				Addons: sn.desired.GetAddons(),
			}
			a.lastSet.Store(&deliveryv1.DesiredSet{Version: set.GetVersion(), Nonce: set.GetNonce(), Digest: set.GetDigest()})
			if err := put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: set}}); err != nil {
				return err
			}
			digest = set.GetDigest()
		}
		if role == deliveryv1.Role_ROLE_EXECUTOR {
			a.s.observeExecutor(w, a, a.applied.Load(), sn.desired.GetDigest())
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			// The certificate was revoked or expired (the stream's context
			// says which), or the stream is over.
			if cause := context.Cause(ctx); status.Code(cause) == codes.Unauthenticated {
				_ = a.stream.Send(fence(epoch, "the agent's certificate was revoked"))
				return cause
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				_ = a.stream.Send(fence(epoch, "the agent's certificate expired"))
				return status.Error(codes.Unauthenticated, "the agent's certificate expired; connect again with a new one")
			}
			return ctx.Err()
		case <-a.session.lease.lost:
			_ = a.stream.Send(fence(epoch, "the session expired"))
			return status.Error(codes.Unavailable, "delivery session expired; connect again")
		case <-a.replaced:
			_ = a.stream.Send(fence(epoch, "a newer stream of this instance took over"))
			return status.Error(codes.Aborted, "a newer stream of this instance took over")
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			// The receiver ended the stream (a protocol violation): its
			// last answers, a Fence among them, go out first.
			for pending := true; pending; {
				select {
				case m := <-a.out:
					_ = a.stream.Send(m)
				default:
					pending = false
				}
			}
			return err
		case m := <-a.out:
			if err := put(m); err != nil {
				return err
			}
		case <-heartbeat.C:
			// An agent silent for fence-after has stopped applying (it
			// sends heartbeats); its stream may be half-open. End it, so
			// the session runs out and a standby can take over, instead of
			// renewing the session of an agent nobody hears.
			if a.s.clock.since(a.heard.Load()) > a.s.cfg.FenceAfter {
				_ = a.stream.Send(fence(epoch, "saltbush heard nothing from the agent for fence-after"))
				return status.Error(codes.Unavailable, "the agent was silent for fence-after; connect again")
			}
			if unsure {
				select {
				case recheck <- struct{}{}:
				default:
				}
			}
			if time.Since(lastSentAt) >= a.s.cfg.HeartbeatInterval/2 {
				if err := put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}}); err != nil {
					return err
				}
			}
		case <-changed:
			if err := onSnapshot(); err != nil {
				return err
			}
		case <-recheck:
			if err := onSnapshot(); err != nil {
				return err
			}
		}
	}
}

func fence(epoch int64, reason string) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Fence{Fence: &deliveryv1.Fence{Epoch: epoch, Reason: reason}}}
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// receive reads the agent's messages until the stream ends.
func (a *agentStream) receive(ctx context.Context, w *clusterWatch) error {
	for {
		m, err := a.stream.Recv()
		if err != nil {
			return err
		}
		a.heard.Store(a.s.clock.now())
		switch msg := m.GetMessage().(type) {
		case *deliveryv1.AgentMessage_Report:
			results, violation := a.report(ctx, w, msg.Report)
			for _, r := range results {
				select {
				case a.out <- r:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if violation != nil {
				return violation
			}
		case *deliveryv1.AgentMessage_Ack:
			if err := a.acked(ctx, w, msg.Ack); err != nil {
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
				continue
			}
			if err := a.fenceAcked(ctx, w, msg.FenceAck.GetEpoch()); err != nil {
				a.s.log.WarnContext(ctx, "fence acknowledgement", "cluster_uid", a.uid, "instance", a.instance, "err", err)
			}
		case *deliveryv1.AgentMessage_Heartbeat:
		case *deliveryv1.AgentMessage_Hello:
			return errdefs.InvalidParameter("Hello is only the first message of a stream.")
		}
	}
}
