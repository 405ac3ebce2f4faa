package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

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
	case <-s.closing:
		// A stream waiting for its Hello would hold the replica's
		// graceful stop for the hello timeout.
		return nil, errShuttingDown
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
	ref := &controlv1.ClusterRef{AccountId: h.GetCluster().GetAccountId(), Name: h.GetCluster().GetName()}
	// From the read view first: in a connect storm every agent of a
	// cluster reads its record, which a linearizable Get decoded once per
	// agent (a 1,000-member record a thousand times); the view decodes
	// each version once. A stale record costs nothing: the session's write
	// is guarded by the revision read here (openSession), so the agent
	// connects again. A refusal is confirmed linearizably, so that a
	// member added a moment ago through another replica is admitted.
	c, rev, err := s.clusters.Read(ctx, ref)
	if err = admissible(agent, c, err, refused); err != nil {
		c, rev, err = s.clusters.Get(ctx, ref)
		if err = admissible(agent, c, err, refused); err != nil {
			return nil, 0, err
		}
	}
	return c, rev, nil
}

// admissible says why agent may not connect to c, as read with err; nil
// when it may.
func admissible(agent *identity.Agent, c *storagev1.ClusterRecord, err error, refused *errdefs.Error) error {
	var apiErr *errdefs.Error
	switch {
	case errors.As(err, &apiErr):
		return refused.WithCause(err)
	case err != nil:
		return err
	case c.GetUid() != agent.ClusterUID:
		return refused
	}
	sn := &snapshot{cluster: c}
	if !sn.member(agent.Instance) {
		return errdefs.AccessDenied("Instance %s is not a member of cluster %s.", agent.Instance, c.GetName())
	}
	if !sn.serving() {
		return errdefs.InvalidRequest("Cluster %s is %s: it takes no deliveries.", c.GetName(), c.GetStatus())
	}
	return nil
}

// openSession records the agent's session on the replica's lease, which
// is renewed while the stream lives; end it with closeSession.
func (s *Service) openSession(ctx context.Context, c *storagev1.ClusterRecord, clusterRev int64, h *deliveryv1.Hello) (*session, error) {
	lease, err := s.renewer.acquire(ctx)
	if errors.Is(err, errLeaseTooSlow) {
		s.log.WarnContext(ctx, "agent refused: no fresh session lease", "instance", h.GetInstanceId(), "err", err)
		return nil, errNotFresh(h.GetInstanceId())
	}
	if err != nil {
		return nil, fmt.Errorf("session lease for %s: %w", h.GetInstanceId(), err)
	}
	if !lease.fresh(s.clock, s.cfg) {
		// The replica's lease is not being renewed in time.
		s.renewer.release(lease)
		s.log.WarnContext(ctx, "agent refused: the session lease is not fresh", "instance", h.GetInstanceId())
		return nil, errNotFresh(h.GetInstanceId())
	}
	rec := &storagev1.AgentSessionRecord{
		InstanceId: h.GetInstanceId(), BootId: h.GetBootId(),
		AgentVersion: h.GetAgentVersion(), AgentCommit: h.GetAgentCommit(), AgentContractBaseline: h.GetAgentContractBaseline(),
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
	if !ss.fresh(s.clock, s.cfg) {
		// Written too late to promise the agent anything: it would be
		// fenced at its first message.
		s.renewer.release(lease)
		go s.retire(ss)
		s.log.WarnContext(ctx, "agent refused: its session was not fresh once written", "instance", h.GetInstanceId())
		return nil, errNotFresh(h.GetInstanceId())
	}
	return ss, nil
}

// errNotFresh refuses a stream whose session could not be fresh when it
// was written (etcd slow from this replica, or unreachable). Refused
// before the host says a word, the agent's link counts this replica as
// failing and tries the next; admitted only to be fenced at once, it
// would count it as working and come back to it, again and again, while
// another replica could serve it.
func errNotFresh(instance string) error {
	return status.Errorf(codes.Unavailable, "the delivery session of %s cannot be kept fresh from this replica (etcd is slow or unreachable from it); connect to another replica", instance)
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
	return ss.lease.fresh(clock, cfg)
}

// fresh reports whether a session on l would be fresh now (session.fresh).
func (l *replicaLease) fresh(clock monoClock, cfg Config) bool {
	return clock.since(l.renewed.Load()) < cfg.freshWindow()
}
