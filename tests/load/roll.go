package main

// A rolling upgrade under load (-saltbush-from): the replicas start as an
// older saltbush and, -roll-at into the run, are upgraded one at a time to
// -saltbush as an operator does it: stop one gracefully, start the new
// binary on its data directory and ports, wait until it is ready, then the
// next. The SDK clients reach the façades through the front (front.go) and
// the agents have every replica as an endpoint, so that the load goes on
// through the roll; what it saw, and whether the world was sound after it,
// is in the result.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/invariants"
)

// settleTimeout bounds each wait after a rolling run's load: for every
// agent's stream to be up again, and for the add-ons to leave their
// transitional statuses (the executors report on every new stream, and
// repeat their reports every -report-every).
const settleTimeout = 2 * time.Minute

// rollReport is what a rolling upgrade did, in the rate it ran in.
type rollReport struct {
	from, to string // the binaries
	// began and ended are since the load started.
	began, ended time.Duration
	steps        []rollStep
	// okAtEnd is the SDK calls that had succeeded when the roll ended;
	// okAfter those that succeeded after it, until the load ended.
	okAtEnd, okAfter int64
	// err is why the roll did not finish: a replica that did not come
	// back, or the run interrupted.
	err error
}

// rollStep is one replica's upgrade.
type rollStep struct {
	replica  string
	from, to string // its binary before and after
	// at is when it went down (SIGTERM), since the load started; stopped
	// how long until the process exited, down until the new one was
	// ready (/readyz 200).
	at, stopped, down time.Duration
	// stopErr says the old process did not end cleanly on SIGTERM (an
	// exit code, a kill after childStopTimeout, or an exit before it was
	// stopped); "" when it did.
	stopErr string
	ready   bool
}

