package conformance

import (
	"bufio"
	"context"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/fakeagent"
)

// fastDelivery shortens delivery's timing for tests (the rule
// fenceAfter + margin < TTL still holds).
func fastDelivery(c *server.Config) {
	c.Delivery.SessionTTL = 3 * time.Second
	c.Delivery.HeartbeatInterval = 200 * time.Millisecond
	c.Delivery.FenceAfter = 1500 * time.Millisecond
	c.Delivery.SafetyMargin = 500 * time.Millisecond
}

// simAgent is a scripted guest agent: a fakeagent.Stream with its own
// agent certificate whose test sends every message itself; it renders
// nothing (that is the agent's own issue), it only records what the host
// sends.
type simAgent struct {
	t        *testing.T
	instance string
	stream   *fakeagent.Stream
	msgs     <-chan fakeagent.Received
	cancel   context.CancelFunc
}

func connectAgent(t *testing.T, srv *servertest.Server, certUID, certInstance string, hello *deliveryv1.Hello) *simAgent {
	t.Helper()
	return connectAgentOn(t, srv.AgentConn(t, certUID, certInstance), certInstance, hello)
}

// connectAgentOn opens a stream on conn (an agent certificate's). Its
// heartbeats tick every 100ms from the Hello on, so no test's stream is
// ended for silence.
func connectAgentOn(t *testing.T, conn *grpc.ClientConn, certInstance string, hello *deliveryv1.Hello) *simAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := fakeagent.Connect(ctx, conn, fakeagent.Options{Hello: hello, Heartbeats: fakeagent.Ticker, HeartbeatEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &simAgent{t: t, instance: certInstance, stream: stream, msgs: stream.Receive(256), cancel: cancel}
}

// next returns the first message that matches, or fails after within.
func (a *simAgent) next(within time.Duration, what string, match func(*deliveryv1.HostMessage) bool) *deliveryv1.HostMessage {
	a.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case r, ok := <-a.msgs:
			if !ok || r.Err != nil {
				a.t.Fatalf("%s: stream ended waiting for %s: %v", a.instance, what, r.Err)
			}
			if match(r.Msg) {
				return r.Msg
			}
		case <-deadline:
			a.t.Fatalf("%s: no %s within %s", a.instance, what, within)
		}
	}
}

func (a *simAgent) assignment(role deliveryv1.Role, epoch int64) *deliveryv1.Assignment {
	a.t.Helper()
	return a.next(10*time.Second, role.String()+" assignment", func(m *deliveryv1.HostMessage) bool {
		as := m.GetAssignment()
		return as != nil && as.GetRole() == role && (epoch == 0 || as.GetEpoch() == epoch)
	}).GetAssignment()
}

func (a *simAgent) desired(what string, match func(*deliveryv1.DesiredSet) bool) *deliveryv1.DesiredSet {
	a.t.Helper()
	return a.next(10*time.Second, what, func(m *deliveryv1.HostMessage) bool {
		return m.GetDesiredSet() != nil && match(m.GetDesiredSet())
	}).GetDesiredSet()
}

func (a *simAgent) send(m *deliveryv1.AgentMessage) {
	a.t.Helper()
	if err := a.stream.Send(m); err != nil {
		a.t.Fatalf("%s: send: %v", a.instance, err)
	}
}

func (a *simAgent) report(epoch int64, addon, uid string, gen int64, phase deliveryv1.Phase) *deliveryv1.ReportResult {
	a.t.Helper()
	a.send(fakeagent.ReportMsg(epoch, addon, uid, gen, phase))
	return a.next(10*time.Second, "report result", func(m *deliveryv1.HostMessage) bool {
		return m.GetReportResult() != nil && m.GetReportResult().GetAddon() == addon
	}).GetReportResult()
}

// ended waits for the stream to end and returns its status code.
func (a *simAgent) ended(within time.Duration) codes.Code {
	a.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case r, ok := <-a.msgs:
			if !ok || r.Err != nil {
				return status.Code(r.Err)
			}
		case <-deadline:
			a.t.Fatalf("%s: stream still open after %s", a.instance, within)
		}
	}
}

// deliveryHarness is an ACTIVE cluster (API mode) with members i-1, i-2.
type deliveryHarness struct {
	*accessHarness
	uid string
}

func newDeliveryHarness(t *testing.T) *deliveryHarness {
	t.Helper()
	return newDeliveryHarnessWith(t, fastDelivery)
}

