package iam

import (
	"context"
	"log/slog"
	"strings"
	"time"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
)

// Certificates is the gRPC port's certificate authority (server/pki).
type Certificates interface {
	Issue(ctx context.Context, csrPEM []byte, spiffeID string, ttl time.Duration) (certPEM []byte, serial string, notAfter time.Time, err error)
	Revoke(ctx context.Context, serial, reason string) error
	Rotate(ctx context.Context) (issuingSerial string, err error)
	Remove(ctx context.Context, serial string) error
	BundleFromStore(ctx context.Context) (bundle []byte, issuingSerial string, err error)
}

// ControlServer serves saltbush.control.v1.IdentityControlService. Who may
// call it is decided before it runs (service identities whose policy allows
// saltbush:{Method}); it converts domain errors to the wire once, here.
type ControlServer struct {
	controlv1.UnimplementedIdentityControlServiceServer
	svc   *Service
	certs Certificates
	log   *slog.Logger
}

var _ controlv1.IdentityControlServiceServer = (*ControlServer)(nil)

// NewControlServer returns the identity control API.
func NewControlServer(svc *Service, certs Certificates) *ControlServer {
	return &ControlServer{svc: svc, certs: certs, log: slog.New(slog.DiscardHandler)}
}

func (s *ControlServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.log, op, err)
}

// CreateAccount implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) CreateAccount(ctx context.Context, req *controlv1.CreateAccountRequest) (*controlv1.CreateAccountResponse, error) {
	rec, err := s.svc.CreateAccount(ctx, req.GetAccountId(), req.GetName())
	if err != nil {
		return nil, s.wire(ctx, "CreateAccount", err)
	}
	return &controlv1.CreateAccountResponse{AccountId: rec.GetAccountId(), Name: rec.GetName()}, nil
}

// CreatePrincipal implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) CreatePrincipal(ctx context.Context, req *controlv1.CreatePrincipalRequest) (*controlv1.CreatePrincipalResponse, error) {
	rec, err := s.svc.CreatePrincipal(ctx, req.GetArn())
	if err != nil {
		return nil, s.wire(ctx, "CreatePrincipal", err)
	}
	return &controlv1.CreatePrincipalResponse{Arn: rec.GetArn()}, nil
}

// PutPolicy implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) PutPolicy(ctx context.Context, req *controlv1.PutPolicyRequest) (*controlv1.PutPolicyResponse, error) {
	if _, err := s.svc.PutPolicy(ctx, req.GetAccountId(), req.GetName(), req.GetDocument()); err != nil {
		return nil, s.wire(ctx, "PutPolicy", err)
	}
	return &controlv1.PutPolicyResponse{}, nil
}

// AttachPolicy implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) AttachPolicy(ctx context.Context, req *controlv1.AttachPolicyRequest) (*controlv1.AttachPolicyResponse, error) {
	if err := s.svc.AttachPolicy(ctx, req.GetPrincipalArn(), req.GetPolicyName()); err != nil {
		return nil, s.wire(ctx, "AttachPolicy", err)
	}
	return &controlv1.AttachPolicyResponse{}, nil
}

// CreateAccessKey implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) CreateAccessKey(ctx context.Context, req *controlv1.CreateAccessKeyRequest) (*controlv1.CreateAccessKeyResponse, error) {
	akid, secret, err := s.svc.CreateAccessKey(ctx, req.GetPrincipalArn())
	if err != nil {
		return nil, s.wire(ctx, "CreateAccessKey", err)
	}
	// The ARN was valid (the key was made): its fifth field is the account.
	account := strings.Split(req.GetPrincipalArn(), ":")[4]
	return &controlv1.CreateAccessKeyResponse{
		AccessKeyId: akid, SecretAccessKey: secret, AccountId: account, PrincipalArn: req.GetPrincipalArn(),
	}, nil
}

// UpdateAccessKey implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) UpdateAccessKey(ctx context.Context, req *controlv1.UpdateAccessKeyRequest) (*controlv1.UpdateAccessKeyResponse, error) {
	if err := s.svc.SetAccessKeyStatus(ctx, req.GetAccessKeyId(), req.GetStatus()); err != nil {
		return nil, s.wire(ctx, "UpdateAccessKey", err)
	}
	return &controlv1.UpdateAccessKeyResponse{}, nil
}

// PutServicePolicy implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) PutServicePolicy(ctx context.Context, req *controlv1.PutServicePolicyRequest) (*controlv1.PutServicePolicyResponse, error) {
	if _, err := s.svc.PutServicePolicy(ctx, req.GetService(), req.GetDocument()); err != nil {
		return nil, s.wire(ctx, "PutServicePolicy", err)
	}
	return &controlv1.PutServicePolicyResponse{}, nil
}

