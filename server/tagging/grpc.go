package tagging

import (
	"context"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/validation"
)

// EKSServer serves saltbush.eks.v1.TagService; it converts domain errors to
// the wire once, here.
type EKSServer struct {
	eksv1.UnimplementedTagServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.TagServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS tag API on svc; every call is authorized by
// az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

// authorize checks action on the ARN the request names. An ARN that does
// not parse, or names another account, is left to the service: it answers
// BadRequestException or NotFoundException for those whether or not the
// resource exists, so nothing about another account is revealed.
func (s *EKSServer) authorize(ctx context.Context, action, raw string) error {
	arn, err := ParseARN(raw)
	if who, _ := identity.FromContext(ctx); err != nil || arn.Account != who.AccountID {
		return nil
	}
	return s.authz.Authorize(ctx, action, raw)
}

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.svc.log, op, validation.Conform(op, err))
}

// TagResource implements eksv1.TagServiceServer.
func (s *EKSServer) TagResource(ctx context.Context, req *eksv1.TagResourceRequest) (*eksv1.TagResourceResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "TagResource", err)
	}
	if err := s.authorize(ctx, "eks:TagResource", req.GetResourceArn()); err != nil {
		return nil, s.wire(ctx, "TagResource", err)
	}
	if err := s.svc.Tag(ctx, req.GetResourceArn(), req.GetTags()); err != nil {
		return nil, s.wire(ctx, "TagResource", err)
	}
	return &eksv1.TagResourceResponse{}, nil
}

// UntagResource implements eksv1.TagServiceServer.
func (s *EKSServer) UntagResource(ctx context.Context, req *eksv1.UntagResourceRequest) (*eksv1.UntagResourceResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "UntagResource", err)
	}
	if err := s.authorize(ctx, "eks:UntagResource", req.GetResourceArn()); err != nil {
		return nil, s.wire(ctx, "UntagResource", err)
	}
	if err := s.svc.Untag(ctx, req.GetResourceArn(), req.GetTagKeys()); err != nil {
		return nil, s.wire(ctx, "UntagResource", err)
	}
	return &eksv1.UntagResourceResponse{}, nil
}

// ListTagsForResource implements eksv1.TagServiceServer.
func (s *EKSServer) ListTagsForResource(ctx context.Context, req *eksv1.ListTagsForResourceRequest) (*eksv1.ListTagsForResourceResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListTagsForResource", err)
	}
	if err := s.authorize(ctx, "eks:ListTagsForResource", req.GetResourceArn()); err != nil {
		return nil, s.wire(ctx, "ListTagsForResource", err)
	}
	tags, err := s.svc.List(ctx, req.GetResourceArn())
	if err != nil {
		return nil, s.wire(ctx, "ListTagsForResource", err)
	}
	return &eksv1.ListTagsForResourceResponse{Tags: tags}, nil
}