func newDeliveryHarnessWith(t *testing.T, timing func(*server.Config)) *deliveryHarness {
	t.Helper()
	h := &deliveryHarness{accessHarness: newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, servertest.WithConfig(timing))}
	h.uid = h.addMember(t, h.cluster, "i-1")
	h.addMember(t, h.cluster, "i-2")
	return h
}

func (h *deliveryHarness) hello(instance string) *deliveryv1.Hello {
	return &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: h.cluster}, InstanceId: instance, BootId: "boot-1", AgentVersion: "test"}
}

func (h *deliveryHarness) executorKV(t *testing.T) (string, int64, int64) {
	t.Helper()
	resp, err := h.srv.Etcd(t).Get(ctxT(t), h.srv.Store(t).Key(store.ExecutorKey(h.uid)))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("executor record: %v %v", resp, err)
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision, resp.Header.Revision
}

// TestDeliveryAdmission: only an agent naming itself and its own cluster,
// as a member of a cluster that is neither DELETING nor FAILED, is
// admitted.
func TestDeliveryAdmission(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	other := createInput("other")
	if _, err := h.eks.CreateCluster(ctx, other); err != nil {
		t.Fatal(err)
	}
	otherUID := h.addMember(t, "other", "i-9")
	failed := createInput("failed")
	if _, err := h.eks.CreateCluster(ctx, failed); err != nil {
		t.Fatal(err)
	}
	failedUID := h.addMember(t, "failed", "i-1")
	cc := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t))
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: &controlv1.ClusterRef{AccountId: h.account, Name: "failed"},
		Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name              string
		certUID, certInst string
		hello             *deliveryv1.Hello
		code              codes.Code
	}{
		{"a certificate of another cluster", otherUID, "i-1", h.hello("i-1"), codes.PermissionDenied},
		{"impersonating another member", h.uid, "i-1", h.hello("i-2"), codes.PermissionDenied},
		{"not a member", h.uid, "i-3", h.hello("i-3"), codes.PermissionDenied},
		{"an earlier incarnation", "6f1c2a4e-8d2b-4c51-9a3e-0b7d5e9f1a22", "i-1", h.hello("i-1"), codes.PermissionDenied},
		{"a FAILED cluster", failedUID, "i-1", &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: "failed"}, InstanceId: "i-1"}, codes.FailedPrecondition},
		{"another cluster's name with this cluster's certificate", h.uid, "i-1", &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: h.account, Name: "other"}, InstanceId: "i-1"}, codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := connectAgent(t, h.srv, tc.certUID, tc.certInst, tc.hello)
			if got := a.ended(10 * time.Second); got != tc.code {
				t.Errorf("stream ended with %s, want %s", got, tc.code)
			}
		})
	}
	t.Run("a service certificate", func(t *testing.T) {
		stream, err := deliveryv1.NewDeliveryServiceClient(h.srv.GRPC(t)).Connect(ctx)
		if err == nil {
			_ = stream.Send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Hello{Hello: h.hello("i-1")}})
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("service certificate: %v, want PermissionDenied", err)
		}
	})
	// None of the refused streams left a session or an executor behind.
	resp, err := h.srv.Etcd(t).Get(ctx, h.srv.Store(t).Key("clusters/"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.Contains(k, "/sessions/") || strings.HasSuffix(k, "/executor") {
			t.Errorf("a refused stream left %s", k)
		}
	}
}

