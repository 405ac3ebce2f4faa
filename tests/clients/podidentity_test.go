package clients

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestPodIdentityAssociationsWithBotocore runs botocore_podidentity.py over
// every pod identity association operation and the add-on-owned ones, and
// checks with the Go SDK that what botocore did is what the other client
// sees.
func TestPodIdentityAssociationsWithBotocore(t *testing.T) {
	requireBotocore(t)
	h := newAccessHarness(t, "boto-pods")
	var out struct {
		Deleted, Botocore string
		Owned             []string
	}
	lastJSON(t, runEnv(t, keysOf(h.srv.Dev(t)), "python3", "botocore_podidentity.py",
		"--endpoint", h.srv.URL, "--cluster", h.cluster), &out)
	t.Logf("botocore %s", out.Botocore)
	ctx := ctxT(t)
	_, err := h.eks.DescribePodIdentityAssociation(ctx, &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(out.Deleted)})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
	if len(out.Owned) != 1 {
		t.Fatalf("botocore saw owned associations %v, want one", out.Owned)
	}
	a, err := h.eks.DescribePodIdentityAssociation(ctx, &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(h.cluster), AssociationId: aws.String(out.Owned[0])})
	if err != nil {
		t.Fatalf("Go SDK DescribePodIdentityAssociation %s: %v", out.Owned[0], err)
	}
	ad, err := h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni")})
	if err != nil {
		t.Fatalf("Go SDK DescribeAddon: %v", err)
	}
	if aws.ToString(a.Association.OwnerArn) != aws.ToString(ad.Addon.AddonArn) {
		t.Errorf("owned association's owner %s, add-on %s", aws.ToString(a.Association.OwnerArn), aws.ToString(ad.Addon.AddonArn))
	}
	l, err := h.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
	if err != nil || len(l.Associations) != 4 {
		t.Errorf("Go SDK lists %v, %v; want the three jobs and the add-on's", l, err)
	}
}
