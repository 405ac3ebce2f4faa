package conformance

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestAccessEntryClusterCoupling: entries follow their cluster's
// authentication mode, status and incarnation.
func TestAccessEntryClusterCoupling(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED) // CREATING
	ctx := ctxT(t)
	createIn := func(principal string) *eks.CreateAccessEntryInput {
		return &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(principal)}
	}

	t.Run("CONFIG_MAP cluster refuses the access-entry API", func(t *testing.T) {
		if _, err := h.eks.CreateCluster(ctx, createInput("configmap")); err != nil {
			t.Fatal(err)
		}
		before := h.keyspace(t)
		_, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String("configmap"), PrincipalArn: aws.String(teamRoleARN)})
		wanterr.Like(t, err, &types.InvalidRequestException{})
		wanterr.Contains(t, err, "authentication mode must be set to one of [API, API_AND_CONFIG_MAP]")
		_, err = h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("configmap")})
		wanterr.Like(t, err, &types.InvalidRequestException{})
		wanterr.Contains(t, err, "authentication mode")
		h.noWrites(t, before)
	})
	t.Run("bootstrapClusterCreatorAdminPermissions false seeds nobody", func(t *testing.T) {
		in := createInput("no-bootstrap")
		in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap, BootstrapClusterCreatorAdminPermissions: aws.Bool(false)}
		if _, err := h.eks.CreateCluster(ctx, in); err != nil {
			t.Fatal(err)
		}
		out, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("no-bootstrap")})
		if err != nil || len(out.AccessEntries) != 0 {
			t.Errorf("entries = %v, %v; want none", out, err)
		}
	})
	t.Run("a CREATING cluster takes entries", func(t *testing.T) {
		if _, err := h.eks.CreateAccessEntry(ctx, createIn(teamRoleARN)); err != nil {
			t.Fatal(err)
		}
	})

	mutations := map[string]func() error{
		"create": func() error { _, err := h.eks.CreateAccessEntry(ctx, createIn(readerUserARN)); return err },
		"update": func() error {
			_, err := h.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN), KubernetesGroups: []string{"x"}})
			return err
		},
		"associate": func() error {
			_, err := h.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN),
				PolicyArn: aws.String(viewPolicy), AccessScope: &types.AccessScope{Type: types.AccessScopeTypeCluster}})
			return err
		},
		"disassociate": func() error {
			_, err := h.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(devUserARN), PolicyArn: aws.String(adminPolicy)})
			return err
		},
		"delete": func() error {
			_, err := h.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)})
			return err
		},
	}
	reads := func(t *testing.T) {
		t.Helper()
		if _, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)}); err != nil {
			t.Errorf("describe: %v", err)
		}
		if out, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster)}); err != nil || len(out.AccessEntries) != 2 {
			t.Errorf("list: %v %v", out, err)
		}
	}
	for _, st := range []controlv1.ClusterStatus{controlv1.ClusterStatus_CLUSTER_STATUS_FAILED, controlv1.ClusterStatus_CLUSTER_STATUS_DELETING} {
		t.Run(st.String(), func(t *testing.T) {
			if st == controlv1.ClusterStatus_CLUSTER_STATUS_DELETING {
				if _, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(h.cluster)}); err != nil {
					t.Fatal(err)
				}
			} else {
				h.setStatus(t, st)
			}
			for name, call := range mutations {
				before := h.keyspace(t)
				err := call()
				var e *types.InvalidRequestException
				if !errors.As(err, &e) {
					t.Errorf("%s on a %s cluster: %v, want InvalidRequestException", name, st, err)
				}
				h.noWrites(t, before)
			}
			reads(t)
		})
	}

	t.Run("a recreated cluster starts with only its creator's entry", func(t *testing.T) {
		old, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)})
		if err != nil {
			t.Fatal(err)
		}
		cc := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t))
		info, err := cc.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: h.ref()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cc.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: h.ref()}); err != nil {
			t.Fatalf("FinalizeDeletion: %v", err)
		}
		for k := range h.keyspace(t) {
			if strings.HasPrefix(k, "clusters/"+info.GetCluster().GetUid()+"/") {
				t.Errorf("key %s outlived its cluster", k)
			}
		}
		in := createInput(h.cluster)
		in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
		if _, err := h.eks.CreateCluster(ctx, in); err != nil {
			t.Fatal(err)
		}
		out, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(h.cluster)})
		if err != nil || len(out.AccessEntries) != 1 || out.AccessEntries[0] != devUserARN {
			t.Errorf("entries of the new incarnation = %v, %v", out, err)
		}
		var nf *types.NotFoundException
		if _, err := h.eks.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: old.AccessEntry.AccessEntryArn}); !errors.As(err, &nf) {
			t.Errorf("the old entry's ARN: %v, want NotFoundException", err)
		}
	})
}

