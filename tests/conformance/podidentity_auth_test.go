package conformance

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
)

// TestPodIdentityAssociationAuthorization: the actions and resources
// AWS's service authorization reference gives the pod identity operations
// (Create and List on the cluster ARN, the others on the association's
// ARN), iam:PassRole on the roleArn, and nothing written when refused.
func TestPodIdentityAssociationAuthorization(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	srv := h.srv
	region, acct := srv.Config.Cluster.Region, h.account
	clusterARN := "arn:aws:eks:" + region + ":" + acct + ":cluster/" + h.cluster
	a := h.createPod(t, "apps", "web")
	id := aws.ToString(a.AssociationId)
	assocARN := aws.ToString(a.AssociationArn)

	user := func(name, doc string) (string, *eks.Client) {
		arn := "arn:aws:iam::" + acct + ":user/" + name
		return arn, srv.EKSAs(t, srv.NewUser(t, arn, doc), authOneAttempt)
	}
	readerARN, reader := user("pods-reader", policyReadOnly)
	noPassARN, noPass := user("pods-no-pass", policyEKSAll)
	oneARN, one := user("pods-one", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow",
		"Action":["eks:DescribePodIdentityAssociation","eks:UpdatePodIdentityAssociation"],"Resource":"`+assocARN+`"},
		{"Effect":"Allow","Action":"iam:PassRole","Resource":"`+podRole2ARN+`"}]}`)

	create := func(c *eks.Client) error {
		_, err := c.CreatePodIdentityAssociation(ctxT(t), &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(h.cluster),
			Namespace: aws.String("apps"), ServiceAccount: aws.String("new"), RoleArn: aws.String(podRoleARN)})
		return err
	}
	describe := func(c *eks.Client) error {
		_, err := c.DescribePodIdentityAssociation(ctxT(t), &eks.DescribePodIdentityAssociationInput{
			ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
		return err
	}
	list := func(c *eks.Client) error {
		_, err := c.ListPodIdentityAssociations(ctxT(t), &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(h.cluster)})
		return err
	}
	update := func(role string) func(c *eks.Client) error {
		return func(c *eks.Client) error {
			_, err := c.UpdatePodIdentityAssociation(ctxT(t), &eks.UpdatePodIdentityAssociationInput{
				ClusterName: aws.String(h.cluster), AssociationId: aws.String(id), RoleArn: aws.String(role)})
			return err
		}
	}
	del := func(c *eks.Client) error {
		_, err := c.DeletePodIdentityAssociation(ctxT(t), &eks.DeletePodIdentityAssociationInput{
			ClusterName: aws.String(h.cluster), AssociationId: aws.String(id)})
		return err
	}
	cases := []struct {
		name string
		who  string
		c    *eks.Client
		call func(*eks.Client) error
		deny *denied
	}{
		{"reader describes", readerARN, reader, describe, nil},
		{"reader lists", readerARN, reader, list, nil},
		{"reader creates", readerARN, reader, create, &denied{action: "eks:CreatePodIdentityAssociation", resource: clusterARN}},
		{"reader updates", readerARN, reader, update(podRoleARN), &denied{action: "eks:UpdatePodIdentityAssociation", resource: assocARN}},
		{"reader deletes", readerARN, reader, del, &denied{action: "eks:DeletePodIdentityAssociation", resource: assocARN}},
		{"no PassRole creates", noPassARN, noPass, create, &denied{action: "iam:PassRole", resource: podRoleARN}},
		{"no PassRole updates", noPassARN, noPass, update(podRole2ARN), &denied{action: "iam:PassRole", resource: podRole2ARN}},
		{"one association: lists", oneARN, one, list, &denied{action: "eks:ListPodIdentityAssociations", resource: clusterARN}},
		{"one association: describes it", oneARN, one, describe, nil},
		{"one association: updates it", oneARN, one, update(podRole2ARN), nil},
		{"one association: deletes it", oneARN, one, del, &denied{action: "eks:DeletePodIdentityAssociation", resource: assocARN}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.deny == nil {
				if err := tc.call(tc.c); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				return
			}
			before := addonKeyspace(t, h)
			checkDenied(t, tc.call(tc.c), tc.who, *tc.deny)
			addonNoWrites(t, h, before)
		})
	}
}
