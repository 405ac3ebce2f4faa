package fakeagent

import (
	"strings"
	"testing"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

func assignment(role deliveryv1.Role, epoch int64, executor string) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Assignment{Assignment: &deliveryv1.Assignment{
		Role: role, Epoch: epoch, ExecutorInstanceId: executor}}}
}

func fence(epoch int64) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_Fence{Fence: &deliveryv1.Fence{Epoch: epoch}}}
}

func desired(version int64, addons ...*deliveryv1.DesiredAddon) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_DesiredSet{DesiredSet: &deliveryv1.DesiredSet{
		Version: version, Nonce: "n", Addons: addons}}}
}

func result(addon string, gen int64, accepted bool) *deliveryv1.HostMessage {
	return &deliveryv1.HostMessage{Message: &deliveryv1.HostMessage_ReportResult{ReportResult: &deliveryv1.ReportResult{
		Addon: addon, Generation: gen, Accepted: accepted}}}
}

var (
	coredns  = &deliveryv1.DesiredAddon{Name: "coredns", Uid: "u1", Generation: 1}
	gone     = &deliveryv1.DesiredAddon{Name: "kube-proxy", Uid: "u2", Generation: 2, Deleting: true}
	executor = deliveryv1.Role_ROLE_EXECUTOR
	standby  = deliveryv1.Role_ROLE_STANDBY
)

// kinds names the messages, in order: "ack", "nack", "fence-ack", "report
// <addon> <phase>".
func kinds(ms []*deliveryv1.AgentMessage) string {
	var out []string
	for _, m := range ms {
		switch {
		case m.GetAck() != nil:
			out = append(out, "ack")
		case m.GetNack() != nil:
			out = append(out, "nack")
		case m.GetFenceAck() != nil:
			out = append(out, "fence-ack")
		case m.GetReport() != nil:
			out = append(out, "report "+m.GetReport().GetAddon()+" "+m.GetReport().GetPhase().String())
		}
	}
	return strings.Join(out, ", ")
}

// TestSession feeds a session host messages and checks what the agent
// answers, and reports, after the last (docs/delivery-protocol.md, rules
// 10–13).
func TestSession(t *testing.T) {
	cases := []struct {
		name    string
		opts    SessionOptions
		msgs    []*deliveryv1.HostMessage
		replies string // to the last message
		due     string // reports owed after it
		wantErr string
	}{
		{name: "executor acknowledges and reports every add-on",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 1, "i-1"), desired(5, coredns, gone)},
			replies: "ack", due: "report coredns PHASE_READY, report kube-proxy PHASE_REMOVED"},
		{name: "standby acknowledges and reports nothing",
			msgs:    []*deliveryv1.HostMessage{assignment(standby, 1, "i-2"), desired(5, coredns)},
			replies: "ack"},
		{name: "silent standby does not acknowledge",
			opts:    SessionOptions{StandbysSilent: true},
			msgs:    []*deliveryv1.HostMessage{assignment(standby, 1, "i-2"), desired(5, coredns)},
			replies: ""},
		{name: "a set older than the applied one is refused",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 1, "i-1"), desired(5, coredns), desired(4)},
			replies: "nack", due: "report coredns PHASE_READY"},
		{name: "fence of the executor's epoch is acknowledged and stops reports",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 2, "i-1"), desired(5, coredns), fence(2)},
			replies: "fence-ack"},
		{name: "a later fence ends the epoch without an acknowledgement",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 2, "i-1"), desired(5, coredns), fence(3)},
			replies: ""},
		{name: "an older epoch's fence is ignored",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 2, "i-1"), desired(5, coredns), fence(1)},
			replies: "", due: "report coredns PHASE_READY"},
		{name: "an assignment after a fence grants again",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 2, "i-1"), desired(5, coredns), fence(2), assignment(executor, 3, "i-1")},
			replies: "", due: "report coredns PHASE_READY"},
		{name: "an EXECUTOR assignment naming another instance is an error",
			msgs:    []*deliveryv1.HostMessage{assignment(executor, 1, "i-9")},
			wantErr: "naming i-9"},
		{name: "a report result for no report is an error",
			msgs:    []*deliveryv1.HostMessage{result("coredns", 1, true)},
			wantErr: "for no report"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSession("i-1", &Applied{}, tc.opts)
			var (
				taken Taken
				err   error
			)
			for _, m := range tc.msgs {
				if taken, err = s.Take(m); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(taken.Replies); got != tc.replies {
				t.Errorf("replies %q, want %q", got, tc.replies)
			}
			var due []*deliveryv1.AgentMessage
			for _, r := range s.Due() {
				due = append(due, s.Track(r, true))
			}
			if got := kinds(due); got != tc.due {
				t.Errorf("due %q, want %q", got, tc.due)
			}
		})
	}
}

// TestSessionLevelTriggered: a report is owed once per epoch, generation
// and phase; one not accepted is owed again, one sent on purpose (not to
// be retried) is not.
func TestSessionLevelTriggered(t *testing.T) {
	applied := &Applied{}
	s := NewSession("i-1", applied, SessionOptions{})
	for _, m := range []*deliveryv1.HostMessage{assignment(executor, 1, "i-1"), desired(5, coredns)} {
		if _, err := s.Take(m); err != nil {
			t.Fatal(err)
		}
	}
	due := s.Due()
	if len(due) != 1 {
		t.Fatalf("due %v", due)
	}
	s.Track(due[0], true)
	stale := &deliveryv1.Report{Epoch: 0, Addon: "coredns", AddonUid: "u1", Generation: 1, Phase: deliveryv1.Phase_PHASE_READY}
	s.Track(stale, false)
	if again := s.Due(); len(again) != 0 {
		t.Fatalf("owed again before any result: %v", again)
	}
	taken, err := s.Take(result("coredns", 1, false))
	if err != nil || taken.Answered != due[0] {
		t.Fatalf("answered %v, %v; want the first report", taken.Answered, err)
	}
	if taken, err = s.Take(result("coredns", 1, false)); err != nil || taken.Answered != stale {
		t.Fatalf("answered %v, %v; want the stale report", taken.Answered, err)
	}
	if again := s.Due(); len(again) != 1 {
		t.Fatalf("a report not accepted is owed again once; due %v", again)
	}
	// A new stream of the same agent resumes from the applied set.
	h := applied.Resume(&deliveryv1.Hello{})
	if h.GetDesiredVersion() != 5 {
		t.Fatalf("Hello resumes from version %d, want 5", h.GetDesiredVersion())
	}
}
