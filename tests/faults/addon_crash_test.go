package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/store"
)

// TestAddonKillMidWriteKeepsInvariants drives add-on creates, updates,
// deletes and reports against the real binary from many goroutines, kills
// it with SIGKILL in the middle, and then checks the whole keyspace left in
// its data directory: every multi-key change is one transaction, so no
// crash can leave half of one behind.
func TestAddonKillMidWriteKeepsInvariants(t *testing.T) {
	t.Parallel()
	bin := buildSaltbush(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startServe(t, bin, dataDir)
	conn := p.grpc(t)
	control := controlv1.NewAddonControlServiceClient(conn)
	clusters := []string{"crash-a", "crash-b"}
	for _, name := range clusters {
		if _, err := p.client(t).CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := controlv1.NewClusterControlServiceClient(conn).SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster:  &controlv1.ClusterRef{AccountId: "000000000000", Name: name},
			Status:   controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: clustertest.Endpoint, CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
		}); err != nil {
			t.Fatal(err)
		}
	}
	addons := []string{"coredns", "kube-proxy", "vpc-cni", "metrics-server", "saltbush-noop"}
	phases := []controlv1.AddonPhase{
		controlv1.AddonPhase_ADDON_PHASE_APPLIED, controlv1.AddonPhase_ADDON_PHASE_READY,
		controlv1.AddonPhase_ADDON_PHASE_READY, controlv1.AddonPhase_ADDON_PHASE_FAILED,
		controlv1.AddonPhase_ADDON_PHASE_REMOVED,
	}

	// Workers run until the process dies under them; their errors (conflicts,
	// ResourceInUse, refused connections after the kill) are expected.
	// Add-on incarnations (uids) the server acknowledged creating, and those
	// a REMOVED report may have erased (accepted, or unanswered).
	var acked, removed sync.Map
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	client := p.client(t)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			for workCtx.Err() == nil {
				cl, name := clusters[rng.IntN(len(clusters))], addons[rng.IntN(len(addons))]
				in := &eks.DescribeAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(name)}
				switch rng.IntN(4) {
				case 0:
					out, err := client.CreateAddon(workCtx, &eks.CreateAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName})
					if err == nil {
						arn := aws.ToString(out.Addon.AddonArn)
						acked.Store(arn[strings.LastIndex(arn, "/")+1:], true)
					}
				case 1:
					_, _ = client.UpdateAddon(workCtx, &eks.UpdateAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName,
						ConfigurationValues: aws.String(fmt.Sprintf(`{"replicaCount": %d}`, 1+rng.IntN(5)))})
				case 2:
					_, _ = client.DeleteAddon(workCtx, &eks.DeleteAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName})
				default:
					got, err := control.GetAddon(workCtx, &controlv1.GetAddonRequest{
						Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: cl}, AddonName: name})
					if err != nil {
						continue
					}
					a := got.GetAddon()
					phase := phases[rng.IntN(len(phases))]
					r, err := control.ApplyAddonReport(workCtx, &controlv1.ApplyAddonReportRequest{
						ClusterUid: a.GetClusterUid(), AddonName: name, AddonUid: a.GetUid(),
						Generation: a.GetGeneration(), Phase: phase,
					})
					// A REMOVED whose answer was lost to the kill may have
					// committed: it counts as a possible erasure.
					if phase == controlv1.AddonPhase_ADDON_PHASE_REMOVED &&
						(err != nil || (r.GetAccepted() && r.GetAddon() == nil)) {
						removed.Store(a.GetUid(), true)
					}
				}
			}
		}(uint64(w + 1))
	}
	killMidWrite(t, ctx, p, dataDir, "add-on records", &acked, stopWork, &wg, func(cli *clientv3.Client) int {
		return checkAddonInvariants(t, ctx, cli, &acked, &removed)
	})

	// And the restarted binary serves them.
	p = startServe(t, bin, dataDir)
	for _, cl := range clusters {
		if _, err := p.client(t).ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cl)}); err != nil {
			t.Errorf("ListAddons %s after restart: %v", cl, err)
		}
	}
}

