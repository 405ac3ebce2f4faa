package delivery

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// TestAssignAfterTheExecutorsSessionLapsed: the executor's session is
// taken over in place (a newer stream of the instance) and the epoch
// stays; it lapses and the instance comes back with a new session before
// anyone saw the gap, and the same instance is assigned at the next epoch
// — never the standby, whose session lived throughout
// (docs/delivery-protocol.md, rule 6); it is gone, and the standby takes
// over at the next epoch.
func TestAssignAfterTheExecutorsSessionLapsed(t *testing.T) {
	st := storetest.New(t)
	s := &Service{store: st, client: st.Client(), cfg: reviewTiming, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		assignments: prometheus.NewCounter(prometheus.CounterOpts{Name: "assignments"})}
	ctx := context.Background()
	const uid, account, name = "uid-lapse", "111122223333", "lapse"
	commit := func(txn *store.Txn) {
		t.Helper()
		if _, err := st.Commit(ctx, txn); err != nil {
			t.Fatal(err)
		}
	}
	commit(store.NewTxn().Put(store.ClusterKey(account, name), &storagev1.ClusterRecord{Uid: uid, AccountId: account, Name: name,
		Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}}))
	connect := func(instance, replica string) {
		t.Helper()
		commit(store.NewTxn().Put(store.SessionKey(uid, instance), &storagev1.AgentSessionRecord{InstanceId: instance, Replica: replica}))
	}
	lapse := func(instance string) {
		t.Helper()
		commit(store.NewTxn().Remove(store.SessionKey(uid, instance)))
	}
	// assign reads a snapshot and tries an assignment; then the executor.
	assign := func() (bool, *storagev1.ExecutorRecord) {
		t.Helper()
		sn, err := s.read(ctx, uid, account, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := s.assign(ctx, sn)
		if err != nil {
			t.Fatal(err)
		}
		after, err := s.read(ctx, uid, account, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok, after.executor
	}
	want := func(what string, committed bool, instance string, epoch int64) {
		t.Helper()
		ok, e := assign()
		if ok != committed || e.GetInstanceId() != instance || e.GetEpoch() != epoch {
			t.Fatalf("%s: assigned %v, executor %v; want assigned %v, %s at epoch %d", what, ok, e, committed, instance, epoch)
		}
	}

	connect("i-a", "r1")
	want("first connect", true, "i-a", 1)
	connect("i-b", "r1")
	want("a standby connects", false, "i-a", 1)
	connect("i-a", "r2")
	want("a newer stream takes the session over", false, "i-a", 1)
	lapse("i-a")
	connect("i-a", "r2")
	want("the session lapsed, the executor came back", true, "i-a", 2)
	want("once assigned again", false, "i-a", 2)
	lapse("i-a")
	want("the session lapsed, the executor stays away", true, "i-b", 3)
	connect("i-a", "r1")
	want("the old executor comes back", false, "i-b", 3)
}
