package update

import (
	"context"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/validation"
)

// EKSServer serves saltbush.eks.v1.UpdateService; it converts domain errors
// to the wire once, here.
type EKSServer struct {
	eksv1.UnimplementedUpdateServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.UpdateServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS update API on svc; every call is authorized
// by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

// authorize checks action on the cluster the updates belong to.
func (s *EKSServer) authorize(ctx context.Context, action, cluster string) error {
	who, _ := identity.FromContext(ctx)
	return s.authz.Authorize(ctx, action, s.svc.clusters.ARN(who.AccountID, cluster))
}

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.svc.log, op, validation.Conform(op, err))
}

// DescribeUpdate implements eksv1.UpdateServiceServer.
func (s *EKSServer) DescribeUpdate(ctx context.Context, req *eksv1.DescribeUpdateRequest) (*eksv1.DescribeUpdateResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DescribeUpdate", err)
	}
	if err := s.authorize(ctx, "eks:DescribeUpdate", req.GetName()); err != nil {
		return nil, s.wire(ctx, "DescribeUpdate", err)
	}
	rec, err := s.svc.Describe(ctx, req.GetName(), req.GetUpdateId(), Filter{
		AddonName: req.GetAddonName(), NodegroupName: req.GetNodegroupName(), CapabilityName: req.GetCapabilityName(),
	})
	if err != nil {
		return nil, s.wire(ctx, "DescribeUpdate", err)
	}
	return &eksv1.DescribeUpdateResponse{Update: ToAPI(rec)}, nil
}

// ListUpdates implements eksv1.UpdateServiceServer.
func (s *EKSServer) ListUpdates(ctx context.Context, req *eksv1.ListUpdatesRequest) (*eksv1.ListUpdatesResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListUpdates", err)
	}
	if err := s.authorize(ctx, "eks:ListUpdates", req.GetName()); err != nil {
		return nil, s.wire(ctx, "ListUpdates", err)
	}
	ids, next, err := s.svc.List(ctx, req.GetName(), Filter{
		AddonName: req.GetAddonName(), NodegroupName: req.GetNodegroupName(), CapabilityName: req.GetCapabilityName(),
	}, req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListUpdates", err)
	}
	return &eksv1.ListUpdatesResponse{UpdateIds: ids, NextToken: next}, nil
}
