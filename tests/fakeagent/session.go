package fakeagent

import (
	"fmt"
	"sync"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// Applied is the desired set an agent last applied. It outlives streams:
// a reconnecting agent names it in its Hello, and never applies a set
// older than it (docs/delivery-protocol.md, rule 10). Safe for concurrent
// use.
type Applied struct {
	mu  sync.Mutex
	set *deliveryv1.DesiredSet
}

// Set is the applied set (nil before the first).
func (a *Applied) Set() *deliveryv1.DesiredSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set
}

// Resume fills h's desired version and digest from the applied set, so the
// host resends nothing that is still current.
func (a *Applied) Resume(h *deliveryv1.Hello) *deliveryv1.Hello {
	set := a.Set()
	h.DesiredVersion, h.DesiredDigest = set.GetVersion(), set.GetDigest()
	return h
}

// offer applies set unless it is older than the applied one.
func (a *Applied) offer(set *deliveryv1.DesiredSet) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set != nil && set.GetVersion() < a.set.GetVersion() {
		return false
	}
	a.set = set
	return true
}

// SessionOptions configure a Session.
type SessionOptions struct {
	// StandbysSilent makes a standby acknowledge nothing: BenchmarkDelivery-
	// Streams' fleet measures the host's fan-out of pushes, and thousands of
	// standby acknowledgements (each a write) would measure something else.
	StandbysSilent bool
}

// Taken is what a Session makes of one host message.
type Taken struct {
	// Replies are the agent's answers, to be sent in order.
	Replies []*deliveryv1.AgentMessage
	// Applied is the desired set the message brought, when it was applied.
	Applied *deliveryv1.DesiredSet
	// Refused is set when the message was a desired set older than the
	// one applied (answered with a Nack).
	Refused bool
	// Answered is the report a ReportResult answers.
	Answered *deliveryv1.Report
}

type reportKey struct {
	epoch int64
	uid   string
	gen   int64
	phase deliveryv1.Phase
}

type pendingReport struct {
	r     *deliveryv1.Report
	retry bool
}

// Session is the agent's side of the protocol on one stream. It is not safe
// for concurrent use: one goroutine feeds it the stream's messages.
type Session struct {
	instance string
	applied  *Applied
	opts     SessionOptions

	role     deliveryv1.Role
	epoch    int64
	executor string
	assigned bool
	fenced   bool
	sent     map[reportKey]bool
	pending  []pendingReport // ReportResults come back in order
}

// NewSession starts the protocol state of a stream of instance, applying
// into applied (shared by the agent's streams).
func NewSession(instance string, applied *Applied, opts SessionOptions) *Session {
	return &Session{instance: instance, applied: applied, opts: opts, sent: map[reportKey]bool{}}
}

// Role is the last Assignment's role.
func (s *Session) Role() deliveryv1.Role { return s.role }

// Epoch is the last Assignment's epoch.
func (s *Session) Epoch() int64 { return s.epoch }

// Assigned says whether an Assignment came.
func (s *Session) Assigned() bool { return s.assigned }

// Fenced says whether a Fence for the assigned epoch (or a later one)
// came.
func (s *Session) Fenced() bool { return s.fenced }

// Executing says whether the agent holds the grant to write: the EXECUTOR
// role naming it, at the epoch of the last Assignment, unfenced
// (docs/delivery-protocol.md, rule 13; the fence-after lapse is the
// caller's, which knows when it last heard the host).
func (s *Session) Executing() bool {
	return s.assigned && !s.fenced && s.role == deliveryv1.Role_ROLE_EXECUTOR && s.executor == s.instance
}

// Take takes in m. The error is a host message that breaks the protocol
// (the state is updated all the same).
func (s *Session) Take(m *deliveryv1.HostMessage) (Taken, error) {
	var t Taken
	switch {
	case m.GetAssignment() != nil:
		as := m.GetAssignment()
		s.role, s.epoch, s.executor, s.assigned, s.fenced = as.GetRole(), as.GetEpoch(), as.GetExecutorInstanceId(), true, false
		if as.GetRole() == deliveryv1.Role_ROLE_EXECUTOR && as.GetExecutorInstanceId() != s.instance {
			return t, fmt.Errorf("%s: EXECUTOR assignment naming %s", s.instance, as.GetExecutorInstanceId())
		}
	case m.GetFence() != nil:
		// A Fence ends its epoch and every earlier one; an agent whose
		// assignment is newer ignores it (rule 13).
		f := m.GetFence()
		if f.GetEpoch() >= s.epoch {
			s.fenced = true
			if s.role == deliveryv1.Role_ROLE_EXECUTOR && f.GetEpoch() == s.epoch {
				t.Replies = append(t.Replies, FenceAckMsg(f.GetEpoch()))
			}
		}
	case m.GetDesiredSet() != nil:
		set := m.GetDesiredSet()
		if !s.applied.offer(set) {
			t.Refused = true
			t.Replies = append(t.Replies, NackMsg(set, "older than the set applied"))
			break
		}
		t.Applied = set
		if s.role == deliveryv1.Role_ROLE_EXECUTOR || !s.opts.StandbysSilent {
			t.Replies = append(t.Replies, AckMsg(set))
		}
	case m.GetReportResult() != nil:
		res := m.GetReportResult()
		if len(s.pending) == 0 {
			return t, fmt.Errorf("%s: a ReportResult for no report: %v", s.instance, res)
		}
		p := s.pending[0]
		s.pending = s.pending[1:]
		t.Answered = p.r
		if !res.GetAccepted() && p.retry {
			// Level triggered: say it again (Due).
			delete(s.sent, reportKey{p.r.GetEpoch(), p.r.GetAddonUid(), p.r.GetGeneration(), p.r.GetPhase()})
		}
		if p.r.GetAddon() != res.GetAddon() || p.r.GetGeneration() != res.GetGeneration() {
			return t, fmt.Errorf("%s: ReportResult %v answers %v", s.instance, res, p.r)
		}
	}
	return t, nil
}

// Due is what an unfenced executor owes: a report for every add-on of the
// applied set (READY, REMOVED for a tombstone) not yet reported on this
// stream at this epoch, or whose report was not accepted (rule 12). The
// caller sends each with Track.
func (s *Session) Due() []*deliveryv1.Report {
	if !s.Executing() {
		return nil
	}
	var due []*deliveryv1.Report
	for _, d := range s.applied.Set().GetAddons() {
		phase := deliveryv1.Phase_PHASE_READY
		if d.GetDeleting() {
			phase = deliveryv1.Phase_PHASE_REMOVED
		}
		k := reportKey{s.epoch, d.GetUid(), d.GetGeneration(), phase}
		if s.sent[k] {
			continue
		}
		s.sent[k] = true
		due = append(due, &deliveryv1.Report{Epoch: s.epoch, Addon: d.GetName(), AddonUid: d.GetUid(), Generation: d.GetGeneration(), Phase: phase})
	}
	return due
}

// Track notes that r is being sent, so its ReportResult is matched; retry
// says whether Due should report it again if it is not accepted (false
// for a report a test makes stale on purpose). It returns the message to
// send.
func (s *Session) Track(r *deliveryv1.Report, retry bool) *deliveryv1.AgentMessage {
	s.pending = append(s.pending, pendingReport{r: r, retry: retry})
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Report{Report: r}}
}
