// Package faults runs saltbush through failures of what it depends on.
package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
	"github.com/saltbush/saltbush/tests/netproxy"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// proxiedMembers is a 3-member etcd cluster whose client ports saltbush
// reaches through a proxy each (tests/netproxy), so that a member can be
// lost to its clients at once, as a crash looks to them. A member stopped
// with clients still connected waits up to etcd's request timeout (7 s)
// for their streams (watches) to end before it stops; cut one first and
// it stops at once. (Stopping raft before the client ports drain would
// be the truer crash, but etcd then serves reads in flight from a closed
// backend, and the test binary panics.)
type proxiedMembers struct {
	*embedetcd.Cluster
	proxies []*netproxy.Proxy
}

func startProxiedMembers(ctx context.Context, t *testing.T) *proxiedMembers {
	t.Helper()
	cluster, err := embedetcd.StartCluster(ctx, embedetcd.ClusterConfig{Dir: t.TempDir(), Size: 3, UnsafeNoFsync: true, URL: heldURL(t)})
	if err != nil {
		t.Fatalf("start 3-member etcd: %v", err)
	}
	// Closed after the server and the proxies (cleanups run last first).
	t.Cleanup(cluster.Close)
	m := &proxiedMembers{Cluster: cluster}
	for _, ep := range cluster.Endpoints() {
		m.proxies = append(m.proxies, netproxy.Start(t, strings.TrimPrefix(ep, "http://")))
	}
	return m
}

// proxiedEndpoints are the members' client URLs through the proxies, for
// the server.
func (m *proxiedMembers) proxiedEndpoints() []string {
	eps := make([]string, 0, len(m.proxies))
	for _, p := range m.proxies {
		eps = append(eps, "http://"+p.Addr())
	}
	return eps
}

// cut loses member i: its clients' connections are reset and new ones
// refused, and the member stops (its data stays).
func (m *proxiedMembers) cut(i int) {
	m.proxies[i].Reset()
	m.Stop(i)
}

// leader waits (30 s) for a member to lead, as after an election.
func (m *proxiedMembers) leader(ctx context.Context, t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		i, err := m.Leader(ctx)
		if err == nil {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart starts member i again and lets its clients reach it.
func (m *proxiedMembers) restart(ctx context.Context, i int) error {
	if err := m.Restart(ctx, i); err != nil {
		return fmt.Errorf("restart member %d: %w", i, err)
	}
	m.proxies[i].Heal()
	return nil
}

// memberLoss is one way a member is lost: which member, and how.
type memberLoss struct {
	name string
	// member picks the member to lose, given the one that leads now.
	member func(leader, size int) int
	// graceful stops it as an operator would (clients' streams drained
	// for up to etcd's request timeout); else its clients are cut off at
	// once (proxiedMembers.cut).
	graceful bool
}

// pickFollower and pickLeader are memberLoss.member's choices.
func pickFollower(leader, size int) int { return (leader + 1) % size }

func pickLeader(leader, _ int) int { return leader }

// TestThreeMemberEtcdMemberLoss runs saltbush on a 3-member etcd cluster
// under a mixed load (mixed_load_test.go), loses a follower and then the
// leader, each while the load runs, and restarts each. Two of three
// members keep a quorum, so no call may fail once the SDK's default
// retryer has done its part; afterwards every acknowledged write is there,
// the members agree on the keyspace's history, and exclusivity still
// holds. The short form cuts the members off; the long form
// (-faults.long) also stops them gracefully, three rounds over.
func TestThreeMemberEtcdMemberLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := startProxiedMembers(ctx, t)
	srv := servertest.Start(t, servertest.WithEtcdEndpoints(cluster.proxiedEndpoints()))
	client := srv.EKS(t)
	create := func(name string) error {
		_, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name:               aws.String(name),
			RoleArn:            aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
		})
		return err
	}
	for i := 0; i < 5; i++ {
		if err := create(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatalf("create before member loss: %v", err)
		}
	}

	losses := []memberLoss{{"cut follower", pickFollower, false}, {"cut leader", pickLeader, false}}
	if *long {
		for range 3 {
			losses = append(losses, memberLoss{"stopped follower", pickFollower, true}, memberLoss{"stopped leader", pickLeader, true},
				memberLoss{"cut follower", pickFollower, false}, memberLoss{"cut leader", pickLeader, false})
		}
	}
	loadClusters := setupLoadClusters(ctx, t, srv, "load", 3)
	load := startMixedLoad(ctx, t, srv, loadClusters, loadConfig{workers: len(loadAddons), principals: 2})
	defer load.stop()
	load.waitAcked(ctx, 30, "before member loss")

	created := 5
	for round, loss := range losses {
		lost := loss.member(cluster.leader(ctx, t), cluster.Size())
		t.Logf("%s: member %d, under load (%d operations acknowledged)", loss.name, lost, load.acked.Load())
		if loss.graceful {
			cluster.Stop(lost)
		} else {
			cluster.cut(lost)
		}
		load.waitAcked(ctx, 60, fmt.Sprintf("with member %d down (%s)", lost, loss.name))
		for i := 0; i < 5; i++ {
			name := fmt.Sprintf("without-%d-%d", round, i)
			if err := create(name); err != nil {
				t.Fatalf("create %s with member %d down: %v", name, lost, err)
			}
			created++
			if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); err != nil {
				t.Fatalf("describe %s with member %d down: %v", name, lost, err)
			}
		}
		if err := cluster.restart(ctx, lost); err != nil {
			t.Fatal(err)
		}
		load.waitAcked(ctx, 30, fmt.Sprintf("after member %d rejoined", lost))
	}
	load.stop()
	t.Logf("mixed load: %d operations acknowledged, %d SDK calls retried", load.acked.Load(), load.retried.Load())

	var names []string
	p := eks.NewListClustersPaginator(client, &eks.ListClustersInput{MaxResults: aws.Int32(4)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		names = append(names, page.Clusters...)
	}
	if want := created + len(loadClusters); len(names) != want {
		t.Errorf("listed %d clusters, want %d: %v", len(names), want, names)
	}

	// Duplicates are still refused: exclusivity does not depend on which
	// member answered.
	wanterr.Type[*types.ResourceInUseException](t, create("before-0"))

	addons, entries := load.verify(ctx, srv.Etcd(t))
	t.Logf("verified %d add-ons and %d access entries the load left", addons, entries)
	membersAgree(ctx, t, cluster.Cluster)
}

// membersAgree checks that every member holds the same keyspace history:
// etcd's hash of the key-value store at one revision is equal on all of
// them, once the restarted members have caught up.
func membersAgree(ctx context.Context, t *testing.T, cluster *embedetcd.Cluster) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	resp, err := cli.Get(ctx, "member-agreement-probe")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	deadline := time.Now().Add(30 * time.Second)
	for {
		hashes := map[uint32][]string{}
		var lastErr error
		for _, ep := range cluster.Endpoints() {
			h, err := cli.HashKV(ctx, ep, rev)
			if err != nil {
				lastErr = fmt.Errorf("HashKV %s at revision %d: %w", ep, rev, err)
				break
			}
			hashes[h.Hash] = append(hashes[h.Hash], ep)
		}
		if lastErr == nil && len(hashes) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members disagree at revision %d: hashes %v, %v", rev, hashes, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// heldURL picks etcd members' URLs from ports reserved until t ends, so
// that a stopped member's port is still free when it restarts (package
// loopport says why a port the kernel picked may not be).
func heldURL(t *testing.T) func() (string, error) {
	return func() (string, error) { return loopport.URL(t, "http"), nil }
}
