package podidentity

import (
	"context"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/validation"
)

// The gRPC shell: each method authorizes, calls the domain and converts
// its error to the wire once, here. Actions and resources are AWS's
// (service authorization reference): Create and List on the cluster ARN,
// Describe, Update and Delete on the association's ARN; a roleArn is
// handed over, so it needs iam:PassRole.

// EKSServer serves saltbush.eks.v1.PodIdentityAssociationService.
type EKSServer struct {
	eksv1.UnimplementedPodIdentityAssociationServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.PodIdentityAssociationServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS pod identity association API on svc; every
// call is authorized by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.svc.log, op, validation.Conform(op, err))
}

func (s *EKSServer) authorizeCluster(ctx context.Context, action, cluster string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	return s.authz.Authorize(ctx, action, s.svc.ClusterARN(who.AccountID, cluster))
}

func (s *EKSServer) authorizeAssociation(ctx context.Context, action, cluster, id string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	return s.authz.Authorize(ctx, action, s.svc.ARN(who.AccountID, cluster, id))
}

// CreatePodIdentityAssociation implements eksv1.PodIdentityAssociationServiceServer.
func (s *EKSServer) CreatePodIdentityAssociation(ctx context.Context, req *eksv1.CreatePodIdentityAssociationRequest) (*eksv1.CreatePodIdentityAssociationResponse, error) {
	const op = "CreatePodIdentityAssociation"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if err := s.authorizeCluster(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if req.GetRoleArn() != "" {
		if err := s.authz.PassRoles(ctx, req.GetRoleArn()); err != nil {
			return nil, s.wire(ctx, op, err)
		}
	}
	rec, err := s.svc.Create(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, op, err)
	}
	return &eksv1.CreatePodIdentityAssociationResponse{Association: ToAPI(rec)}, nil
}

// DescribePodIdentityAssociation implements eksv1.PodIdentityAssociationServiceServer.
func (s *EKSServer) DescribePodIdentityAssociation(ctx context.Context, req *eksv1.DescribePodIdentityAssociationRequest) (*eksv1.DescribePodIdentityAssociationResponse, error) {
	const op = "DescribePodIdentityAssociation"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if err := s.authorizeAssociation(ctx, "eks:"+op, req.GetClusterName(), req.GetAssociationId()); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	rec, err := s.svc.Describe(ctx, req.GetClusterName(), req.GetAssociationId())
	if err != nil {
		return nil, s.wire(ctx, op, err)
	}
	return &eksv1.DescribePodIdentityAssociationResponse{Association: ToAPI(rec)}, nil
}

// ListPodIdentityAssociations implements eksv1.PodIdentityAssociationServiceServer.
func (s *EKSServer) ListPodIdentityAssociations(ctx context.Context, req *eksv1.ListPodIdentityAssociationsRequest) (*eksv1.ListPodIdentityAssociationsResponse, error) {
	const op = "ListPodIdentityAssociations"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if err := s.authorizeCluster(ctx, "eks:"+op, req.GetClusterName()); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	page, next, err := s.svc.List(ctx, req.GetClusterName(),
		Filter{Namespace: req.GetNamespace(), ServiceAccount: req.GetServiceAccount()}, req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, op, err)
	}
	out := &eksv1.ListPodIdentityAssociationsResponse{NextToken: next,
		Associations: make([]*eksv1.PodIdentityAssociationSummary, 0, len(page))}
	for _, rec := range page {
		out.Associations = append(out.Associations, SummaryToAPI(rec))
	}
	return out, nil
}

// UpdatePodIdentityAssociation implements eksv1.PodIdentityAssociationServiceServer.
func (s *EKSServer) UpdatePodIdentityAssociation(ctx context.Context, req *eksv1.UpdatePodIdentityAssociationRequest) (*eksv1.UpdatePodIdentityAssociationResponse, error) {
	const op = "UpdatePodIdentityAssociation"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if err := s.authorizeAssociation(ctx, "eks:"+op, req.GetClusterName(), req.GetAssociationId()); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if req.GetRoleArn() != "" {
		if err := s.authz.PassRoles(ctx, req.GetRoleArn()); err != nil {
			return nil, s.wire(ctx, op, err)
		}
	}
	rec, err := s.svc.Update(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, op, err)
	}
	return &eksv1.UpdatePodIdentityAssociationResponse{Association: ToAPI(rec)}, nil
}

// DeletePodIdentityAssociation implements eksv1.PodIdentityAssociationServiceServer.
func (s *EKSServer) DeletePodIdentityAssociation(ctx context.Context, req *eksv1.DeletePodIdentityAssociationRequest) (*eksv1.DeletePodIdentityAssociationResponse, error) {
	const op = "DeletePodIdentityAssociation"
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	if err := s.authorizeAssociation(ctx, "eks:"+op, req.GetClusterName(), req.GetAssociationId()); err != nil {
		return nil, s.wire(ctx, op, err)
	}
	rec, err := s.svc.Delete(ctx, req.GetClusterName(), req.GetAssociationId())
	if err != nil {
		return nil, s.wire(ctx, op, err)
	}
	return &eksv1.DeletePodIdentityAssociationResponse{Association: ToAPI(rec)}, nil
}
