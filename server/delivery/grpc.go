package delivery

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// The gRPC shells: each method calls the domain and converts its error to
// the wire once, here.

// Server serves saltbush.delivery.v1.DeliveryService.
type Server struct {
	deliveryv1.UnimplementedDeliveryServiceServer
	svc *Service
}

var _ deliveryv1.DeliveryServiceServer = (*Server)(nil)

// NewServer returns the gRPC service on svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

// Connect implements deliveryv1.DeliveryServiceServer; errors reach the
// wire once, here.
func (s *Server) Connect(stream deliveryv1.DeliveryService_ConnectServer) error {
	err := s.svc.connect(stream)
	if err == nil || status.Code(err) != codes.Unknown {
		return err
	}
	return errdefs.Wire(stream.Context(), s.svc.log, "Connect", err)
}

// ControlServer serves saltbush.control.v1.DeliveryControlService.
type ControlServer struct {
	controlv1.UnimplementedDeliveryControlServiceServer
	svc *Service
}

var _ controlv1.DeliveryControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the delivery control API on svc.
func NewControlServer(svc *Service) *ControlServer { return &ControlServer{svc: svc} }

// GetDeliveryStatus implements controlv1.DeliveryControlServiceServer.
func (s *ControlServer) GetDeliveryStatus(ctx context.Context, req *controlv1.GetDeliveryStatusRequest) (*controlv1.GetDeliveryStatusResponse, error) {
	out, err := s.svc.Status(ctx, req.GetCluster())
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "GetDeliveryStatus", err)
	}
	return out, nil
}

// DrainExecutor implements controlv1.DeliveryControlServiceServer.
func (s *ControlServer) DrainExecutor(ctx context.Context, req *controlv1.DrainExecutorRequest) (*controlv1.DrainExecutorResponse, error) {
	e, err := s.svc.Drain(ctx, req.GetCluster())
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "DrainExecutor", err)
	}
	return &controlv1.DrainExecutorResponse{Executor: executorToAPI(e)}, nil
}
