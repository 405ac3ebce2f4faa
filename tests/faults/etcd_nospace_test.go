package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// noSpaceQuota is the test etcd's backend quota: small enough to fill in
// a few puts, large enough for saltbush's own records.
const noSpaceQuota = 8 << 20

// scratchPrefix is where the test fills etcd, outside saltbush's keyspace.
const scratchPrefix = "/nospace-scratch/"

// TestEtcdNoSpace fills an etcd with a small backend quota until a write
// through saltbush trips etcd's NOSPACE alarm. Then every write through
// the façade answers 503 ServiceUnavailableException (not a 500), except
// one that only deletes, which etcd takes; reads and /readyz still work,
// and nothing a refused multi-key write would have made is there. After
// the operator's recovery (delete what is not needed, compact,
// defragment, disarm the alarm) writes succeed again.
func TestEtcdNoSpace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true, QuotaBackendBytes: noSpaceQuota})
	if err != nil {
		t.Fatalf("start etcd with a %d-byte quota: %v", noSpaceQuota, err)
	}
	t.Cleanup(etcd.Close) // after the server stops
	endpoint := etcd.Endpoints()[0]
	srv := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()))
	cli := srv.Etcd(t)
	client := srv.EKS(t)
	once := srv.EKS(t, func(o *eks.Options) { o.RetryMaxAttempts = 1 })

	c := setupLoadClusters(ctx, t, srv, "nospace", 1)[0]
	cn := aws.String(c.name)
	principals := []string{"arn:aws:iam::000000000000:role/nospace-before", "arn:aws:iam::000000000000:role/nospace-refused",
		"arn:aws:iam::000000000000:role/nospace-deleted"}
	for _, arn := range principals {
		if _, err := controlv1.NewIdentityControlServiceClient(srv.GRPC(t)).CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	if _, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: cn, AddonName: aws.String("saltbush-noop")}); err != nil {
		t.Fatalf("CreateAddon before NOSPACE: %v", err)
	}
	for _, p := range []string{principals[0], principals[2]} {
		if _, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(p),
			KubernetesGroups: []string{"before"}}); err != nil {
			t.Fatalf("CreateAccessEntry %s before NOSPACE: %v", p, err)
		}
	}

	// Fill etcd directly until it refuses a put and raises the alarm,
	// then disarm it without freeing anything (an operator's easy
	// mistake): the next write through saltbush finds the quota exceeded
	// and raises the alarm again.
	puts, size := fillScratch(ctx, t, cli, endpoint)
	disarmAlarms(ctx, t, cli)
	trip := func(c *eks.Client) error {
		_, err := c.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("tripped"), ClientRequestToken: aws.String("tripped-token"),
			RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"), ResourcesVpcConfig: &types.VpcConfigRequest{},
			AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}})
		return err
	}
	_, msg := wanterr.AWS(t, trip(once), "ServiceUnavailableException", http.StatusServiceUnavailable)
	t.Logf("quota %d bytes: %d scratch puts of 512 KiB filled etcd to %d bytes; with the alarm disarmed, CreateCluster answered 503 %q",
		noSpaceQuota, puts, size, msg)
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(alarms.Alarms, func(a *etcdserverpb.AlarmMember) bool { return a.Alarm == etcdserverpb.AlarmType_NOSPACE }) {
		t.Fatalf("etcd alarms %v after the refused write, want NOSPACE", alarms.Alarms)
	}

	// Every write, single- or multi-key, is refused with a 503.
	refused := []struct {
		name string
		call func() error
	}{
		{"CreateCluster", func() error {
			_, err := once.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("refused"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
				ResourcesVpcConfig: &types.VpcConfigRequest{}, AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}})
			return err
		}},
		{"CreateAddon with pod identity associations", func() error {
			_, err := once.CreateAddon(ctx, noSpaceAddon(c.name))
			return err
		}},
		{"CreateAccessEntry", func() error {
			_, err := once.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[1])})
			return err
		}},
		{"UpdateAccessEntry", func() error {
			_, err := once.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[0]),
				KubernetesGroups: []string{"during"}})
			return err
		}},
		{"DeleteAddon", func() error {
			_, err := once.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: cn, AddonName: aws.String("saltbush-noop")})
			return err
		}},
		{"TagResource", func() error {
			d, err := once.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: cn})
			if err != nil {
				return fmt.Errorf("DescribeCluster: %w", err)
			}
			_, err = once.TagResource(ctx, &eks.TagResourceInput{ResourceArn: d.Cluster.Arn, Tags: map[string]string{"during": "nospace"}})
			return err
		}},
	}
	for _, w := range refused {
		t.Run(w.name, func(t *testing.T) {
			err := w.call()
			var unavailable *types.ServiceUnavailableException
			if !errors.As(err, &unavailable) {
				t.Fatalf("%s under NOSPACE: %v, want ServiceUnavailableException", w.name, err)
			}
			wanterr.AWS(t, err, "ServiceUnavailableException", http.StatusServiceUnavailable)
		})
	}
	// A write that only deletes keys costs etcd no space, and etcd takes
	// it under the alarm: deleting is how space comes back.
	if _, err := once.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[2])}); err != nil {
		t.Errorf("DeleteAccessEntry under NOSPACE: %v", err)
	}
	var nf *types.ResourceNotFoundException
	if _, err := once.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[2])}); !errors.As(err, &nf) {
		t.Errorf("access entry deleted under NOSPACE: DescribeAccessEntry = %v, want ResourceNotFoundException", err)
	}
	// The SDK's own retries end in the same answer, soon.
	_, err = client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[1])})
	wanterr.AWS(t, err, "ServiceUnavailableException", http.StatusServiceUnavailable)

	// Reads still work, and saltbush stays ready: a replica that cannot
	// write can still serve reads, and every replica shares the etcd.
	reads := []struct {
		name string
		call func() error
	}{
		{"DescribeCluster", func() error { _, err := once.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: cn}); return err }},
		{"ListClusters", func() error { _, err := once.ListClusters(ctx, &eks.ListClustersInput{}); return err }},
		{"DescribeAddon", func() error {
			_, err := once.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: cn, AddonName: aws.String("saltbush-noop")})
			return err
		}},
		{"ListAccessEntries", func() error {
			_, err := once.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: cn})
			return err
		}},
	}
	for _, r := range reads {
		if err := r.call(); err != nil {
			t.Errorf("%s under NOSPACE: %v", r.name, err)
		}
	}
	if resp, err := http.Get(srv.URL + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz under NOSPACE: %v %v, want 200", resp, err)
	} else {
		_ = resp.Body.Close()
	}

	// Nothing of a write refused under the alarm is there: neither the
	// cluster nor its creator's entry, nor the add-on nor its associations
	// and their exclusivity keys, nor the entry; what the refused updates
	// would have changed is as it was. (A write that crosses the quota
	// with the alarm not yet raised may have been made: etcd judges the
	// quota again as it applies a write, applies it anyway, and answers
	// NOSPACE all the same. Its 503 means what any 503 means, an outcome
	// to learn by retrying with the same token.)
	noneOfRefused(ctx, t, cli, client, c, principals)
	checkKeyspace(ctx, t, cli)

	// The operator's recovery.
	recoverNoSpace(ctx, t, cli, endpoint)

	// Writes succeed again: the refused ones included, and the write that
	// raised the alarm, retried with its token.
	if err := trip(client); err != nil {
		t.Errorf("CreateCluster tripped, retried with its token after recovery: %v", err)
	}
	if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("refused"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{}, AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}}); err != nil {
		t.Errorf("CreateCluster after recovery: %v", err)
	}
	if out, err := client.CreateAddon(ctx, noSpaceAddon(c.name)); err != nil {
		t.Errorf("CreateAddon after recovery: %v", err)
	} else if len(out.Addon.PodIdentityAssociations) != 2 {
		t.Errorf("CreateAddon after recovery: %d pod identity associations, want 2", len(out.Addon.PodIdentityAssociations))
	}
	if _, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[1])}); err != nil {
		t.Errorf("CreateAccessEntry after recovery: %v", err)
	}
	if _, err := client.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: cn, PrincipalArn: aws.String(principals[0]),
		KubernetesGroups: []string{"after"}}); err != nil {
		t.Errorf("UpdateAccessEntry after recovery: %v", err)
	}
	checkKeyspace(ctx, t, cli)
}

