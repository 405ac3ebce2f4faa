package conformance

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// TestVersionActionsAuthorized: eks:DescribeClusterVersions on "*",
// eks:UpdateClusterVersion, eks:ListInsights and eks:DescribeInsight on
// the cluster's ARN, each refused with IAM's message when no policy
// allows it.
func TestVersionActionsAuthorized(t *testing.T) {
	h := newUpgradeHarness(t, "team-a-1", "1.35")
	srv := h.srv
	acct, region := srv.Config.DevAccount, srv.Config.Cluster.Region
	clusterARN := "arn:aws:eks:" + region + ":" + acct + ":cluster/team-a-1"
	user := func(name, doc string) (string, *eks.Client) {
		arn := "arn:aws:iam::" + acct + ":user/" + name
		return arn, srv.EKSAs(t, srv.NewUser(t, arn, doc), authOneAttempt)
	}
	readerARN, reader := user("version-reader", policyReadOnly)
	otherARN, other := user("team-b", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*",
		"Resource":"arn:aws:eks:`+region+`:`+acct+`:cluster/team-b-*"}]}`)

	list, err := reader.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster)})
	if err != nil || len(list.Insights) != 1 {
		t.Fatalf("ListInsights as a reader = %v, %v", list, err)
	}
	if _, err := reader.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String(h.cluster), Id: list.Insights[0].Id}); err != nil {
		t.Fatalf("DescribeInsight as a reader: %v", err)
	}
	if _, err := reader.DescribeClusterVersions(ctxT(t), &eks.DescribeClusterVersionsInput{}); err != nil {
		t.Fatalf("DescribeClusterVersions as a reader: %v", err)
	}
	_, err = reader.UpdateClusterVersion(ctxT(t), &eks.UpdateClusterVersionInput{Name: aws.String(h.cluster), Version: aws.String("1.36")})
	checkDenied(t, err, readerARN, denied{action: "eks:UpdateClusterVersion", resource: clusterARN})

	_, err = other.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster)})
	checkDenied(t, err, otherARN, denied{action: "eks:ListInsights", resource: clusterARN})
	_, err = other.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String(h.cluster), Id: list.Insights[0].Id})
	checkDenied(t, err, otherARN, denied{action: "eks:DescribeInsight", resource: clusterARN})
	_, err = other.DescribeClusterVersions(ctxT(t), &eks.DescribeClusterVersionsInput{})
	checkDenied(t, err, otherARN, denied{action: "eks:DescribeClusterVersions", resource: "*"})

	if c := h.describe(t); c.Status != types.ClusterStatusActive {
		t.Fatalf("a refused upgrade changed the cluster: %s", c.Status)
	}
}
