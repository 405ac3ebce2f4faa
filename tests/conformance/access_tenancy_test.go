package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestAccessEntryTenancy: another account, naming A's cluster, entries and
// entry ARNs, gets the answers a ghost gets and changes nothing.
func TestAccessEntryTenancy(t *testing.T) {
	h := newAccessHarness(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	ctx := ctxT(t)
	out, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(teamRoleARN)})
	if err != nil {
		t.Fatal(err)
	}
	type target struct{ cluster, principal, entryARN string }
	real := target{h.cluster, teamRoleARN, aws.ToString(out.AccessEntry.AccessEntryArn)}
	ghost := target{"ghost-1", teamRoleARN, strings.Replace(real.entryARN, "/"+h.cluster+"/", "/ghost-1/", 1)}
	b := h.srv.EKSAs(t, h.srv.NewAccount(t, "111111111111"), authOneAttempt)
	scope := &types.AccessScope{Type: types.AccessScopeTypeCluster}
	ops := []struct {
		name string
		call func(ctx context.Context, x target) error
	}{
		{"CreateAccessEntry", func(ctx context.Context, x target) error {
			_, err := b.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal)})
			return err
		}},
		{"DescribeAccessEntry", func(ctx context.Context, x target) error {
			_, err := b.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal)})
			return err
		}},
		{"ListAccessEntries", func(ctx context.Context, x target) error {
			_, err := b.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(x.cluster)})
			return err
		}},
		{"UpdateAccessEntry", func(ctx context.Context, x target) error {
			_, err := b.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal), KubernetesGroups: []string{"b"}})
			return err
		}},
		{"DeleteAccessEntry", func(ctx context.Context, x target) error {
			_, err := b.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal)})
			return err
		}},
		{"AssociateAccessPolicy", func(ctx context.Context, x target) error {
			_, err := b.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal), PolicyArn: aws.String(adminPolicy), AccessScope: scope})
			return err
		}},
		{"DisassociateAccessPolicy", func(ctx context.Context, x target) error {
			_, err := b.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal), PolicyArn: aws.String(adminPolicy)})
			return err
		}},
		{"ListAssociatedAccessPolicies", func(ctx context.Context, x target) error {
			_, err := b.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(x.cluster), PrincipalArn: aws.String(x.principal)})
			return err
		}},
		{"TagResource entry ARN", func(ctx context.Context, x target) error {
			_, err := b.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(x.entryARN), Tags: map[string]string{"k": "b"}})
			return err
		}},
		{"ListTagsForResource entry ARN", func(ctx context.Context, x target) error {
			_, err := b.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(x.entryARN)})
			return err
		}},
	}
	ghostify := strings.NewReplacer(real.entryARN, ghost.entryARN, real.cluster, ghost.cluster)
	before := h.keyspace(t)
	for _, op := range ops {
		t.Run("B "+op.name, func(t *testing.T) {
			code, msg := wanterr.AWS(t, op.call(ctxT(t), real), "", wanterr.AnyClientError)
			if code != "ResourceNotFoundException" && code != "NotFoundException" {
				t.Errorf("code = %s (%q), want a not-found exception", code, msg)
			}
			gcode, gmsg := wanterr.AWS(t, op.call(ctxT(t), ghost), "", wanterr.AnyClientError)
			if code != gcode || ghostify.Replace(msg) != gmsg {
				t.Errorf("A's resource and a ghost answer differently:\n  A's:   %s %q\n  ghost: %s %q", code, msg, gcode, gmsg)
			}
		})
	}
	h.noWrites(t, before)
}
