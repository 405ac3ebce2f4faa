package delivery

// stop is the one way a stream ends: each ending fences the agent (or
// does not) and returns what Connect returns.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// hookedStream is a fakeStream that calls onSend before recording each
// message.
type hookedStream struct {
	*fakeStream
	onSend func(*deliveryv1.HostMessage)
}

func (h hookedStream) Send(m *deliveryv1.HostMessage) error {
	h.onSend(m)
	return h.fakeStream.Send(m)
}

// stoppingStream is a stream at epoch 7 with nothing running: stop is
// called on it directly.
func stoppingStream(t *testing.T, ctx context.Context) (*agentStream, *fakeStream) {
	t.Helper()
	s := &Service{cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: newMonoClock()}
	stream := &fakeStream{ctx: ctx, sent: make(chan *deliveryv1.HostMessage, 16)}
	a := newAgentStream(s, stream, &clusterWatch{uid: "uid-stop"}, nil, &session{revision: 1},
		&deliveryv1.Hello{InstanceId: "i-a"}, make(chan struct{}))
	a.epoch = 7
	return a, stream
}

// sentNow drains what was sent so far.
func sentNow(stream *fakeStream) []*deliveryv1.HostMessage {
	var out []*deliveryv1.HostMessage
	for len(stream.sent) > 0 {
		out = append(out, <-stream.sent)
	}
	return out
}

func TestStopFencesThenEnds(t *testing.T) {
	broken := errors.New("transport is closing")
	for _, tc := range []struct {
		name  string
		err   error
		fence string // the Fence's reason; "" none
		code  codes.Code
	}{
		{"session not renewed", endNotRenewed, "saltbush could not renew the session", codes.Unavailable},
		{"cluster not serving", endNotServing, "the cluster is deleting, failed or gone", codes.FailedPrecondition},
		{"session not owned", endNotOwned, "the session is no longer this stream's", codes.Aborted},
		{"session expired", endSessionExpired, "the session expired", codes.Unavailable},
		{"replaced", endReplaced, "a newer stream of this instance took over", codes.Aborted},
		{"agent silent", endSilent, "saltbush heard nothing from the agent for fence-after", codes.Unavailable},
		{"certificate expired", endCertificateExpired, "the agent's certificate expired", codes.Unauthenticated},
		{"agent closed", receiverEnded(io.EOF), "", codes.OK},
		{"agent cancelled", receiverEnded(status.Error(codes.Canceled, "bye")), "", codes.OK},
		{"send failed", broken, "", codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, stream := stoppingStream(t, ctx)
			err := a.stop(ctx, tc.err)
			if status.Code(err) != tc.code {
				t.Errorf("ended with %v, want %v", err, tc.code)
			}
			if tc.err == broken && err != broken {
				t.Errorf("a failed Send ended the stream with %v, want the Send's error", err)
			}
			sent := sentNow(stream)
			switch {
			case tc.fence == "" && len(sent) != 0:
				t.Errorf("sent %v, want nothing", sent)
			case tc.fence != "" && (len(sent) != 1 || sent[0].GetFence().GetReason() != tc.fence || sent[0].GetFence().GetEpoch() != 7):
				t.Errorf("sent %v, want one Fence at epoch 7: %q", sent, tc.fence)
			}
		})
	}
}

// TestStopOnContextEnd: a revoked certificate (the pki interceptor cancels
// the stream's context with an Unauthenticated cause) ends the stream with
// the revocation, an expired one (its deadline) with Unauthenticated too,
// each after a Fence; a stream that is simply over sends nothing.
func TestStopOnContextEnd(t *testing.T) {
	revoked := status.Error(codes.Unauthenticated, "certificate revoked")
	for _, tc := range []struct {
		name  string
		end   func() (context.Context, context.CancelFunc)
		fence string
		code  codes.Code
	}{
		{"revoked", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(revoked)
			return ctx, func() {}
		}, "the agent's certificate was revoked", codes.Unauthenticated},
		{"expired", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, "the agent's certificate expired", codes.Unauthenticated},
		{"over", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, "", codes.Unknown}, // context.Canceled itself, as gRPC reports a stream that is over
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.end()
			defer cancel()
			// The stream itself stays writable: the Fence goes out on a
			// context of its own.
			live, stopLive := context.WithCancel(context.Background())
			defer stopLive()
			a, stream := stoppingStream(t, live)
			err := a.stop(ctx, contextEnded(ctx))
			if status.Code(err) != tc.code {
				t.Errorf("ended with %v, want %v", err, tc.code)
			}
			if tc.name == "revoked" && err != revoked {
				t.Errorf("ended with %v, want the revocation itself", err)
			}
			if tc.name == "over" && err != context.Canceled {
				t.Errorf("ended with %v, want the context's error", err)
			}
			sent := sentNow(stream)
			if tc.fence == "" && len(sent) != 0 || tc.fence != "" && (len(sent) != 1 || sent[0].GetFence().GetReason() != tc.fence) {
				t.Errorf("sent %v, want Fence %q", sent, tc.fence)
			}
		})
	}
}

// TestStopFlushesTheReceiversAnswers: a receiver that ended the stream
// (a report for an epoch never assigned) left its answers — the result
// and the Fence at that epoch — on out; they go out, in order, and
// nothing else.
func TestStopFlushesTheReceiversAnswers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, stream := stoppingStream(t, ctx)
	result := &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: &deliveryv1.ReportResult{Reason: rejectInvalid}}}
	a.out <- result
	a.out <- fence(9, "reports from epoch 9 are no longer accepted: invalid")
	violation := status.Error(codes.FailedPrecondition, "a report for epoch 9, which was never assigned")
	if err := a.stop(ctx, receiverEnded(violation)); err != violation {
		t.Fatalf("ended with %v, want the receiver's %v", err, violation)
	}
	sent := sentNow(stream)
	if len(sent) != 2 || sent[0] != result || sent[1].GetFence().GetEpoch() != 9 {
		t.Fatalf("sent %v, want the result, then the Fence at epoch 9", sent)
	}
}

// TestStopHandsOverARemovedMember: a removed member is told which Fence
// to acknowledge (leaving) before it is sent, and the stream ends once
// the acknowledgement removed the session (left), not before.
func TestStopHandsOverARemovedMember(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, stream := stoppingStream(t, ctx)
	var leavingAtFence int64
	a.stream = hookedStream{fakeStream: stream, onSend: func(m *deliveryv1.HostMessage) {
		if m.GetFence() != nil {
			leavingAtFence = a.leaving.Load()
		}
	}}
	// A report result the receiver produced before the agent heard the
	// Fence goes out while the stream waits.
	a.out <- &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: &deliveryv1.ReportResult{}}}
	done := make(chan error, 1)
	go func() { done <- a.stop(ctx, endRemoved) }()
	var fenced, answered bool
	for !fenced || !answered {
		select {
		case m := <-stream.sent:
			fenced = fenced || m.GetFence().GetReason() == "the instance is no longer a member"
			answered = answered || m.GetReportResult() != nil
		case err := <-done:
			t.Fatalf("ended (%v) before the removed member acknowledged its Fence", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("no Fence and report result (fenced %v, answered %v)", fenced, answered)
		}
	}
	if leavingAtFence != 8 {
		t.Errorf("leaving was %d when the Fence was sent, want epoch 7 + 1", leavingAtFence)
	}
	close(a.left) // the receiver removed the session on the FenceAck
	select {
	case err := <-done:
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("ended with %v, want FailedPrecondition", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end once the removed member's session was removed")
	}
}
