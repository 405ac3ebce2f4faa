package agent_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/saltbush/saltbush/server/catalog"
)

// realPodsOnly are add-ons that cannot be ACTIVE where pods only seem to
// run: what readiness waits for is served by their pods themselves. The
// kubelet double leaves them CREATING, as a real cluster would with their
// pods broken; tests/addons proves them on a real node.
var realPodsOnly = map[string]string{
	"metrics-server": "ACTIVE waits for its APIService v1beta1.metrics.k8s.io to be Available, which only a running metrics-server makes it (tests/addons)",
}

// TestCatalogueRunsOnARealCluster installs every version of every add-on
// of the catalogue on a cluster of a Kubernetes version it supports, waits
// for ACTIVE — every object Current on a real apiserver and controller
// manager, every pod started by a kubelet double that refuses pods whose
// Secrets, ConfigMaps or service accounts do not exist — then deletes it
// and waits until the AddonDeleted waiter and the cluster agree it is
// gone. A bundle that relies on objects nobody creates fails here. Add-ons
// with credentialed service accounts get a role, which must land on them.
func TestCatalogueRunsOnARealCluster(t *testing.T) {
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	// One cluster per Kubernetes version the versions need, the newest
	// each version supports.
	byKube := map[string][]*catalog.Version{}
	for _, a := range cat.Addons() {
		if why := realPodsOnly[a.Name]; why != "" {
			t.Logf("%s left out on the kubelet double: %s", a.Name, why)
			continue
		}
		for _, v := range a.Versions {
			kv := v.Compatibilities[len(v.Compatibilities)-1].ClusterVersion
			byKube[kv] = append(byKube[kv], v)
		}
	}
	kubes := make([]string, 0, len(byKube))
	for kv := range byKube {
		kubes = append(kubes, kv)
	}
	slices.Sort(kubes)
	for _, kv := range kubes {
		t.Run("kubernetes-"+kv, func(t *testing.T) {
			e := newEnv(t, envOptions{kubernetesVersion: kv}, "i-a")
			e.startAgent("i-a", agentOptions{})
			for _, v := range byKube[kv] {
				t.Run(v.Addon.Name+"-"+v.Version, func(t *testing.T) {
					e := e.in(t)
					in := eks.CreateAddonInput{AddonName: aws.String(v.Addon.Name), AddonVersion: aws.String(v.Version)}
					if v.RequiresConfiguration {
						ex, err := v.Examples()
						if err != nil || len(ex) == 0 {
							t.Fatalf("a version that requires configuration has no example: %v", err)
						}
						b, _ := json.Marshal(ex[0])
						in.ConfigurationValues = aws.String(string(b))
					}
					role := "arn:aws:iam::" + e.account + ":role/" + v.Addon.Name
					if len(v.PodIdentity) > 0 {
						in.ServiceAccountRoleArn = aws.String(role)
					}
					e.createAddon(in)
					e.waitActive(v.Addon.Name)
					for _, pi := range v.PodIdentity {
						ns := v.Addon.DefaultNamespace
						sa := e.object(serviceaccs, ns, pi.ServiceAccount)
						if sa == nil || sa.GetAnnotations()["eks.amazonaws.com/role-arn"] != role {
							t.Errorf("service account %s/%s does not carry the role: %v", ns, pi.ServiceAccount, sa.GetAnnotations())
						}
					}
					if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster),
						AddonName: aws.String(v.Addon.Name)}); err != nil {
						t.Fatal(err)
					}
					e.waitDeleted(v.Addon.Name)
					if left := e.leftovers(); len(left) > 0 {
						t.Fatalf("deleted, but left in the cluster: %v", left)
					}
				})
			}
		})
	}
}
