package conformance

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const (
	adminPolicy     = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
	viewPolicy      = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
	editPolicy      = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"
	autoNodePolicy  = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAutoNodePolicy"
	devUserARN      = "arn:aws:iam::000000000000:user/saltbush-dev"
	teamRoleARN     = "arn:aws:iam::000000000000:role/team"
	pathRoleARN     = "arn:aws:iam::000000000000:role/ops/deployer"
	nodeRoleARN     = "arn:aws:iam::000000000000:role/nodes"
	readerUserARN   = "arn:aws:iam::000000000000:user/reader"
	otherAccountARN = "arn:aws:iam::111111111111:role/elsewhere"
)

// accessHarness is a running saltbush with one cluster in authentication
// mode API, created by the dev user (so its creator entry was seeded), and
// IAM principals to make entries for.
type accessHarness struct {
	srv     *servertest.Server
	eks     *eks.Client
	cluster string
	account string
}

func newAccessHarness(t *testing.T, status controlv1.ClusterStatus, opts ...servertest.Option) *accessHarness {
	t.Helper()
	srv := servertest.Start(t, opts...)
	h := &accessHarness{srv: srv, eks: srv.EKS(t), cluster: "access-1", account: srv.Config.DevAccount}
	ctx := ctxT(t)
	in := createInput(h.cluster)
	in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
	if _, err := h.eks.CreateCluster(ctx, in); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	for _, arn := range []string{teamRoleARN, pathRoleARN, nodeRoleARN, readerUserARN} {
		if _, err := srv.IAM().CreatePrincipal(ctx, arn); err != nil {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	if status != controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED {
		h.setStatus(t, status)
	}
	return h
}

func (h *accessHarness) ref() *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: h.account, Name: h.cluster}
}

func (h *accessHarness) setStatus(t *testing.T, st controlv1.ClusterStatus) {
	t.Helper()
	req := &controlv1.SetStatusRequest{Cluster: h.ref(), Status: st}
	switch st {
	case controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE:
		req.Endpoint, req.PlatformVersion = "https://10.0.0.1:6443", "eks.1"
		req.CertificateAuthorityData = clustertest.CertificateAuthorityData(t)
	case controlv1.ClusterStatus_CLUSTER_STATUS_FAILED:
		req.Reason = "test"
	}
	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).SetStatus(ctxT(t), req); err != nil {
		t.Fatalf("SetStatus %s: %v", st, err)
	}
}

// keyspace is every key with its value and mod revision (see addonKeyspace).
func (h *accessHarness) keyspace(t *testing.T) map[string]string {
	t.Helper()
	return addonKeyspace(t, &addonHarness{srv: h.srv})
}

func (h *accessHarness) noWrites(t *testing.T, before map[string]string) {
	t.Helper()
	addonNoWrites(t, &addonHarness{srv: h.srv}, before)
}

// epoch checks an AWS timestamp is within a minute of now.
func recent(t *testing.T, what string, ts *time.Time) {
	t.Helper()
	if ts == nil || time.Since(*ts) > time.Minute || time.Until(*ts) > time.Second {
		t.Errorf("%s = %v, want about now", what, ts)
	}
}