// noSpaceAddon is a multi-key create: the add-on, two pod identity
// associations and their service accounts' exclusivity keys, its deadline
// hint, the idempotency record.
func noSpaceAddon(cluster string) *eks.CreateAddonInput {
	return &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("saltbush-pod-identity"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{
			{ServiceAccount: aws.String("saltbush-pod-identity-controller"), RoleArn: aws.String("arn:aws:iam::000000000000:role/controller")},
			{ServiceAccount: aws.String("saltbush-pod-identity-node"), RoleArn: aws.String("arn:aws:iam::000000000000:role/node")},
		}}
}

// fillScratch puts 512 KiB values under scratchPrefix until etcd refuses
// one for space and, with the alarm disarmed, a one-byte put too (which
// raises the NOSPACE alarm again), and returns the puts it
// acknowledged and the backend's size. (etcd judges a put by the
// backend's size at its last commit, and bbolt grows in steps: the
// status's size cannot say how close the quota is, a refusal can.)
func fillScratch(ctx context.Context, t *testing.T, cli *clientv3.Client, endpoint string) (int, int64) {
	t.Helper()
	puts := 0
	chunk := 512 << 10
	for {
		_, err := cli.Put(ctx, fmt.Sprintf("%s%06d", scratchPrefix, puts), string(make([]byte, chunk)))
		if errors.Is(err, rpctypes.ErrNoSpace) {
			// The quota is checked against the backend's size as of its
			// last commit, which lags a write by up to the batch interval:
			// a small write right after could still fit. Full is when
			// one byte, with the alarm disarmed, is refused too; that
			// refusal raises the alarm again, for the caller to disarm.
			// When it fits, the refused chunk was larger than the room
			// left (a commit that kept up with the writes, as on a busy
			// machine): the next chunks are halved until nothing fits.
			disarmAlarms(ctx, t, cli)
			_, err = cli.Put(ctx, scratchPrefix+"probe", "x")
			if errors.Is(err, rpctypes.ErrNoSpace) {
				break
			}
			chunk = max(chunk/2, 1)
		}
		if err != nil {
			t.Fatalf("scratch put %d: %v", puts, err)
		}
		if puts++; puts > 1000 {
			t.Fatalf("%d scratch puts did not fill a %d-byte quota", puts, noSpaceQuota)
		}
	}
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		t.Fatalf("status of %s: %v", endpoint, err)
	}
	return puts, st.DbSize
}

