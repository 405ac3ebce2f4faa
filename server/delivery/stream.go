package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/saltbush/saltbush/errdefs"
	controlv1 "github.com/saltbush/saltbush/gen/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/store"
)

// Server serves saltbush.delivery.v1.DeliveryService.
type Server struct {
	deliveryv1.UnimplementedDeliveryServiceServer
	svc *Service
}

var _ deliveryv1.DeliveryServiceServer = (*Server)(nil)

// NewServer returns the gRPC service on svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

// Connect implements deliveryv1.DeliveryServiceServer; errors reach the
// wire once, here.
func (s *Server) Connect(stream deliveryv1.DeliveryService_ConnectServer) error {
	err := s.svc.connect(stream)
	if err == nil || status.Code(err) != codes.Unknown {
		return err
	}
	return errdefs.Wire(stream.Context(), s.svc.log, "Connect", err)
}

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

// session is an admitted stream's session record and the lease it lives on.
type session struct {
	key string
	// rec is the record as the stream first wrote it: its identity
	// (instance, boot, replica, connect time) tells the stream's record
	// from a newer stream's (ownSession).
	rec *storagev1.AgentSessionRecord
	// lease is the replica's, while the stream lives.
	lease *replicaLease
	// revision is the etcd revision the session was created at: the
	// stream's first assignment comes from a snapshot at least that new.
	revision int64
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

// hello reads the stream's first message, which must be a Hello.
func (s *Service) hello(ctx context.Context, stream deliveryv1.DeliveryService_ConnectServer) (*deliveryv1.Hello, error) {
	first := make(chan *deliveryv1.AgentMessage, 1)
	failed := make(chan error, 1)
	go func() {
		m, err := stream.Recv()
		if err != nil {
			failed <- err
			return
		}
		first <- m
	}()
	select {
	case m := <-first:
		if m.GetHello() == nil {
			return nil, errdefs.InvalidParameter("The first message of a delivery stream must be a Hello.")
		}
		return m.GetHello(), nil
	case err := <-failed:
		return nil, err
	case <-time.After(s.cfg.HelloTimeout):
		return nil, status.Error(codes.DeadlineExceeded, "no Hello within the hello timeout")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// admit checks a Hello against the certificate (no impersonation: the
// cluster incarnation and the instance are the certificate's) and the
// cluster (a member; not DELETING or FAILED).
func (s *Service) admit(ctx context.Context, agent *identity.Agent, h *deliveryv1.Hello) (*storagev1.ClusterRecord, int64, error) {
	refused := errdefs.AccessDenied("Agent %s of cluster %s may connect only as itself, to its own cluster.", agent.Instance, agent.ClusterUID)
	if h.GetInstanceId() != agent.Instance || identity.ValidateAccountID(h.GetCluster().GetAccountId()) != nil || h.GetCluster().GetName() == "" {
		return nil, 0, refused
	}
	c, rev, err := s.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: h.GetCluster().GetAccountId(), Name: h.GetCluster().GetName()})
	var apiErr *errdefs.Error
	switch {
	case errors.As(err, &apiErr):
		return nil, 0, refused.WithCause(err)
	case err != nil:
		return nil, 0, err
	case c.GetUid() != agent.ClusterUID:
		return nil, 0, refused
	}
	sn := &snapshot{cluster: c}
	if !sn.member(agent.Instance) {
		return nil, 0, errdefs.AccessDenied("Instance %s is not a member of cluster %s.", agent.Instance, c.GetName())
	}
	if !sn.serving() {
		return nil, 0, errdefs.InvalidRequest("Cluster %s is %s: it takes no deliveries.", c.GetName(), c.GetStatus())
	}
	return c, rev, nil
}

// openSession records the agent's session on the replica's lease, which
// is renewed while the stream lives; end it with closeSession.
func (s *Service) openSession(ctx context.Context, c *storagev1.ClusterRecord, clusterRev int64, h *deliveryv1.Hello) (*session, error) {
	lease, err := s.renewer.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("session lease for %s: %w", h.GetInstanceId(), err)
	}
	rec := &storagev1.AgentSessionRecord{
		InstanceId: h.GetInstanceId(), BootId: h.GetBootId(), AgentVersion: h.GetAgentVersion(),
		Replica: s.cfg.Replica, ConnectedAt: timestamppb.Now(),
		// What the agent says it has applied (it resumes from it).
		AckedVersion: h.GetDesiredVersion(), AckedDigest: h.GetDesiredDigest(),
	}
	if rec.AckedVersion != 0 {
		rec.AckedAt = rec.ConnectedAt
	}
	// Guarded by the cluster record read at admission: a member removed,
	// or a cluster turned DELETING, in between gets no session.
	key := store.SessionKey(c.GetUid(), h.GetInstanceId())
	ss := &session{key: key, rec: rec, lease: lease}
	// Not cut short by the agent going away mid-write, which would leave
	// the outcome unknown.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	res, err := s.store.Commit(wctx, store.NewTxn().
		PutWithLease(key, rec, lease.id).
		RequireModRevision(store.ClusterKey(c.GetAccountId(), c.GetName()), clusterRev))
	if err != nil {
		s.renewer.release(lease)
		if errors.Is(err, store.ErrConflict) {
			return nil, status.Error(codes.Aborted, "the cluster changed during admission; connect again")
		}
		// The write may have been applied with its answer lost: a
		// session nobody renews or retires would keep the replica's
		// lease forever. Retire it if it is there.
		go s.retire(ss)
		return nil, fmt.Errorf("session of %s: %w", h.GetInstanceId(), err)
	}
	ss.revision = res.Revision
	return ss, nil
}

