package conformance

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// TestDeliveryPodIdentityAssociations: creating, updating and deleting a
// pod identity association through the SDK each pushes the executor a new
// desired set carrying the cluster's associations as they are now, with a
// new digest (docs/delivery-protocol.md, rule 8).
func TestDeliveryPodIdentityAssociations(t *testing.T) {
	h := newDeliveryHarness(t)
	ctx := ctxT(t)
	a := connectAgent(t, h.srv, h.uid, "i-1", h.hello("i-1"))
	a.assignment(deliveryv1.Role_ROLE_EXECUTOR, 1)
	first := a.desired("the first set", func(*deliveryv1.DesiredSet) bool { return true })
	role := func(name string) string { return "arn:aws:iam::" + h.account + ":role/" + name }

	created, err := h.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
		Namespace: aws.String("apps"), ServiceAccount: aws.String("web"), RoleArn: aws.String(role("web"))})
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	id := aws.ToString(created.Association.AssociationId)
	set := a.desired("the created association", func(s *deliveryv1.DesiredSet) bool { return len(s.GetPodIdentityAssociations()) == 1 })
	got := set.GetPodIdentityAssociations()[0]
	if got.GetAssociationId() != id || got.GetAssociationArn() != aws.ToString(created.Association.AssociationArn) ||
		got.GetNamespace() != "apps" || got.GetServiceAccount() != "web" || got.GetRoleArn() != role("web") ||
		got.GetOwnerArn() != "" || got.GetOwnerAddon() != "" || set.GetDigest() == first.GetDigest() {
		t.Fatalf("desired association = %v (digest %s, before %s)", got, set.GetDigest(), first.GetDigest())
	}

	if _, err := h.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
		AssociationId: aws.String(id), RoleArn: aws.String(role("web-two")), DisableSessionTags: aws.Bool(true)}); err != nil {
		t.Fatalf("UpdatePodIdentityAssociation: %v", err)
	}
	updated := a.desired("the updated association", func(s *deliveryv1.DesiredSet) bool {
		p := s.GetPodIdentityAssociations()
		return len(p) == 1 && p[0].GetRoleArn() == role("web-two")
	})
	if p := updated.GetPodIdentityAssociations()[0]; !p.GetDisableSessionTags() || updated.GetDigest() == set.GetDigest() {
		t.Fatalf("after the update: %v (digest %s, before %s)", p, updated.GetDigest(), set.GetDigest())
	}

	if _, err := h.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
		AssociationId: aws.String(id)}); err != nil {
		t.Fatalf("DeletePodIdentityAssociation: %v", err)
	}
	gone := a.desired("the deleted association", func(s *deliveryv1.DesiredSet) bool { return len(s.GetPodIdentityAssociations()) == 0 })
	if gone.GetDigest() != first.GetDigest() {
		t.Errorf("a set whose association was deleted has digest %s, the set before it %s", gone.GetDigest(), first.GetDigest())
	}
}