// TestDeliveryConvergence: CreateAddon is pushed to the executor (no
// polling), its READY report makes the add-on ACTIVE, and a reconnecting
// agent that has the current set gets nothing resent.
func TestDeliveryConvergence(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	a := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	as := a.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	if as.GetTiming().GetSessionTtl().AsDuration() != 3*time.Second || as.GetTiming().GetFenceAfter().AsDuration() != 1500*time.Millisecond {
		t.Errorf("timing = %v", as.GetTiming())
	}
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop"),
		ConfigurationValues: aws.String(`{"message": "pushed"}`)}); err != nil {
		t.Fatal(err)
	}
	set := a.desired("the new add-on", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 })
	d := set.GetAddons()[0]
	if d.GetName() != "saltbush-noop" || d.GetGeneration() != 1 || d.GetDeleting() || !strings.Contains(string(d.GetManifest()), "pushed") ||
		set.GetEpoch() != 1 || set.GetNonce() == "" || len(set.GetDigest()) != 64 {
		t.Fatalf("desired set = %v", set)
	}
	a.send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{Version: set.GetVersion(), Nonce: set.GetNonce()}}})
	if r := a.report(1, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_READY); !r.GetAccepted() {
		t.Fatalf("READY report: %v", r)
	}
	out, err := h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")})
	if err != nil || out.Addon.Status != types.AddonStatusActive {
		t.Fatalf("add-on after READY: %v %v", out, err)
	}
	// A report for another generation changes nothing.
	if r := a.report(1, d.GetName(), d.GetUid(), 7, deliveryv1.Phase_PHASE_FAILED); r.GetAccepted() || r.GetReason() != "stale_generation" {
		t.Errorf("stale generation report: %v", r)
	}

	// Reconnect knowing the current set: the same instance is still the
	// executor at the same epoch (its session never lapsed), and the set is
	// not sent again.
	a.cancel()
	b := connectAgent(t, h.srv, h.uid, "i-1", &deliveryv1.Hello{Cluster: h.hello("i-1").GetCluster(), InstanceId: "i-1",
		DesiredVersion: set.GetVersion(), DesiredDigest: set.GetDigest()})
	b.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	deadline := time.After(time.Second)
	for done := false; !done; {
		select {
		case r := <-b.msgs:
			if r.Msg.GetDesiredSet() != nil {
				t.Fatalf("desired set resent to an agent that has it: %v", r.Msg.GetDesiredSet())
			}
		case <-deadline:
			done = true
		}
	}
}

// TestDeliveryFailover: the executor's stream is cut; the standby becomes
// executor only once the old session has expired (break before make), the
// old executor's late report is rejected and fenced, and when it comes
// back it is a standby.
func TestDeliveryFailover(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	one := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	two := connectAgent(t, h.srv, h.uid, "i-2", h.hello("i-2"))
	two.assignment(deliveryv1.Role_ROLE_STANDBY, 1)
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")}); err != nil {
		t.Fatal(err)
	}
	d := one.desired("the add-on", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 }).GetAddons()[0]
	two.desired("the add-on (standbys get the set too)", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 })

	// A report the standby sends is not accepted, and fenced.
	if r := two.report(1, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_READY); r.GetAccepted() || r.GetReason() != "not_executor" {
		t.Errorf("standby's report: %v", r)
	}
	two.next(5*time.Second, "fence for the standby's report", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil })

	cutAt := time.Now()
	one.cancel()
	two.assignment(deliveryv1.Role_ROLE_EXECUTOR, 2)
	if since := time.Since(cutAt); since < 2*time.Second {
		t.Errorf("successor assigned %s after the cut, before the old session (TTL 3s) could expire", since)
	}
	// The transaction that assigned epoch 2 saw no session of i-1.
	_, execRev, _ := h.executorKV(t)
	old, err := h.srv.Etcd(t).Get(ctx, h.srv.Store(t).Key(store.SessionKey(h.uid, "i-1")), clientv3.WithRev(execRev))
	if err != nil || len(old.Kvs) != 0 {
		t.Errorf("i-1's session existed when epoch 2 was assigned: %v %v", old.Kvs, err)
	}

	// i-1 comes back: a standby; a report it queued under epoch 1 is
	// rejected and answered with a Fence.
	back := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	back.assignment(deliveryv1.Role_ROLE_STANDBY, 2)
	if r := back.report(1, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_READY); r.GetAccepted() {
		t.Errorf("the old executor's late report was accepted: %v", r)
	}
	back.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence().GetEpoch() == 1 })
	out, err := h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")})
	if err != nil || out.Addon.Status != types.AddonStatusCreating {
		t.Fatalf("add-on after rejected reports: %v %v", out, err)
	}
	// The new executor's report counts.
	if r := two.report(2, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_READY); !r.GetAccepted() {
		t.Errorf("executor epoch 2 report: %v", r)
	}
}

