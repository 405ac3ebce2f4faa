package insight

import (
	"context"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/validation"
)

// EKSServer serves saltbush.eks.v1.InsightService: each method authorizes
// on the cluster's ARN, calls the domain and converts its error to the
// wire once, here.
type EKSServer struct {
	eksv1.UnimplementedInsightServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.InsightServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS insight API on svc.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

func (s *EKSServer) authorize(ctx context.Context, action, cluster string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	return s.authz.Authorize(ctx, action, s.svc.ClusterARN(who.AccountID, cluster))
}

// ListInsights implements eksv1.InsightServiceServer.
func (s *EKSServer) ListInsights(ctx context.Context, req *eksv1.ListInsightsRequest) (*eksv1.ListInsightsResponse, error) {
	const op = "ListInsights"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authorize(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	insights, next, err := s.svc.List(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.ListInsightsResponse{Insights: insights, NextToken: next}, nil
}

// DescribeInsight implements eksv1.InsightServiceServer.
func (s *EKSServer) DescribeInsight(ctx context.Context, req *eksv1.DescribeInsightRequest) (*eksv1.DescribeInsightResponse, error) {
	const op = "DescribeInsight"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authorize(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	in, err := s.svc.Describe(ctx, req.GetClusterName(), req.GetId())
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.DescribeInsightResponse{Insight: in}, nil
}

// StartInsightsRefresh implements eksv1.InsightServiceServer.
func (s *EKSServer) StartInsightsRefresh(ctx context.Context, req *eksv1.StartInsightsRefreshRequest) (*eksv1.StartInsightsRefreshResponse, error) {
	const op = "StartInsightsRefresh"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authorize(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	rec, err := s.svc.StartRefresh(ctx, req.GetClusterName())
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.StartInsightsRefreshResponse{Status: refreshStatusName(rec.GetStatus()), Message: rec.GetMessage()}, nil
}

// DescribeInsightsRefresh implements eksv1.InsightServiceServer.
func (s *EKSServer) DescribeInsightsRefresh(ctx context.Context, req *eksv1.DescribeInsightsRefreshRequest) (*eksv1.DescribeInsightsRefreshResponse, error) {
	const op = "DescribeInsightsRefresh"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authorize(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	out, err := s.svc.DescribeRefresh(ctx, req.GetClusterName())
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return out, nil
}
