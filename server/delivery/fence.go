package delivery

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// An ending is why a stream ends. The sender's steps return one as their
// error; sendLoop hands it to stop, the one place a stream ends.
type ending struct {
	// reason names the ending in the log.
	reason string
	// fence is the reason of the Fence the agent is sent first; "" sends
	// none (the agent closed the stream, or the receiver's own answers
	// hold the Fence).
	fence string
	// handover: the agent is a removed member, which gets fence-after to
	// acknowledge the Fence (its session goes at once when it does).
	handover bool
	// flush: the receiver ended the stream; its last answers (report
	// results, a Fence among them) go out first.
	flush bool
	// err is what Connect returns (nil: the agent closed the stream).
	err error
}

func (e *ending) Error() string {
	if e.err == nil {
		return e.reason
	}
	return e.err.Error()
}

func (e *ending) Unwrap() error { return e.err }

// The endings that do not depend on what ended the stream; each tells the
// agent why it must stop.
var (
	// The replica's lease was not renewed recently enough to promise
	// the agent its grant (see session.fresh).
	endNotRenewed = &ending{reason: "session_not_renewed", fence: "saltbush could not renew the session",
		err: status.Error(codes.Unavailable, "delivery session not renewed in time; connect again")}
	endNotServing = &ending{reason: "cluster_not_serving", fence: "the cluster is deleting, failed or gone",
		err: status.Error(codes.FailedPrecondition, "delivery ended: the cluster is deleting, failed or gone")}
	endRemoved = &ending{reason: "member_removed", fence: "the instance is no longer a member", handover: true,
		err: status.Error(codes.FailedPrecondition, "delivery ended: the instance is no longer a member")}
	// The session is another stream's now (a newer stream of the
	// instance, on another replica), or gone: this stream no longer keeps
	// the agent's grant alive, so it must not extend it.
	endNotOwned = &ending{reason: "session_not_owned", fence: "the session is no longer this stream's",
		err: status.Error(codes.Aborted, "the session is no longer this stream's; connect again")}
	endSessionExpired = &ending{reason: "session_expired", fence: "the session expired",
		err: status.Error(codes.Unavailable, "delivery session expired; connect again")}
	endReplaced = &ending{reason: "replaced", fence: "a newer stream of this instance took over",
		err: status.Error(codes.Aborted, "a newer stream of this instance took over")}
	// An agent silent for fence-after has stopped applying (it sends
	// heartbeats); its stream may be half-open. Ending it lets the session
	// run out and a standby take over, instead of renewing the session of
	// an agent nobody hears.
	endSilent = &ending{reason: "agent_silent", fence: "saltbush heard nothing from the agent for fence-after",
		err: status.Error(codes.Unavailable, "the agent was silent for fence-after; connect again")}
	endCertificateExpired = &ending{reason: "certificate_expired", fence: "the agent's certificate expired",
		err: status.Error(codes.Unauthenticated, "the agent's certificate expired; connect again with a new one")}
	// The replica is shutting down (Service.Shutdown): the agent moves to
	// another replica now rather than when this one's shutdown times
	// out. Its session is left to it: retired like any ended stream's, it
	// runs out a TTL after the last renewal unless the agent's next
	// stream, on another replica, takes it over first — which keeps the
	// executor's epoch, so no successor is made and none waits for the
	// session to expire. The Fence stops the agent's writes at once; its
	// next stream's Assignment grants it again.
	endShuttingDown = &ending{reason: "replica_shutting_down", fence: "this saltbush replica is shutting down",
		err: errShuttingDown}
)

// errShuttingDown ends the streams of a replica that is shutting down and
// refuses new ones. Unavailable: the agent's link tries another replica.
var errShuttingDown = status.Error(codes.Unavailable, "this saltbush replica is shutting down; connect to another replica")

// contextEnded is why a stream whose context ended ends: the certificate
// was revoked or expired (the stream's context says which), or the stream
// is over.
func contextEnded(ctx context.Context) error {
	if cause := context.Cause(ctx); status.Code(cause) == codes.Unauthenticated {
		return &ending{reason: "certificate_revoked", fence: "the agent's certificate was revoked", err: cause}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return endCertificateExpired
	}
	return &ending{reason: "stream_done", err: ctx.Err()}
}

// receiverEnded is why a stream whose receiver ended ends: the agent
// closed it, or broke the protocol (the receiver's answers say how).
func receiverEnded(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return &ending{reason: "agent_closed"}
	}
	return &ending{reason: "receiver_ended", flush: true, err: err}
}

// stop ends the stream for err, a step's ending or the error of a Send
// (the stream is broken: nothing more reaches the agent). Every ending
// comes here, so every one fences its agent the same way — the Fence at
// the epoch it holds, before the stream is gone, so that it stops
// applying at once rather than at fence-after — and is logged with its
// reason. It returns what Connect returns.
func (a *agentStream) stop(ctx context.Context, err error) error {
	var why *ending
	if !errors.As(err, &why) {
		why = &ending{reason: "send_failed", err: err}
	}
	if why.handover {
		// Before the Fence: its FenceAck may come at once.
		a.leaving.Store(a.epoch + 1)
	}
	if why.fence != "" {
		_ = a.stream.Send(fence(a.epoch, why.fence))
	}
	if why.flush {
		a.flushOut()
	}
	a.s.log.InfoContext(ctx, "agent stream ended", "cluster_uid", a.uid, "instance", a.instance, "epoch", a.epoch,
		"reason", why.reason, "err", why.err)
	if why.handover {
		a.awaitFenceAck(ctx)
	}
	return why.err
}

// flushOut sends what the receiver left on out.
func (a *agentStream) flushOut() {
	for {
		select {
		case m := <-a.out:
			_ = a.stream.Send(m)
		default:
			return
		}
	}
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
		case err := <-a.recvErr:
			// The agent closed its side without acknowledging: the
			// stream is over either way, so its end is only logged.
			a.s.log.DebugContext(ctx, "removed member's stream ended before its FenceAck", "cluster_uid", a.uid, "instance", a.instance, "error", err)
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

func fence(epoch int64, reason string) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Fence{Fence: &deliveryv1.Fence{Epoch: epoch, Reason: reason}}}
}
