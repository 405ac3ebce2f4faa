package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	clientv3 "go.etcd.io/etcd/client/v3"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// The sender's steps on each snapshot of the cluster's watch: all run on
// sendLoop, and read and write its fields.

// onSnapshot acts on the watch's latest snapshot: it ends the stream
// (stop fences the agent first) when the agent may no longer be
// connected, else sends what changed — role, drain fence, desired set —
// in that order, so an agent hears its role before the set it is to
// apply.
func (a *agentStream) onSnapshot(ctx context.Context) error {
	sn := a.viewOfSession(ctx)
	if sn == nil {
		return nil
	}
	if err := a.mayStayConnected(sn); err != nil {
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
		return endNotOwned
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

// mayStayConnected ends the stream when the cluster takes no deliveries
// or the instance is no longer a member: the agent must not apply for a
// cluster that has no executor, nor for one it no longer belongs to.
func (a *agentStream) mayStayConnected(sn *snapshot) error {
	switch {
	case !sn.serving():
		return endNotServing
	case !sn.member(a.instance):
		return endRemoved
	}
	return nil
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
	// The stream sends nothing while it waits, so the wait is bounded by
	// what the agent can go without hearing from the host: half its
	// fence-after leaves the other half for the answer. Bounded by one
	// heartbeat interval instead, a loaded etcd that answers in a little
	// more than one would leave a new stream unsure, retried at every
	// heartbeat, and without its first Assignment for good.
	ctx, cancel := context.WithTimeout(ctx, a.s.cfg.FenceAfter/2)
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
		Addons: sn.desired.GetAddons(), PodIdentityAssociations: sn.desired.GetPodIdentityAssociations(),
	}
	a.lastSet.Store(&deliveryv1.DesiredSet{Version: set.GetVersion(), Nonce: set.GetNonce(), Digest: set.GetDigest()})
	if err := a.put(&deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: set}}); err != nil {
		return err
	}
	a.digest = set.GetDigest()
	return nil
}

// nonce names one desired set sent, for the Ack that answers it.
func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
