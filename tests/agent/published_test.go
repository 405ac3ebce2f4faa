package agent_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/catalog"
)

// TestPublishedAddonOnARealCluster: an add-on an operator published
// (docs/operators.md), not one the binary embeds, is created, updated and
// deleted through the AWS SDK and applied by the real agent on the real
// control plane. The version is published through one replica and the
// add-on created through the other.
func TestPublishedAddonOnARealCluster(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2}, "i-a")
	cc := controlv1.NewCatalogControlServiceClient(e.admin)
	for _, v := range []string{"v1.0.0", "v1.1.0"} {
		files, err := catalog.ReadVersion(os.DirFS("../../docs/examples/private-addon/acme-agent"), v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cc.PublishAddonVersion(e.ctx(waitChange), &controlv1.PublishAddonVersionRequest{Files: files, Version: v}); err != nil {
			t.Fatalf("publish %s: %v", v, err)
		}
	}
	e.startAgent("i-a", agentOptions{})

	// The other replica serves the add-on once its read view has the
	// versions; the SDK's retry covers nothing here, so wait for it.
	other := e.replicas[1].EKSAs(t, e.replicas[1].Dev(t))
	ctx := e.ctx(waitChange)
	for {
		out, err := other.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{AddonName: aws.String("acme-agent")})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Addons) == 1 && len(out.Addons[0].AddonVersions) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the second replica never listed the published versions")
		case <-time.After(100 * time.Millisecond):
		}
	}
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String("acme-agent"), AddonVersion: aws.String("v1.0.0"),
		ConfigurationValues: aws.String(`{"logLevel":"debug"}`)})
	a := e.waitActive("acme-agent")
	if aws.ToString(a.Publisher) != "acme-platform" || aws.ToString(a.Owner) != "acme" {
		t.Errorf("ACTIVE as %s/%s", aws.ToString(a.Publisher), aws.ToString(a.Owner))
	}
	cm := e.object(configmaps, "acme-system", "acme-agent")
	if cm == nil {
		t.Fatal("ConfigMap acme-system/acme-agent was not applied")
	}
	if data, _, _ := unstructured.NestedString(cm.Object, "data", "logLevel"); data != "debug" {
		t.Errorf("logLevel %q, want the configuration's debug", data)
	}
	image := func() string {
		d := e.object(deployments, "acme-system", "acme-agent")
		if d == nil {
			t.Fatal("Deployment acme-system/acme-agent was not applied")
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			t.Fatalf("containers %v", cs)
		}
		img, _ := cs[0].(map[string]any)["image"].(string)
		return img
	}
	if img := image(); img != "acme/agent:1.0.0" {
		t.Errorf("image %s", img)
	}
	if mf := cm.GetManagedFields(); len(mf) == 0 || mf[0].Manager != "eks" {
		t.Errorf("managed by %v, want the eks field manager", mf)
	}

	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String("acme-agent"), AddonVersion: aws.String("v1.1.0")})
	e.waitUpdate("acme-agent", id, types.UpdateStatusSuccessful)
	e.waitActive("acme-agent")
	if img := image(); img != "acme/agent:1.1.0" {
		t.Errorf("image after the update %s", img)
	}

	if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String("acme-agent")}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted("acme-agent")
	if left := e.leftovers(); len(left) > 0 {
		t.Fatalf("deleted, but left in the cluster: %s", strings.Join(left, ", "))
	}
}
