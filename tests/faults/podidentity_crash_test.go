package faults

import (
	"context"
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
	"github.com/saltbush/saltbush/store"
)

// TestPodIdentityKillMidWriteKeepsInvariants drives pod identity
// associations made directly (create, update, delete) and by add-ons
// (CreateAddon, UpdateAddon replacing the set, DeleteAddon with and
// without preserve), and a cluster deleted, purged and recreated, against
// the real binary from many goroutines; kills it with SIGKILL in the
// middle; then checks the keyspace left in its data directory (see
// checkPodIdentityInvariants) and that no acknowledged association nobody
// deleted is lost.
func TestPodIdentityKillMidWriteKeepsInvariants(t *testing.T) {
	t.Parallel()
	bin := buildSaltbush(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startServe(t, bin, dataDir)
	client := p.client(t)
	cc := controlv1.NewClusterControlServiceClient(p.grpc(t))
	createCluster := func(ctx context.Context, name string) error {
		_, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
		})
		return err
	}
	clusters := []string{"pods-a", "pods-b"}
	for _, name := range append(slices.Clone(clusters), "recycled") {
		if err := createCluster(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	roles := []string{"arn:aws:iam::000000000000:role/pods-1", "arn:aws:iam::000000000000:role/pods-2"}
	// Service accounts of the churned direct associations; "stable-*"
	// ones are never deleted, so their acknowledged creates must survive.
	churnSAs := []string{"web", "worker", "aws-node", "ebs-csi-controller-sa"}
	addons := map[string]string{"vpc-cni": "aws-node", "aws-ebs-csi-driver": "ebs-csi-controller-sa"}
	addonNames := []string{"vpc-cni", "aws-ebs-csi-driver"}

	var acked sync.Map // association id → what
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			n := 0
			for workCtx.Err() == nil {
				n++
				cl := clusters[rng.IntN(len(clusters))]
				if rng.IntN(5) == 0 {
					cl = "recycled"
				}
				role := roles[rng.IntN(len(roles))]
				ad := addonNames[rng.IntN(len(addonNames))]
				switch op := rng.IntN(8); op {
				case 0:
					sa := fmt.Sprintf("stable-%d-%d", seed, n)
					out, err := client.CreatePodIdentityAssociation(workCtx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(cl),
						Namespace: aws.String("apps"), ServiceAccount: aws.String(sa), RoleArn: aws.String(role)})
					if err == nil && cl != "recycled" {
						acked.Store(aws.ToString(out.Association.AssociationId), cl+" apps/"+sa)
					}
				case 1:
					// Now and then an add-on's service account in its
					// namespace: the add-on's create or update then
					// meets it (ResourceInUseException).
					ns := "apps"
					if rng.IntN(8) == 0 {
						ns = "kube-system"
					}
					_, _ = client.CreatePodIdentityAssociation(workCtx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(cl),
						Namespace: aws.String(ns), ServiceAccount: aws.String(churnSAs[rng.IntN(len(churnSAs))]), RoleArn: aws.String(role),
						ClientRequestToken: aws.String(fmt.Sprintf("t-%d", rng.IntN(50)))})
				case 2, 3:
					// Update or delete a churned direct association.
					out, err := client.ListPodIdentityAssociations(workCtx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(cl)})
					if err != nil {
						continue
					}
					for _, s := range out.Associations {
						if s.OwnerArn != nil || strings.HasPrefix(aws.ToString(s.ServiceAccount), "stable-") {
							continue
						}
						if op == 2 {
							_, _ = client.UpdatePodIdentityAssociation(workCtx, &eks.UpdatePodIdentityAssociationInput{ClusterName: aws.String(cl),
								AssociationId: s.AssociationId, RoleArn: aws.String(role)})
						} else {
							_, _ = client.DeletePodIdentityAssociation(workCtx, &eks.DeletePodIdentityAssociationInput{ClusterName: aws.String(cl),
								AssociationId: s.AssociationId})
						}
						break
					}
				case 4:
					_, _ = client.CreateAddon(workCtx, &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(ad),
						PodIdentityAssociations: []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String(addons[ad]), RoleArn: aws.String(role)}}})
				case 5:
					set := []types.AddonPodIdentityAssociations{}
					if rng.IntN(3) != 0 {
						set = append(set, types.AddonPodIdentityAssociations{ServiceAccount: aws.String(addons[ad]), RoleArn: aws.String(role)})
					}
					_, _ = client.UpdateAddon(workCtx, &eks.UpdateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(ad),
						PodIdentityAssociations: set})
				case 6:
					if rng.IntN(4) != 0 {
						// Rarely: with no agent, a deleted add-on stays
						// DELETING, and its name is taken for good.
						continue
					}
					_, _ = client.DeleteAddon(workCtx, &eks.DeleteAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(ad),
						Preserve: rng.IntN(2) == 0})
				case 7:
					if rng.IntN(4) == 0 {
						// Recycle: delete, purge, recreate (a new incarnation).
						_, _ = client.DeleteCluster(workCtx, &eks.DeleteClusterInput{Name: aws.String("recycled")})
						_, _ = cc.FinalizeDeletion(workCtx, &controlv1.FinalizeDeletionRequest{Cluster: &controlv1.ClusterRef{AccountId: "000000000000", Name: "recycled"}})
						_ = createCluster(workCtx, "recycled")
					}
				}
			}
		}(uint64(w + 1))
	}
	killMidWrite(t, ctx, p, dataDir, "pod identity associations", &acked, stopWork, &wg, func(cli *clientv3.Client) int {
		return checkPodIdentityInvariants(t, ctx, cli, &acked)
	})

	p = startServe(t, bin, dataDir)
	for _, cl := range clusters {
		if _, err := p.client(t).ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(cl)}); err != nil {
			t.Errorf("ListPodIdentityAssociations %s after restart: %v", cl, err)
		}
	}
}