// IssueCertificate implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) IssueCertificate(ctx context.Context, req *controlv1.IssueCertificateRequest) (*controlv1.IssueCertificateResponse, error) {
	var id string
	switch sub := req.GetSubject().(type) {
	case *controlv1.IssueCertificateRequest_Service:
		if err := identity.ValidateName("service name", sub.Service); err != nil {
			return nil, s.wire(ctx, "IssueCertificate", errdefs.InvalidParameter("%v.", err))
		}
		id = identity.ServiceID(sub.Service)
	case *controlv1.IssueCertificateRequest_Agent:
		for what, v := range map[string]string{"cluster uid": sub.Agent.GetClusterUid(), "instance": sub.Agent.GetInstance()} {
			if err := identity.ValidateName(what, v); err != nil {
				return nil, s.wire(ctx, "IssueCertificate", errdefs.InvalidParameter("%v.", err))
			}
		}
		id = identity.AgentID(sub.Agent.GetClusterUid(), sub.Agent.GetInstance())
	default:
		return nil, s.wire(ctx, "IssueCertificate", errdefs.InvalidParameter("A service or an agent subject is required."))
	}
	if req.GetTtlSeconds() < 0 {
		return nil, s.wire(ctx, "IssueCertificate", errdefs.InvalidParameter("ttlSeconds must not be negative."))
	}
	certPEM, serial, notAfter, err := s.certs.Issue(ctx, []byte(req.GetCsrPem()), id, time.Duration(req.GetTtlSeconds())*time.Second)
	if err != nil {
		return nil, s.wire(ctx, "IssueCertificate", err)
	}
	bundle, _, err := s.certs.BundleFromStore(ctx)
	if err != nil {
		return nil, s.wire(ctx, "IssueCertificate", err)
	}
	return &controlv1.IssueCertificateResponse{
		CertificatePem: string(certPEM), CaBundlePem: string(bundle), Serial: serial, SpiffeId: id,
		NotAfterEpochSeconds: notAfter.Unix(),
	}, nil
}

// RevokeCertificate implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) RevokeCertificate(ctx context.Context, req *controlv1.RevokeCertificateRequest) (*controlv1.RevokeCertificateResponse, error) {
	if err := s.certs.Revoke(ctx, req.GetSerial(), req.GetReason()); err != nil {
		return nil, s.wire(ctx, "RevokeCertificate", err)
	}
	return &controlv1.RevokeCertificateResponse{}, nil
}

// RotateCertificateAuthority implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) RotateCertificateAuthority(ctx context.Context, _ *controlv1.RotateCertificateAuthorityRequest) (*controlv1.RotateCertificateAuthorityResponse, error) {
	serial, err := s.certs.Rotate(ctx)
	if err != nil {
		return nil, s.wire(ctx, "RotateCertificateAuthority", err)
	}
	bundle, _, err := s.certs.BundleFromStore(ctx)
	if err != nil {
		return nil, s.wire(ctx, "RotateCertificateAuthority", err)
	}
	return &controlv1.RotateCertificateAuthorityResponse{IssuingSerial: serial, CaBundlePem: string(bundle)}, nil
}

// RemoveCertificateAuthority implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) RemoveCertificateAuthority(ctx context.Context, req *controlv1.RemoveCertificateAuthorityRequest) (*controlv1.RemoveCertificateAuthorityResponse, error) {
	if err := s.certs.Remove(ctx, req.GetSerial()); err != nil {
		return nil, s.wire(ctx, "RemoveCertificateAuthority", err)
	}
	bundle, _, err := s.certs.BundleFromStore(ctx)
	if err != nil {
		return nil, s.wire(ctx, "RemoveCertificateAuthority", err)
	}
	return &controlv1.RemoveCertificateAuthorityResponse{CaBundlePem: string(bundle)}, nil
}

// GetCertificateAuthorityBundle implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) GetCertificateAuthorityBundle(ctx context.Context, _ *controlv1.GetCertificateAuthorityBundleRequest) (*controlv1.GetCertificateAuthorityBundleResponse, error) {
	bundle, serial, err := s.certs.BundleFromStore(ctx)
	if err != nil {
		return nil, s.wire(ctx, "GetCertificateAuthorityBundle", err)
	}
	return &controlv1.GetCertificateAuthorityBundleResponse{CaBundlePem: string(bundle), IssuingSerial: serial}, nil
}

// UpdateRole implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) UpdateRole(ctx context.Context, req *controlv1.UpdateRoleRequest) (*controlv1.UpdateRoleResponse, error) {
	var u RoleUpdate
	if req.TrustPolicy != nil {
		u.TrustPolicy = req.TrustPolicy
	}
	if req.MaxSessionDurationSeconds != nil {
		d := time.Duration(req.GetMaxSessionDurationSeconds()) * time.Second
		u.MaxSessionDuration = &d
	}
	rec, err := s.svc.UpdateRole(ctx, req.GetRoleArn(), u)
	if err != nil {
		return nil, s.wire(ctx, "UpdateRole", err)
	}
	return &controlv1.UpdateRoleResponse{
		RoleArn: rec.GetArn(), TrustPolicy: rec.GetTrustPolicy(),
		MaxSessionDurationSeconds: MaxSessionSeconds(rec),
	}, nil
}

// GetRole implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) GetRole(ctx context.Context, req *controlv1.GetRoleRequest) (*controlv1.GetRoleResponse, error) {
	rec, err := s.svc.GetRole(ctx, req.GetRoleArn())
	if err != nil {
		return nil, s.wire(ctx, "GetRole", err)
	}
	resp := &controlv1.GetRoleResponse{
		RoleArn: rec.GetArn(), TrustPolicy: rec.GetTrustPolicy(),
		MaxSessionDurationSeconds: MaxSessionSeconds(rec),
	}
	if rb := rec.GetSessionsRevokedBefore(); rb != nil {
		resp.SessionsRevokedBeforeEpochSeconds = rb.GetSeconds()
	}
	return resp, nil
}

// RevokeRoleSessions implements controlv1.IdentityControlServiceServer.
func (s *ControlServer) RevokeRoleSessions(ctx context.Context, req *controlv1.RevokeRoleSessionsRequest) (*controlv1.RevokeRoleSessionsResponse, error) {
	at, err := s.svc.RevokeRoleSessions(ctx, req.GetRoleArn())
	if err != nil {
		return nil, s.wire(ctx, "RevokeRoleSessions", err)
	}
	return &controlv1.RevokeRoleSessionsResponse{SessionsRevokedBeforeEpochSeconds: at.Unix()}, nil
}
