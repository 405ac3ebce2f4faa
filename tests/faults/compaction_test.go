package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/netproxy"
)

// compactAll compacts etcd's history up to its current revision,
// physically (the old revisions are gone when it returns), and returns
// that revision.
func compactAll(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, "compaction-test/probe")
	if err != nil {
		t.Fatalf("read the revision: %v", err)
	}
	rev := resp.Header.Revision
	// Compacted to rev already (nothing was written since): that is done.
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compact to %d: %v", rev, err)
	}
	return rev
}

// TestCompactionBetweenPages: a nextToken is a position in key order (the
// last key returned, signed), not a revision: etcd compacted — physically,
// to its current revision — between any two pages, the listing goes on,
// on either replica. For ListClusters, ListAddons and ListAccessEntries,
// with two items a page and a compaction before every page: every item
// is listed once, in key order; an item created past the position before
// the next page is listed, one created behind it is not, and one deleted
// past it is not (it is gone); so the pages equal, exactly, a listing of
// what was there when the listing reached it. A tampered token and a
// token from another listing are InvalidParameterException ("The
// nextToken provided is not valid.") after compaction as before.
func TestCompactionBetweenPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	replicas := []*servertest.Server{
		servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints())),
		servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints())),
	}
	clients := []*eks.Client{replicas[0].EKS(t), replicas[1].EKS(t)}
	cli := replicas[0].Etcd(t)
	c := clients[0]

	const cluster = "paged-1"
	for _, name := range []string{"paged-0", cluster, "paged-2", "paged-3", "paged-4"} {
		in := &eks.CreateClusterInput{Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks-cluster"),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
			AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}}
		if _, err := c.CreateCluster(ctx, in); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
	}
	ca, err := clustertest.GenerateCertificateAuthorityData()
	if err != nil {
		t.Fatal(err)
	}
	account := replicas[0].Config.DevAccount
	if _, err := controlv1.NewClusterControlServiceClient(replicas[0].GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: account, Name: cluster}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: ca,
	}); err != nil {
		t.Fatalf("SetStatus %s ACTIVE: %v", cluster, err)
	}
	clusterUID := clusterUIDOf(t, ctx, replicas[0], account, cluster)
	createAddon := func(name string) error {
		in := &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(name)}
		if name == "saltbush-noop" {
			in.ConfigurationValues = aws.String(dlConfig(name, 1))
		}
		_, err := c.CreateAddon(ctx, in)
		return err
	}
	for _, name := range []string{"coredns", "kube-proxy", "metrics-server", "saltbush-noop", "vpc-cni"} {
		if err := createAddon(name); err != nil {
			t.Fatalf("CreateAddon %s: %v", name, err)
		}
	}
	role := func(i int) string { return fmt.Sprintf("arn:aws:iam::%s:role/paged-%02d", account, i) }
	for i := range 16 {
		if _, err := replicas[0].IAM().CreatePrincipal(ctx, role(i)); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", role(i), err)
		}
	}
	createEntry := func(arn string) error {
		_, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(arn)})
		return err
	}
	for i := range 5 {
		if err := createEntry(role(i)); err != nil {
			t.Fatalf("CreateAccessEntry %s: %v", role(i), err)
		}
	}
	var spareRoles []string
	for i := 5; i < 16; i++ {
		spareRoles = append(spareRoles, role(i))
	}

	type listFn func(c *eks.Client, token *string) ([]string, *string, error)
	cases := []struct {
		name string
		list listFn
		// key is an item's etcd key, whose order is the listing's.
		key func(name string) string
		// spare are items not yet created, to create between pages.
		spare  []string
		create func(name string) error
		// remove deletes an item at once (nil: deletion is not
		// immediate for this kind).
		remove func(name string) error
	}{
		{name: "ListClusters",
			list: func(c *eks.Client, token *string) ([]string, *string, error) {
				out, err := c.ListClusters(ctx, &eks.ListClustersInput{MaxResults: aws.Int32(2), NextToken: token})
				if err != nil {
					return nil, nil, err
				}
				return out.Clusters, out.NextToken, nil
			},
			key:   func(n string) string { return n },
			spare: []string{"paged-00", "paged-9"},
			create: func(n string) error {
				_, err := c.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(n), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks-cluster"),
					ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}}})
				return err
			}},
		{name: "ListAddons",
			list: func(c *eks.Client, token *string) ([]string, *string, error) {
				out, err := c.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cluster), MaxResults: aws.Int32(2), NextToken: token})
				if err != nil {
					return nil, nil, err
				}
				return out.Addons, out.NextToken, nil
			},
			key:    func(n string) string { return n },
			spare:  []string{"aws-ebs-csi-driver", "nvidia-device-plugin"},
			create: createAddon},
		{name: "ListAccessEntries",
			list: func(c *eks.Client, token *string) ([]string, *string, error) {
				out, err := c.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(cluster), MaxResults: aws.Int32(2), NextToken: token})
				if err != nil {
					return nil, nil, err
				}
				return out.AccessEntries, out.NextToken, nil
			},
			key:    func(arn string) string { return store.AccessEntryKey(clusterUID, arn) },
			spare:  spareRoles,
			create: createEntry,
			remove: func(arn string) error {
				_, err := c.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(arn)})
				return err
			}},
	}
	var firstTokens []*string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all, err := listAll(tc.list, c)
			if err != nil {
				t.Fatalf("%s before paging: %v", tc.name, err)
			}
			page, token, err := tc.list(clients[0], nil)
			if err != nil || len(page) != 2 || token == nil {
				t.Fatalf("%s page 1: %v, next %v, %v", tc.name, page, token, err)
			}
			firstTokens = append(firstTokens, token)
			cursor := tc.key(page[len(page)-1])
			compactAll(t, ctx, cli)
			// Between the pages: one item created past the position, one
			// behind it, and one not yet listed deleted.
			var ahead, behind string
			for _, n := range tc.spare {
				switch k := tc.key(n); {
				case k > cursor && ahead == "":
					ahead = n
				case k < cursor && behind == "":
					behind = n
				}
			}
			if ahead == "" || behind == "" {
				t.Fatalf("no spare item on both sides of %q in %v", cursor, tc.spare)
			}
			want := map[string]bool{}
			for _, n := range all {
				if tc.key(n) > cursor {
					want[n] = true
				}
			}
			for _, n := range []string{ahead, behind} {
				if err := tc.create(n); err != nil {
					t.Fatalf("create %s between pages: %v", n, err)
				}
			}
			want[ahead] = true
			if tc.remove != nil {
				gone := ""
				for n := range want {
					if n != ahead && (gone == "" || tc.key(n) < tc.key(gone)) {
						gone = n
					}
				}
				if err := tc.remove(gone); err != nil {
					t.Fatalf("delete %s between pages: %v", gone, err)
				}
				delete(want, gone)
			}
			got := slices.Clone(page)
			for i := 1; token != nil; i++ {
				rev := compactAll(t, ctx, cli)
				var next []string
				next, token, err = tc.list(clients[i%2], token)
				if err != nil {
					t.Fatalf("%s page %d, on replica %d, after compacting to %d: %v", tc.name, i+1, i%2, rev, err)
				}
				got = append(got, next...)
			}
			rest := slices.Collect(maps.Keys(want))
			sort.Slice(rest, func(i, j int) bool { return tc.key(rest[i]) < tc.key(rest[j]) })
			if expected := append(slices.Clone(page), rest...); !slices.Equal(got, expected) {
				t.Errorf("%s across compactions: %v\nwant %v (page 1 %v, then what was past %q when the listing got there)", tc.name, got, expected, page, page[len(page)-1])
			}
		})
	}

	// Refused tokens are refused after compaction too, as AWS refuses them.
	if len(firstTokens) != len(cases) {
		t.Fatal("not every listing gave a token")
	}
	compactAll(t, ctx, cli)
	// The last character changed (to another base64url letter).
	tampered := *firstTokens[1]
	swap := "A"
	if strings.HasSuffix(tampered, "A") {
		swap = "B"
	}
	tampered = tampered[:len(tampered)-1] + swap
	refused := []struct {
		name  string
		token string
	}{
		{"a tampered ListAddons token", tampered},
		{"a ListClusters token given to ListAddons", *firstTokens[0]},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := cases[1].list(clients[1], aws.String(tc.token))
			var invalid *types.InvalidParameterException
			if !errors.As(err, &invalid) || !strings.Contains(invalid.ErrorMessage(), "nextToken") {
				t.Errorf("ListAddons with %s: %v; want InvalidParameterException about the nextToken", tc.name, err)
			}
		})
	}
}

