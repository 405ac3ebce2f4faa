package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/tests/fakeagent"
)

// The agents' operations in the recorder.
const (
	opReport = "agent Report" // a Report until its ReportResult
	opStream = "agent stream" // streams the host ended, and Fences
)

// reportsExpectedRejected are the reasons a report may be refused in a
// healthy run: the SDK clients changed or deleted the add-on while the
// report was on its way (docs/delivery-protocol.md). A stale epoch or a
// report from a non-executor means an executor changed: a stream lapsed.
var reportsExpectedRejected = map[string]bool{"stale_generation": true, "unknown_addon": true, "stale_incarnation": true}

// fleet is a run's protocol-level guest agents (tests/fakeagent): one mTLS
// connection with its own agent certificate and one delivery stream each,
// acknowledging every desired set and, as executor, reporting every add-on
// READY (REMOVED for a tombstone) at once. Its heartbeats and repeated
// reports come from one loop each (heartbeats, pokeRepeats) for the whole
// fleet; each agent's stream is read by the agent's own run goroutine.
type fleet struct {
	rec         *recorder
	reportEvery time.Duration

	// interval is the heartbeat interval of the first Assignment.
	interval atomic.Int64
	// sets, acks, reports and repeats count what the agents received and
	// sent; reconnects the streams opened again after the host ended one.
	sets, acks, reports, repeats, reconnects atomic.Int64
	// upgrading is set while a rolling upgrade stops and starts replicas
	// (runRoll): the streams of a replica that is stopped end then, and
	// their agents move to another.
	upgrading atomic.Bool

	mu       sync.Mutex
	live     []*agent          // agents that said Hello (heartbeats, repeats)
	examples map[string]string // a message of each kind of stream end, and of Fence
}

// agent is one guest agent. stream is replaced by run (on a reconnect)
// and read by the fleet's loops, under mu.
type agent struct {
	f        *fleet
	instance string
	hello    *deliveryv1.Hello
	// conns are one connection per endpoint, its own replica's first
	// (connectAll); next is the index of the one a stream opens on (read
	// and changed by connect, and by run once it has started).
	conns   []*grpc.ClientConn
	next    int
	applied fakeagent.Applied
	// poke asks run to repeat the executor's reports (fleet.pokeRepeats).
	poke chan struct{}
	// up says the current stream had its Assignment and has not ended.
	up atomic.Bool

	mu     sync.Mutex
	stream *fakeagent.Stream
}

func newFleet(rec *recorder, reportEvery time.Duration) *fleet {
	return &fleet{rec: rec, reportEvery: reportEvery, examples: map[string]string{}}
}

