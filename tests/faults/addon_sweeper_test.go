package faults

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
)

func shortDeadlines(c *server.Config) {
	c.Addon.CreateTimeout = 1500 * time.Millisecond
	c.Addon.UpdateTimeout = 1500 * time.Millisecond
	c.Addon.DeleteTimeout = 1500 * time.Millisecond
	c.Addon.SweepInterval = 100 * time.Millisecond
}

func activeCluster(t *testing.T, ctx context.Context, srv *servertest.Server, name string) {
	t.Helper()
	if _, err := srv.EKS(t).CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String(name),
		RoleArn:            aws.String("arn:aws:iam::000000000000:role/eks-cluster"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if _, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster:  &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name},
		Status:   controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: clustertest.Endpoint, CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
}

func waitStatus(t *testing.T, ctx context.Context, client *eks.Client, cluster, addon string, want types.AddonStatus) *types.Addon {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
		if err == nil && out.Addon.Status == want {
			return out.Addon
		}
		if time.Now().After(deadline) {
			t.Fatalf("add-on %s: %v / %+v, want status %s", addon, err, out, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAddonDeadlinesFailWithClusterUnreachable: with no agent reporting,
// each in-flight generation moves to its *_FAILED status with a
// ClusterUnreachable issue once its deadline passes, and an in-progress
// update is Failed with it.
func TestAddonDeadlinesFailWithClusterUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := servertest.Start(t, servertest.WithConfig(shortDeadlines))
	client := srv.EKS(t)
	activeCluster(t, ctx, srv, "quiet")
	control := controlv1.NewAddonControlServiceClient(srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: "quiet"}

	if _, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String("quiet"), AddonName: aws.String("coredns")}); err != nil {
		t.Fatal(err)
	}
	a := waitStatus(t, ctx, client, "quiet", "coredns", types.AddonStatusCreateFailed)
	if len(a.Health.Issues) != 1 || a.Health.Issues[0].Code != types.AddonIssueCodeClusterUnreachable {
		t.Fatalf("health = %+v, want one ClusterUnreachable issue", a.Health)
	}

	// Re-drive by updating; nobody answers again: UPDATE_FAILED, update Failed.
	up, err := client.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String("quiet"), AddonName: aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
	if err != nil {
		t.Fatalf("UpdateAddon from CREATE_FAILED: %v", err)
	}
	waitStatus(t, ctx, client, "quiet", "coredns", types.AddonStatusUpdateFailed)
	du, err := client.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String("quiet"), UpdateId: up.Update.Id, AddonName: aws.String("coredns")})
	if err != nil {
		t.Fatal(err)
	}
	if du.Update.Status != types.UpdateStatusFailed || len(du.Update.Errors) != 1 ||
		du.Update.Errors[0].ErrorCode != types.ErrorCodeClusterUnreachable {
		t.Fatalf("update = %s %+v, want Failed with ClusterUnreachable", du.Update.Status, du.Update.Errors)
	}

	// A late READY for the failed generation does not lift it.
	info, err := control.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: ref, AddonName: "coredns"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
		ClusterUid: info.GetAddon().GetClusterUid(), AddonName: "coredns", AddonUid: info.GetAddon().GetUid(),
		Generation: info.GetAddon().GetGeneration(), Phase: controlv1.AddonPhase_ADDON_PHASE_READY,
	}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ctx, client, "quiet", "coredns", types.AddonStatusUpdateFailed)

	if _, err := client.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String("quiet"), AddonName: aws.String("coredns")}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ctx, client, "quiet", "coredns", types.AddonStatusDeleteFailed)
}

// TestAddonSweeperElection: two replicas on one etcd; exactly one leads the
// deadline sweeper at any time, and when it shuts down the other takes
// over and keeps expiring deadlines.
func TestAddonSweeperElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	opts := func(name string) []servertest.Option {
		return []servertest.Option{
			servertest.WithEtcdEndpoints(etcd.Endpoints()),
			servertest.WithConfig(shortDeadlines),
			servertest.WithConfig(func(c *server.Config) { c.ReplicaName = name }),
		}
	}
	a := servertest.Start(t, opts("replica-a")...)
	b := servertest.Start(t, opts("replica-b")...)

	leaders := func() int {
		n := 0
		for _, s := range []*servertest.Server{a, b} {
			if s.SweeperLeader(t) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for leaders() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sweeper leaders, want 1", leaders())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 50; i++ {
		if n := leaders(); n > 1 {
			t.Fatalf("%d sweeper leaders at once", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	leader, follower := a, b
	if b.SweeperLeader(t) {
		leader, follower = b, a
	}
	if err := leader.Stop(); err != nil {
		t.Fatalf("stop leader: %v", err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for !follower.SweeperLeader(t) {
		if time.Now().After(deadline) {
			t.Fatal("the remaining replica did not take over the sweeper")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The new leader sweeps: an unanswered add-on fails by its deadline.
	activeCluster(t, ctx, follower, "handover")
	if _, err := follower.EKS(t).CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String("handover"), AddonName: aws.String("kube-proxy")}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ctx, follower.EKS(t), "handover", "kube-proxy", types.AddonStatusCreateFailed)
}

// TestStopWhileCampaigningWithEtcdGone: a replica whose sweeper waits in
// the election (another replica leads) still shuts down when etcd is gone.
// etcd's Campaign resigns an interrupted campaign on the client's own
// context, which a dead etcd never answers; shutdown must not wait for it
// forever. (A liveness check with a generous bound, not a timing.)
func TestStopWhileCampaigningWithEtcdGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	a := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()))
	deadline := time.Now().Add(20 * time.Second)
	for !a.SweeperLeader(t) {
		if time.Now().After(deadline) {
			t.Fatal("the first replica did not lead the sweeper")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()))
	time.Sleep(500 * time.Millisecond) // b is campaigning: waiting for a's key to go
	if b.SweeperLeader(t) {
		t.Fatal("two replicas lead the sweeper")
	}
	etcd.Close()

	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a campaigning replica did not shut down with etcd gone")
	}
}

// startSharedEtcd starts an embedded etcd for several saltbush replicas,
// closed when the test ends.
func startSharedEtcd(t *testing.T, ctx context.Context) *embedetcd.Server {
	t.Helper()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	return etcd
}