// checkAddonInvariants reads every key under the default prefix and checks
// what the add-on transactions promise. It returns the number of add-on
// records seen.
func checkAddonInvariants(t *testing.T, ctx context.Context, cli *clientv3.Client, acked, removed *sync.Map) int {
	t.Helper()
	resp, err := cli.Get(ctx, store.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]byte{}
	for _, k := range resp.Kvs {
		kv[strings.TrimPrefix(string(k.Key), store.DefaultPrefix)] = k.Value
	}
	clusterUIDs := map[string]bool{}
	for k, v := range kv {
		if strings.HasPrefix(k, "accounts/") {
			c := &storagev1.ClusterRecord{}
			if err := store.Decode(v, c); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			clusterUIDs[c.GetUid()] = true
		}
	}
	addons := 0
	liveUIDs := map[string]bool{}
	for k, v := range kv {
		parts := strings.Split(k, "/")
		switch {
		case len(parts) == 4 && parts[0] == "clusters" && parts[2] == "addons":
			addons++
			a := &storagev1.AddonRecord{}
			if err := store.Decode(v, a); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			liveUIDs[a.GetUid()] = true
			uid, name := parts[1], parts[3]
			if !clusterUIDs[uid] || a.GetClusterUid() != uid || a.GetName() != name || !strings.HasSuffix(a.GetArn(), "/"+a.GetUid()) {
				t.Errorf("%s: record does not match its key or cluster: %v", k, a)
			}
			if a.GetObserved().GetGeneration() > a.GetGeneration() {
				t.Errorf("%s: observed generation %d ahead of generation %d", k, a.GetObserved().GetGeneration(), a.GetGeneration())
			}
			switch a.GetStatus() {
			case storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_UPDATING, storagev1.AddonStatus_ADDON_STATUS_DELETING:
				if a.GetDeadline() == nil {
					t.Errorf("%s: in-flight %s without a deadline", k, a.GetStatus())
				} else if _, ok := kv[store.AddonDeadlineKey(a.GetDeadline().AsTime(), uid, name)]; !ok {
					t.Errorf("%s: in-flight %s without its deadline hint", k, a.GetStatus())
				}
			}
			if a.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_UPDATING {
				u := &storagev1.UpdateRecord{}
				b, ok := kv[store.AddonUpdateKey(uid, name, a.GetUpdateId())]
				if !ok {
					t.Errorf("%s: UPDATING without its update record %q", k, a.GetUpdateId())
				} else if err := store.Decode(b, u); err != nil || u.GetGeneration() != a.GetGeneration() ||
					u.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
					t.Errorf("%s: UPDATING at generation %d, its update is %v (%v)", k, a.GetGeneration(), u, err)
				}
			}
		case len(parts) == 6 && parts[0] == "clusters" && parts[2] == "updates" && parts[3] == "addons":
			u := &storagev1.UpdateRecord{}
			if err := store.Decode(v, u); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			b, ok := kv[store.AddonKey(parts[1], parts[4])]
			a := &storagev1.AddonRecord{}
			if !ok || store.Decode(b, a) != nil || a.GetUid() != u.GetAddonUid() {
				t.Errorf("%s: update of an add-on incarnation that is gone (orphan)", k)
				continue
			}
			if u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS &&
				(a.GetUpdateId() != u.GetId() || a.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_UPDATING) {
				t.Errorf("%s: InProgress but the add-on is %s with update %q", k, a.GetStatus(), a.GetUpdateId())
			}
		}
	}
	// Nothing acknowledged is lost: every add-on whose create was answered
	// is still there, unless an answered REMOVED report erased it.
	survived := 0
	acked.Range(func(uid, _ any) bool {
		switch _, gone := removed.Load(uid); {
		case liveUIDs[uid.(string)]:
			survived++
		case !gone:
			t.Errorf("add-on %s: its create was acknowledged, nothing erased it, and it is gone", uid)
		}
		return true
	})
	t.Logf("%d acknowledged creates survive in the keyspace", survived)
	return addons
}
