package published

import (
	"context"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// ControlServer serves saltbush.control.v1.CatalogControlService; errors
// reach the wire once, here.
type ControlServer struct {
	controlv1.UnimplementedCatalogControlServiceServer
	svc *Service
}

var _ controlv1.CatalogControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the catalogue control API on svc.
func NewControlServer(svc *Service) *ControlServer { return &ControlServer{svc: svc} }

// PublishAddonVersion implements controlv1.CatalogControlServiceServer.
func (s *ControlServer) PublishAddonVersion(ctx context.Context, req *controlv1.PublishAddonVersionRequest) (*controlv1.PublishAddonVersionResponse, error) {
	v, err := s.svc.Publish(ctx, req)
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "PublishAddonVersion", err)
	}
	return &controlv1.PublishAddonVersionResponse{Version: v}, nil
}

// RetireAddonVersion implements controlv1.CatalogControlServiceServer.
func (s *ControlServer) RetireAddonVersion(ctx context.Context, req *controlv1.RetireAddonVersionRequest) (*controlv1.RetireAddonVersionResponse, error) {
	v, err := s.svc.SetRetired(ctx, req.GetAddonName(), req.GetVersion(), true)
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "RetireAddonVersion", err)
	}
	return &controlv1.RetireAddonVersionResponse{Version: v}, nil
}

// UnretireAddonVersion implements controlv1.CatalogControlServiceServer.
func (s *ControlServer) UnretireAddonVersion(ctx context.Context, req *controlv1.UnretireAddonVersionRequest) (*controlv1.UnretireAddonVersionResponse, error) {
	v, err := s.svc.SetRetired(ctx, req.GetAddonName(), req.GetVersion(), false)
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "UnretireAddonVersion", err)
	}
	return &controlv1.UnretireAddonVersionResponse{Version: v}, nil
}

// ListPublishedAddonVersions implements controlv1.CatalogControlServiceServer.
func (s *ControlServer) ListPublishedAddonVersions(ctx context.Context, req *controlv1.ListPublishedAddonVersionsRequest) (*controlv1.ListPublishedAddonVersionsResponse, error) {
	vs, err := s.svc.ListPublished(ctx, req.GetAddonName())
	if err != nil {
		return nil, errdefs.Wire(ctx, s.svc.log, "ListPublishedAddonVersions", err)
	}
	return &controlv1.ListPublishedAddonVersionsResponse{Versions: vs}, nil
}
