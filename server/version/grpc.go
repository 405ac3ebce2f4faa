package version

import (
	"context"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/validation"
)

// The gRPC shells: each method authorizes, calls the domain and converts
// its error to the wire once, here.

// EKSServer serves saltbush.eks.v1.ClusterVersionService.
type EKSServer struct {
	eksv1.UnimplementedClusterVersionServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.ClusterVersionServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS version API on svc; every call is
// authorized by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

// DescribeClusterVersions implements eksv1.ClusterVersionServiceServer. It
// names no resource: it is authorized on "*", as AWS does.
func (s *EKSServer) DescribeClusterVersions(ctx context.Context, req *eksv1.DescribeClusterVersionsRequest) (*eksv1.DescribeClusterVersionsResponse, error) {
	const op = "DescribeClusterVersions"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authz.Authorize(ctx, "eks:"+op, "*"); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	versions, next, err := s.svc.Describe(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.DescribeClusterVersionsResponse{ClusterVersions: versions, NextToken: next}, nil
}

// UpdateClusterVersion implements eksv1.ClusterVersionServiceServer,
// authorized on the cluster's ARN.
func (s *EKSServer) UpdateClusterVersion(ctx context.Context, req *eksv1.UpdateClusterVersionRequest) (*eksv1.UpdateClusterVersionResponse, error) {
	const op = "UpdateClusterVersion"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authz.Authorize(ctx, "eks:"+op, s.svc.clusters.ARN(who.AccountID, req.GetName())); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	u, err := s.svc.Upgrade(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.UpdateClusterVersionResponse{Update: update.ToAPI(u)}, nil
}

// CancelUpdate implements eksv1.ClusterVersionServiceServer, authorized
// on the cluster's ARN.
func (s *EKSServer) CancelUpdate(ctx context.Context, req *eksv1.CancelUpdateRequest) (*eksv1.CancelUpdateResponse, error) {
	const op = "CancelUpdate"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	if err := s.authz.Authorize(ctx, "eks:"+op, s.svc.clusters.ARN(who.AccountID, req.GetName())); err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	u, err := s.svc.Cancel(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, op, err)
	}
	return &eksv1.CancelUpdateResponse{Update: update.ToAPI(u)}, nil
}

// ControlServer serves saltbush.control.v1.ClusterUpdateControlService.
type ControlServer struct {
	controlv1.UnimplementedClusterUpdateControlServiceServer
	svc *Service
}

var _ controlv1.ClusterUpdateControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the internal cluster-update control API on svc.
func NewControlServer(svc *Service) *ControlServer { return &ControlServer{svc: svc} }

// CompleteUpdate implements controlv1.ClusterUpdateControlServiceServer.
func (s *ControlServer) CompleteUpdate(ctx context.Context, req *controlv1.CompleteUpdateRequest) (*controlv1.CompleteUpdateResponse, error) {
	c, u, err := s.svc.Complete(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "CompleteUpdate", err)
	}
	return &controlv1.CompleteUpdateResponse{
		Cluster:           cluster.ToControl(c),
		UpdateStatus:      update.StatusName(u.GetStatus()),
		KubernetesVersion: c.GetKubernetesVersion(),
	}, nil
}