// closeSession ends a stream's session once its receiver has stopped
// (done closes): off the replica's lease, running out its TTL.
func (s *Service) closeSession(ss *session, done <-chan struct{}) {
	s.renewer.release(ss.lease)
	go func() {
		<-done
		s.retire(ss)
	}()
}

// fresh reports whether the session is certain to outlive an agent that
// hears from the host now: the lease was renewed recently enough that it
// lasts at least fence-after plus the safety margin from now. A stream
// whose session is not fresh says nothing more but a Fence (the agent may
// be replaced once the lease runs out, and it must have stopped by then).
func (ss *session) fresh(clock monoClock, cfg Config) bool {
	age := clock.since(ss.lease.renewed.Load())
	return age < cfg.SessionTTL-cfg.FenceAfter-cfg.SafetyMargin
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

// phases maps the wire phases to the stored ones.
var phases = map[deliveryv1.Phase]storagev1.AddonPhase{
	deliveryv1.Phase_PHASE_APPLIED: storagev1.AddonPhase_ADDON_PHASE_APPLIED,
	deliveryv1.Phase_PHASE_READY:   storagev1.AddonPhase_ADDON_PHASE_READY,
	deliveryv1.Phase_PHASE_FAILED:  storagev1.AddonPhase_ADDON_PHASE_FAILED,
	deliveryv1.Phase_PHASE_REMOVED: storagev1.AddonPhase_ADDON_PHASE_REMOVED,
}

// Why a report changed nothing, beyond the add-on lifecycle's reasons.
const (
	rejectNotExecutor = "not_executor"
	rejectDraining    = "draining"
	rejectInvalid     = "invalid"
)

// report applies one report if this stream's instance is the executor at
// the report's epoch — checked again, with the add-on's incarnation and
// generation, in the transaction that applies it — and answers it; a
// report from a stale epoch or a standby is also answered with a Fence.
//
// A report naming an epoch later than any assigned is a confused agent:
// it is fenced at that epoch (which covers the one it holds) and the
// stream ends (the returned error), so it connects again and hears its
// assignment afresh — answering it with a Fence alone would stop it for
// good while it stays the executor.
func (a *agentStream) report(ctx context.Context, w *clusterWatch, r *deliveryv1.Report) ([]*deliveryv1.HostMessage, error) {
	result := &deliveryv1.ReportResult{Addon: r.GetAddon(), Generation: r.GetGeneration()}
	answer := func(reason string, fenced bool) []*deliveryv1.HostMessage {
		result.Reason = reason
		out := []*deliveryv1.HostMessage{{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: result}}}
		if reason != addon.ReportAccepted {
			a.s.rejected.WithLabelValues(reason).Inc()
		}
		if fenced {
			out = append(out, fence(r.GetEpoch(), "reports from epoch "+fmt.Sprint(r.GetEpoch())+" are no longer accepted: "+reason))
		}
		return out
	}
	sn := a.snapshotOfSession(ctx, w)
	if sn == nil {
		// No view of the cluster that includes this stream's session (etcd
		// reads failing): nothing can be judged, and a Fence alone would
		// leave a fenced executor in place. End the stream.
		return answer("unavailable", false), status.Error(codes.Unavailable, "no current view of the cluster; connect again")
	}
	if r.GetEpoch() > sn.executor.GetEpoch() {
		return answer(rejectInvalid, true), status.Errorf(codes.FailedPrecondition,
			"a report for epoch %d, which was never assigned (the executor's epoch is %d); connect again", r.GetEpoch(), sn.executor.GetEpoch())
	}
	if sn.executor.GetInstanceId() != a.instance {
		return answer(rejectNotExecutor, true), nil
	}
	if r.GetEpoch() != sn.executor.GetEpoch() {
		return answer(addon.ReportStaleEpoch, true), nil
	}
	if sn.executor.GetDraining() {
		return answer(rejectDraining, true), nil
	}
	issues := make([]*storagev1.AddonIssue, 0, len(r.GetIssues()))
	for _, is := range r.GetIssues() {
		issues = append(issues, &storagev1.AddonIssue{Code: is.GetCode(), Message: is.GetMessage(), ResourceIds: is.GetResourceIds()})
	}
	executorKey, executorRev := store.ExecutorKey(a.uid), sn.executorRev
	res, err := a.s.addons.ApplyReport(ctx, addon.Report{
		ClusterUID: a.uid, AddonName: r.GetAddon(), AddonUID: r.GetAddonUid(), Generation: r.GetGeneration(),
		Phase: phases[r.GetPhase()], Issues: issues, ExecutorEpoch: r.GetEpoch(), InstanceID: a.instance,
	}, func(txn *store.Txn) {
		// The fence: the executor record is still the one that named
		// this instance at this epoch.
		txn.RequireModRevision(executorKey, executorRev)
	})
	var apiErr *errdefs.Error
	switch {
	case errors.As(err, &apiErr):
		return answer(rejectInvalid, false), nil
	case err != nil:
		a.s.log.WarnContext(ctx, "report not applied", "cluster_uid", a.uid, "addon", r.GetAddon(), "err", err)
		return answer("unavailable", false), nil
	}
	result.Accepted = res.Accepted
	return answer(res.Reason, res.Reason == addon.ReportStaleEpoch), nil
}

