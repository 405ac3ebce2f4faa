package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
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
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/store"
)

// TestAccessEntryKillMidWriteKeepsInvariants drives access-entry creates,
// updates, associations and deletes, and a cluster that is deleted, purged
// and recreated over and over, against the real
// binary from many goroutines; kills it with SIGKILL in the middle; then
// checks the keyspace left in its data directory: no entry outlives its
// cluster incarnation, every record matches its key, every cluster has its
// creator's entry, and no acknowledged entry of a principal nobody deleted
// is lost.
func TestAccessEntryKillMidWriteKeepsInvariants(t *testing.T) {
	t.Parallel()
	bin := buildSaltbush(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startServe(t, bin, dataDir)
	conn := p.grpc(t)
	client := p.client(t)
	cc := controlv1.NewClusterControlServiceClient(conn)
	createCluster := func(ctx context.Context, name string) error {
		_, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
			AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
		})
		return err
	}
	stable := []string{"arn:aws:iam::000000000000:role/stable-a", "arn:aws:iam::000000000000:user/stable-b"}
	churn := []string{"arn:aws:iam::000000000000:role/churn-a", "arn:aws:iam::000000000000:role/ops/churn-b"}
	for _, arn := range append(slices.Clone(stable), churn...) {
		if _, err := controlv1.NewIdentityControlServiceClient(conn).CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
			t.Fatal(err)
		}
	}
	clusters := []string{"entries-a", "entries-b"}
	for _, name := range append(slices.Clone(clusters), "recycled") {
		if err := createCluster(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	policies := []string{"AmazonEKSViewPolicy", "AmazonEKSEditPolicy", "AmazonEKSAdminPolicy"}

	// acked: entry uids whose create was answered, for stable principals
	// (never deleted) on clusters that are never deleted.
	var acked sync.Map
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			for workCtx.Err() == nil {
				cl := clusters[rng.IntN(len(clusters))]
				if rng.IntN(5) == 0 {
					cl = "recycled"
				}
				isStable := rng.IntN(2) == 0
				principal := churn[rng.IntN(len(churn))]
				if isStable {
					principal = stable[rng.IntN(len(stable))]
				}
				switch op := rng.IntN(6); {
				case op == 0:
					out, err := client.CreateAccessEntry(workCtx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
						KubernetesGroups: []string{fmt.Sprintf("g%d", rng.IntN(3))}, ClientRequestToken: aws.String(fmt.Sprintf("t-%d", rng.IntN(1000)))})
					if err == nil && isStable && cl != "recycled" {
						arn := aws.ToString(out.AccessEntry.AccessEntryArn)
						acked.Store(arn[strings.LastIndex(arn, "/")+1:], cl+" "+principal)
					}
				case op == 1:
					_, _ = client.UpdateAccessEntry(workCtx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
						KubernetesGroups: []string{fmt.Sprintf("g%d", rng.IntN(3))}, Username: aws.String(fmt.Sprintf("u%d:{{SessionName}}", rng.IntN(3)))})
				case op == 2:
					scope := &types.AccessScope{Type: types.AccessScopeTypeCluster}
					if rng.IntN(2) == 0 {
						scope = &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev", "team-*"}}
					}
					_, _ = client.AssociateAccessPolicy(workCtx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
						PolicyArn: aws.String("arn:aws:eks::aws:cluster-access-policy/" + policies[rng.IntN(len(policies))]), AccessScope: scope})
				case op == 3:
					_, _ = client.DisassociateAccessPolicy(workCtx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
						PolicyArn: aws.String("arn:aws:eks::aws:cluster-access-policy/" + policies[rng.IntN(len(policies))])})
				case op == 4 && !isStable:
					_, _ = client.DeleteAccessEntry(workCtx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal)})
				case op == 5 && rng.IntN(4) == 0:
					// Recycle: delete, purge, recreate (a new incarnation).
					_, _ = client.DeleteCluster(workCtx, &eks.DeleteClusterInput{Name: aws.String("recycled")})
					_, _ = cc.FinalizeDeletion(workCtx, &controlv1.FinalizeDeletionRequest{Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "recycled"}})
					_ = createCluster(workCtx, "recycled")
				}
			}
		}(uint64(w + 1))
	}
	killMidWrite(t, ctx, p, dataDir, "access entries", &acked, stopWork, &wg, func(cli *clientv3.Client) int {
		return checkAccessInvariants(t, ctx, cli, &acked)
	})

	p = startServe(t, bin, dataDir)
	for _, cl := range clusters {
		if _, err := p.client(t).ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(cl)}); err != nil {
			t.Errorf("ListAccessEntries %s after restart: %v", cl, err)
		}
	}
}

// checkAccessInvariants checks what the access-entry transactions promise
// and returns the number of entries seen.
func checkAccessInvariants(t *testing.T, ctx context.Context, cli *clientv3.Client, acked *sync.Map) int {
	t.Helper()
	resp, err := cli.Get(ctx, store.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]byte{}
	for _, k := range resp.Kvs {
		kv[strings.TrimPrefix(string(k.Key), store.DefaultPrefix)] = k.Value
	}
	clustersByUID := map[string]*storagev1.ClusterRecord{}
	for k, v := range kv {
		if strings.HasPrefix(k, "accounts/") {
			c := &storagev1.ClusterRecord{}
			if err := store.Decode(v, c); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			clustersByUID[c.GetUid()] = c
		}
	}
	entries := 0
	creators := map[string]bool{}
	live := map[string]bool{}
	for k, v := range kv {
		parts := strings.Split(k, "/")
		if len(parts) != 4 || parts[0] != "clusters" || parts[2] != "access" {
			continue
		}
		entries++
		e := &storagev1.AccessEntryRecord{}
		if err := store.Decode(v, e); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		live[e.GetUid()] = true
		c, ok := clustersByUID[parts[1]]
		if !ok {
			t.Errorf("%s: entry of %s outlived its cluster incarnation", k, e.GetPrincipalArn())
			continue
		}
		p, err := access.ParsePrincipal(e.GetPrincipalArn())
		if err != nil {
			t.Errorf("%s: stored principal %q: %v", k, e.GetPrincipalArn(), err)
			continue
		}
		sum := sha256.Sum256([]byte(p.Canonical()))
		if parts[3] != hex.EncodeToString(sum[:]) || e.GetClusterUid() != c.GetUid() || e.GetClusterName() != c.GetName() ||
			!strings.HasSuffix(e.GetArn(), "/"+e.GetUid()) || !strings.Contains(e.GetArn(), ":access-entry/"+c.GetName()+"/") {
			t.Errorf("%s: record does not match its key or cluster: %v", k, e)
		}
		seen := map[string]bool{}
		for _, a := range e.GetPolicies() {
			if seen[a.GetPolicyArn()] {
				t.Errorf("%s: policy %s associated twice", k, a.GetPolicyArn())
			}
			seen[a.GetPolicyArn()] = true
		}
		if e.GetClusterCreator() {
			creators[c.GetUid()] = true
		}
	}
	for uid, c := range clustersByUID {
		if !creators[uid] {
			t.Errorf("cluster %s (%s) has no creator entry: seeded outside its create transaction?", c.GetName(), uid)
		}
	}
	acked.Range(func(uid, what any) bool {
		if !live[uid.(string)] {
			t.Errorf("acknowledged entry %s (%s) was lost", uid, what)
		}
		return true
	})
	return entries
}
