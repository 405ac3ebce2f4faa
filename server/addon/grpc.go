package addon

import (
	"context"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/validation"
	"github.com/saltbush/saltbush/store"
)

// The gRPC shells: each method calls the domain and converts its error to
// the wire once, here.

// EKSServer serves saltbush.eks.v1.AddonService.
type EKSServer struct {
	eksv1.UnimplementedAddonServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.AddonServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS add-on API on svc; every call is authorized
// by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

// authorizeCluster checks an action whose resource is the cluster
// (CreateAddon, ListAddons, as in AWS's service authorization reference).
func (s *EKSServer) authorizeCluster(ctx context.Context, action, cluster string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	return s.authz.Authorize(ctx, action, s.svc.ClusterARN(who.AccountID, cluster))
}

// authorizeAddon checks an action on an add-on. Its ARN ends in the
// incarnation's uuid, which only the record knows: it is read (a fast
// read; authorization does not need the latest write) and, for an add-on
// that does not exist, "*" stands in, so a caller without permission gets
// AccessDeniedException whether or not the add-on exists.
func (s *EKSServer) authorizeAddon(ctx context.Context, action, cluster, addon string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	uid := "*"
	if namePattern.MatchString(addon) {
		ref := &controlv1.ClusterRef{AccountId: who.AccountID, Name: cluster}
		if sc, err := s.svc.scopes.Read(ctx, ref, clusterscope.Serializable); err == nil {
			if rec, _, err := store.GetSerializableShared(ctx, s.svc.store, store.AddonKey(sc.UID(), addon), newRecord); err == nil {
				uid = rec.GetUid()
			}
		}
	}
	return s.authz.Authorize(ctx, action, s.svc.ARN(who.AccountID, cluster, addon, uid))
}

// wire converts a domain error to the wire (errdefs.Wire) once, here.
func (s *Service) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.log, op, validation.Conform(op, err))
}

// CreateAddon implements eksv1.AddonServiceServer.
func (s *EKSServer) CreateAddon(ctx context.Context, req *eksv1.CreateAddonRequest) (*eksv1.CreateAddonResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "CreateAddon", err)
	}
	if err := s.authorizeCluster(ctx, "eks:CreateAddon", req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, "CreateAddon", err)
	}
	roles := []string{req.GetServiceAccountRoleArn()}
	for _, p := range req.GetPodIdentityAssociations() {
		roles = append(roles, p.GetRoleArn())
	}
	if err := s.authz.PassRoles(ctx, roles...); err != nil {
		return nil, s.svc.wire(ctx, "CreateAddon", err)
	}
	rec, err := s.svc.Create(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "CreateAddon", err)
	}
	return &eksv1.CreateAddonResponse{Addon: s.svc.ToAPI(ctx, rec)}, nil
}

// DescribeAddon implements eksv1.AddonServiceServer.
func (s *EKSServer) DescribeAddon(ctx context.Context, req *eksv1.DescribeAddonRequest) (*eksv1.DescribeAddonResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddon", err)
	}
	if err := s.authorizeAddon(ctx, "eks:DescribeAddon", req.GetClusterName(), req.GetAddonName()); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddon", err)
	}
	rec, err := s.svc.Describe(ctx, req.GetClusterName(), req.GetAddonName())
	if err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddon", err)
	}
	return &eksv1.DescribeAddonResponse{Addon: s.svc.ToAPI(ctx, rec)}, nil
}

// ListAddons implements eksv1.AddonServiceServer.
func (s *EKSServer) ListAddons(ctx context.Context, req *eksv1.ListAddonsRequest) (*eksv1.ListAddonsResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "ListAddons", err)
	}
	if err := s.authorizeCluster(ctx, "eks:ListAddons", req.GetClusterName()); err != nil {
		return nil, s.svc.wire(ctx, "ListAddons", err)
	}
	names, next, err := s.svc.List(ctx, req.GetClusterName(), req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.svc.wire(ctx, "ListAddons", err)
	}
	return &eksv1.ListAddonsResponse{Addons: names, NextToken: next}, nil
}

// UpdateAddon implements eksv1.AddonServiceServer.
func (s *EKSServer) UpdateAddon(ctx context.Context, req *eksv1.UpdateAddonRequest) (*eksv1.UpdateAddonResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "UpdateAddon", err)
	}
	if err := s.authorizeAddon(ctx, "eks:UpdateAddon", req.GetClusterName(), req.GetAddonName()); err != nil {
		return nil, s.svc.wire(ctx, "UpdateAddon", err)
	}
	roles := []string{req.GetServiceAccountRoleArn()}
	for _, v := range req.GetPodIdentityAssociations().GetValues() {
		// A malformed entry is refused by Update's validation.
		if arn, ok := v.GetStructValue().GetFields()["roleArn"]; ok {
			roles = append(roles, arn.GetStringValue())
		}
	}
	if err := s.authz.PassRoles(ctx, roles...); err != nil {
		return nil, s.svc.wire(ctx, "UpdateAddon", err)
	}
	u, err := s.svc.Update(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "UpdateAddon", err)
	}
	return &eksv1.UpdateAddonResponse{Update: update.ToAPI(u)}, nil
}