func TestAccessEntryLifecycleWithSDK(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	ctx := ctxT(t)

	// The creator's entry was seeded with the cluster.
	creator, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(devUserARN)})
	if err != nil {
		t.Fatalf("creator entry: %v", err)
	}
	if aws.ToString(creator.AccessEntry.Type) != "STANDARD" || aws.ToString(creator.AccessEntry.Username) != devUserARN {
		t.Errorf("creator entry = type %q username %q", aws.ToString(creator.AccessEntry.Type), aws.ToString(creator.AccessEntry.Username))
	}
	assoc, err := h.eks.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(devUserARN)})
	if err != nil {
		t.Fatalf("creator associations: %v", err)
	}
	if len(assoc.AssociatedAccessPolicies) != 1 || aws.ToString(assoc.AssociatedAccessPolicies[0].PolicyArn) != adminPolicy ||
		assoc.AssociatedAccessPolicies[0].AccessScope.Type != types.AccessScopeTypeCluster {
		t.Errorf("creator associations = %+v, want ClusterAdmin on cluster scope", assoc.AssociatedAccessPolicies)
	}

	// Create a STANDARD entry for a role with a path.
	out, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN),
		KubernetesGroups: []string{"deployers", "viewers"}, Tags: map[string]string{"team": "ops"},
	})
	if err != nil {
		t.Fatalf("CreateAccessEntry: %v", err)
	}
	e := out.AccessEntry
	wantPrefix := "arn:aws:eks:us-east-1:000000000000:access-entry/access-1/role/000000000000/deployer/"
	if arn := aws.ToString(e.AccessEntryArn); !strings.HasPrefix(arn, wantPrefix) || len(arn) != len(wantPrefix)+36 {
		t.Errorf("accessEntryArn = %s, want %s{uuid}", arn, wantPrefix)
	}
	if got, want := aws.ToString(e.Username), "arn:aws:sts::000000000000:assumed-role/deployer/{{SessionName}}"; got != want {
		t.Errorf("generated username = %q, want %q", got, want)
	}
	if aws.ToString(e.Type) != "STANDARD" || aws.ToString(e.PrincipalArn) != pathRoleARN || aws.ToString(e.ClusterName) != h.cluster {
		t.Errorf("entry = %+v", e)
	}
	if !slices.Equal(e.KubernetesGroups, []string{"deployers", "viewers"}) || e.Tags["team"] != "ops" {
		t.Errorf("groups %v tags %v", e.KubernetesGroups, e.Tags)
	}
	recent(t, "createdAt", e.CreatedAt)
	if !e.CreatedAt.Equal(aws.ToTime(e.ModifiedAt)) {
		t.Errorf("modifiedAt %v != createdAt %v on create", e.ModifiedAt, e.CreatedAt)
	}

	// Describe by the same ARN.
	d, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN)})
	if err != nil || aws.ToString(d.AccessEntry.AccessEntryArn) != aws.ToString(e.AccessEntryArn) {
		t.Fatalf("DescribeAccessEntry: %v %v", d, err)
	}

	// Update with nothing changed: modifiedAt stays.
	time.Sleep(20 * time.Millisecond)
	u, err := h.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), KubernetesGroups: []string{"deployers", "viewers"},
	})
	if err != nil {
		t.Fatalf("UpdateAccessEntry (same): %v", err)
	}
	if !u.AccessEntry.ModifiedAt.Equal(aws.ToTime(e.ModifiedAt)) {
		t.Errorf("modifiedAt moved on a no-op update: %v -> %v", e.ModifiedAt, u.AccessEntry.ModifiedAt)
	}
	// Username only: groups kept, modifiedAt moves.
	u, err = h.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), Username: aws.String("ops:{{SessionName}}"),
	})
	if err != nil {
		t.Fatalf("UpdateAccessEntry (username): %v", err)
	}
	if aws.ToString(u.AccessEntry.Username) != "ops:{{SessionName}}" || !slices.Equal(u.AccessEntry.KubernetesGroups, []string{"deployers", "viewers"}) {
		t.Errorf("after username update: %q %v", aws.ToString(u.AccessEntry.Username), u.AccessEntry.KubernetesGroups)
	}
	if !u.AccessEntry.ModifiedAt.After(aws.ToTime(e.ModifiedAt)) {
		t.Errorf("modifiedAt did not move on a change: %v -> %v", e.ModifiedAt, u.AccessEntry.ModifiedAt)
	}
	// An empty list removes every group.
	u, err = h.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), KubernetesGroups: []string{},
	})
	if err != nil || len(u.AccessEntry.KubernetesGroups) != 0 {
		t.Fatalf("UpdateAccessEntry (clear groups): %v %v", u, err)
	}

	// Associate on namespaces, then again: the scope is replaced.
	a1, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), PolicyArn: aws.String(editPolicy),
		AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev", "team-*"}},
	})
	if err != nil {
		t.Fatalf("AssociateAccessPolicy: %v", err)
	}
	if aws.ToString(a1.ClusterName) != h.cluster || aws.ToString(a1.PrincipalArn) != pathRoleARN ||
		!slices.Equal(a1.AssociatedAccessPolicy.AccessScope.Namespaces, []string{"dev", "team-*"}) {
		t.Errorf("association = %+v", a1)
	}
	recent(t, "associatedAt", a1.AssociatedAccessPolicy.AssociatedAt)
	time.Sleep(20 * time.Millisecond)
	a2, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), PolicyArn: aws.String(editPolicy),
		AccessScope: &types.AccessScope{Type: types.AccessScopeTypeCluster},
	})
	if err != nil {
		t.Fatalf("re-AssociateAccessPolicy: %v", err)
	}
	if !a2.AssociatedAccessPolicy.AssociatedAt.Equal(aws.ToTime(a1.AssociatedAccessPolicy.AssociatedAt)) ||
		!a2.AssociatedAccessPolicy.ModifiedAt.After(aws.ToTime(a1.AssociatedAccessPolicy.ModifiedAt)) {
		t.Errorf("re-association times: associatedAt %v->%v modifiedAt %v->%v", a1.AssociatedAccessPolicy.AssociatedAt,
			a2.AssociatedAccessPolicy.AssociatedAt, a1.AssociatedAccessPolicy.ModifiedAt, a2.AssociatedAccessPolicy.ModifiedAt)
	}
	if _, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), PolicyArn: aws.String(viewPolicy),
		AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"prod"}},
	}); err != nil {
		t.Fatalf("AssociateAccessPolicy view: %v", err)
	}
	la, err := h.eks.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN)})
	if err != nil || len(la.AssociatedAccessPolicies) != 2 {
		t.Fatalf("ListAssociatedAccessPolicies: %+v %v", la, err)
	}
	for _, p := range la.AssociatedAccessPolicies {
		if aws.ToString(p.PolicyArn) == editPolicy && (p.AccessScope.Type != types.AccessScopeTypeCluster || len(p.AccessScope.Namespaces) != 0) {
			t.Errorf("edit association scope = %+v, want cluster", p.AccessScope)
		}
	}
	// Paged, one at a time, through the SDK paginator.
	var paged []string
	pg := eks.NewListAssociatedAccessPoliciesPaginator(h.eks, &eks.ListAssociatedAccessPoliciesInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), MaxResults: aws.Int32(1)})
	for pg.HasMorePages() {
		p, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatalf("paged associations: %v", err)
		}
		for _, a := range p.AssociatedAccessPolicies {
			paged = append(paged, aws.ToString(a.PolicyArn))
		}
	}
	if !slices.Equal(paged, []string{editPolicy, viewPolicy}) {
		t.Errorf("paged associations = %v", paged)
	}

	// More entries: a user and a node role; list paged and filtered.
	if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(readerUserARN)}); err != nil {
		t.Fatalf("create user entry: %v", err)
	}
	node, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(nodeRoleARN), Type: aws.String("EC2_LINUX")})
	if err != nil {
		t.Fatalf("create EC2_LINUX entry: %v", err)
	}
	if aws.ToString(node.AccessEntry.Username) != "system:node:{{EC2PrivateDNSName}}" || !slices.Equal(node.AccessEntry.KubernetesGroups, []string{"system:nodes"}) {
		t.Errorf("EC2_LINUX entry username %q groups %v", aws.ToString(node.AccessEntry.Username), node.AccessEntry.KubernetesGroups)
	}
	var all []string
	lp := eks.NewListAccessEntriesPaginator(h.eks, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(1)})
	pages := 0
	for lp.HasMorePages() {
		p, err := lp.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListAccessEntries: %v", err)
		}
		pages++
		all = append(all, p.AccessEntries...)
	}
	slices.Sort(all)
	if want := []string{pathRoleARN, nodeRoleARN, readerUserARN, devUserARN}; !sameSet(all, want) || pages != 4 {
		t.Errorf("ListAccessEntries = %v in %d pages, want %v in 4", all, pages, want)
	}
	filtered, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster), AssociatedPolicyArn: aws.String(adminPolicy)})
	if err != nil || !slices.Equal(filtered.AccessEntries, []string{devUserARN}) {
		t.Errorf("ListAccessEntries filtered by ClusterAdmin = %v, %v", filtered, err)
	}

	// Tags on the entry's ARN.
	entryARN := aws.ToString(e.AccessEntryArn)
	if _, err := h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(entryARN), Tags: map[string]string{"env": "dev"}}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	tags, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(entryARN)})
	if err != nil || tags.Tags["env"] != "dev" || tags.Tags["team"] != "ops" {
		t.Errorf("ListTagsForResource = %v, %v", tags, err)
	}
	if _, err := h.eks.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(entryARN), TagKeys: []string{"team"}}); err != nil {
		t.Fatalf("UntagResource: %v", err)
	}

	// Disassociate, then delete.
	if _, err := h.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), PolicyArn: aws.String(viewPolicy)}); err != nil {
		t.Fatalf("DisassociateAccessPolicy: %v", err)
	}
	var nf *types.ResourceNotFoundException
	if _, err := h.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{
		ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN), PolicyArn: aws.String(viewPolicy)}); !errors.As(err, &nf) {
		t.Errorf("second DisassociateAccessPolicy: %v, want ResourceNotFoundException", err)
	}
	if _, err := h.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN)}); err != nil {
		t.Fatalf("DeleteAccessEntry: %v", err)
	}
	if _, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN)}); !errors.As(err, &nf) {
		t.Errorf("Describe after delete: %v, want ResourceNotFoundException", err)
	}
	if _, err := h.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(pathRoleARN)}); !errors.As(err, &nf) {
		t.Errorf("second delete: %v, want ResourceNotFoundException", err)
	}
	var tnf *types.NotFoundException
	if _, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(entryARN)}); !errors.As(err, &tnf) {
		t.Errorf("tags of a deleted entry: %v, want NotFoundException", err)
	}

	// The catalogue.
	var policies []string
	pp := eks.NewListAccessPoliciesPaginator(h.eks, &eks.ListAccessPoliciesInput{MaxResults: aws.Int32(7)})
	for pp.HasMorePages() {
		p, err := pp.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListAccessPolicies: %v", err)
		}
		for _, ap := range p.AccessPolicies {
			if aws.ToString(ap.Arn) != "arn:aws:eks::aws:cluster-access-policy/"+aws.ToString(ap.Name) {
				t.Errorf("policy %s has ARN %s", aws.ToString(ap.Name), aws.ToString(ap.Arn))
			}
			policies = append(policies, aws.ToString(ap.Name))
		}
	}
	if len(policies) != 19 || !slices.Contains(policies, "AmazonEKSClusterAdminPolicy") || !slices.IsSorted(policies) {
		t.Errorf("ListAccessPolicies = %v", policies)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestAccessEntryRulesWithSDK: every AWS rule violation is a typed error
// and writes nothing.
func TestAccessEntryRulesWithSDK(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	ctx := ctxT(t)
	if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(nodeRoleARN), Type: aws.String("EC2_LINUX")}); err != nil {
		t.Fatalf("node entry: %v", err)
	}
	if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)}); err != nil {
		t.Fatalf("team entry: %v", err)
	}
	create := func(in eks.CreateAccessEntryInput) func() error {
		return func() error {
			in.ClusterName = aws.String(h.cluster)
			_, err := h.eks.CreateAccessEntry(ctx, &in)
			return err
		}
	}
	associate := func(principal, policy string, scope *types.AccessScope) func() error {
		return func() error {
			_, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
				ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(principal), PolicyArn: aws.String(policy), AccessScope: scope})
			return err
		}
	}
	update := func(in eks.UpdateAccessEntryInput) func() error {
		return func() error {
			in.ClusterName = aws.String(h.cluster)
			_, err := h.eks.UpdateAccessEntry(ctx, &in)
			return err
		}
	}
	clusterScope := &types.AccessScope{Type: types.AccessScopeTypeCluster}
	cases := []struct {
		name string
		call func() error
		want error
		msg  string
	}{
		{"unknown type", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Type: aws.String("LINUX")}), &types.InvalidParameterException{}, "type"},
		{"session principal", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String("arn:aws:sts::000000000000:assumed-role/team/alice")}), &types.InvalidParameterException{}, "STS session"},
		{"not an ARN", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String("alice")}), &types.InvalidParameterException{}, "principalArn"},
		{"principal that does not exist", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String("arn:aws:iam::000000000000:role/ghost")}), &types.InvalidParameterException{}, "invalid principal"},
		{"username system:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("system:admin")}), &types.InvalidParameterException{}, "cannot start with system:"},
		{"username eks:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("eks:x")}), &types.InvalidParameterException{}, "cannot start with eks:"},
		{"username aws:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("aws:x")}), &types.InvalidParameterException{}, "aws:"},
		{"username amazon:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("amazon:x")}), &types.InvalidParameterException{}, "amazon:"},
		{"username iam:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("iam:x")}), &types.InvalidParameterException{}, "iam:"},
		{"session name without colon", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("{{SessionName}}")}), &types.InvalidParameterException{}, "colon"},
		{"unknown template", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("u:{{Nope}}")}), &types.InvalidParameterException{}, "template"},
		{"group system:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), KubernetesGroups: []string{"ok", "system:masters"}}), &types.InvalidParameterException{}, "The kubernetes group name system:masters is invalid, it cannot start with system:"},
		{"group eks:", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), KubernetesGroups: []string{"eks:x"}}), &types.InvalidParameterException{}, "eks:"},
		{"node entry with groups", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(teamRoleARN), Type: aws.String("EC2_WINDOWS"), KubernetesGroups: []string{"g"}}), &types.InvalidParameterException{}, "STANDARD"},
		{"node entry with username", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(teamRoleARN), Type: aws.String("FARGATE_LINUX"), Username: aws.String("u")}), &types.InvalidParameterException{}, "STANDARD"},
		{"node entry for a user", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Type: aws.String("HYBRID_LINUX")}), &types.InvalidParameterException{}, "IAM role"},
		{"node entry for another account's role", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(otherAccountARN), Type: aws.String("HYPERPOD_LINUX")}), &types.InvalidParameterException{}, "IAM role of account"},
		{"duplicate entry", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(teamRoleARN)}), &types.ResourceInUseException{}, "already in use"},
		// IAM names a role by name whatever its path, but an ARN with the
		// wrong path names no principal.
		{"existing role by a wrong path", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String("arn:aws:iam::000000000000:role/x/team")}), &types.InvalidParameterException{}, "invalid principal"},
		{"bad tag", create(eks.CreateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Tags: map[string]string{"aws:x": "y"}}), &types.InvalidParameterException{}, "aws:"},
		{"cluster that does not exist", func() error {
			_, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String("ghost"), PrincipalArn: aws.String(readerUserARN)})
			return err
		}, &types.ResourceNotFoundException{}, "No cluster found for name: ghost."},
		{"associate unknown policy", associate(teamRoleARN, "arn:aws:eks::aws:cluster-access-policy/Nope", clusterScope), &types.InvalidParameterException{}, "policyArn"},
		{"associate without scope (the SDK refuses to send it; sent by hand)", func() error {
			resp := h.srv.Do(t, "POST", "/clusters/access-1/access-entries/"+url.PathEscape(teamRoleARN)+"/access-policies",
				[]byte(`{"policyArn":"`+viewPolicy+`"}`))
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || resp.Header.Get("X-Amzn-ErrorType") != "InvalidParameterException" {
				return fmt.Errorf("status %d %s: %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), body)
			}
			return &types.InvalidParameterException{Message: aws.String(string(body))}
		}, &types.InvalidParameterException{}, "accessScope"},
		{"associate cluster scope with namespaces", associate(teamRoleARN, viewPolicy, &types.AccessScope{Type: types.AccessScopeTypeCluster, Namespaces: []string{"a"}}), &types.InvalidParameterException{}, ""},
		{"associate namespace scope without namespaces", associate(teamRoleARN, viewPolicy, &types.AccessScope{Type: types.AccessScopeTypeNamespace}), &types.InvalidParameterException{}, ""},
		{"associate star in the middle", associate(teamRoleARN, viewPolicy, &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"a*b"}}), &types.InvalidParameterException{}, ""},
		{"associate unknown scope type", associate(teamRoleARN, viewPolicy, &types.AccessScope{Type: "account"}), &types.InvalidParameterException{}, ""},
		{"associate with a node entry", associate(nodeRoleARN, viewPolicy, clusterScope), &types.InvalidRequestException{}, `This operation can only be performed on Access Entries with a type of "STANDARD".`},
		{"associate auto-node policy with a STANDARD entry", associate(teamRoleARN, autoNodePolicy, clusterScope), &types.InvalidParameterException{}, "EC2"},
		{"associate with no entry", associate(readerUserARN, viewPolicy, clusterScope), &types.ResourceNotFoundException{}, "principalArn could not be found"},
		{"update a node entry", update(eks.UpdateAccessEntryInput{PrincipalArn: aws.String(nodeRoleARN), KubernetesGroups: []string{"g"}}), &types.InvalidRequestException{}, `type of "STANDARD"`},
		{"update with a forbidden group", update(eks.UpdateAccessEntryInput{PrincipalArn: aws.String(teamRoleARN), KubernetesGroups: []string{"system:masters"}}), &types.InvalidParameterException{}, "system:"},
		{"update with a forbidden username", update(eks.UpdateAccessEntryInput{PrincipalArn: aws.String(teamRoleARN), Username: aws.String("amazon:x")}), &types.InvalidParameterException{}, "amazon:"},
		{"update a missing entry", update(eks.UpdateAccessEntryInput{PrincipalArn: aws.String(readerUserARN), Username: aws.String("u")}), &types.ResourceNotFoundException{}, ""},
		{"list with an unknown policy filter", func() error {
			_, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster), AssociatedPolicyArn: aws.String("arn:aws:eks::aws:cluster-access-policy/Nope")})
			return err
		}, &types.InvalidParameterException{}, "associatedPolicyArn"},
		{"list with maxResults 0", func() error {
			_, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(101)})
			return err
		}, &types.InvalidParameterException{}, "maxResults"},
		{"list with a forged token", func() error {
			_, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster), NextToken: aws.String("forged")})
			return err
		}, &types.InvalidParameterException{}, "nextToken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.keyspace(t)
			err := tc.call()
			wanterr.Like(t, err, tc.want)
			wanterr.Contains(t, err, tc.msg)
			h.noWrites(t, before)
		})
	}
}