// checkPodIdentityInvariants checks what the pod identity transactions
// promise and returns the number of associations seen: every association
// decodes and matches its key, lives under an existing cluster
// incarnation, and its service account's exclusivity key names it; every
// exclusivity key names an association of that service account; an owned
// association's owner is an add-on of the incarnation, not being deleted,
// whose spec lists it; every association an add-on's spec lists exists and
// is owned by it (unless the add-on is being deleted); no acknowledged
// association (of a service account nobody deleted) is lost.
func checkPodIdentityInvariants(t *testing.T, ctx context.Context, cli *clientv3.Client, acked *sync.Map) int {
	t.Helper()
	resp, err := cli.Get(ctx, store.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]byte{}
	for _, k := range resp.Kvs {
		kv[strings.TrimPrefix(string(k.Key), store.DefaultPrefix)] = k.Value
	}
	clusters := map[string]*storagev1.ClusterRecord{}
	addonsByARN := map[string]*storagev1.AddonRecord{}
	for k, v := range kv {
		switch parts := strings.Split(k, "/"); {
		case parts[0] == "accounts" && len(parts) == 4 && parts[2] == "clusters":
			c := &storagev1.ClusterRecord{}
			if err := store.Decode(v, c); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			clusters[c.GetUid()] = c
		case parts[0] == "clusters" && len(parts) == 4 && parts[2] == "addons":
			a := &storagev1.AddonRecord{}
			if err := store.Decode(v, a); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			addonsByARN[a.GetArn()] = a
		}
	}
	assocs := map[string]*storagev1.PodIdentityAssociationRecord{} // uid/id
	holders := map[string]string{}                                 // uid/ns/sa → id
	for k, v := range kv {
		parts := strings.Split(k, "/")
		if len(parts) < 5 || parts[0] != "clusters" || parts[2] != "podidentity" {
			continue
		}
		uid := parts[1]
		if _, ok := clusters[uid]; !ok {
			t.Errorf("%s outlived its cluster incarnation", k)
			continue
		}
		switch {
		case parts[3] == "associations" && len(parts) == 5:
			rec := &storagev1.PodIdentityAssociationRecord{}
			if err := store.Decode(v, rec); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			c := clusters[uid]
			if rec.GetClusterUid() != uid || rec.GetAssociationId() != parts[4] || rec.GetClusterName() != c.GetName() ||
				rec.GetArn() != "arn:aws:eks:us-east-1:000000000000:podidentityassociation/"+c.GetName()+"/"+parts[4] {
				t.Errorf("%s: record does not match its key or cluster: %v", k, rec)
			}
			assocs[uid+"/"+parts[4]] = rec
		case parts[3] == "serviceaccounts" && len(parts) == 6:
			sa := &storagev1.PodIdentityServiceAccountRecord{}
			if err := store.Decode(v, sa); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			holders[uid+"/"+parts[4]+"/"+parts[5]] = sa.GetAssociationId()
		default:
			t.Errorf("%s: unknown pod identity key", k)
		}
	}
	owned := 0
	for key, rec := range assocs {
		uid := rec.GetClusterUid()
		if got := holders[uid+"/"+rec.GetNamespace()+"/"+rec.GetServiceAccount()]; got != rec.GetAssociationId() {
			t.Errorf("association %s (%s/%s): exclusivity key names %q", key, rec.GetNamespace(), rec.GetServiceAccount(), got)
		}
		if owner := rec.GetOwnerArn(); owner != "" {
			owned++
			a, ok := addonsByARN[owner]
			switch {
			case !ok || a.GetClusterUid() != uid:
				t.Errorf("association %s: owner %s is no add-on of its cluster", key, owner)
			case a.GetSpec().GetDeleted():
				t.Errorf("association %s: owner %s is being deleted and still owns it", key, owner)
			case !slices.ContainsFunc(a.GetSpec().GetPodIdentityAssociations(), func(p *storagev1.PodIdentityAssociation) bool {
				return p.GetAssociationId() == rec.GetAssociationId() && p.GetServiceAccount() == rec.GetServiceAccount() &&
					p.GetRoleArn() == rec.GetRoleArn()
			}):
				t.Errorf("association %s: owner %s does not list it (as it is)", key, owner)
			}
		}
	}
	for key, id := range holders {
		uid, rest, _ := strings.Cut(key, "/")
		rec, ok := assocs[uid+"/"+id]
		if !ok || rec.GetNamespace()+"/"+rec.GetServiceAccount() != rest {
			t.Errorf("exclusivity key %s names %s, which does not hold it", key, id)
		}
	}
	for _, a := range addonsByARN {
		if a.GetSpec().GetDeleted() {
			continue
		}
		for _, p := range a.GetSpec().GetPodIdentityAssociations() {
			rec, ok := assocs[a.GetClusterUid()+"/"+p.GetAssociationId()]
			if !ok || rec.GetOwnerArn() != a.GetArn() {
				t.Errorf("add-on %s lists association %s, which is not there as its own", a.GetArn(), p.GetAssociationId())
			}
		}
	}
	acked.Range(func(id, what any) bool {
		found := false
		for _, rec := range assocs {
			found = found || rec.GetAssociationId() == id.(string)
		}
		if !found {
			t.Errorf("acknowledged association %s (%s) was lost", id, what)
		}
		return true
	})
	t.Logf("%d associations, %d of them owned by add-ons", len(assocs), owned)
	return len(assocs)
}
