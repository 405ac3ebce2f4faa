package conformance

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestInsightsAnswers: a cluster without add-ons passes; the model's
// errors for an unknown cluster, an unknown id and a forged nextToken.
func TestInsightsAnswers(t *testing.T) {
	h := newUpgradeHarness(t, "insights-1", "1.34")
	sum, in := h.compatibilityInsight(t)
	if sum.InsightStatus.Status != types.InsightStatusValuePassing || aws.ToString(sum.KubernetesVersion) != "1.35" ||
		len(in.Resources) != 0 || len(in.CategorySpecificSummary.AddonCompatibilityDetails) != 0 {
		t.Fatalf("insight without add-ons = %+v, %+v; want PASSING for 1.35 with nothing listed", sum, in)
	}
	page, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(1)})
	if err != nil || len(page.Insights) != 1 || page.NextToken != nil {
		t.Fatalf("ListInsights maxResults 1 = %+v, %v; want the one insight and no nextToken", page, err)
	}

	errs := []struct {
		name string
		call func() error
		want func(t *testing.T, err error)
	}{
		{"unknown cluster", func() error {
			_, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String("absent")})
			return err
		}, func(t *testing.T, err error) { wanterr.Type[*types.ResourceNotFoundException](t, err) }},
		{"unknown cluster, describe", func() error {
			_, err := h.eks.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String("absent"), Id: sum.Id})
			return err
		}, func(t *testing.T, err error) { wanterr.Type[*types.ResourceNotFoundException](t, err) }},
		{"unknown id", func() error {
			_, err := h.eks.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String(h.cluster),
				Id: aws.String("00000000-0000-0000-0000-000000000000")})
			return err
		}, func(t *testing.T, err error) { wanterr.Type[*types.ResourceNotFoundException](t, err) }},
		{"forged nextToken", func() error {
			_, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster), NextToken: aws.String("forged")})
			return err
		}, func(t *testing.T, err error) { wanterr.Type[*types.InvalidParameterException](t, err) }},
		{"maxResults 0", func() error {
			_, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(0)})
			return err
		}, func(t *testing.T, err error) { wanterr.Type[*types.InvalidParameterException](t, err) }},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) { tt.want(t, tt.call()) })
	}
}