// runRoll waits until -roll-at into the load (start), upgrades every
// replica to o.saltbushBin (system.roll) and fills in roll. The load's
// successes until the roll's end are read from rec; f is told while
// replicas are being stopped.
func runRoll(ctx context.Context, o *options, procs *system, f *fleet, start time.Time, rec *recorder, roll *rollReport) {
	t := time.NewTimer(time.Until(start.Add(o.rollAt)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		roll.err = ctx.Err()
		return
	case <-t.C:
	}
	roll.began = time.Since(start)
	f.upgrading.Store(true)
	roll.steps, roll.err = procs.roll(ctx, o.saltbushBin, start)
	f.upgrading.Store(false)
	roll.ended = time.Since(start)
	roll.okAtEnd = rec.merged(opNames()).Count
}

// roll upgrades the replicas to bin one at a time, in order, and says what
// each took. A replica that does not come back ends the roll: the others
// keep their binary.
func (s *system) roll(ctx context.Context, bin string, start time.Time) ([]rollStep, error) {
	s.mu.Lock()
	procs := slices.Clone(s.replicas)
	s.mu.Unlock()
	var steps []rollStep
	for _, p := range procs {
		st, err := s.restart(ctx, p, bin, start)
		steps = append(steps, st)
		if err != nil {
			return steps, err
		}
	}
	return steps, nil
}

// restart stops p's process with SIGTERM (serve's graceful shutdown,
// within --shutdown-timeout), waits until it has exited, and starts bin
// on the same data directory, name, ports and flags, until it is ready.
func (s *system) restart(ctx context.Context, p *replicaProc, bin string, start time.Time) (rollStep, error) {
	old, from := p.current()
	st := rollStep{replica: p.name, from: from, to: bin, at: time.Since(start)}
	if old == nil {
		return st, fmt.Errorf("replica %s: no process to upgrade", p.name)
	}
	t0 := time.Now()
	if err := old.stop(); err != nil {
		st.stopErr = err.Error()
	}
	st.stopped = time.Since(t0)
	p.retire(old)
	if err := s.start(ctx, p, bin); err != nil {
		return st, fmt.Errorf("replica %s did not come back on %s: %w", p.name, bin, err)
	}
	st.down = time.Since(t0)
	st.ready = true
	return st, nil
}

// afterRoll is what a rolling run checks once its load has ended.
type afterRoll struct {
	// agentsUp is the agents with a stream up once they settled (or at
	// the deadline), agentsUpIn how long that took.
	agentsUp   int
	agentsUpIn time.Duration
	// stuck are the add-ons still CREATING, UPDATING or DELETING at the
	// deadline ("account/cluster/addon STATUS"); settledIn is how long
	// until none was.
	stuck     []string
	settledIn time.Duration
	// keyspace is the keyspace checker's summary, violations what it
	// found (tests/invariants).
	keyspace   string
	violations []string
}

// checkAfterRoll waits for the agents' streams and for the add-ons to
// settle, then checks the keyspace. An error is a check that could not
// run; what the checks found is in the afterRoll.
func checkAfterRoll(ctx context.Context, e *env, f *fleet) (*afterRoll, error) {
	a := &afterRoll{}
	t0 := time.Now()
	upCtx, cancel := context.WithTimeout(ctx, settleTimeout)
	// At the deadline the count says how many are missing.
	_ = f.waitUp(upCtx)
	cancel()
	a.agentsUp, a.agentsUpIn = f.up(), time.Since(t0)

	t0 = time.Now()
	var err error
	if a.stuck, err = e.stuckAddons(ctx, time.Now().Add(settleTimeout)); err != nil {
		return a, err
	}
	a.settledIn = time.Since(t0)

	checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep, err := invariants.Check(checkCtx, e.etcdCli, store.DefaultPrefix, nil)
	if err != nil {
		return a, fmt.Errorf("keyspace check: %w", err)
	}
	a.keyspace = rep.Summary()
	for _, v := range rep.Violations {
		a.violations = append(a.violations, v.String())
	}
	return a, nil
}

// addonRef names an add-on of a cluster.
type addonRef struct {
	c    *clusterInfo
	name string
}

func (r addonRef) String() string { return r.c.tenant.account + "/" + r.c.name + "/" + r.name }

// stuckAddons waits until no add-on of any cluster is CREATING, UPDATING
// or DELETING, as each cluster's tenant sees them through the façade
// (ListAddons, then DescribeAddon), and returns those still so at
// deadline. The load has ended: no add-on appears after the first
// listing, so later rounds describe only the ones still in transition.
func (e *env) stuckAddons(ctx context.Context, deadline time.Time) ([]string, error) {
	sdks := map[*tenant]*eks.Client{}
	for i, t := range e.tenants {
		sdks[t] = e.setupSDK(t, e.facade(i))
	}
	var mu sync.Mutex
	var pending []addonRef
	err := parallel(ctx, len(e.clusters), 8, func(i int) error {
		c := e.clusters[i]
		p := eks.NewListAddonsPaginator(sdks[c.tenant], &eks.ListAddonsInput{ClusterName: aws.String(c.name)})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("list the add-ons of %s: %w", c.name, err)
			}
			mu.Lock()
			for _, n := range out.Addons {
				pending = append(pending, addonRef{c, n})
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		var still []addonRef
		var stuck []string
		err := parallel(ctx, len(pending), 8, func(i int) error {
			r := pending[i]
			out, err := sdks[r.c.tenant].DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(r.c.name), AddonName: aws.String(r.name)})
			var nf *ekstypes.ResourceNotFoundException
			switch {
			case errors.As(err, &nf):
				return nil // deleted: settled
			case err != nil:
				return fmt.Errorf("describe add-on %s: %w", r, err)
			}
			switch st := out.Addon.Status; st {
			case ekstypes.AddonStatusCreating, ekstypes.AddonStatusUpdating, ekstypes.AddonStatusDeleting:
				mu.Lock()
				still = append(still, r)
				stuck = append(stuck, fmt.Sprintf("%s %s", r, st))
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(still) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) {
			slices.Sort(stuck)
			return stuck, nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
