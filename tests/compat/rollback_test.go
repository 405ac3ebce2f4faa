package compat_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/compat"
	"github.com/saltbush/saltbush/tests/invariants"
	"github.com/saltbush/saltbush/tests/poll"
)

// TestHostRollback: the current replica writes records with what an older
// release does not know (the cluster's OIDC issuer, VPC ids and health
// issues; a pod identity association; agent sessions with their release
// identity), the replica is rolled back to the older release over the
// same etcd, which serves and changes them (a tag and an update rewrite
// the cluster and add-on records), and rolled forward again: the current
// replica finds every field it wrote intact, the older one's changes
// kept, and the keyspace checker finds nothing wrong.
func TestHostRollback(t *testing.T) {
	for _, o := range old(t) {
		t.Run(fmt.Sprintf("baseline %d", o.Baseline.Number), func(t *testing.T) { hostRollback(t, o) })
	}
}

func hostRollback(t *testing.T, oldBins compat.Binaries) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, suite.current.Saltbush, hostOptions{etcd: etcd.Endpoints(), masterKeyFile: keyFile})
	w := newWorld(t, h, "a", "b")

	// What only the current release writes.
	health := []*controlv1.ClusterIssue{{Code: "Ec2SecurityGroupNotFound", Message: "sg-0abc is gone", ResourceIds: []string{"sg-0abc"}}}
	if _, err := controlv1.NewClusterControlServiceClient(h.admin).SetStatus(w.ctx(30*time.Second), &controlv1.SetStatusRequest{
		Cluster: w.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		OidcIssuer: "https://oidc.example.test/id/" + w.uid, VpcId: "vpc-0a1b2c3d", ClusterSecurityGroupId: "sg-0c1d2e3f",
		HealthIssues: health,
	}); err != nil {
		t.Fatalf("SetStatus with the current release's fields: %v", err)
	}
	a := w.startAgent("a", suite.current)
	a.waitRole(t, "EXECUTOR")
	w.startAgent("b", suite.current).waitRole(t, "STANDBY")
	w.createAddon("one")
	w.waitActive()
	w.createPodIdentityAssociation()
	w.tagCluster(map[string]string{"stage": "current"})
	before := w.describeCluster()
	beforeAddon := w.describeAddon()
	associations := w.podIdentityAssociations()
	if len(associations) != 1 {
		t.Fatalf("%d pod identity associations, want 1", len(associations))
	}
	if before.Identity == nil || before.Identity.Oidc == nil || aws.ToString(before.Identity.Oidc.Issuer) == "" ||
		aws.ToString(before.ResourcesVpcConfig.VpcId) == "" || before.Health == nil || len(before.Health.Issues) != 1 {
		t.Fatalf("the current replica does not show what it was given: %s", describeCluster(before))
	}

	// Rolled back: the older release serves every record as it knows it,
	// and changes the cluster and add-on records.
	h.restart(oldBins.Saltbush)
	old := w.describeCluster()
	if old.Name == nil || aws.ToString(old.Arn) != aws.ToString(before.Arn) || old.Status != before.Status ||
		aws.ToString(old.Endpoint) != aws.ToString(before.Endpoint) || !maps.Equal(old.Tags, before.Tags) {
		t.Errorf("the older replica's DescribeCluster differs in what it knows:\n before %s\n older  %s", describeCluster(before), describeCluster(old))
	}
	oldAddon := w.describeAddon()
	if aws.ToString(oldAddon.AddonArn) != aws.ToString(beforeAddon.AddonArn) || oldAddon.Status != types.AddonStatusActive ||
		aws.ToString(oldAddon.ConfigurationValues) != aws.ToString(beforeAddon.ConfigurationValues) {
		t.Errorf("the older replica's DescribeAddon differs:\n before %s\n older  %s", describeAddon(beforeAddon), describeAddon(oldAddon))
	}
	w.tagCluster(map[string]string{"stage": "older"})
	id := w.updateAddon("two")
	w.waitUpdate(id)
	w.waitConfigMap("two")

	// Rolled forward: everything the current release wrote is there,
	// with the older one's changes.
	h.restart(suite.current.Saltbush)
	after := w.describeCluster()
	if aws.ToString(after.Identity.Oidc.Issuer) != aws.ToString(before.Identity.Oidc.Issuer) ||
		aws.ToString(after.ResourcesVpcConfig.VpcId) != aws.ToString(before.ResourcesVpcConfig.VpcId) ||
		aws.ToString(after.ResourcesVpcConfig.ClusterSecurityGroupId) != aws.ToString(before.ResourcesVpcConfig.ClusterSecurityGroupId) ||
		after.Health == nil || len(after.Health.Issues) != 1 || after.Health.Issues[0].Code != before.Health.Issues[0].Code {
		t.Errorf("the current replica lost what it wrote, after the older one rewrote the cluster:\n before %s\n after  %s", describeCluster(before), describeCluster(after))
	}
	if after.Tags["stage"] != "older" {
		t.Errorf("the older replica's tag is lost: %v", after.Tags)
	}
	afterAddon := w.describeAddon()
	if aws.ToString(afterAddon.ConfigurationValues) != aws.ToString(noopValues("two")) || afterAddon.Status != types.AddonStatusActive {
		t.Errorf("the add-on after the roll forward: %s", describeAddon(afterAddon))
	}
	if got := w.podIdentityAssociations(); !slices.Equal(got, associations) {
		t.Errorf("pod identity associations after the rollback and back: %v, want %v", got, associations)
	}
	// The agents are back with the current release: it records their
	// identity again.
	poll.Until(t, waitLong, "sessions with the agents' release identity", func() (bool, string) {
		st := w.deliveryStatus()
		n := 0
		for _, s := range st.GetSessions() {
			if len(s.GetAgentCommit()) == 40 && strings.HasPrefix(s.GetAgentCommit(), suite.agentCommit) {
				n++
			}
		}
		return n == 2, fmt.Sprint(st.GetSessions())
	})
	w.waitAllAcked()

	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	rep, err := invariants.Check(ctx, cli, store.DefaultPrefix, nil)
	if err != nil {
		t.Fatalf("keyspace check: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("keyspace: %s", v)
	}
	if lines := h.errorLines(); len(lines) > 0 {
		t.Errorf("the replicas logged %d ERROR lines; the first: %s", len(lines), lines[0])
	}
}

