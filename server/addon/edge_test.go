package addon

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/store"
)

// Edge cases of the add-on service found in review, each once a defect.

const edgeAccount = "000000000000"

func edgeCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return identity.NewContext(ctx, identity.RootCaller(edgeAccount))
}

// edgeCluster creates an ACTIVE cluster of Kubernetes version k8s.
func edgeCluster(t *testing.T, cs *cluster.Service, name, k8s string) *storagev1.ClusterRecord {
	t.Helper()
	ctx := edgeCtx(t)
	if _, err := cs.Create(ctx, &eksv1.CreateClusterRequest{
		Name: name, Version: k8s, RoleArn: "arn:aws:iam::" + edgeAccount + ":role/eks",
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	}); err != nil {
		t.Fatalf("create cluster %s: %v", name, err)
	}
	rec, err := cs.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: edgeRef(name), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: clustertest.Endpoint, CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	})
	if err != nil {
		t.Fatalf("cluster %s ACTIVE: %v", name, err)
	}
	return rec
}

func edgeRef(name string) *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: edgeAccount, Name: name}
}

// laggingClusters is the real cluster service whose serializable reads
// come from an etcd member that lags behind: for the clusters in stale it
// answers what that member last applied. This is exactly the latitude
// Clusters.GetSerializable documents ("may return a stale record").
type laggingClusters struct {
	*cluster.Service
	mu    sync.Mutex
	stale map[string]staleRead
}

type staleRead struct {
	rec *storagev1.ClusterRecord
	rev int64
}

func (l *laggingClusters) GetSerializable(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error) {
	l.mu.Lock()
	s, ok := l.stale[ref.GetName()]
	l.mu.Unlock()
	if ok {
		return proto.Clone(s.rec).(*storagev1.ClusterRecord), s.rev, nil
	}
	return l.Service.GetSerializable(ctx, ref)
}

// freeze remembers the cluster as it is now; later serializable reads
// return this version.
func (l *laggingClusters) freeze(t *testing.T, name string) {
	t.Helper()
	rec, rev, err := l.Get(edgeCtx(t), edgeRef(name))
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.stale[name] = staleRead{rec, rev}
	l.mu.Unlock()
}

// newLaggingService is newTestService whose cluster reads may lag.
func newLaggingService(t *testing.T) (*Service, *laggingClusters, *store.Store) {
	t.Helper()
	base, st := newTestService(t)
	lag := &laggingClusters{Service: base.clusters.(*cluster.Service), stale: map[string]staleRead{}}
	svc, err := NewService(st, lag, base.catalog, base.cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return svc, lag, st
}

func mustPanicFree(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s panicked: %v", what, p)
		}
	}()
	f()
}

