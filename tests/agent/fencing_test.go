package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/guest/agent"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/netproxy"
	"github.com/saltbush/saltbush/tests/poll"
)

// status reads a running agent's status API.
func (a *agentProc) status(t *testing.T) (agent.Status, error) {
	t.Helper()
	return a.Status(context.Background())
}

// waitRole waits until the agent's status shows role (and, for an
// executor, a grant it may write under).
func (a *agentProc) waitRole(t *testing.T, role string) agent.Status {
	t.Helper()
	var st agent.Status
	poll.Until(t, waitChange, "agent "+a.instance+" "+role, func() (bool, string) {
		var err error
		st, err = a.status(t)
		if err != nil {
			return false, err.Error()
		}
		return st.Role == role && (role != "EXECUTOR" || st.Writable), fmt.Sprintf("role %s writable %v", st.Role, st.Writable)
	})
	return st
}

// executor is the cluster's executor as saltbush records it.
func (e *env) executor() *controlv1.DeliveryExecutor {
	e.t.Helper()
	out, err := controlv1.NewDeliveryControlServiceClient(e.admin).GetDeliveryStatus(e.ctx(10*time.Second),
		&controlv1.GetDeliveryStatusRequest{Cluster: &controlv1.ClusterRef{AccountId: e.account, Name: e.cluster}})
	if err != nil {
		e.t.Fatalf("delivery status: %v", err)
	}
	return out.GetExecutor()
}

// writes are the audited writes of the given users, in the order the
// apiserver received them.
func (e *env) writes(users ...string) []kubetest.AuditEvent {
	e.t.Helper()
	evs, err := e.kube.AuditEvents()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []kubetest.AuditEvent
	for _, ev := range evs {
		if slices.Contains(users, ev.User) {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b kubetest.AuditEvent) int {
		return a.RequestReceivedTimestamp.Compare(b.RequestReceivedTimestamp)
	})
	return out
}

// checkOneWriter is the history check over the apiserver's audit log: the
// writes of the cluster's agents fall into tenures of one writer each, a
// tenure's writes all complete before the next writer's first write is
// received, and a writer succeeded never writes again. It returns the
// writers in order.
func checkOneWriter(t *testing.T, writes []kubetest.AuditEvent) []string {
	t.Helper()
	var writers []string
	var lastDone time.Time // the current tenure's latest completion
	for _, w := range writes {
		if n := len(writers); n == 0 || writers[n-1] != w.User {
			if slices.Contains(writers, w.User) {
				t.Fatalf("%s wrote again (%s %s/%s at %s) after %s succeeded it", w.User, w.Verb, w.ObjectRef.Resource,
					w.ObjectRef.Name, w.RequestReceivedTimestamp.Format(time.StampMicro), writers[n-1])
			}
			if n > 0 && !lastDone.Before(w.RequestReceivedTimestamp) {
				t.Fatalf("%s's write received at %s overlaps %s's, which completed at %s", w.User,
					w.RequestReceivedTimestamp.Format(time.StampMicro), writers[n-1], lastDone.Format(time.StampMicro))
			}
			writers = append(writers, w.User)
			lastDone = time.Time{}
		}
		if w.StageTimestamp.After(lastDone) {
			lastDone = w.StageTimestamp
		}
	}
	return writers
}

// TestFencedFailover cuts the executor's stream (a partition between it
// and saltbush; it still reaches its apiserver): it stops writing within
// fence-after — nothing it could fix makes it write once its grant lapsed,
// and the audit log shows no write of it completing after the cut plus
// fence-after plus the margin — the standby becomes the executor, adopts
// the inventory and repairs the drift, a later change is applied by it
// alone, and the old executor, reconnected, is a standby that writes
// nothing.
func TestFencedFailover(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a", "i-b")
	proxy := netproxy.Start(t, e.replicas[0].GRPCAddr())
	a := e.startAgent("i-a", agentOptions{endpoints: []string{proxy.Addr()}})
	a.waitRole(t, "EXECUTOR")
	b := e.startAgent("i-b", agentOptions{})
	b.waitRole(t, "STANDBY")

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: noopValues("one")})
	e.waitActive(noop)
	epoch := e.executor().GetEpoch()

	cut := time.Now()
	proxy.Partition()
	// Its grant lapses; it says so itself.
	poll.Until(t, waitChange, "the cut executor's grant lapses", func() (bool, string) {
		st, err := a.status(t)
		return err == nil && !st.Writable, fmt.Sprintf("%+v %v", st, err)
	})
	lapsed := time.Now()
	t.Logf("executor cut at %s, no grant by %s (%s later)", cut.Format(time.StampMilli), lapsed.Format(time.StampMilli),
		lapsed.Sub(cut).Round(time.Millisecond))

	// Drift the old executor would repair if it could: it sees it (its
	// apiserver is reachable) and must not touch it.
	drifted := time.Now()
	if err := e.k8s.CoreV1().ConfigMaps(noop).Delete(e.ctx(10*time.Second), noop, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitChange, "i-b executor", func() (bool, string) {
		x := e.executor()
		return x.GetInstanceId() == "i-b" && x.GetEpoch() > epoch, fmt.Sprintf("executor %s epoch %d", x.GetInstanceId(), x.GetEpoch())
	})
	b.waitRole(t, "EXECUTOR")
	poll.Until(t, waitChange, "the successor repairs the drift", func() (bool, string) {
		_, err := e.k8s.CoreV1().ConfigMaps(noop).Get(e.ctx(10*time.Second), noop, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	e.waitStatus(noop, types.AddonStatusActive)

	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("two")})
	e.waitUpdate(noop, id, types.UpdateStatusSuccessful)

	proxy.Heal()
	a.waitRole(t, "STANDBY")
	id = e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("three")})
	e.waitUpdate(noop, id, types.UpdateStatusSuccessful)
	cm, err := e.k8s.CoreV1().ConfigMaps(noop).Get(e.ctx(10*time.Second), noop, metav1.GetOptions{})
	if err != nil || cm.Data["message"] != "three" {
		t.Fatalf("ConfigMap after the last update: %v %v", cm.Data, err)
	}

	writes := e.writes(a.user, b.user)
	writers := checkOneWriter(t, writes)
	if !slices.Equal(writers, []string{a.user, b.user}) {
		t.Fatalf("writers in order %v, want %s then %s", writers, a.user, b.user)
	}
	limit := cut.Add(fenceAfter + 2*time.Second) // fence-after plus the safety margin
	for _, w := range writes {
		if w.User != a.user {
			continue
		}
		if w.StageTimestamp.After(limit) || w.RequestReceivedTimestamp.After(drifted) {
			t.Fatalf("the cut executor wrote %s %s/%s, received %s, completed %s: after the cut (%s) plus fence-after and margin, or after the drift",
				w.Verb, w.ObjectRef.Resource, w.ObjectRef.Name, w.RequestReceivedTimestamp.Format(time.StampMicro),
				w.StageTimestamp.Format(time.StampMicro), cut.Format(time.StampMicro))
		}
	}
	if !slices.ContainsFunc(writes, func(w kubetest.AuditEvent) bool {
		return w.User == b.user && w.Verb == "patch" && w.ObjectRef.Resource == "configmaps" && w.ObjectRef.Name == noop
	}) {
		t.Fatal("the successor never wrote the add-on's ConfigMap")
	}
	if n := countApplied(a.log()); n != 1 {
		t.Errorf("the old executor applied %d times; once (before the cut) is all", n)
	}
}

func countApplied(log string) int { return strings.Count(log, `msg="add-on applied"`) }