// connectAll dials every member of every cluster, member m of cluster c to
// replica (c+m) mod replicas so a cluster's members straddle replicas, and
// waits until each has its Assignment. The agents run until ctx ends.
//
// In a rolling run (e.rolling) each agent has every replica as an
// endpoint, its own first, as the real agent is configured with them all
// (guest/hostlink): when its replica goes down it opens its stream on the
// next by itself. Otherwise it has its own replica only, as before, so
// that the measurements stay comparable.
func (f *fleet) connectAll(ctx context.Context, e *env, certTTL time.Duration) error {
	type member struct {
		c       *clusterInfo
		replica int
		inst    string
	}
	var members []member
	for ci, c := range e.clusters {
		for m, inst := range c.members {
			members = append(members, member{c, (ci + m) % len(e.replicas), inst})
		}
	}
	go f.heartbeats(ctx)
	if f.reportEvery > 0 {
		go f.pokeRepeats(ctx)
	}
	// Eight at a time: each admission writes a session and starts a
	// cluster's watch, and a storm of them starves etcd on a small machine.
	return parallel(ctx, len(members), 8, func(i int) error {
		m := members[i]
		var tlsCfg *tls.Config
		err := retrying(ctx, 5, func() (err error) {
			tlsCfg, err = e.agentTLS(ctx, m.c.uid, m.inst, certTTL)
			return err
		})
		if err != nil {
			return err
		}
		a := &agent{f: f, instance: m.inst, poke: make(chan struct{}, 1), hello: &deliveryv1.Hello{
			Cluster: &deliveryv1.ClusterName{AccountId: m.c.tenant.account, Name: m.c.name}, InstanceId: m.inst,
			BootId: "boot-1", AgentVersion: "load",
		}}
		endpoints := 1
		if e.rolling {
			endpoints = len(e.replicas)
		}
		for j := range endpoints {
			conn, err := grpc.NewClient(e.replicas[(m.replica+j)%len(e.replicas)].grpcAddr, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg)))
			if err != nil {
				a.closeConns()
				return err
			}
			a.conns = append(a.conns, conn)
		}
		if err := a.connect(ctx); err != nil {
			a.closeConns()
			return err
		}
		f.mu.Lock()
		f.live = append(f.live, a)
		f.mu.Unlock()
		assigned := make(chan struct{}, 1)
		go a.run(ctx, assigned)
		select {
		case <-assigned:
			return nil
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("%s: no Assignment within 2m (%d streams reopened so far)", m.inst, f.reconnects.Load())
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// retrying calls call up to attempts times, a second apart, until it
// succeeds: setup's etcd writes may time out on a starved machine.
func retrying(ctx context.Context, attempts int, call func() error) error {
	var err error
	for range attempts {
		if err = call(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
	return err
}

// close ends every agent's connections (their streams end with ctx); the
// agents stay counted.
func (f *fleet) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.live {
		a.closeConns()
	}
}

func (a *agent) closeConns() {
	for _, c := range a.conns {
		_ = c.Close() // a second Close only says it was closed
	}
}

// reset forgets what the agents counted (during setup).
func (f *fleet) reset() {
	for _, c := range []*atomic.Int64{&f.sets, &f.acks, &f.reports, &f.repeats, &f.reconnects} {
		c.Store(0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.examples)
}

// connected is how many agents said Hello.
func (f *fleet) connected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// up is how many agents have a stream up now: Assignment received, not
// ended.
func (f *fleet) up() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.live {
		if a.up.Load() {
			n++
		}
	}
	return n
}

// waitUp waits until every agent has a stream up, or ctx ends: after a
// replica went away its agents open theirs on another after a pause.
func (f *fleet) waitUp(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for f.up() < f.connected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d agents have a stream up: %w", f.up(), f.connected(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// streamEnded counts a stream the host ended. Unavailable is what a
// replica that is stopped ends its streams with: expected during a
// rolling upgrade, when replicas are stopped on purpose.
func (f *fleet) streamEnded(code codes.Code, msg string) {
	f.rec.countError(opStream, code.String(), code == codes.Unavailable && f.upgrading.Load())
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.examples[code.String()]; !ok {
		f.examples[code.String()] = msg
	}
}

// fenced counts a Fence, and keeps the first one's words. A replica that
// shuts down fences its executors' streams (delivery's endShuttingDown):
// expected during a rolling upgrade.
func (f *fleet) fenced(instance string, fence *deliveryv1.Fence) {
	f.rec.countError(opStream, "Fence", f.upgrading.Load() && strings.Contains(fence.GetReason(), "shutting down"))
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.examples["Fence"]; !ok {
		f.examples["Fence"] = fmt.Sprintf("%s at epoch %d: %s", instance, fence.GetEpoch(), fence.GetReason())
	}
}

// connect opens a stream on the current endpoint and says Hello,
// resuming from the last desired set applied (the host resends nothing
// that is still current). An endpoint that fails to open one is passed
// over for the next, as the real agent does.
func (a *agent) connect(ctx context.Context) error {
	hello := a.applied.Resume(proto.Clone(a.hello).(*deliveryv1.Hello))
	s, err := fakeagent.Connect(ctx, a.conns[a.next%len(a.conns)], fakeagent.Options{Hello: hello, Heartbeats: fakeagent.ByCaller})
	if err != nil {
		a.next++
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stream != nil {
		a.stream.Close() // it ended already; this frees its context
	}
	a.stream = s
	return nil
}

func (a *agent) current() *fakeagent.Stream {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stream
}

// run is the agent's protocol loop: it owns the session and the send times
// of the reports in flight (ReportResults come back in order). The first
// Assignment is signalled on assigned. A stream the host ends, before it
// or after, is opened again after a pause, as the real agent does: on the
// same endpoint if the host had spoken on it, else on the next (a replica
// shutting down refuses new streams before its port closes).
func (a *agent) run(ctx context.Context, assigned chan<- struct{}) {
	f := a.f
	first := true
	heard := false // the host spoke on the current stream
	session := fakeagent.NewSession(a.instance, &a.applied, fakeagent.SessionOptions{})
	var inFlight []time.Time
	stream := a.current()
	msgs := stream.Receive(64)
	send := func(m *deliveryv1.AgentMessage) {
		// A failed send means the stream is ending: its Receive says why.
		_ = stream.Send(m)
	}
	report := func(r *deliveryv1.Report, retry bool) {
		inFlight = append(inFlight, time.Now())
		send(session.Track(r, retry))
	}
	for {
		var in fakeagent.Received
		select {
		case <-ctx.Done():
			return
		case <-a.poke:
			if !session.Executing() {
				continue
			}
			// Level triggered: the latest report of every live add-on,
			// again (what the real agent sends on every stream and after
			// every assignment).
			for _, d := range a.applied.Set().GetAddons() {
				if d.GetDeleting() {
					continue
				}
				f.repeats.Add(1)
				report(&deliveryv1.Report{Epoch: session.Epoch(), Addon: d.GetName(), AddonUid: d.GetUid(),
					Generation: d.GetGeneration(), Phase: deliveryv1.Phase_PHASE_READY}, false)
			}
			continue
		case r, ok := <-msgs:
			if !ok {
				msgs = nil // the end came in the last value, and msgs was replaced then
				continue
			}
			in = r
		}
		if in.Err != nil {
			a.up.Store(false)
			if ctx.Err() != nil {
				return
			}
			if !heard {
				a.next++
			}
			heard = false
			st := status.Convert(in.Err)
			f.streamEnded(st.Code(), st.Message())
			if !a.reconnect(ctx) {
				return
			}
			f.reconnects.Add(1)
			session = fakeagent.NewSession(a.instance, &a.applied, fakeagent.SessionOptions{})
			inFlight = nil
			stream = a.current()
			msgs = stream.Receive(64)
			continue
		}
		m := in.Msg
		heard = true
		switch {
		case m.GetAssignment() != nil:
			a.up.Store(true)
			f.interval.CompareAndSwap(0, int64(m.GetAssignment().GetTiming().GetHeartbeatInterval().AsDuration()))
			if first {
				first = false
				assigned <- struct{}{}
			}
		case m.GetDesiredSet() != nil:
			f.sets.Add(1)
		case m.GetFence() != nil:
			f.fenced(a.instance, m.GetFence())
		case m.GetReportResult() != nil && len(inFlight) > 0:
			res := m.GetReportResult()
			d := in.At.Sub(inFlight[0])
			inFlight = inFlight[1:]
			if res.GetAccepted() {
				f.rec.recordKind(opReport, d, "", false, false, "")
			} else {
				f.rec.recordKind(opReport, d, "rejected: "+res.GetReason(), reportsExpectedRejected[res.GetReason()], false, "")
			}
		}
		taken, err := session.Take(m)
		if err != nil {
			f.rec.countError(opStream, "protocol: "+err.Error(), false)
		}
		for _, reply := range taken.Replies {
			if reply.GetAck() != nil {
				f.acks.Add(1)
			}
			send(reply)
		}
		for _, r := range session.Due() {
			f.reports.Add(1)
			report(r, true)
		}
	}
}

// reconnect opens a new stream, retrying every second, until it succeeds
// or ctx ends.
func (a *agent) reconnect(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
		if a.connect(ctx) == nil {
			return true
		}
	}
}

// heartbeats sends every live agent a Heartbeat once per heartbeat
// interval (the Assignment's), spread evenly over it, as the real agent
// does when idle: saltbush ends the stream of an agent it has not heard
// from for fence-after.
func (f *fleet) heartbeats(ctx context.Context) {
	hb := fakeagent.HeartbeatMsg()
	f.spread(ctx, func() time.Duration { return time.Duration(f.interval.Load()) }, func(a *agent) {
		_ = a.current().Send(hb)
	})
}

// pokeRepeats pokes every live agent once per -report-every, spread evenly.
func (f *fleet) pokeRepeats(ctx context.Context) {
	f.spread(ctx, func() time.Duration { return f.reportEvery }, func(a *agent) {
		select {
		case a.poke <- struct{}{}:
		default:
		}
	})
}

// spread calls do for every live agent once per period, a few every 10 ms.
func (f *fleet) spread(ctx context.Context, period func() time.Duration, do func(*agent)) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	// carry is the fraction of an agent owed from the previous ticks, so
	// fewer agents than ticks per period are served at the right rate.
	var carry float64
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		iv := period()
		f.mu.Lock()
		agents := f.live
		f.mu.Unlock()
		if iv <= 0 || len(agents) == 0 {
			continue
		}
		carry += float64(len(agents)) * float64(tick) / float64(iv)
		for ; carry >= 1; carry-- {
			i %= len(agents)
			do(agents[i])
			i++
		}
	}
}
