package review

import (
	"context"
	"log/slog"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// Server serves saltbush.delivery.v1.AccessReviewService; errors are
// converted to the wire once, here.
type Server struct {
	deliveryv1.UnimplementedAccessReviewServiceServer
	svc *Service
	log *slog.Logger
}

var _ deliveryv1.AccessReviewServiceServer = (*Server)(nil)

// NewServer returns the gRPC service on svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc, log: svc.log} }

// ReviewToken implements deliveryv1.AccessReviewServiceServer.
func (s *Server) ReviewToken(ctx context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	resp, err := s.svc.ReviewToken(ctx, req)
	if err != nil {
		return nil, errdefs.Wire(ctx, s.log, "ReviewToken", err)
	}
	return resp, nil
}

// ReviewAccess implements deliveryv1.AccessReviewServiceServer.
func (s *Server) ReviewAccess(ctx context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	resp, err := s.svc.ReviewAccess(ctx, req)
	if err != nil {
		return nil, errdefs.Wire(ctx, s.log, "ReviewAccess", err)
	}
	return resp, nil
}
