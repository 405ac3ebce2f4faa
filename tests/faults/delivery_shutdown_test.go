package faults

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
)

// TestDeliveryReplicaShutdown: two replicas over one etcd, started with a
// long shutdown timeout. i-1, the executor, has its stream on a; i-2, a
// standby, on b; both agents are the real agent's link (guest/hostlink),
// given both replicas' addresses. Replica a is stopped gracefully (as
// SIGTERM does). Checked:
//   - a's Serve returns well within its shutdown timeout (under half of
//     it): the agent stream does not hold gRPC's graceful stop;
//   - i-1's stream on a ends as a replica that is going away ends it: a
//     Fence saying so, then Unavailable (replica_shutting_down);
//   - i-1's link takes it to b, where it takes its session over and is
//     the executor again at the same epoch: no successor was assigned
//     (the standby stays one) and nobody waited for the session to run
//     out; an update made on b converges through i-1 there;
//   - from etcd's history: break before make holds, and epoch 1 is the
//     only assignment.
func TestDeliveryReplicaShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Far beyond anything the stop needs, so that a stop held by the
	// stream (it would take all of it) is told apart from a slow machine.
	const shutdownTimeout = 60 * time.Second
	etcd := startSharedEtcd(t, ctx)
	env := newDLEnv(t, etcd.Endpoints(), 2, servertest.WithConfig(func(c *server.Config) { c.ShutdownTimeout = shutdownTimeout }))
	ra, rb := env.replica(0), env.replica(1)
	const cluster, addonName = "shutdown", "coredns"
	uid, from, err := env.createCluster(ctx, cluster, []string{"i-1", "i-2"})
	if err != nil {
		t.Fatal(err)
	}
	agent := startLinkAgent(t, env, uid, cluster, "i-1", time.Second, ra.srv.GRPCAddr(), rb.srv.GRPCAddr())
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		e, eerr := env.executor(ctx, uid)
		return s["i-1"] == ra.name && e.GetInstanceId() == "i-1" && e.GetEpoch() == 1, errors.Join(err, eerr)
	}); err != nil {
		t.Fatalf("i-1 is not the executor at epoch 1 with its stream on %s: %v", ra.name, err)
	}
	standby := startLinkAgent(t, env, uid, cluster, "i-2", time.Second, rb.srv.GRPCAddr(), ra.srv.GRPCAddr())
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		return !standby.assigned(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_STANDBY, 1).IsZero(), nil
	}); err != nil {
		t.Fatalf("i-2 is not a standby on %s: %v\n%s", rb.name, err, standby.describe())
	}
	if _, err := rb.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
		ConfigurationValues: aws.String(dlConfig(addonName, 1))}); err != nil {
		t.Fatalf("CreateAddon %s: %v", addonName, err)
	}
	waitAddon(t, ctx, env, uid, addonName, 1, "the add-on ACTIVE through i-1 on "+ra.name)

	stopAt := time.Now()
	took, err := env.stopGracefully(0)
	if err != nil {
		t.Errorf("%s's Serve: %v", ra.name, err)
	}
	if took >= shutdownTimeout/2 {
		t.Errorf("%s's Serve returned %s after the stop began; want well within its shutdown timeout %s (under half of it)",
			ra.name, took.Round(time.Millisecond), shutdownTimeout)
	}

	// How i-1's stream on a ended.
	var f *deliveryv1.Fence
	var endAt time.Time
	var endErr error
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		f, endAt, endErr = agent.streamEnd(ra.srv.GRPCAddr(), stopAt)
		return !endAt.IsZero(), nil
	}); err != nil {
		t.Fatalf("i-1's stream on %s did not end after the stop: %v\n%s", ra.name, err, agent.describe())
	}
	if f == nil || f.GetEpoch() != 1 || !strings.Contains(f.GetReason(), "shutting down") {
		t.Errorf("i-1's stream on %s ended after %v, want a Fence for epoch 1 saying the replica is shutting down\n%s", ra.name, f, agent.describe())
	}
	if st := status.Convert(endErr); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
		t.Errorf("i-1's stream on %s ended with %v, want Unavailable: the replica is shutting down", ra.name, endErr)
	}

	// Where i-1 carries on: b, at the same epoch, with its session.
	var back time.Time
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		back = agent.assigned(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_EXECUTOR, 1)
		return !back.IsZero(), nil
	}); err != nil {
		t.Fatalf("i-1's link did not take it to %s as the executor at epoch 1: %v\n%s", rb.name, err, agent.describe())
	}
	if s, err := env.sessions(ctx, uid); err != nil || s["i-1"] != rb.name || s["i-2"] != rb.name {
		t.Errorf("sessions %v (%v); want i-1's and i-2's on %s", s, err, rb.name)
	}
	if _, err := rb.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addonName),
		ConfigurationValues: aws.String(dlConfig(addonName, 2))}); err != nil {
		t.Fatalf("UpdateAddon on %s: %v", rb.name, err)
	}
	waitAddon(t, ctx, env, uid, addonName, 2, "the update made after the stop ACTIVE through i-1 on "+rb.name)
	if e, err := env.executor(ctx, uid); err != nil || e.GetInstanceId() != "i-1" || e.GetEpoch() != 1 {
		t.Errorf("executor %v (%v), want i-1 at epoch 1", e, err)
	}
	if at := standby.assignedAny(rb.srv.GRPCAddr(), deliveryv1.Role_ROLE_EXECUTOR); !at.IsZero() {
		t.Errorf("the standby i-2 was made the executor at %s\n%s", at.Format("15:04:05.000"), standby.describe())
	}
	agent.stop()
	standby.stop()

	h, assigned := env.checkHistorySince(t, ctx, cluster, uid, from)
	if len(assigned) != 1 {
		t.Errorf("assignments %v; want epoch 1's only\n%s", assigned, h.describe())
	}
	t.Logf("%s's Serve returned %s after the stop began (shutdown timeout %s); i-1's stream there ended %s in (%s: %v); "+
		"i-1 the executor on %s at epoch 1 %s in",
		ra.name, took.Round(time.Millisecond), shutdownTimeout, endAt.Sub(stopAt).Round(time.Millisecond), f.GetReason(), endErr,
		rb.name, back.Sub(stopAt).Round(time.Millisecond))
}

// stopGracefully stops replica slot as SIGTERM does (no API call is sent
// to it any more) and returns how long its Serve took to return, and
// what it returned.
func (e *dlEnv) stopGracefully(slot int) (time.Duration, error) {
	e.mu.Lock()
	r := e.replicas[slot]
	r.up.Store(false)
	e.mu.Unlock()
	e.t.Logf("%s: stopping %s", time.Now().Format("15:04:05.000"), r.name)
	start := time.Now()
	err := r.srv.Stop()
	return time.Since(start), err
}

// streamEnd returns, for the first stream on endpoint that ended after
// since, the Fence it brought (nil: none) and when and how it ended (zero:
// not yet).
func (a *linkAgent) streamEnd(endpoint string, since time.Time) (*deliveryv1.Fence, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var f *deliveryv1.Fence
	for _, ev := range a.events {
		switch {
		case ev.endpoint != endpoint || ev.at.Before(since):
		case ev.msg == nil:
			return f, ev.at, ev.err
		case ev.msg.GetFence() != nil && f == nil:
			f = ev.msg.GetFence()
		}
	}
	return nil, time.Time{}, nil
}
