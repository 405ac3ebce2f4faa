package cluster

import (
	"context"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/validation"
)

// The gRPC shells: each method calls the domain and converts its error to
// the wire once, here.

// EKSServer serves saltbush.eks.v1.ClusterService.
type EKSServer struct {
	eksv1.UnimplementedClusterServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.ClusterServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS cluster API on svc; every call is authorized
// by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

// authorize checks action on the caller's cluster name, before any read.
// ListClusters names no cluster: it is authorized on all of the account's
// (cluster/*), the resource AWS names for it.
func (s *EKSServer) authorize(ctx context.Context, action, name string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	if name == "" {
		name = "*"
	}
	return s.authz.Authorize(ctx, action, s.svc.ARN(who.AccountID, name))
}

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return s.svc.wire(ctx, op, err)
}

// CreateCluster implements eksv1.ClusterServiceServer.
func (s *EKSServer) CreateCluster(ctx context.Context, req *eksv1.CreateClusterRequest) (*eksv1.CreateClusterResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "CreateCluster", err)
	}
	if err := s.authorize(ctx, "eks:CreateCluster", req.GetName()); err != nil {
		return nil, s.wire(ctx, "CreateCluster", err)
	}
	if err := s.authz.PassRoles(ctx, req.GetRoleArn(), req.GetComputeConfig().GetNodeRoleArn()); err != nil {
		return nil, s.wire(ctx, "CreateCluster", err)
	}
	rec, err := s.svc.Create(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, "CreateCluster", err)
	}
	return &eksv1.CreateClusterResponse{Cluster: ToAPI(rec)}, nil
}

// DescribeCluster implements eksv1.ClusterServiceServer.
func (s *EKSServer) DescribeCluster(ctx context.Context, req *eksv1.DescribeClusterRequest) (*eksv1.DescribeClusterResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DescribeCluster", err)
	}
	if err := s.authorize(ctx, "eks:DescribeCluster", req.GetName()); err != nil {
		return nil, s.wire(ctx, "DescribeCluster", err)
	}
	rec, err := s.svc.Describe(ctx, req.GetName())
	if err != nil {
		return nil, s.wire(ctx, "DescribeCluster", err)
	}
	return &eksv1.DescribeClusterResponse{Cluster: ToAPI(rec)}, nil
}

// ListClusters implements eksv1.ClusterServiceServer.
func (s *EKSServer) ListClusters(ctx context.Context, req *eksv1.ListClustersRequest) (*eksv1.ListClustersResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListClusters", err)
	}
	if err := s.authorize(ctx, "eks:ListClusters", ""); err != nil {
		return nil, s.wire(ctx, "ListClusters", err)
	}
	names, next, err := s.svc.List(ctx, req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListClusters", err)
	}
	return &eksv1.ListClustersResponse{Clusters: names, NextToken: next}, nil
}

// DeleteCluster implements eksv1.ClusterServiceServer.
func (s *EKSServer) DeleteCluster(ctx context.Context, req *eksv1.DeleteClusterRequest) (*eksv1.DeleteClusterResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DeleteCluster", err)
	}
	if err := s.authorize(ctx, "eks:DeleteCluster", req.GetName()); err != nil {
		return nil, s.wire(ctx, "DeleteCluster", err)
	}
	rec, err := s.svc.Delete(ctx, req.GetName())
	if err != nil {
		return nil, s.wire(ctx, "DeleteCluster", err)
	}
	return &eksv1.DeleteClusterResponse{Cluster: ToAPI(rec)}, nil
}

// UpdateClusterConfig implements eksv1.ClusterServiceServer.
func (s *EKSServer) UpdateClusterConfig(ctx context.Context, req *eksv1.UpdateClusterConfigRequest) (*eksv1.UpdateClusterConfigResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "UpdateClusterConfig", err)
	}
	if err := s.authorize(ctx, "eks:UpdateClusterConfig", req.GetName()); err != nil {
		return nil, s.wire(ctx, "UpdateClusterConfig", err)
	}
	u, err := s.svc.UpdateConfig(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, "UpdateClusterConfig", err)
	}
	return &eksv1.UpdateClusterConfigResponse{Update: update.ToAPI(u)}, nil
}

// ControlServer serves saltbush.control.v1.ClusterControlService.
type ControlServer struct {
	controlv1.UnimplementedClusterControlServiceServer
	svc *Service
}

var _ controlv1.ClusterControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the internal cluster control API on svc.
func NewControlServer(svc *Service) *ControlServer { return &ControlServer{svc: svc} }

// GetCluster implements controlv1.ClusterControlServiceServer.
func (s *ControlServer) GetCluster(ctx context.Context, req *controlv1.GetClusterRequest) (*controlv1.GetClusterResponse, error) {
	rec, _, err := s.svc.Get(ctx, req.GetCluster())
	if err != nil {
		return nil, s.svc.wire(ctx, "GetCluster", err)
	}
	return &controlv1.GetClusterResponse{Cluster: ToControl(rec)}, nil
}

// AddMember implements controlv1.ClusterControlServiceServer.
func (s *ControlServer) AddMember(ctx context.Context, req *controlv1.AddMemberRequest) (*controlv1.AddMemberResponse, error) {
	rec, err := s.svc.AddMember(ctx, req.GetCluster(), req.GetInstanceId())
	if err != nil {
		return nil, s.svc.wire(ctx, "AddMember", err)
	}
	return &controlv1.AddMemberResponse{Cluster: ToControl(rec)}, nil
}

// RemoveMember implements controlv1.ClusterControlServiceServer.
func (s *ControlServer) RemoveMember(ctx context.Context, req *controlv1.RemoveMemberRequest) (*controlv1.RemoveMemberResponse, error) {
	rec, err := s.svc.RemoveMember(ctx, req.GetCluster(), req.GetInstanceId())
	if err != nil {
		return nil, s.svc.wire(ctx, "RemoveMember", err)
	}
	return &controlv1.RemoveMemberResponse{Cluster: ToControl(rec)}, nil
}

// SetStatus implements controlv1.ClusterControlServiceServer.
func (s *ControlServer) SetStatus(ctx context.Context, req *controlv1.SetStatusRequest) (*controlv1.SetStatusResponse, error) {
	rec, err := s.svc.SetStatus(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "SetStatus", err)
	}
	return &controlv1.SetStatusResponse{Cluster: ToControl(rec)}, nil
}

// FinalizeDeletion implements controlv1.ClusterControlServiceServer.
func (s *ControlServer) FinalizeDeletion(ctx context.Context, req *controlv1.FinalizeDeletionRequest) (*controlv1.FinalizeDeletionResponse, error) {
	n, err := s.svc.FinalizeDeletion(ctx, req.GetCluster())
	if err != nil {
		return nil, s.svc.wire(ctx, "FinalizeDeletion", err)
	}
	return &controlv1.FinalizeDeletionResponse{DeletedKeys: n}, nil
}

// wire converts a domain error to the wire (errdefs.Wire) once, here.
func (s *Service) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.log, op, validation.Conform(op, err))
}
