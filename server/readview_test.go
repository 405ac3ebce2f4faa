package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/netproxy"
)

const viewTestRole = "arn:aws:iam::000000000000:role/eks-cluster"

func viewCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func createActiveCluster(t *testing.T, srv *servertest.Server, client *eks.Client, name string) {
	t.Helper()
	ctx := viewCtx(t)
	if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(name), Version: aws.String("1.35"), RoleArn: aws.String(viewTestRole),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
	}); err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	if _, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus %s ACTIVE: %v", name, err)
	}
}

func notFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}

// Every read through a replica right after a write through the same
// replica sees the write, whatever the operation, and is answered by the
// replica's read view.
func TestReadViewReadYourWrites(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := viewCtx(t)
	before := srv.ReadView().Stats()

	for i := range 5 {
		name := fmt.Sprintf("ryw-%d", i)
		ctrl := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
		if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), Version: aws.String("1.35"), RoleArn: aws.String(viewTestRole),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
			AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
		}); err != nil {
			t.Fatal(err)
		}
		if out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); err != nil || out.Cluster.Status != types.ClusterStatusCreating {
			t.Fatalf("DescribeCluster right after CreateCluster: %v, %v", out, err)
		}
		list, err := client.ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil || !slices.Contains(list.Clusters, name) {
			t.Fatalf("ListClusters right after CreateCluster %s: %v, %v", name, list, err)
		}
		if _, err := ctrl.SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
		}); err != nil {
			t.Fatal(err)
		}
		desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
		if err != nil || desc.Cluster.Status != types.ClusterStatusActive {
			t.Fatalf("DescribeCluster right after SetStatus ACTIVE: %v, %v", desc, err)
		}
		if _, err := client.TagResource(ctx, &eks.TagResourceInput{ResourceArn: desc.Cluster.Arn, Tags: map[string]string{"round": name}}); err != nil {
			t.Fatal(err)
		}
		if out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); err != nil || out.Cluster.Tags["round"] != name {
			t.Fatalf("DescribeCluster right after TagResource: %v, %v", out, err)
		}

		// Add-ons and their updates.
		if _, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil {
			t.Fatal(err)
		}
		if out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil || out.Addon.Status != types.AddonStatusCreating {
			t.Fatalf("DescribeAddon right after CreateAddon: %v, %v", out, err)
		}
		if out, err := client.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(name)}); err != nil || !slices.Equal(out.Addons, []string{"coredns"}) {
			t.Fatalf("ListAddons right after CreateAddon: %v, %v", out, err)
		}
		// The agent's READY report of generation 1 makes it ACTIVE.
		addons := controlv1.NewAddonControlServiceClient(srv.GRPC(t))
		got, err := addons.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name}, AddonName: "coredns"})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := addons.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
			ClusterUid: got.GetAddon().GetClusterUid(), AddonName: "coredns", AddonUid: got.GetAddon().GetUid(),
			Generation: got.GetAddon().GetGeneration(), Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "i-0123456789abcdef0",
		})
		if err != nil || !rep.GetAccepted() {
			t.Fatalf("ApplyAddonReport ACTIVE: %v, %v", rep, err)
		}
		if out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil || out.Addon.Status != types.AddonStatusActive {
			t.Fatalf("DescribeAddon right after the ACTIVE report: %v, %v", out, err)
		}
		values := fmt.Sprintf(`{"replicaCount": %d}`, i+2)
		up, err := client.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns"), ConfigurationValues: aws.String(values)})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil || aws.ToString(out.Addon.ConfigurationValues) != values {
			t.Fatalf("DescribeAddon right after UpdateAddon: %v, %v", out, err)
		}
		if out, err := client.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(name), AddonName: aws.String("coredns"), UpdateId: up.Update.Id}); err != nil || aws.ToString(out.Update.Id) != aws.ToString(up.Update.Id) {
			t.Fatalf("DescribeUpdate right after UpdateAddon: %v, %v", out, err)
		}
		if out, err := client.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(name), AddonName: aws.String("coredns")}); err != nil || !slices.Contains(out.UpdateIds, aws.ToString(up.Update.Id)) {
			t.Fatalf("ListUpdates right after UpdateAddon: %v, %v", out, err)
		}
		if _, err := client.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil {
			t.Fatal(err)
		}
		if out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil || out.Addon.Status != types.AddonStatusDeleting {
			t.Fatalf("DescribeAddon right after DeleteAddon: %v, %v", out, err)
		}

		// Access entries.
		principal := fmt.Sprintf("arn:aws:iam::000000000000:user/ryw-%d", i)
		srv.NewUser(t, principal, "")
		if _, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)}); err != nil {
			t.Fatalf("DescribeAccessEntry right after CreateAccessEntry: %v", err)
		}
		if out, err := client.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(name)}); err != nil || !slices.Contains(out.AccessEntries, principal) {
			t.Fatalf("ListAccessEntries right after CreateAccessEntry: %v, %v", out, err)
		}
		if _, err := client.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)}); !notFound(err) {
			t.Fatalf("DescribeAccessEntry right after DeleteAccessEntry = %v, want ResourceNotFoundException", err)
		}
	}
	after := srv.ReadView().Stats()
	if after.TimedOut != before.TimedOut || after.FromView-before.FromView < 5*15 {
		t.Fatalf("read view stats before %+v, after %+v: want the reads answered by the view, none timed out", before, after)
	}
}