// disarmAlarms disarms every alarm etcd has raised, and returns how many.
func disarmAlarms(ctx context.Context, t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alarms.Alarms {
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			t.Fatalf("disarm %v: %v", a, err)
		}
	}
	return len(alarms.Alarms)
}

// noneOfRefused checks that the writes refused under NOSPACE left nothing
// behind, and changed nothing.
func noneOfRefused(ctx context.Context, t *testing.T, cli *clientv3.Client, client *eks.Client, c loadCluster, principals []string) {
	t.Helper()
	var nf *types.ResourceNotFoundException
	for _, name := range []string{"refused", "tripped"} {
		if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); !errors.As(err, &nf) {
			t.Errorf("cluster %s, refused under NOSPACE: DescribeCluster = %v, want ResourceNotFoundException", name, err)
		}
		if n := countKeys(ctx, t, cli, store.DefaultPrefix+store.ClusterKey("000000000000", name)); n != 0 {
			t.Errorf("cluster %s, refused under NOSPACE: %d keys", name, n)
		}
	}
	if _, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String("saltbush-pod-identity")}); !errors.As(err, &nf) {
		t.Errorf("add-on saltbush-pod-identity, refused under NOSPACE: DescribeAddon = %v, want ResourceNotFoundException", err)
	}
	for _, prefix := range []string{store.PodIdentityAssociationsPrefix(c.uid), store.PodIdentityServiceAccountsPrefix(c.uid)} {
		if n := countKeys(ctx, t, cli, store.DefaultPrefix+prefix); n != 0 {
			t.Errorf("%d keys under %s after the add-on with pod identity associations was refused", n, prefix)
		}
	}
	if _, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principals[1])}); !errors.As(err, &nf) {
		t.Errorf("access entry of %s, refused under NOSPACE: %v, want ResourceNotFoundException", principals[1], err)
	}
	entry, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principals[0])})
	if err != nil || !slices.Equal(entry.AccessEntry.KubernetesGroups, []string{"before"}) {
		t.Errorf("access entry of %s after a refused update: %v, %v; want groups [before]", principals[0], entry, err)
	}
	addon, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String("saltbush-noop")})
	if err != nil || addon.Addon.Status == types.AddonStatusDeleting {
		t.Errorf("add-on saltbush-noop after a refused delete: %v, %v; want it not DELETING", addon, err)
	}
}

func countKeys(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count keys under %s: %v", prefix, err)
	}
	return resp.Count
}

// recoverNoSpace is the operator's recovery from NOSPACE
// (docs/operations.md): delete what is not needed, compact the history
// up to the current revision, defragment (which gives the space back to
// the file system), and disarm the alarm, which etcd keeps raised until
// told.
func recoverNoSpace(ctx context.Context, t *testing.T, cli *clientv3.Client, endpoint string) {
	t.Helper()
	before, err := cli.Status(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, scratchPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("delete the scratch keys under NOSPACE: %v", err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact at revision %d: %v", del.Header.Revision, err)
	}
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		t.Fatalf("defragment %s: %v", endpoint, err)
	}
	disarmed := disarmAlarms(ctx, t, cli)
	after, err := cli.Status(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if alarms, err := cli.AlarmList(ctx); err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after disarming: %v, %v", alarms, err)
	}
	t.Logf("recovery: deleted %d scratch keys, compacted at revision %d, defragmented %d → %d bytes, disarmed %d alarm(s)",
		del.Deleted, del.Header.Revision, before.DbSize, after.DbSize, disarmed)
}
