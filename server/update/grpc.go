package update

import (
	"context"

	"github.com/saltbush/saltbush/errdefs"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
)

// EKSServer serves saltbush.eks.v1.UpdateService; it converts domain errors
// to the wire once, here.
type EKSServer struct {
	eksv1.UnimplementedUpdateServiceServer
	svc *Service
}

var _ eksv1.UpdateServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS update API on svc.
func NewEKSServer(svc *Service) *EKSServer { return &EKSServer{svc: svc} }

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.svc.log, op, err)
}

// DescribeUpdate implements eksv1.UpdateServiceServer.
func (s *EKSServer) DescribeUpdate(ctx context.Context, req *eksv1.DescribeUpdateRequest) (*eksv1.DescribeUpdateResponse, error) {
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
	ids, next, err := s.svc.List(ctx, req.GetName(), Filter{
		AddonName: req.GetAddonName(), NodegroupName: req.GetNodegroupName(), CapabilityName: req.GetCapabilityName(),
	}, req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListUpdates", err)
	}
	return &eksv1.ListUpdatesResponse{UpdateIds: ids, NextToken: next}, nil
}