// TestAccessEntryConcurrentCreates: 50 concurrent creates for one
// principal (each with its own client token, as separate SDK calls make)
// leave exactly one entry; the others get ResourceInUseException.
func TestAccessEntryConcurrentCreates(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	ctx := ctxT(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	arns := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
				ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN),
				KubernetesGroups: []string{fmt.Sprintf("writer-%d", i)},
			})
			errs[i] = err
			if err == nil {
				arns[i] = aws.ToString(out.AccessEntry.AccessEntryArn)
			}
		}()
	}
	wg.Wait()
	won, winner := 0, -1
	for i, err := range errs {
		var inUse *types.ResourceInUseException
		switch {
		case err == nil:
			won, winner = won+1, i
		case !errors.As(err, &inUse):
			t.Errorf("create %d: %v, want success or ResourceInUseException", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creates succeeded, want exactly 1", won)
	}
	d, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(d.AccessEntry.AccessEntryArn) != arns[winner] || !slices.Equal(d.AccessEntry.KubernetesGroups, []string{fmt.Sprintf("writer-%d", winner)}) {
		t.Errorf("stored entry %s %v is not the winner's %s writer-%d", aws.ToString(d.AccessEntry.AccessEntryArn), d.AccessEntry.KubernetesGroups, arns[winner], winner)
	}
}
