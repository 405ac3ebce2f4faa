package delivery

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
)

// The sender's steps on each snapshot of the cluster's watch: all run on
// sendLoop, and read and write its fields.

// onSnapshot acts on the watch's latest snapshot: it ends the stream
// (after a Fence) when the agent may no longer be connected, else sends
// what changed — role, drain fence, desired set — in that order, so an
// agent hears its role before the set it is to apply.
func (a *agentStream) onSnapshot(ctx context.Context) error {
	sn := a.viewOfSession(ctx)
	if sn == nil {
		return nil
	}
	if err := a.mayStayConnected(ctx, sn); err != nil {
		return err
	}
	owned, known := a.ownsSession(ctx, sn)
	// etcd could not say whose the session is: say nothing but a Fence
	// until it can (checked again every heartbeat interval); the agent
	// lapses meanwhile.
	a.unsure = !known
	if !known {
		return nil
	}
	if !owned {
		// The session is another stream's now (a newer stream of the
		// instance, on another replica), or gone: this stream no longer
		// keeps the agent's grant alive, so it must not extend it.
		_ = a.put(fence(a.epoch, "the session is no longer this stream's"))
		return status.Error(codes.Aborted, "the session is no longer this stream's; connect again")
	}
	if err := a.sendAssignment(sn); err != nil {
		return err
	}
	if err := a.sendDrainFence(sn); err != nil {
		return err
	}
	if err := a.sendDesiredSet(sn); err != nil {
		return err
	}
	if a.role == deliveryv1.Role_ROLE_EXECUTOR {
		a.s.observeExecutor(a.watch, a, a.applied.Load(), sn.desired.GetDigest())
	}
	return nil
}

// viewOfSession is the watch's latest snapshot if it includes this
// stream's session, else nil: a view older than the stream's own session
// must not be acted on (a reconnecting agent must not be told a role etcd
// has since given away); the watch brings a newer one.
func (a *agentStream) viewOfSession(ctx context.Context) *snapshot {
	sn, err := a.watch.current()
	if sn == nil || sn.revision < a.session.revision {
		if err != nil {
			a.s.log.WarnContext(ctx, "delivery snapshot", "cluster_uid", a.uid, "err", err)
		}
		return nil
	}
	return sn
}

// mayStayConnected ends the stream, after a Fence, when the cluster takes
// no deliveries or the instance is no longer a member.
func (a *agentStream) mayStayConnected(ctx context.Context, sn *snapshot) error {
	if !sn.serving() {
		reason := "the cluster is deleting, failed or gone"
		_ = a.put(fence(a.epoch, reason))
		return status.Error(codes.FailedPrecondition, "delivery ended: "+reason)
	}
	if !sn.member(a.instance) {
		reason := "the instance is no longer a member"
		a.leaving.Store(a.epoch + 1)
		_ = a.put(fence(a.epoch, reason))
		a.awaitFenceAck(ctx)
		return status.Error(codes.FailedPrecondition, "delivery ended: "+reason)
	}
	return nil
}

// awaitFenceAck gives a removed member fence-after to acknowledge its
// Fence. An agent that does has stopped, and its session goes at once
// (the receiver removes it): a successor need not wait for it to run
// out. One that does not has stopped on its own by then, but its session
// runs out first.
func (a *agentStream) awaitFenceAck(ctx context.Context) {
	wait := time.NewTimer(a.s.cfg.FenceAfter)
	defer wait.Stop()
	for {
		select {
		case <-a.left:
			return
		case <-wait.C:
			return
		case <-a.recvErr:
			return
		case <-ctx.Done():
			return
		case m := <-a.out:
			// Answers to reports the agent sent before it heard the
			// fence: the receiver must not block on them, or it never
			// reads the FenceAck.
			_ = a.stream.Send(m)
		}
	}
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

// sendAssignment tells the agent its role and epoch, first of all and
// whenever either changed. An executor that lost its role (or its epoch)
// is fenced at the old epoch first, so it stops before it hears anything
// of the new one.
func (a *agentStream) sendAssignment(sn *snapshot) error {
	role, epoch := deliveryv1.Role_ROLE_STANDBY, sn.executor.GetEpoch()
	if sn.executor.GetInstanceId() == a.instance {
		role = deliveryv1.Role_ROLE_EXECUTOR
	}
	if a.sentRole && role == a.role && epoch == a.epoch {
		return nil
	}
	if a.sentRole && a.role == deliveryv1.Role_ROLE_EXECUTOR {
		if err := a.put(fence(a.epoch, "another executor was assigned")); err != nil {
			return err
		}
	}
	a.role, a.epoch, a.sentRole = role, epoch, true
	a.executor.Store(role == deliveryv1.Role_ROLE_EXECUTOR)
	if role != deliveryv1.Role_ROLE_EXECUTOR {
		// Its figures are no longer the executor's.
		a.s.forgetExecutor(a)
	}
	return a.put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{
		Role: role, Epoch: epoch, ExecutorInstanceId: sn.executor.GetInstanceId(), Timing: a.s.cfg.timing(),
	}}})
}

// sendDrainFence fences an executor an operator drains, once per epoch:
// its FenceAck lets the watch assign a successor at once.
func (a *agentStream) sendDrainFence(sn *snapshot) error {
	if a.role != deliveryv1.Role_ROLE_EXECUTOR || !sn.executor.GetDraining() || a.drainFenced == a.epoch {
		return nil
	}
	a.drainFenced = a.epoch
	return a.put(fence(a.epoch, "drained by an operator"))
}

// sendDesiredSet sends the desired set when its content digest differs
// from what the agent has (state of the world: the latest wins, nothing
// is resent to an agent that has it). The set is remembered, without its
// add-ons, for the Ack that names its nonce.
func (a *agentStream) sendDesiredSet(sn *snapshot) error {
	if sn.desired.GetDigest() == a.digest {
		return nil
	}
	set := &deliveryv1.DesiredSet{
		Version: sn.desired.GetVersion(), Nonce: nonce(), Epoch: a.epoch, Digest: sn.desired.GetDigest(),
		Addons: sn.desired.GetAddons(),
	}
	a.lastSet.Store(&deliveryv1.DesiredSet{Version: set.GetVersion(), Nonce: set.GetNonce(), Digest: set.GetDigest()})
	if err := a.put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: set}}); err != nil {
		return err
	}
	a.digest = set.GetDigest()
	return nil
}