// listAll lists every page.
func listAll(list func(c *eks.Client, token *string) ([]string, *string, error), c *eks.Client) ([]string, error) {
	var all []string
	var token *string
	for {
		page, next, err := list(c, token)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if token = next; token == nil {
			return all, nil
		}
	}
}

// clusterUIDOf reads a cluster's uid from its record.
func clusterUIDOf(t *testing.T, ctx context.Context, srv *servertest.Server, account, name string) string {
	t.Helper()
	ref := &controlv1.ClusterRef{AccountId: account, Name: name}
	out, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
	if err != nil {
		t.Fatalf("GetCluster %s: %v", name, err)
	}
	return out.GetCluster().GetUid()
}

// TestCompactionBehindAWatch: replica a reaches etcd through a proxy;
// while every connection of a to etcd is reset, things change — keys
// under a watched prefix put and deleted, an access key deactivated on
// replica b, an add-on created on b — and etcd is compacted, physically,
// to its current revision; then the proxy heals. Every watch of a is
// behind the compaction when it resumes, and must re-list (a snapshot)
// and go on from there, losing nothing of the latest state:
//   - a store.Watch on a client through the proxy ends up holding exactly
//     what etcd holds: after the resume it sends a snapshot at or after
//     the compaction, then live events after it, never one at or before
//     the revision of what it already sent;
//   - a's key store mirror (a store.Watch) learns that the key was
//     deactivated: a refuses it (UnrecognizedClientException), as b does;
//   - a's delivery watch of the cluster (its own etcd watches) resumes:
//     i-1's stream on a, which outlives the outage (a fresh session lasts
//     longer here), is sent the desired set with the new add-on, and its
//     READY report makes it ACTIVE.
func TestCompactionBehindAWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	proxy := netproxy.Start(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	// A session fresh for 8s after a renewal: the stream on a outlives
	// the outage and etcd's reconnection after it.
	env := newDLEnvVia(t, etcd.Endpoints(), [][]string{{"http://" + proxy.Addr()}, nil},
		servertest.WithConfig(func(c *server.Config) { c.Delivery.SessionTTL = 10 * time.Second }))
	ra, rb := env.replica(0), env.replica(1)
	const cluster = "watched"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1"})
	if err != nil {
		t.Fatal(err)
	}
	agent := startLinkAgent(t, env, uid, cluster, "i-1", time.Second, ra.srv.GRPCAddr())
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
		s, err := env.sessions(ctx, uid)
		e, eerr := env.executor(ctx, uid)
		return s["i-1"] == ra.name && e.GetInstanceId() == "i-1", errors.Join(err, eerr)
	}); err != nil {
		t.Fatalf("i-1 is not the executor with its stream on %s: %v", ra.name, err)
	}
	if _, err := rb.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("coredns")}); err != nil {
		t.Fatalf("CreateAddon coredns: %v", err)
	}
	waitAddon(t, ctx, env, uid, "coredns", 1, "coredns ACTIVE through i-1 on "+ra.name)

	// A store watch through the proxy, and a mirror of what it sends.
	viaProxy, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxy.Close() })
	st, err := store.New(ctx, viaProxy, store.Options{Prefix: env.prefix})
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "compaction-watch/"
	put := func(k, v string) {
		t.Helper()
		if _, err := env.cli.Put(ctx, env.prefix+prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		put(k, "v1")
	}
	m := startMirror(ctx, st, prefix)
	m.waitEqual(t, ctx, env, prefix, "before the outage")

	// A key a accepts.
	key := rb.srv.NewKey(t, identity.RootARN(env.account))
	viaA := ra.srv.EKSAs(t, key, func(o *eks.Options) { o.Retryer = aws.NopRetryer{} })
	if _, err := viaA.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters on %s with a new key: %v", ra.name, err)
	}

	proxy.Reset()
	outage := time.Now()
	if _, err := env.cli.Delete(ctx, env.prefix+prefix+"k1"); err != nil {
		t.Fatal(err)
	}
	put("k2", "v2")
	put("k4", "v1")
	if err := rb.srv.IAM().SetAccessKeyStatus(ctx, key.AccessKeyID, iam.KeyInactive); err != nil {
		t.Fatalf("deactivate %s on %s: %v", key.AccessKeyID, rb.name, err)
	}
	if _, err := rb.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("kube-proxy")}); err != nil {
		t.Fatalf("CreateAddon kube-proxy on %s: %v", rb.name, err)
	}
	compacted := compactAll(t, ctx, env.cli)
	proxy.Heal()
	t.Logf("a's etcd connections reset for %s; compacted to %d", time.Since(outage).Round(time.Millisecond), compacted)

	// The store watch: re-listed after the compaction, exactly etcd's.
	m.waitEqual(t, ctx, env, prefix, "after the outage")
	if snap := m.snapshotAtLeast(compacted); snap == 0 {
		t.Errorf("the store watch holds etcd's state but sent no snapshot at or after the compaction at %d: it did not re-list\n%s", compacted, m.describe())
	}
	put("k5", "v1")
	m.waitEqual(t, ctx, env, prefix, "a put after the resume")
	for _, e := range m.order() {
		t.Error(e)
	}

	// The key mirror of a: the key is refused there too.
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		_, err := viaA.ListClusters(ctx, &eks.ListClustersInput{})
		var apiErr smithy.APIError
		return errors.As(err, &apiErr) && apiErr.ErrorCode() == "UnrecognizedClientException", err
	}); err != nil {
		t.Errorf("%s still accepts the key deactivated on %s while it was cut off: %v", ra.name, rb.name, err)
	}

	// The delivery watch of a: the add-on created during the outage
	// reaches i-1 on the stream that was open throughout.
	waitAddon(t, ctx, env, uid, "kube-proxy", 1, "kube-proxy, created during the outage, ACTIVE through i-1 on "+ra.name)
	if ended := agent.heard(ra.srv.GRPCAddr(), time.Time{}); agent.streamEnds() > 0 {
		t.Errorf("i-1's stream on %s ended (after %d messages): the outage was meant to be shorter than its session's freshness\n%s", ra.name, ended, agent.describe())
	}
	if set := agent.lastSet(); set.GetVersion() < compacted {
		t.Errorf("i-1 applied set version %d, before the compaction at %d", set.GetVersion(), compacted)
	}
}

