package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// leaderIndex returns the index of the cluster's leader.
func leaderIndex(t testing.TB, client *clientv3.Client, c *embedetcd.Cluster) int {
	t.Helper()
	leader := -1
	eventually(t, "find the leader", func(ctx context.Context) error {
		for i, ep := range c.Endpoints() {
			st, err := client.Status(ctx, ep)
			if err != nil {
				return err
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("no member is leader")
	})
	return leader
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c, err := embedetcd.StartCluster(ctx, embedetcd.ClusterConfig{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(c.Close)
	if c.Size() != 3 {
		t.Fatalf("cluster of %d", c.Size())
	}

	admin := clientFor(t, c.Endpoints()...)
	victim := leaderIndex(t, admin, c)

	// The watcher's client first knows only the member that will be
	// stopped, so its watch stream is certainly there; then it learns all
	// three endpoints, as a client configured with the whole cluster.
	wclient := clientFor(t, c.Endpoints()[victim])
	prefix := uniquePrefix(t)
	watcher := newStoreAt(t, wclient, prefix)
	s := newStoreAt(t, clientFor(t, c.Endpoints()...), prefix)

	mustCreate(t, s, "clusters/c0", cluster("c0"))
	put(t, s, "w/a", "a")
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	ch := watcher.Watch(wctx, "w/", 0)
	expectSnapshot(t, ch, "w/a")
	wclient.SetEndpoints(c.Endpoints()...)
	put(t, s, "w/b", "b")
	expectPut(t, ch, "w/b")

	// Stop the leader, the member serving the watch. (Stopping waits for
	// the open watch stream, up to etcd's request timeout.)
	start := time.Now()
	c.Stop(victim)
	t.Logf("stopped member %d (the leader) in %s", victim, time.Since(start))
	eventually(t, "a linearizable read without the stopped member", s.Ping)

	// The store keeps working on the two remaining members.
	mustCreate(t, s, "clusters/c1", cluster("c1"))
	rev, err := s.GuaranteedUpdate(testContext(t), "clusters/c0", &storagev1.ClusterRecord{}, addMember("i-after-stop"))
	if err != nil {
		t.Fatalf("GuaranteedUpdate without a member: %v", err)
	}
	if got, modRev := getCluster(t, s, "clusters/c0"); len(got.GetMembers()) != 1 || modRev != rev {
		t.Fatalf("record after update: %v @%d, update returned %d", got, modRev, rev)
	}
	page, err := s.List(testContext(t), store.ListOptions{Prefix: "clusters/", Limit: 1})
	if err != nil || len(page.Items) != 1 || page.NextToken == "" {
		t.Fatalf("List without a member: %+v, %v", page, err)
	}
	page, err = s.List(testContext(t), store.ListOptions{Prefix: "clusters/", Limit: 1, Token: page.NextToken})
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "c1" || page.NextToken != "" {
		t.Fatalf("second page without a member: %+v, %v", page, err)
	}

	// The watch moved to a live member and missed nothing.
	rc := put(t, s, "w/c", "c")
	rd := del(t, s, "w/a")
	if ev := expectPut(t, ch, "w/c"); ev.Revision != rc {
		t.Fatalf("w/c at %d, want %d", ev.Revision, rc)
	}
	if ev := expectDelete(t, ch, "w/a"); ev.Revision != rd {
		t.Fatalf("delete w/a at %d, want %d", ev.Revision, rd)
	}

	// Restart the member: the cluster is whole again.
	if err := c.Restart(ctx, victim); err != nil {
		t.Fatalf("restart member %d: %v", victim, err)
	}
	back := clientFor(t, c.Endpoints()[victim])
	eventually(t, "the restarted member catches up", func(ctx context.Context) error {
		resp, err := back.Get(ctx, s.Key("clusters/c1"), clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("restarted member lacks clusters/c1")
		}
		return nil
	})
	eventually(t, "every member sees the same leader", func(ctx context.Context) error {
		members, err := admin.MemberList(ctx)
		if err != nil {
			return err
		}
		if len(members.Members) != 3 {
			return fmt.Errorf("%d members", len(members.Members))
		}
		var leaders []uint64
		for _, ep := range c.Endpoints() {
			st, err := admin.Status(ctx, ep)
			if err != nil {
				return err
			}
			leaders = append(leaders, st.Leader)
		}
		for _, l := range leaders {
			if l == 0 || l != leaders[0] {
				return fmt.Errorf("leaders %v", leaders)
			}
		}
		return nil
	})
	re := put(t, s, "w/e", "e")
	if ev := expectPut(t, ch, "w/e"); ev.Revision != re {
		t.Fatalf("w/e at %d, want %d", ev.Revision, re)
	}
	wcancel()
	for range ch {
	}
}
