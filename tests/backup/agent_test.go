package backup

// Guest agents at protocol level (tests/fakeagent) that outlive the
// replicas they talk to, as real agents outlive a restore: each keeps the
// desired set it applied (fakeagent.Applied, the agent's state file),
// reconnects to whichever replica address it is given, and resumes with
// the applied set's version and digest in its Hello.

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/tests/fakeagent"
)

// targets are the gRPC addresses of the replicas up now (none during the
// outage): agent i connects to targets[i mod n], as a load balancer would
// spread them.
type targets struct {
	mu    sync.Mutex
	addrs []string
}

func (t *targets) set(addrs ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addrs = addrs
}

func (t *targets) pick(i int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.addrs) == 0 {
		return ""
	}
	return t.addrs[i%len(t.addrs)]
}

// agentState is what the test reads of an agent.
type agentState struct {
	streams   int     // streams admitted (an Assignment came) so far
	refused   []int64 // versions of desired sets refused as older than the applied one
	role      deliveryv1.Role
	epoch     int64
	executing bool
	accepted  []*deliveryv1.Report // reports the host accepted
	errs      []error              // host messages that broke the protocol
}

type agent struct {
	idx     int
	hello   *deliveryv1.Hello
	tls     *tls.Config
	targets *targets
	applied fakeagent.Applied

	mu    sync.Mutex
	state agentState

	cancel context.CancelFunc
	done   chan struct{}
}

func startAgent(idx int, hello *deliveryv1.Hello, tlsCfg *tls.Config, tg *targets) *agent {
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{idx: idx, hello: hello, tls: tlsCfg, targets: tg, cancel: cancel, done: make(chan struct{})}
	go a.run(ctx)
	return a
}

func (a *agent) stop() {
	a.cancel()
	<-a.done
}

func (a *agent) snapshot() agentState {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.state
	s.refused = append([]int64(nil), s.refused...)
	s.accepted = append([]*deliveryv1.Report(nil), s.accepted...)
	s.errs = append([]error(nil), s.errs...)
	return s
}

func (a *agent) run(ctx context.Context) {
	defer close(a.done)
	for ctx.Err() == nil {
		if addr := a.targets.pick(a.idx); addr != "" {
			a.stream(ctx, addr)
		}
		// A real agent backs off between attempts (500 ms doubling to
		// 30 s, docs/agent.md); short here, so the test waits on events.
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stream is one Connect stream, until it ends.
func (a *agent) stream(ctx context.Context, addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(grpccreds.NewTLS(a.tls)))
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hello := a.applied.Resume(proto.Clone(a.hello).(*deliveryv1.Hello))
	st, err := fakeagent.Connect(sctx, conn, fakeagent.Options{Hello: hello})
	if err != nil {
		return
	}
	session := fakeagent.NewSession(a.hello.GetInstanceId(), &a.applied, fakeagent.SessionOptions{})
	in := st.Receive(64)
	// Reports the host did not accept are owed again (level triggered),
	// but at most once per tick: after a restore the applied set may name
	// add-on generations the restored keyspace does not have, and their
	// reports are refused every time.
	admitted := false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	defer a.set(func(s *agentState) { s.role, s.epoch, s.executing = deliveryv1.Role_ROLE_UNSPECIFIED, 0, false })
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case r := <-in:
			if r.Err != nil {
				return
			}
			taken, err := session.Take(r.Msg)
			a.set(func(s *agentState) {
				if err != nil {
					s.errs = append(s.errs, err)
				}
				if r.Msg.GetAssignment() != nil && !admitted {
					admitted = true
					s.streams++
				}
				s.role, s.epoch, s.executing = session.Role(), session.Epoch(), session.Executing()
				if taken.Refused {
					s.refused = append(s.refused, r.Msg.GetDesiredSet().GetVersion())
				}
				if res := r.Msg.GetReportResult(); res != nil && res.GetAccepted() && taken.Answered != nil {
					s.accepted = append(s.accepted, taken.Answered)
				}
			})
			for _, m := range taken.Replies {
				_ = st.Send(m)
			}
			if r.Msg.GetReportResult() != nil {
				continue // owed reports wait for the tick
			}
		}
		for _, rep := range session.Due() {
			_ = st.Send(session.Track(rep, true))
		}
	}
}

func (a *agent) set(f func(*agentState)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.state)
}