// TestAccessEntryCreatorSeedRace: a create for the creator racing
// CreateCluster never replaces the seeded entry: it
// fails while the cluster does not exist, and with ResourceInUseException
// once it does, because the entry was written with the cluster.
func TestAccessEntryCreatorSeedRace(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED)
	ctx := ctxT(t)
	for i := range 10 {
		name := fmt.Sprintf("race-%d", i)
		var wg sync.WaitGroup
		results := make(chan error, 64)
		wg.Add(2)
		go func() {
			defer wg.Done()
			in := createInput(name)
			in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
			if _, err := h.eks.CreateCluster(ctx, in); err != nil {
				results <- fmt.Errorf("CreateCluster: %w", err)
			}
		}()
		go func() {
			defer wg.Done()
			for range 60 {
				_, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(devUserARN), KubernetesGroups: []string{"racer"}})
				var nf *types.ResourceNotFoundException
				if errors.As(err, &nf) {
					continue // the cluster does not exist yet
				}
				results <- err
				return
			}
			results <- errors.New("the cluster never appeared")
		}()
		wg.Wait()
		close(results)
		for err := range results {
			var inUse *types.ResourceInUseException
			if !errors.As(err, &inUse) {
				t.Errorf("%s: %v, want ResourceInUseException", name, err)
			}
		}
		d, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(devUserARN)})
		if err != nil || len(d.AccessEntry.KubernetesGroups) != 0 {
			t.Fatalf("%s: creator entry %v, %v: replaced", name, d, err)
		}
		la, err := h.eks.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(name), PrincipalArn: aws.String(devUserARN)})
		if err != nil || len(la.AssociatedAccessPolicies) != 1 || aws.ToString(la.AssociatedAccessPolicies[0].PolicyArn) != adminPolicy {
			t.Errorf("%s: creator associations %v, %v", name, la, err)
		}
	}
}

// TestAccessEntryClientRequestToken: the same token and parameters return
// the original entry; the same token with other parameters is refused.
func TestAccessEntryClientRequestToken(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	ctx := ctxT(t)
	in := &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN),
		KubernetesGroups: []string{"a"}, ClientRequestToken: aws.String("create-team-1")}
	first, err := h.eks.CreateAccessEntry(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.eks.CreateAccessEntry(ctx, in)
	if err != nil || aws.ToString(again.AccessEntry.AccessEntryArn) != aws.ToString(first.AccessEntry.AccessEntryArn) {
		t.Fatalf("replay: %v %v", again, err)
	}
	before := h.keyspace(t)
	in.KubernetesGroups = []string{"b"}
	_, err = h.eks.CreateAccessEntry(ctx, in)
	wanterr.Like(t, err, &types.InvalidParameterException{})
	wanterr.Contains(t, err, "clientRequestToken")
	h.noWrites(t, before)

	up := &eks.UpdateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN),
		Username: aws.String("team:{{SessionName}}"), ClientRequestToken: aws.String("update-team-1")}
	u1, err := h.eks.UpdateAccessEntry(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := h.eks.UpdateAccessEntry(ctx, up)
	if err != nil || !u2.AccessEntry.ModifiedAt.Equal(aws.ToTime(u1.AccessEntry.ModifiedAt)) {
		t.Fatalf("update replay: %v %v", u2, err)
	}
	up.Username = aws.String("other:{{SessionName}}")
	_, err = h.eks.UpdateAccessEntry(ctx, up)
	wanterr.Like(t, err, &types.InvalidParameterException{})
	wanterr.Contains(t, err, "clientRequestToken")
}

// TestAccessEntryCreatorIsTheSessionsRole: a cluster created by an
// assumed-role session seeds an entry for the role — with the role's path,
// which the session ARN leaves out — and a token of any session of that
// role then authenticates as the creator.
func TestAccessEntryCreatorIsTheSessionsRole(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED)
	ctx := ctxT(t)
	const role = "arn:aws:iam::000000000000:role/platform/creator"
	if _, err := h.srv.IAM().CreatePrincipal(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.IAM().AttachPolicy(ctx, role, "AdministratorAccess"); err != nil {
		t.Fatal(err)
	}
	session := h.srv.EKSAs(t, h.srv.NewKey(t, "arn:aws:sts::000000000000:assumed-role/creator/build-42"))
	in := createInput("by-session")
	in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}
	// The attachment reaches the key store's in-memory mirror through its
	// etcd watch, within milliseconds: until then the role has no policy.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := session.CreateCluster(ctx, in)
		var denied *types.AccessDeniedException
		if errors.As(err, &denied) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	out, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("by-session")})
	if err != nil || len(out.AccessEntries) != 1 || out.AccessEntries[0] != role {
		t.Fatalf("entries = %v, %v; want the role with its path", out, err)
	}
	d, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String("by-session"), PrincipalArn: aws.String(role)})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(d.AccessEntry.Username); got != "arn:aws:sts::000000000000:assumed-role/creator/{{SessionName}}" {
		t.Errorf("username = %s", got)
	}
	// The role without its path names no entry.
	var nf *types.ResourceNotFoundException
	if _, err := h.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String("by-session"),
		PrincipalArn: aws.String("arn:aws:iam::000000000000:role/creator")}); !errors.As(err, &nf) {
		t.Errorf("the role's ARN without its path: %v, want ResourceNotFoundException", err)
	}
}