// TestDeliveryEndsWithTheCluster: a member removed, and then the cluster
// deleted, end their streams after a Fence; deleting ends the executor
// (a record naming nobody, the epoch kept) in the same transaction.
func TestDeliveryEndsWithTheCluster(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	one := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	two := connectAgent(t, h.srv, h.uid, "i-2", h.hello("i-2"))
	two.assignment(deliveryv1.Role_ROLE_STANDBY, 1)

	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: h.ref(), InstanceId: "i-2"}); err != nil {
		t.Fatal(err)
	}
	two.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil })
	if got := two.ended(5 * time.Second); got != codes.FailedPrecondition {
		t.Errorf("removed member's stream ended with %s", got)
	}

	if _, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(h.cluster)}); err != nil {
		t.Fatal(err)
	}
	one.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil })
	if got := one.ended(5 * time.Second); got != codes.FailedPrecondition {
		t.Errorf("executor's stream ended with %s", got)
	}
	// The executor record names nobody now and keeps the epoch.
	resp, err := h.srv.Etcd(t).Get(ctx, h.srv.Store(t).Key(store.ExecutorKey(h.uid)))
	e := &storagev1.ExecutorRecord{}
	if err != nil || len(resp.Kvs) != 1 || store.Decode(resp.Kvs[0].Value, e) != nil || e.GetInstanceId() != "" || e.GetEpoch() != 1 {
		t.Errorf("executor record after DeleteCluster: %v %v", e, err)
	}
}

// TestDeliveryDrainAndStatus: a drained executor is fenced, and once it
// acknowledges the fence a standby takes over at the next epoch without
// waiting for the session to expire; the status RPC shows executor,
// sessions, what they applied and the add-ons' reported generations.
func TestDeliveryDrainAndStatus(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	dc := controlv1.NewDeliveryControlServiceClient(h.srv.GRPC(t))
	one := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	two := connectAgent(t, h.srv, h.uid, "i-2", h.hello("i-2"))
	two.assignment(deliveryv1.Role_ROLE_STANDBY, 1)
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")}); err != nil {
		t.Fatal(err)
	}
	set := one.desired("the add-on", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 })
	d := set.GetAddons()[0]
	one.send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{Version: set.GetVersion(), Nonce: set.GetNonce()}}})
	if r := one.report(1, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_READY); !r.GetAccepted() {
		t.Fatalf("READY: %v", r)
	}

	// Status: executor i-1 at epoch 1, two sessions, i-1 applied the set,
	// the add-on reported READY at generation 1 by i-1 under epoch 1.
	deadline := time.Now().Add(10 * time.Second)
	var st *controlv1.GetDeliveryStatusResponse
	for {
		var err error
		st, err = dc.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: h.ref()})
		if err != nil {
			t.Fatal(err)
		}
		acked := false
		for _, s := range st.GetSessions() {
			acked = acked || (s.GetInstanceId() == "i-1" && s.GetAckedVersion() == set.GetVersion() && s.GetAckedDigest() == set.GetDigest())
		}
		if acked || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.GetExecutor().GetInstanceId() != "i-1" || st.GetExecutor().GetEpoch() != 1 || len(st.GetSessions()) != 2 ||
		st.GetDesiredDigest() != set.GetDigest() || len(st.GetAddons()) != 1 {
		t.Fatalf("status = %v", st)
	}
	if a := st.GetAddons()[0]; a.GetObservedPhase() != "READY" || a.GetObservedGeneration() != 1 || a.GetReportedEpoch() != 1 || a.GetReportedBy() != "i-1" {
		t.Errorf("add-on status = %v", a)
	}
	// The same as metrics: the executor (its stream here) applied the
	// current set, its epoch, two live sessions, a report.
	label := `{cluster_uid="` + h.uid + `"}`
	want := map[string]float64{
		"saltbush_delivery_executor_in_sync" + label:         1,
		"saltbush_delivery_executor_applied_version" + label: float64(set.GetVersion()),
		"saltbush_delivery_executor_epoch" + label:           1,
		"saltbush_delivery_sessions" + label:                 2,
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := map[string]float64{}
		for series := range want {
			got[series], _ = scrapeMetric(t, h.srv.URL, series)
		}
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery metrics = %v, want %v", got, want)
		}
	}
	if v, ok := scrapeMetric(t, h.srv.URL, "saltbush_delivery_last_report_timestamp_seconds"+label); !ok || time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("last report metric = %v (present %v)", v, ok)
	}
	drainingBefore, _ := scrapeMetric(t, h.srv.URL, `saltbush_delivery_reports_rejected_total{reason="draining"}`)

	// Drain: i-1 is fenced; its reports are refused from then on.
	if _, err := dc.DrainExecutor(ctx, &controlv1.DrainExecutorRequest{Cluster: h.ref()}); err != nil {
		t.Fatal(err)
	}
	one.next(5*time.Second, "drain fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence().GetEpoch() == 1 })
	if r := one.report(1, d.GetName(), d.GetUid(), 1, deliveryv1.Phase_PHASE_FAILED); r.GetAccepted() || r.GetReason() != "draining" {
		t.Errorf("report of a draining executor: %v", r)
	}
	if v, _ := scrapeMetric(t, h.srv.URL, `saltbush_delivery_reports_rejected_total{reason="draining"}`); v != drainingBefore+1 {
		t.Errorf("rejected reports (draining) = %v, want %v", v, drainingBefore+1)
	}
	// Its acknowledgement hands over at once (well before the 2s TTL,
	// since i-1's session stays live: its stream is still open).
	one.send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_FenceAck{FenceAck: &deliveryv1.FenceAck{Epoch: 1}}})
	two.assignment(deliveryv1.Role_ROLE_EXECUTOR, 2)
	one.assignment(deliveryv1.Role_ROLE_STANDBY, 2)
	st, err := dc.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: h.ref()})
	if err != nil || st.GetExecutor().GetInstanceId() != "i-2" || st.GetExecutor().GetEpoch() != 2 || st.GetExecutor().GetDraining() {
		t.Fatalf("status after the drain = %v %v", st, err)
	}
	if !strings.Contains(st.GetExecutor().GetReason(), "drained") {
		t.Errorf("reason = %q", st.GetExecutor().GetReason())
	}
}