// Two replicas over one etcd: what one writes, the other's view has once
// etcd's watch delivered it. The delay is logged (docs/architecture.md,
// "Read view", has the measured figures); the test asserts that the second
// replica answers from its view, current, once the view has the revision.
func TestReadViewAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t)
	b := servertest.Start(t, servertest.WithEtcdEndpoints(a.EtcdEndpoints(t)))
	ca, cb := a.EKS(t), b.EKS(t)
	ctx := viewCtx(t)
	var delays []time.Duration
	for i := range 20 {
		name := fmt.Sprintf("across-%d", i)
		if _, err := ca.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), Version: aws.String("1.35"), RoleArn: aws.String(viewTestRole),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
		}); err != nil {
			t.Fatal(err)
		}
		wrote := a.ReadView().Stats().Seen
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := b.ReadView().Await(wctx, wrote)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		delays = append(delays, time.Since(start))
		before := b.ReadView().Stats().FromView
		if out, err := cb.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); err != nil || aws.ToString(out.Cluster.Name) != name {
			t.Fatalf("replica b: DescribeCluster %s = %v, %v once its view has revision %d", name, out, err, wrote)
		}
		if got := b.ReadView().Stats().FromView; got <= before {
			t.Fatalf("replica b answered DescribeCluster without its view (%d reads from it before, %d after)", before, got)
		}
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	t.Logf("replica b's view had replica a's write %v (median) and %v (worst) after CreateCluster returned on a", delays[len(delays)/2], delays[len(delays)-1])
}

// A replica whose view stops hearing from etcd keeps answering current
// reads from etcd, and /readyz says so; once the link heals, the view
// catches up and answers again.
func TestReadViewLaggingFallsBack(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	eps := srv.EtcdEndpoints(t)
	link := netproxy.Start(t, strings.TrimPrefix(eps[0], "http://"))
	viewClient, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + link.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viewClient.Close() })
	view := srv.ReplaceReadView(viewClient, 200*time.Millisecond)
	client := srv.EKS(t)
	ctx := viewCtx(t)
	createActiveCluster(t, srv, client, "lag")
	if err := view.Await(ctx, view.Stats().Seen); err != nil {
		t.Fatal(err)
	}
	if body := readyz(t, srv); !strings.Contains(body, "read view: synced at revision") {
		t.Fatalf("/readyz before the cut: %q", body)
	}

	link.Partition()
	for i := range 3 {
		tags := map[string]string{"i": fmt.Sprint(i)}
		if _, err := client.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String("arn:aws:eks:us-east-1:000000000000:cluster/lag"), Tags: tags}); err != nil {
			t.Fatal(err)
		}
		out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("lag")})
		if err != nil || out.Cluster.Tags["i"] != fmt.Sprint(i) {
			t.Fatalf("DescribeCluster while the view is cut off: %v, %v; want tag i=%d", out, err, i)
		}
	}
	if st := view.Stats(); !st.Lagging || st.TimedOut == 0 || st.LaggingReads == 0 {
		t.Fatalf("view stats %+v: want lagging, reads sent to etcd", st)
	}
	if body := readyz(t, srv); !strings.Contains(body, "read view: lagging") || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("/readyz while the view lags: %q; want ok and the view lagging", body)
	}
	if m := metrics(t, srv); !strings.Contains(m, "saltbush_read_view_lagging 1") || !strings.Contains(m, `saltbush_read_view_reads_total{reason="lagging",source="etcd"}`) {
		t.Fatalf("metrics while the view lags lack the lagging gauge or reads counter:\n%s", grepLines(m, "saltbush_read_view"))
	}

	link.Heal()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := view.Await(wctx, view.Stats().Seen); err != nil {
		t.Fatal(err)
	}
	// Caught up, the view answers again: the first read may still wait
	// for it in vain (a write since, and a loaded machine, can take it
	// past its 200 ms), so reads are repeated until one is the view's,
	// bounded by the deadline.
	for {
		before := view.Stats().FromView
		if out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("lag")}); err != nil || out.Cluster.Tags["i"] != "2" {
			t.Fatalf("DescribeCluster after healing: %v, %v", out, err)
		}
		st := view.Stats()
		if !st.Lagging && st.FromView > before {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("view stats %+v 30s after healing: want caught up and answering", st)
		}
		if err := view.Await(wctx, st.Seen); err != nil {
			t.Fatal(err)
		}
	}
	if body := readyz(t, srv); !strings.Contains(body, "read view: synced at revision") {
		t.Fatalf("/readyz after healing: %q", body)
	}
}

