package insight

import (
	"context"
	"slices"
	"strings"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/paging"
)

// List returns one page of the cluster's insights that pass the filter
// (an empty list in the filter selects everything), by id.
func (s *Service) List(ctx context.Context, req *eksv1.ListInsightsRequest) ([]*eksv1.InsightSummary, string, error) {
	limit, err := paging.Limit(req.MaxResults)
	if err != nil {
		return nil, "", err
	}
	c, all, err := s.insights(ctx, req.GetClusterName())
	if err != nil {
		return nil, "", err
	}
	scope := "ListInsights/" + c.GetUid()
	after := ""
	if req.GetNextToken() != "" {
		if after, err = s.store.OpenPageToken(req.GetNextToken(), scope); err != nil {
			return nil, "", paging.InvalidToken(err).WithField("clusterName", c.GetName())
		}
	}
	slices.SortFunc(all, func(a, b *eksv1.Insight) int { return strings.Compare(a.GetId(), b.GetId()) })
	out := []*eksv1.InsightSummary{}
	for _, in := range all {
		if in.GetId() <= after || !passes(req.GetFilter(), in) {
			continue
		}
		if len(out) == limit {
			return out, s.store.SealPageToken(scope, out[len(out)-1].GetId()), nil
		}
		out = append(out, summary(in))
	}
	return out, "", nil
}

// Describe returns one insight of the cluster by id.
func (s *Service) Describe(ctx context.Context, clusterName, id string) (*eksv1.Insight, error) {
	if id == "" {
		return nil, errdefs.InvalidParameter("id is required.").WithField("clusterName", clusterName)
	}
	_, all, err := s.insights(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	for _, in := range all {
		if in.GetId() == id {
			return in, nil
		}
	}
	return nil, errdefs.NotFound("No insight found for id: %s.", id).WithField("clusterName", clusterName)
}

// passes applies an InsightsFilter.
func passes(f *eksv1.InsightsFilter, in *eksv1.Insight) bool {
	in1 := func(filter []string, v string) bool { return len(filter) == 0 || slices.Contains(filter, v) }
	return in1(f.GetCategories(), in.GetCategory()) &&
		in1(f.GetKubernetesVersions(), in.GetKubernetesVersion()) &&
		in1(f.GetStatuses(), in.GetInsightStatus().GetStatus())
}

// summary is an insight's InsightSummary.
func summary(in *eksv1.Insight) *eksv1.InsightSummary {
	return &eksv1.InsightSummary{
		Id:                 in.GetId(),
		Name:               in.GetName(),
		Category:           in.GetCategory(),
		KubernetesVersion:  in.GetKubernetesVersion(),
		LastRefreshTime:    in.GetLastRefreshTime(),
		LastTransitionTime: in.GetLastTransitionTime(),
		Description:        in.GetDescription(),
		InsightStatus:      in.GetInsightStatus(),
	}
}