// watchMirror applies what a store.Watch sends, as the key store mirror
// does, and records it.
type watchMirror struct {
	mu     sync.Mutex
	kv     map[string]string
	events []store.Event
}

func startMirror(ctx context.Context, st *store.Store, prefix string) *watchMirror {
	m := &watchMirror{kv: map[string]string{}}
	ch := st.Watch(ctx, prefix, 0)
	go func() {
		for ev := range ch {
			m.mu.Lock()
			switch ev.Type {
			case store.EventSnapshot:
				m.kv = map[string]string{}
				for _, kv := range ev.Snapshot {
					m.kv[kv.Key] = string(kv.Value)
				}
			case store.EventPut:
				m.kv[ev.Key] = string(ev.Value)
			case store.EventDelete:
				delete(m.kv, ev.Key)
			}
			ev.Snapshot = nil
			m.events = append(m.events, ev)
			m.mu.Unlock()
		}
	}()
	return m
}

// waitEqual waits for the mirror to hold exactly what etcd holds under
// prefix.
func (m *watchMirror) waitEqual(t *testing.T, ctx context.Context, env *dlEnv, prefix, when string) {
	t.Helper()
	var want map[string]string
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		resp, err := env.cli.Get(ctx, env.prefix+prefix, clientv3.WithPrefix())
		if err != nil {
			return false, err
		}
		want = map[string]string{}
		for _, kv := range resp.Kvs {
			want[strings.TrimPrefix(string(kv.Key), env.prefix)] = string(kv.Value)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return maps.Equal(m.kv, want), nil
	}); err != nil {
		m.mu.Lock()
		got := maps.Clone(m.kv)
		m.mu.Unlock()
		t.Fatalf("%s: the watch's mirror %v, etcd %v: %v\n%s", when, got, want, err, m.describe())
	}
}