func readyz(t *testing.T, srv *servertest.Server) string {
	t.Helper()
	return get(t, srv.URL+"/readyz", http.StatusOK)
}

func metrics(t *testing.T, srv *servertest.Server) string {
	t.Helper()
	return get(t, srv.URL+"/metrics", http.StatusOK)
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(viewCtx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != want {
		t.Fatalf("GET %s = %d %q, %v; want %d", url, resp.StatusCode, body, err, want)
	}
	return string(body)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Reads answered from the read view share one decoded record per version
// (store.ReadShared). Many callers reading the same cluster, add-on and
// access entry at once, while tags change them, must each get the whole
// current record; run with -race, a path that changed a shared record
// fails here.
func TestReadViewSharedRecordsConcurrently(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := viewCtx(t)
	const name, principal = "shared", "arn:aws:iam::000000000000:user/shared-reader"
	createActiveCluster(t, srv, client, name)
	if _, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns"),
		Tags: map[string]string{"kind": "addon"}}); err != nil {
		t.Fatal(err)
	}
	srv.NewUser(t, principal, "")
	entry, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal),
		KubernetesGroups: []string{"viewers", "auditors"}, Tags: map[string]string{"kind": "entry"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"AmazonEKSViewPolicy", "AmazonEKSAdminViewPolicy"} {
		if _, err := client.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal),
			PolicyArn:   aws.String("arn:aws:eks::aws:cluster-access-policy/" + policy),
			AccessScope: &types.AccessScope{Type: types.AccessScopeTypeCluster}}); err != nil {
			t.Fatal(err)
		}
	}
	cluster, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	before := srv.ReadView().Stats()

	const readers, rounds = 6, 40
	errs := make(chan error, readers+1)
	go func() {
		// The writer: every tag change is a new version of the cluster
		// record, so readers move from one shared record to the next.
		for i := range rounds {
			if _, err := client.TagResource(ctx, &eks.TagResourceInput{ResourceArn: cluster.Cluster.Arn,
				Tags: map[string]string{"round": fmt.Sprint(i)}}); err != nil {
				errs <- fmt.Errorf("TagResource round %d: %w", i, err)
				return
			}
		}
		errs <- nil
	}()
	for r := range readers {
		go func() {
			errs <- func() error {
				for i := range rounds {
					c, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
					if err != nil || c.Cluster.Status != types.ClusterStatusActive || len(c.Cluster.ResourcesVpcConfig.SubnetIds) != 2 {
						return fmt.Errorf("reader %d round %d: DescribeCluster = %+v, %v", r, i, c, err)
					}
					a, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")})
					if err != nil || a.Addon.Tags["kind"] != "addon" || len(a.Addon.Tags) != 1 {
						return fmt.Errorf("reader %d round %d: DescribeAddon = %+v, %v", r, i, a, err)
					}
					e, err := client.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)})
					if err != nil || !slices.Equal(e.AccessEntry.KubernetesGroups, entry.AccessEntry.KubernetesGroups) || e.AccessEntry.Tags["kind"] != "entry" {
						return fmt.Errorf("reader %d round %d: DescribeAccessEntry = %+v, %v", r, i, e, err)
					}
					p, err := client.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(name), PrincipalArn: aws.String(principal)})
					if err != nil || len(p.AssociatedAccessPolicies) != 2 ||
						aws.ToString(p.AssociatedAccessPolicies[0].PolicyArn) > aws.ToString(p.AssociatedAccessPolicies[1].PolicyArn) {
						return fmt.Errorf("reader %d round %d: ListAssociatedAccessPolicies = %+v, %v", r, i, p, err)
					}
				}
				return nil
			}()
		}()
	}
	for range readers + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	final, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
	if err != nil || final.Cluster.Tags["round"] != fmt.Sprint(rounds-1) {
		t.Fatalf("DescribeCluster after the last tag change: %v, %v", final, err)
	}
	if after := srv.ReadView().Stats(); after.FromView-before.FromView < readers*rounds*4 {
		t.Fatalf("read view stats before %+v, after %+v: want the reads answered by the view", before, after)
	}
}