// snapshotOfSession returns the watch's snapshot once it includes this
// stream's session (nil if none comes within fence-after): a report
// re-sent at once by a reconnecting executor must be judged against a
// view at least as new as the assignment it names, not a lagging one
// that would reject it and fence the executor of the current epoch.
func (a *agentStream) snapshotOfSession(ctx context.Context, w *clusterWatch) *snapshot {
	deadline := time.Now().Add(a.s.cfg.FenceAfter)
	for {
		sn, _ := w.current()
		if sn != nil && sn.revision >= a.session.revision {
			return sn
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// acked records the desired set the agent applied in its session record
// (on the session's lease), for the status RPC, and for an executor in
// the cluster's metrics.
func (a *agentStream) acked(ctx context.Context, w *clusterWatch, ack *deliveryv1.Ack) error {
	set := a.lastSet.Load()
	if set == nil || set.GetNonce() != ack.GetNonce() || set.GetVersion() != ack.GetVersion() {
		// Not the last set this stream sent: the Ack of the one after it
		// is on its way, or it is not an Ack of anything sent here.
		return nil
	}
	a.applied.Store(set)
	if sn, _ := w.current(); sn != nil && a.executor.Load() {
		a.s.observeExecutor(w, a, set, sn.desired.GetDigest())
	}
	// Only over this stream's own record, on the lease it is on: a newer
	// stream of the instance owns the key (and its lease) now, and an Ack
	// late on the old stream must not move the session back onto the old
	// lease. Read, then written guarded by what was read.
	for range 3 {
		rec, kv, err := a.s.ownSession(ctx, a.session)
		if err != nil || rec == nil {
			return err // expired or replaced: nothing to record
		}
		rec.AckedVersion, rec.AckedDigest, rec.AckedAt = set.GetVersion(), set.GetDigest(), timestamppb.Now()
		res, err := a.s.store.Commit(ctx, store.NewTxn().
			RequireModRevision(a.session.key, kv.ModRevision).
			PutWithLease(a.session.key, rec, clientv3.LeaseID(kv.Lease)))
		if err == nil {
			// The sender need not ask etcd whose the session is when it
			// sees the key move to this revision: it is this write.
			a.ownWrite.Store(res.Revision)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}

// leave removes the session of a removed member that acknowledged its
// fence: it has stopped applying, so the executor it may have been can be
// succeeded at once (rule 5). Only this stream's own record is removed.
func (a *agentStream) leave(ctx context.Context) error {
	for {
		rec, kv, err := a.s.ownSession(ctx, a.session)
		if err != nil {
			return err
		}
		if rec != nil {
			_, err = a.s.store.Commit(ctx, store.NewTxn().RequireModRevision(a.session.key, kv.ModRevision).Remove(a.session.key))
			if errors.Is(err, store.ErrConflict) {
				continue // written since: read again
			}
			if err != nil {
				return err
			}
		}
		a.leaving.Store(0)
		close(a.left)
		return nil
	}
}

// fenceAcked records that a draining executor stopped for its epoch, in a
// transaction guarded by the executor record: the watch then assigns a
// successor without waiting for the session to expire.
func (a *agentStream) fenceAcked(ctx context.Context, w *clusterWatch, epoch int64) error {
	sn, _ := w.current()
	e := sn.executorOrNil()
	if e == nil || e.GetInstanceId() != a.instance || e.GetEpoch() != epoch || !e.GetDraining() || e.GetFenceAcked() {
		return nil
	}
	next := proto.Clone(e).(*storagev1.ExecutorRecord)
	next.FenceAcked = true
	key := store.ExecutorKey(a.uid)
	_, err := a.s.store.Commit(ctx, store.NewTxn().Update(key, next, sn.executorRev))
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}