// TestDeliveryRemovedExecutor: removing the executor from the cluster
// fences it; once it acknowledges the fence its session goes and a
// standby takes over at the next epoch, without waiting for the session to
// run out. The session TTL here is 60 s, so an assignment within the test's
// waits cannot come from expiry. A removed executor that does not
// acknowledge is not replaced before its session runs out.
func TestDeliveryRemovedExecutor(t *testing.T) {
	longSessions := func(c *server.Config) {
		fastDelivery(c)
		c.Delivery.SessionTTL = 60 * time.Second
	}
	for _, tc := range []struct {
		name        string
		acknowledge bool
	}{
		{"acknowledges the fence", true},
		{"stays silent", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newDeliveryHarnessWith(t, longSessions)
			ctx := ctxT(t)
			one := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
			one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
			two := connectAgent(t, h.srv, h.uid, "i-2", h.hello("i-2"))
			two.assignment(deliveryv1.Role_ROLE_STANDBY, 1)

			if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: h.ref(), InstanceId: "i-1"}); err != nil {
				t.Fatal(err)
			}
			f := one.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil }).GetFence()
			if f.GetEpoch() != 1 {
				t.Errorf("fence of the removed executor: epoch %d, want 1", f.GetEpoch())
			}
			if !tc.acknowledge {
				// Its stream ends after fence-after; the session stays
				// (60 s), and so does the executor record.
				if got := one.ended(5 * time.Second); got != codes.FailedPrecondition {
					t.Errorf("removed executor's stream ended with %s", got)
				}
				deadline := time.Now().Add(2 * time.Second)
				for time.Now().Before(deadline) {
					v, _, _ := h.executorKV(t)
					e := &storagev1.ExecutorRecord{}
					if err := store.Decode([]byte(v), e); err != nil || e.GetInstanceId() != "i-1" || e.GetEpoch() != 1 {
						t.Fatalf("executor %v (%v) while the removed executor's session lives", e, err)
					}
					time.Sleep(100 * time.Millisecond)
				}
				return
			}
			one.send(&deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_FenceAck{FenceAck: &deliveryv1.FenceAck{Epoch: 1}}})
			if got := one.ended(5 * time.Second); got != codes.FailedPrecondition {
				t.Errorf("removed executor's stream ended with %s", got)
			}
			two.assignment(deliveryv1.Role_ROLE_EXECUTOR, 2)
			st, err := controlv1.NewDeliveryControlServiceClient(h.srv.GRPC(t)).GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: h.ref()})
			if err != nil {
				t.Fatal(err)
			}
			if e := st.GetExecutor(); e.GetInstanceId() != "i-2" || e.GetEpoch() != 2 || !strings.Contains(e.GetReason(), "i-1 was removed") {
				t.Errorf("executor after the removal: %v", e)
			}
			for _, s := range st.GetSessions() {
				if s.GetInstanceId() == "i-1" {
					t.Errorf("the removed member's session is still live: %v", s)
				}
			}
		})
	}
}