func (w *world) describeCluster() *types.Cluster {
	w.t.Helper()
	out, err := w.eks.DescribeCluster(w.ctx(30*time.Second), &eks.DescribeClusterInput{Name: aws.String(w.cluster)})
	if err != nil {
		w.t.Fatalf("DescribeCluster: %v", err)
	}
	return out.Cluster
}

func (w *world) describeAddon() *types.Addon {
	w.t.Helper()
	out, err := w.eks.DescribeAddon(w.ctx(30*time.Second), &eks.DescribeAddonInput{ClusterName: aws.String(w.cluster), AddonName: aws.String(noop)})
	if err != nil {
		w.t.Fatalf("DescribeAddon: %v", err)
	}
	return out.Addon
}

func (w *world) tagCluster(tags map[string]string) {
	w.t.Helper()
	arn := aws.ToString(w.describeCluster().Arn)
	if _, err := w.eks.TagResource(w.ctx(30*time.Second), &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: tags}); err != nil {
		w.t.Fatalf("TagResource: %v", err)
	}
}

// podIdentityAssociations describes each association of the cluster, as
// one line each.
func (w *world) podIdentityAssociations() []string {
	w.t.Helper()
	list, err := w.eks.ListPodIdentityAssociations(w.ctx(30*time.Second), &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(w.cluster)})
	if err != nil {
		w.t.Fatalf("ListPodIdentityAssociations: %v", err)
	}
	var out []string
	for _, s := range list.Associations {
		d, err := w.eks.DescribePodIdentityAssociation(w.ctx(30*time.Second), &eks.DescribePodIdentityAssociationInput{
			ClusterName: aws.String(w.cluster), AssociationId: s.AssociationId})
		if err != nil {
			w.t.Fatalf("DescribePodIdentityAssociation: %v", err)
		}
		a := d.Association
		out = append(out, fmt.Sprintf("%s %s/%s %s %s", aws.ToString(a.AssociationArn), aws.ToString(a.Namespace),
			aws.ToString(a.ServiceAccount), aws.ToString(a.RoleArn), a.CreatedAt.UTC()))
	}
	slices.Sort(out)
	return out
}

func describeCluster(c *types.Cluster) string { return jsonOf(c) }
func describeAddon(a *types.Addon) string     { return jsonOf(a) }