// DeleteAddon implements eksv1.AddonServiceServer.
func (s *EKSServer) DeleteAddon(ctx context.Context, req *eksv1.DeleteAddonRequest) (*eksv1.DeleteAddonResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "DeleteAddon", err)
	}
	if err := s.authorizeAddon(ctx, "eks:DeleteAddon", req.GetClusterName(), req.GetAddonName()); err != nil {
		return nil, s.svc.wire(ctx, "DeleteAddon", err)
	}
	rec, err := s.svc.Delete(ctx, req.GetClusterName(), req.GetAddonName(), req.GetPreserve())
	if err != nil {
		return nil, s.svc.wire(ctx, "DeleteAddon", err)
	}
	return &eksv1.DeleteAddonResponse{Addon: s.svc.ToAPI(ctx, rec)}, nil
}

// DescribeAddonVersions implements eksv1.AddonServiceServer.
func (s *EKSServer) DescribeAddonVersions(ctx context.Context, req *eksv1.DescribeAddonVersionsRequest) (*eksv1.DescribeAddonVersionsResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonVersions", err)
	}
	if err := s.authz.Authorize(ctx, "eks:DescribeAddonVersions", "*"); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonVersions", err)
	}
	addons, next, err := s.svc.DescribeVersions(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonVersions", err)
	}
	return &eksv1.DescribeAddonVersionsResponse{Addons: addons, NextToken: next}, nil
}

// DescribeAddonConfiguration implements eksv1.AddonServiceServer.
func (s *EKSServer) DescribeAddonConfiguration(ctx context.Context, req *eksv1.DescribeAddonConfigurationRequest) (*eksv1.DescribeAddonConfigurationResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonConfiguration", err)
	}
	if err := s.authz.Authorize(ctx, "eks:DescribeAddonConfiguration", "*"); err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonConfiguration", err)
	}
	out, err := s.svc.DescribeConfiguration(ctx, req.GetAddonName(), req.GetAddonVersion())
	if err != nil {
		return nil, s.svc.wire(ctx, "DescribeAddonConfiguration", err)
	}
	return out, nil
}

// ControlServer serves saltbush.control.v1.AddonControlService.
type ControlServer struct {
	controlv1.UnimplementedAddonControlServiceServer
	svc *Service
}

var _ controlv1.AddonControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the internal add-on API on svc.
func NewControlServer(svc *Service) *ControlServer { return &ControlServer{svc: svc} }

// GetAddon implements controlv1.AddonControlServiceServer.
func (s *ControlServer) GetAddon(ctx context.Context, req *controlv1.GetAddonRequest) (*controlv1.GetAddonResponse, error) {
	sc, err := s.svc.scopes.Read(ctx, req.GetCluster(), clusterscope.Linearizable)
	if err != nil {
		return nil, s.svc.wire(ctx, "GetAddon", err)
	}
	c := sc.Cluster
	if !namePattern.MatchString(req.GetAddonName()) {
		return nil, s.svc.wire(ctx, "GetAddon", addonNotFound(c.GetName(), req.GetAddonName()))
	}
	rec, _, err := s.svc.get(ctx, c, req.GetAddonName())
	if err != nil {
		return nil, s.svc.wire(ctx, "GetAddon", err)
	}
	return &controlv1.GetAddonResponse{Addon: ToControl(rec)}, nil
}

// ApplyAddonReport implements controlv1.AddonControlServiceServer. Until
// the delivery path exists, reports carry no executor fence.
func (s *ControlServer) ApplyAddonReport(ctx context.Context, req *controlv1.ApplyAddonReportRequest) (*controlv1.ApplyAddonReportResponse, error) {
	issues := make([]*storagev1.AddonIssue, 0, len(req.GetIssues()))
	for _, i := range req.GetIssues() {
		issues = append(issues, &storagev1.AddonIssue{Code: i.GetCode(), Message: i.GetMessage(), ResourceIds: i.GetResourceIds()})
	}
	res, err := s.svc.ApplyReport(ctx, Report{
		ClusterUID:    req.GetClusterUid(),
		AddonName:     req.GetAddonName(),
		AddonUID:      req.GetAddonUid(),
		Generation:    req.GetGeneration(),
		Phase:         storagev1.AddonPhase(req.GetPhase()),
		Issues:        issues,
		ExecutorEpoch: req.GetExecutorEpoch(),
		InstanceID:    req.GetInstanceId(),
	}, nil)
	if err != nil {
		return nil, s.svc.wire(ctx, "ApplyAddonReport", err)
	}
	out := &controlv1.ApplyAddonReportResponse{Accepted: res.Accepted, Reason: res.Reason}
	if res.Addon != nil {
		out.Addon = ToControl(res.Addon)
	}
	return out, nil
}

// EnsureAddon implements controlv1.AddonControlServiceServer.
func (s *ControlServer) EnsureAddon(ctx context.Context, req *controlv1.EnsureAddonRequest) (*controlv1.EnsureAddonResponse, error) {
	rec, created, err := s.svc.Ensure(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "EnsureAddon", err)
	}
	return &controlv1.EnsureAddonResponse{Addon: ToControl(rec), Created: created}, nil
}

// ReleaseAddon implements controlv1.AddonControlServiceServer.
func (s *ControlServer) ReleaseAddon(ctx context.Context, req *controlv1.ReleaseAddonRequest) (*controlv1.ReleaseAddonResponse, error) {
	rec, deleting, err := s.svc.Release(ctx, req)
	if err != nil {
		return nil, s.svc.wire(ctx, "ReleaseAddon", err)
	}
	out := &controlv1.ReleaseAddonResponse{Deleting: deleting}
	if rec != nil {
		out.Addon = ToControl(rec)
	}
	return out, nil
}
