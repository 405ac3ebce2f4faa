package clusterscope_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

const account = "000000000000"

// fixture is one cluster, created through the real cluster service on a
// real etcd.
type fixture struct {
	ctx context.Context
	st  *store.Store
	cs  *cluster.Service
	ref *controlv1.ClusterRef
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := storetest.New(t)
	cs, err := cluster.NewService(st, cluster.DefaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ctx = identity.NewContext(ctx, identity.RootCaller(account))
	if _, err := cs.Create(ctx, &eksv1.CreateClusterRequest{
		Name: "scoped", RoleArn: "arn:aws:iam::" + account + ":role/eks",
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	}); err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, st: st, cs: cs, ref: &controlv1.ClusterRef{AccountId: account, Name: "scoped"}}
}

// setStatus changes the cluster record in the store, as the cluster
// service's own transitions do.
func (f *fixture) setStatus(t *testing.T, st storagev1.ClusterStatus) {
	t.Helper()
	_, err := store.Update(f.ctx, f.st, store.ClusterKey(account, "scoped"), &storagev1.ClusterRecord{},
		func(c *storagev1.ClusterRecord, _ *store.Txn) error {
			c.Status = st
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	const apiOnly = "only clusters in mode API"
	needsAPI := func(c *storagev1.ClusterRecord) error {
		if c.GetAccessConfig().GetAuthenticationMode() != "API" {
			return errdefs.InvalidRequest(apiOnly)
		}
		return nil
	}
	cases := []struct {
		name     string
		status   storagev1.ClusterStatus
		check    func(*storagev1.ClusterRecord) error
		cluster  string
		write    bool
		at       clusterscope.Consistency
		wantExc  string
		wantText string
		wantAt   clusterscope.Consistency
	}{
		{name: "read from the view", at: clusterscope.FromView, wantAt: clusterscope.FromView},
		{name: "read serializable", at: clusterscope.Serializable, wantAt: clusterscope.Serializable},
		{name: "write linearizable", write: true, at: clusterscope.Linearizable, wantAt: clusterscope.Linearizable},
		{name: "missing cluster", cluster: "nosuch", at: clusterscope.Serializable,
			wantExc: errdefs.ResourceNotFoundException, wantText: "No cluster found for name: nosuch."},
		{name: "deleting cluster is readable", status: storagev1.ClusterStatus_CLUSTER_STATUS_DELETING,
			at: clusterscope.FromView, wantAt: clusterscope.FromView},
		{name: "deleting cluster refuses writes", status: storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, write: true,
			at: clusterscope.Linearizable, wantExc: errdefs.InvalidRequestException,
			wantText: "Cluster scoped is in DELETING state; its widgets cannot be changed."},
		{name: "failed cluster refuses writes read serializably", status: storagev1.ClusterStatus_CLUSTER_STATUS_FAILED,
			write: true, at: clusterscope.Serializable, wantExc: errdefs.InvalidRequestException,
			wantText: "Cluster scoped is in FAILED state; its widgets cannot be changed."},
		{name: "check refuses reads", check: needsAPI, at: clusterscope.FromView,
			wantExc: errdefs.InvalidRequestException, wantText: apiOnly},
		{name: "check refuses writes", check: needsAPI, write: true, at: clusterscope.Linearizable,
			wantExc: errdefs.InvalidRequestException, wantText: apiOnly},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.status != storagev1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED {
				f.setStatus(t, tc.status)
			}
			scopes := clusterscope.New(f.cs, clusterscope.Config{Resources: "widgets", Check: tc.check})
			ref := f.ref
			if tc.cluster != "" {
				ref = &controlv1.ClusterRef{AccountId: account, Name: tc.cluster}
			}
			open := scopes.Read
			if tc.write {
				open = scopes.Writable
			}
			sc, err := open(f.ctx, ref, tc.at)
			if tc.wantExc != "" {
				var e *errdefs.Error
				if !errors.As(err, &e) || e.Exception != tc.wantExc || !strings.Contains(e.Message, tc.wantText) {
					t.Fatalf("err = %v, want %s %q", err, tc.wantExc, tc.wantText)
				}
				if e.Fields["clusterName"] == "" && tc.check == nil {
					t.Errorf("err %v does not name the cluster", e)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sc.Name() != "scoped" || sc.UID() == "" || sc.Rev == 0 {
				t.Errorf("scope = %q uid %q rev %d", sc.Name(), sc.UID(), sc.Rev)
			}
			if sc.Consistency != tc.wantAt {
				t.Errorf("read %v, want %v", sc.Consistency, tc.wantAt)
			}
		})
	}
}

// TestGuard: a transaction guarded by a scope commits only while the
// cluster record is the one read.
func TestGuard(t *testing.T) {
	f := newFixture(t)
	scopes := clusterscope.New(f.cs, clusterscope.Config{Resources: "widgets"})
	sc, err := scopes.Writable(f.ctx, f.ref, clusterscope.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	key := store.ClusterUpdateKey(sc.UID(), "first")
	if _, err := f.st.Commit(f.ctx, sc.Guard(store.NewTxn().Create(key, &storagev1.UpdateRecord{Id: "first"}))); err != nil {
		t.Fatalf("guarded write on an unchanged cluster: %v", err)
	}
	f.setStatus(t, storagev1.ClusterStatus_CLUSTER_STATUS_DELETING)
	key = store.ClusterUpdateKey(sc.UID(), "second")
	_, err = f.st.Commit(f.ctx, sc.Guard(store.NewTxn().Create(key, &storagev1.UpdateRecord{Id: "second"})))
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("guarded write after the cluster changed: err = %v, want ErrConflict", err)
	}
	if _, err := f.st.Get(f.ctx, key, &storagev1.UpdateRecord{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused write left %s: %v", key, err)
	}
}

// TestWriteRetriesOnAFreshRead: an attempt that loses the race on the
// cluster runs again on a linearizable read, and sees the cluster's new
// state: a cluster that turned DELETING meanwhile refuses the write.
func TestWriteRetriesOnAFreshRead(t *testing.T) {
	t.Run("cluster turned DELETING", func(t *testing.T) {
		f := newFixture(t)
		scopes := clusterscope.New(f.cs, clusterscope.Config{Resources: "widgets"})
		var reads []clusterscope.Consistency
		err := scopes.Write(f.ctx, f.ref, func(sc clusterscope.Scope) error {
			reads = append(reads, sc.Consistency)
			// Another writer changes the cluster between this attempt's read
			// and its commit.
			f.setStatus(t, storagev1.ClusterStatus_CLUSTER_STATUS_DELETING)
			_, err := f.st.Commit(f.ctx, sc.Guard(store.NewTxn().Put(store.ClusterUpdateKey(sc.UID(), "x"), &storagev1.UpdateRecord{})))
			return err
		})
		if !errdefs.IsException(err, errdefs.InvalidRequestException) {
			t.Fatalf("err = %v, want the DELETING cluster refused", err)
		}
		if len(reads) != 1 || reads[0] != clusterscope.Serializable {
			t.Errorf("attempts read %v, want one Serializable attempt, then the refusal", reads)
		}
	})
	t.Run("cluster changed", func(t *testing.T) {
		f := newFixture(t)
		scopes := clusterscope.New(f.cs, clusterscope.Config{Resources: "widgets"})
		var reads []clusterscope.Consistency
		changed := false
		err := scopes.Write(f.ctx, f.ref, func(sc clusterscope.Scope) error {
			reads = append(reads, sc.Consistency)
			if !changed {
				changed = true
				f.setStatus(t, storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING)
			}
			_, err := f.st.Commit(f.ctx, sc.Guard(store.NewTxn().Put(store.ClusterUpdateKey(sc.UID(), "x"), &storagev1.UpdateRecord{})))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []clusterscope.Consistency{clusterscope.Serializable, clusterscope.Linearizable}
		if len(reads) != 2 || reads[0] != want[0] || reads[1] != want[1] {
			t.Errorf("attempts read %v, want %v", reads, want)
		}
	})
}

// TestCreate: the create skeleton answers a retry of a create that
// happened with its record, and a create of a taken name with Exists.
func TestCreate(t *testing.T) {
	f := newFixture(t)
	scopes := clusterscope.New(f.cs, clusterscope.Config{Resources: "widgets"})
	req := &eksv1.CreateAccessEntryRequest{ClusterName: "scoped", PrincipalArn: "arn:aws:iam::" + account + ":role/a",
		ClientRequestToken: "token-1"}
	create := func(req *eksv1.CreateAccessEntryRequest, valid bool) (*storagev1.AccessEntryRecord, error) {
		tok, err := idempotency.New(account, "CreateAccessEntry", req)
		if err != nil {
			return nil, err
		}
		var rec *storagev1.AccessEntryRecord
		err = scopes.Create(f.ctx, f.st, f.ref, clusterscope.Creation{
			Build: func(_ context.Context, sc clusterscope.Scope) (*store.Txn, error) {
				if !valid {
					return nil, errdefs.InvalidParameter("no longer valid.")
				}
				rec = &storagev1.AccessEntryRecord{Uid: "uid-" + req.GetClientRequestToken(), PrincipalArn: req.GetPrincipalArn()}
				key := store.AccessEntryKey(sc.UID(), "role/a")
				txn := store.NewTxn().Create(key, rec)
				tok.Remember(txn, key, rec.GetUid(), time.Hour, time.Now())
				return txn, nil
			},
			Replay: func(ctx context.Context, _ clusterscope.Scope) (bool, error) {
				rec = &storagev1.AccessEntryRecord{}
				return idempotency.Replay(ctx, f.st, tok, rec, (*storagev1.AccessEntryRecord).GetUid,
					errdefs.ResourceInUse("gone."))
			},
			Exists: func(context.Context, clusterscope.Scope, error) error {
				return errdefs.ResourceInUse("taken.")
			},
		})
		return rec, err
	}
	first, err := create(req, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		valid bool
	}{{"retry", true}, {"retry that no longer validates", false}} {
		got, err := create(req, tc.valid)
		if err != nil || got.GetUid() != first.GetUid() {
			t.Errorf("%s: got %v, %v; want the first create's record %s", tc.name, got, err, first.GetUid())
		}
	}
	other := &eksv1.CreateAccessEntryRequest{ClusterName: "scoped", PrincipalArn: req.GetPrincipalArn(), ClientRequestToken: "token-2"}
	if _, err := create(other, true); !errdefs.IsException(err, errdefs.ResourceInUseException) || !strings.Contains(err.Error(), "taken.") {
		t.Errorf("create of a taken name with another token: err = %v, want Exists' ResourceInUseException", err)
	}
	if _, err := create(other, false); !errdefs.IsException(err, errdefs.InvalidParameterException) {
		t.Errorf("invalid create with an unused token: err = %v, want the validation error", err)
	}
}