// TestUpdateKeptVersionNoLongerCompatible: an UpdateAddon that keeps a
// version the cluster no longer supports (or the catalogue no longer lists)
// is refused with InvalidParameterException; it once dereferenced a nil
// version and answered 500.
func TestUpdateKeptVersionNoLongerCompatible(t *testing.T) {
	svc, st := newTestService(t)
	cs := svc.clusters.(*cluster.Service)
	ctx := edgeCtx(t)
	c := edgeCluster(t, cs, "upgraded", "1.33")

	rec, err := svc.Create(ctx, &eksv1.CreateAddonRequest{ClusterName: "upgraded", AddonName: "metrics-server"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetSpec().GetVersion() != "v0.7.2-eksbuild.4" {
		t.Fatalf("default metrics-server on 1.33 = %s", rec.GetSpec().GetVersion())
	}
	if r, err := svc.ApplyReport(ctx, Report{ClusterUID: c.GetUid(), AddonName: "metrics-server", AddonUID: rec.GetUid(),
		Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}, nil); err != nil || !r.Accepted {
		t.Fatalf("READY: %v %v", r, err)
	}
	// The cluster is upgraded to 1.36, which v0.7.2-eksbuild.4 does not
	// support (what an UpdateClusterVersion will do to the record).
	if _, err := store.Update(ctx, st, store.ClusterKey(edgeAccount, "upgraded"), &storagev1.ClusterRecord{},
		func(c *storagev1.ClusterRecord, _ *store.Txn) error {
			c.KubernetesVersion = "1.36"
			return nil
		}); err != nil {
		t.Fatal(err)
	}

	var uerr error
	mustPanicFree(t, "UpdateAddon naming the current, now incompatible, version", func() {
		_, uerr = svc.Update(ctx, &eksv1.UpdateAddonRequest{
			ClusterName: "upgraded", AddonName: "metrics-server",
			AddonVersion:        proto.String("v0.7.2-eksbuild.4"),
			ConfigurationValues: proto.String(`{"replicaCount": 2}`),
		})
	})
	if !errdefs.IsException(uerr, errdefs.InvalidParameterException) {
		t.Fatalf("UpdateAddon = %v, want InvalidParameterException", uerr)
	}
}

// TestUpdateFromRetiredVersion: an add-on on a version the catalogue no
// longer lists (a saltbush upgrade retired it) can move to any offered
// version; the no-downgrade rule once called every target "older".
func TestUpdateFromRetiredVersion(t *testing.T) {
	svc, st := newTestService(t)
	cs := svc.clusters.(*cluster.Service)
	ctx := edgeCtx(t)
	edgeCluster(t, cs, "old-catalogue", "1.35")
	if _, err := svc.Create(ctx, &eksv1.CreateAddonRequest{ClusterName: "old-catalogue", AddonName: "coredns"}); err != nil {
		t.Fatal(err)
	}
	c, _, err := cs.Get(ctx, edgeRef("old-catalogue"))
	if err != nil {
		t.Fatal(err)
	}
	// The record as an earlier catalogue left it: ACTIVE on a version this
	// catalogue retired.
	if _, err := store.Update(ctx, st, store.AddonKey(c.GetUid(), "coredns"), &storagev1.AddonRecord{},
		func(r *storagev1.AddonRecord, _ *store.Txn) error {
			r.Spec.Version = "v1.10.1-eksbuild.1"
			r.Status = storagev1.AddonStatus_ADDON_STATUS_ACTIVE
			r.Deadline = nil
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	var uerr error
	mustPanicFree(t, "UpdateAddon to a current version", func() {
		_, uerr = svc.Update(ctx, &eksv1.UpdateAddonRequest{
			ClusterName: "old-catalogue", AddonName: "coredns", AddonVersion: proto.String("v1.12.1-eksbuild.2"),
		})
	})
	if uerr != nil {
		t.Fatalf("upgrade from a retired version to v1.12.1-eksbuild.2: %v", uerr)
	}
}

// TestStaleClusterReadIsConfirmedBeforeRefusing: a fast (serializable)
// cluster read that shows the cluster FAILED is confirmed linearizably
// before a write is refused: a lagging member may not have seen it
// re-activated.
func TestStaleClusterReadIsConfirmedBeforeRefusing(t *testing.T) {
	svc, lag, _ := newLaggingService(t)
	ctx := edgeCtx(t)
	edgeCluster(t, lag.Service, "flaky", "1.35")
	if _, err := lag.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: edgeRef("flaky"), Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, Reason: "x",
	}); err != nil {
		t.Fatal(err)
	}
	lag.freeze(t, "flaky") // this member saw FAILED last
	if _, err := lag.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: edgeRef("flaky"), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: clustertest.Endpoint, CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, &eksv1.CreateAddonRequest{ClusterName: "flaky", AddonName: "coredns"}); err != nil {
		t.Fatalf("CreateAddon on an ACTIVE cluster (stale member shows FAILED): %v", err)
	}
}

// TestStaleClusterReadIsConfirmedBeforeNotFound: Update and Delete confirm a
// missing add-on with a linearizable cluster read: a fast read may name an
// earlier incarnation of a recreated cluster.
func TestStaleClusterReadIsConfirmedBeforeNotFound(t *testing.T) {
	svc, lag, _ := newLaggingService(t)
	ctx := edgeCtx(t)
	edgeCluster(t, lag.Service, "phoenix", "1.35")
	lag.freeze(t, "phoenix") // incarnation 1, ACTIVE
	if _, err := lag.Delete(ctx, "phoenix"); err != nil {
		t.Fatal(err)
	}
	if _, err := lag.FinalizeDeletion(ctx, edgeRef("phoenix")); err != nil {
		t.Fatal(err)
	}
	edgeCluster(t, lag.Service, "phoenix", "1.35") // incarnation 2
	// Create confirms (its txn guards the cluster revision), so it works.
	rec, err := svc.Create(ctx, &eksv1.CreateAddonRequest{ClusterName: "phoenix", AddonName: "coredns"})
	if err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	if _, err := svc.Describe(ctx, "phoenix", "coredns"); err != nil {
		t.Fatalf("DescribeAddon (confirms its miss): %v", err)
	}
	if _, err := svc.ApplyReport(ctx, Report{ClusterUID: rec.GetClusterUid(), AddonName: "coredns", AddonUID: rec.GetUid(),
		Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Update(ctx, &eksv1.UpdateAddonRequest{ClusterName: "phoenix", AddonName: "coredns",
		ConfigurationValues: proto.String(`{"replicaCount": 2}`)}); err != nil {
		t.Errorf("UpdateAddon of an existing add-on: %v", err)
	}
	if _, err := svc.Delete(ctx, "phoenix", "coredns", false); err != nil {
		t.Errorf("DeleteAddon of an existing add-on: %v", err)
	}
}

// TestSweepSkipsAPoisonedHint: one deadline hint or add-on record that does
// not decode is skipped (logged and counted); the sweep goes on to the later
// deadlines instead of stopping at it forever.
func TestSweepSkipsAPoisonedHint(t *testing.T) {
	svc, st := newTestService(t)
	ctx := edgeCtx(t)
	clusterUID := uuid.NewString()
	past := time.Now().Add(-time.Hour)

	// An unreadable add-on record with the oldest due hint.
	if _, err := st.Client().Put(ctx, st.Key(store.AddonKey(clusterUID, "broken")), "\xff\xff not a proto"); err != nil {
		t.Fatal(err)
	}
	txn := store.NewTxn()
	hintDeadline(txn, &storagev1.AddonRecord{ClusterUid: clusterUID, Name: "broken", Generation: 1,
		Deadline: timestamppb.New(past)})
	// A healthy overdue add-on, due a minute later.
	good := &storagev1.AddonRecord{
		ClusterUid: clusterUID, Name: "coredns", Uid: uuid.NewString(), Generation: 1,
		Status: storagev1.AddonStatus_ADDON_STATUS_CREATING, Spec: &storagev1.AddonSpec{Version: "v1"},
		Deadline: timestamppb.New(past.Add(time.Minute)),
	}
	txn.Create(store.AddonKey(clusterUID, "coredns"), good)
	hintDeadline(txn, good)
	if _, err := st.Commit(ctx, txn); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = svc.sweep(ctx, nil)
	}
	cur := &storagev1.AddonRecord{}
	if _, err := st.Get(ctx, store.AddonKey(clusterUID, "coredns"), cur); err != nil {
		t.Fatal(err)
	}
	if cur.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_CREATE_FAILED {
		t.Fatalf("overdue add-on after 3 sweeps: %s, want CREATE_FAILED (the sweeper is stuck on one bad hint)",
			StatusName(cur.GetStatus()))
	}
}

// TestEnsureChecksRequestedVersion: EnsureAddon checks addon_version and
// configuration_values against an existing add-on too: a bad version or
// configuration is an error, a re-drive takes what was asked for, and a
// working add-on that differs is not silently reported as ensured.
func TestEnsureChecksRequestedVersion(t *testing.T) {
	svc, _ := newTestService(t)
	cs := svc.clusters.(*cluster.Service)
	ctx := edgeCtx(t)
	edgeCluster(t, cs, "gpu", "1.35")
	if _, _, err := svc.Ensure(ctx, &controlv1.EnsureAddonRequest{
		Cluster: edgeRef("gpu"), AddonName: "nvidia-device-plugin", Reference: "nodegroup/a",
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, version, config string }{
		{"unknown version", "v9.9.9-eksbuild.1", ""},
		{"invalid configuration", "", "{not json"},
	} {
		_, _, err := svc.Ensure(ctx, &controlv1.EnsureAddonRequest{
			Cluster: edgeRef("gpu"), AddonName: "nvidia-device-plugin", Reference: "nodegroup/b",
			AddonVersion: tc.version, ConfigurationValues: tc.config,
		})
		if !errdefs.IsException(err, errdefs.InvalidParameterException) {
			t.Errorf("%s: Ensure on an existing add-on = %v, want InvalidParameterException (as when absent)", tc.name, err)
		}
	}
}