// scrapeMetric reads one series (name and labels as exposed, e.g.
// `saltbush_delivery_sessions{cluster_uid="…"}`) from the server's
// /metrics; ok is false when it is not exposed.
func scrapeMetric(t *testing.T, baseURL, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), series+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q: %v", series, v, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestDeliveryRevokedCertificate: revoking an agent's certificate ends its
// open stream (a Fence first), not just its next connection; the executor
// whose certificate was revoked is succeeded once its session runs out.
func TestDeliveryRevokedCertificate(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	conn, serial := h.srv.AgentConnSerial(t, h.uid, "i-1")
	one := connectAgentOn(t, conn, "i-1", h.hello("i-1"))
	one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	two := connectAgent(t, h.srv, h.uid, "i-2", h.hello("i-2"))
	two.assignment(deliveryv1.Role_ROLE_STANDBY, 1)

	if err := h.srv.Authority().Revoke(ctx, serial, "instance replaced"); err != nil {
		t.Fatal(err)
	}
	f := one.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil }).GetFence()
	if f.GetEpoch() != 1 || !strings.Contains(f.GetReason(), "revoked") {
		t.Errorf("fence = %v", f)
	}
	if got := one.ended(5 * time.Second); got != codes.Unauthenticated {
		t.Errorf("revoked agent's stream ended with %s", got)
	}
	two.assignment(deliveryv1.Role_ROLE_EXECUTOR, 2)
}

// TestDeliveryNewerStreamOfAnInstance: an instance that connects again
// while its old stream is still open (a restarted agent whose old TCP
// connection has not died yet) takes the session over; the old stream is
// fenced and ends, and the new one carries on with the same role.
func TestDeliveryNewerStreamOfAnInstance(t *testing.T) {
	h := newDeliveryHarness(t)
	old := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	old.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	newer := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	newer.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	f := old.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil }).GetFence()
	// Two paths fence it, whichever comes first: the replica ends the
	// older of its two streams of the instance at once, or the old
	// stream's next session renewal finds the session the newer one's
	// (on a busy machine the renewal can win).
	if r := f.GetReason(); f.GetEpoch() != 1 || (!strings.Contains(r, "newer stream") && !strings.Contains(r, "no longer this stream's")) {
		t.Errorf("old stream's fence: %v, want epoch 1, the session taken by the newer stream", f)
	}
	if got := old.ended(5 * time.Second); got != codes.Aborted {
		t.Errorf("old stream ended with %s", got)
	}
	// The session is the newer stream's: it stays the executor, its
	// reports count.
	ctx := ctxT(t)
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")}); err != nil {
		t.Fatal(err)
	}
	set := newer.desired("the add-on", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 })
	d := set.GetAddons()[0]
	if r := newer.report(1, d.GetName(), d.GetUid(), d.GetGeneration(), deliveryv1.Phase_PHASE_READY); !r.GetAccepted() {
		t.Errorf("newer stream's report: %v", r)
	}
}

// TestDeliveryReportFromAnUnassignedEpoch: a report naming an epoch the
// host never assigned (a confused agent) is refused, the agent fenced at
// that epoch (covering the one it holds) and its stream ended, so it
// connects again and hears its assignment afresh rather than staying a
// fenced executor nobody replaces.
func TestDeliveryReportFromAnUnassignedEpoch(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	one := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	one.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop")}); err != nil {
		t.Fatal(err)
	}
	d := one.desired("the add-on", func(s *deliveryv1.DesiredSet) bool { return len(s.GetAddons()) == 1 }).GetAddons()[0]
	if r := one.report(5, d.GetName(), d.GetUid(), d.GetGeneration(), deliveryv1.Phase_PHASE_READY); r.GetAccepted() || r.GetReason() != "invalid" {
		t.Errorf("report for epoch 5: %v", r)
	}
	if f := one.next(5*time.Second, "fence", func(m *deliveryv1.HostMessage) bool { return m.GetFence() != nil }).GetFence(); f.GetEpoch() != 5 {
		t.Errorf("fence = %v, want epoch 5", f)
	}
	if got := one.ended(5 * time.Second); got != codes.FailedPrecondition {
		t.Errorf("stream ended with %s", got)
	}
	again := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	again.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	if r := again.report(1, d.GetName(), d.GetUid(), d.GetGeneration(), deliveryv1.Phase_PHASE_READY); !r.GetAccepted() {
		t.Errorf("report at the assigned epoch after reconnecting: %v", r)
	}
}