// snapshotAtLeast is the revision of the first snapshot sent at rev or
// later (0: none).
func (m *watchMirror) snapshotAtLeast(rev int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range m.events {
		if ev.Type == store.EventSnapshot && ev.Revision >= rev {
			return ev.Revision
		}
	}
	return 0
}

// order checks the events: revisions only grow, and nothing after a
// snapshot is at or before it.
func (m *watchMirror) order() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []string
	var last int64
	for i, ev := range m.events {
		if ev.Revision < last || ev.Type != store.EventSnapshot && ev.Revision == last {
			errs = append(errs, fmt.Sprintf("event %d (type %d, %s) at revision %d, after revision %d was sent", i, ev.Type, ev.Key, ev.Revision, last))
		}
		last = max(last, ev.Revision)
	}
	return errs
}

func (m *watchMirror) describe() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, ev := range m.events {
		fmt.Fprintf(&b, "  type %d %s at %d\n", ev.Type, ev.Key, ev.Revision)
	}
	return b.String()
}

// TestCompactionBeforeAgentResume: an agent resumes by the version (an
// etcd revision) and digest of the set it applied; etcd compacted past
// that version meanwhile. The host never reads at the agent's version —
// it compares digests — so, in order:
//   - content changed while the agent was away (an add-on created, one
//     updated, one deleted) and the version was compacted: the first set
//     on its new stream is the whole desired state at a revision past the
//     compaction (the new add-on, the update's generation, the deleted
//     one as a tombstone), and the agent's reports converge it (ACTIVE,
//     ACTIVE at generation 2, gone);
//   - nothing changed while it was away, only its version was compacted
//     (the revision moved on elsewhere): it is in sync at once (its
//     session's acknowledged digest is the desired one) and is sent
//     nothing again — the first set on its new stream is the next change.
func TestCompactionBeforeAgentResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := startSharedEtcd(t, ctx)
	env := newDLEnv(t, etcd.Endpoints(), 1)
	r := env.replica(0)
	const cluster = "resumed"
	uid, _, err := env.createCluster(ctx, cluster, []string{"i-1"})
	if err != nil {
		t.Fatal(err)
	}
	createAddon := func(name string) {
		t.Helper()
		in := &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(name)}
		if name == "saltbush-noop" {
			in.ConfigurationValues = aws.String(dlConfig(name, 1))
		}
		if _, err := r.eks.CreateAddon(ctx, in); err != nil {
			t.Fatalf("CreateAddon %s: %v", name, err)
		}
	}
	for _, name := range []string{"coredns", "metrics-server", "saltbush-noop"} {
		createAddon(name)
	}
	applied := &fakeagent.Applied{}
	status := controlv1.NewDeliveryControlServiceClient(r.admin)
	ref := &controlv1.ClusterRef{AccountId: env.account, Name: cluster}
	// inSync waits for the agent to have applied the desired content.
	inSync := func(what string) {
		t.Helper()
		if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			st, err := status.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: ref})
			return err == nil && st.GetDesiredDigest() == applied.Set().GetDigest(), err
		}); err != nil {
			t.Fatalf("%s: the agent did not apply the desired set: %v", what, err)
		}
	}
	first := startLinkAgentFrom(t, env, uid, cluster, "i-1", applied, time.Second, r.srv.GRPCAddr())
	for _, name := range []string{"coredns", "metrics-server", "saltbush-noop"} {
		waitAddon(t, ctx, env, uid, name, 1, name+" ACTIVE through i-1")
	}
	inSync("before going away")
	first.stop()
	away := applied.Set()

	t.Run("content changed while away", func(t *testing.T) {
		createAddon("kube-proxy")
		if err := env.updateAddon(ctx, cluster, "coredns", 2); err != nil {
			t.Fatalf("UpdateAddon coredns: %v", err)
		}
		if err := env.deleteAddon(ctx, cluster, "metrics-server"); err != nil {
			t.Fatalf("DeleteAddon metrics-server: %v", err)
		}
		compacted := compactAll(t, ctx, env.cli)
		if away.GetVersion() >= compacted {
			t.Fatalf("the applied version %d is not behind the compaction at %d", away.GetVersion(), compacted)
		}
		// What etcd holds (a deletion is a generation too).
		want := map[string]string{}
		for _, name := range []string{"coredns", "kube-proxy", "metrics-server", "saltbush-noop"} {
			a, err := env.addon(ctx, uid, name)
			if err != nil || a == nil {
				t.Fatalf("add-on %s: %v", name, err)
			}
			want[name] = fmt.Sprintf("gen %d deleting %v", a.GetGeneration(), a.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_DELETING)
		}
		if !strings.Contains(want["metrics-server"], "deleting true") || !strings.HasPrefix(want["coredns"], "gen 2") {
			t.Fatalf("records after the changes: %v", want)
		}
		since := time.Now()
		agent := startLinkAgentFrom(t, env, uid, cluster, "i-1", applied, time.Second, r.srv.GRPCAddr())
		set := agent.firstSetAfter(t, ctx, since)
		got := map[string]string{}
		for _, d := range set.GetAddons() {
			got[d.GetName()] = fmt.Sprintf("gen %d deleting %v", d.GetGeneration(), d.GetDeleting())
		}
		if set.GetVersion() < compacted || !maps.Equal(got, want) {
			t.Errorf("first set after resuming from version %d (compacted at %d): version %d, %v; want the whole state %v",
				away.GetVersion(), compacted, set.GetVersion(), got, want)
		}
		waitAddon(t, ctx, env, uid, "kube-proxy", 1, "kube-proxy ACTIVE after the resume")
		waitAddon(t, ctx, env, uid, "coredns", 2, "coredns's update ACTIVE after the resume")
		if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
			a, err := env.addon(ctx, uid, "metrics-server")
			return a == nil && err == nil, err
		}); err != nil {
			t.Errorf("metrics-server, deleted while the agent was away, is still there: %v", err)
		}
		inSync("after the resume")
		agent.stop()
	})

	t.Run("nothing changed while away", func(t *testing.T) {
		away := applied.Set()
		// The revision moves on elsewhere: another cluster.
		if _, _, err := env.createCluster(ctx, "elsewhere", []string{"i-9"}); err != nil {
			t.Fatal(err)
		}
		compacted := compactAll(t, ctx, env.cli)
		if away.GetVersion() >= compacted {
			t.Fatalf("the applied version %d is not behind the compaction at %d", away.GetVersion(), compacted)
		}
		since := time.Now()
		agent := startLinkAgentFrom(t, env, uid, cluster, "i-1", applied, time.Second, r.srv.GRPCAddr())
		if err := waitFor(ctx, 20*time.Second, func() (bool, error) {
			st, err := status.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: ref})
			if err != nil {
				return false, err
			}
			for _, s := range st.GetSessions() {
				if s.GetInstanceId() == "i-1" && s.GetConnectedAt().AsTime().After(since.Add(-time.Second)) {
					return s.GetAckedDigest() == st.GetDesiredDigest() && s.GetAckedVersion() == away.GetVersion(),
						fmt.Errorf("session acknowledged version %d digest %.12s, desired digest %.12s", s.GetAckedVersion(), s.GetAckedDigest(), st.GetDesiredDigest())
				}
			}
			return false, errors.New("no session of i-1's new stream")
		}); err != nil {
			t.Errorf("i-1, resuming from compacted version %d with the current digest, is not in sync: %v", away.GetVersion(), err)
		}
		createAddon("vpc-cni")
		set := agent.firstSetAfter(t, ctx, since)
		if !slices.ContainsFunc(set.GetAddons(), func(d *deliveryv1.DesiredAddon) bool { return d.GetName() == "vpc-cni" }) {
			t.Errorf("the first set on the resumed stream (version %d) lacks vpc-cni, the change made after it connected: the host sent again what the agent had", set.GetVersion())
		}
		waitAddon(t, ctx, env, uid, "vpc-cni", 1, "vpc-cni ACTIVE")
		agent.stop()
	})

	// saltbush admin delivery status reads the cluster at one revision:
	// compactions racing it must not fail it.
	t.Run("status while etcd compacts", func(t *testing.T) {
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; rctx.Err() == nil; i++ {
				if _, err := env.cli.Put(rctx, env.prefix+"compaction-test/churn", fmt.Sprint(i)); err != nil {
					return
				}
				resp, err := env.cli.Get(rctx, env.prefix+"compaction-test/churn")
				if err != nil {
					return
				}
				_, _ = env.cli.Compact(rctx, resp.Header.Revision)
			}
		}()
		var failed []string
		calls := 0
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); calls++ {
			if _, err := status.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: ref}); err != nil {
				failed = append(failed, err.Error())
			}
		}
		stop()
		wg.Wait()
		if len(failed) > 0 {
			t.Errorf("%d of %d GetDeliveryStatus calls failed while etcd compacted, first: %s", len(failed), calls, failed[0])
		}
	})
}
