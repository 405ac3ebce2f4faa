package access

import (
	"context"
	"net/url"
	"strings"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/validation"
	"github.com/saltbush/saltbush/store"
)

// The gRPC shell: each method authorizes, calls the domain and converts
// its error to the wire once, here.

// EKSServer serves saltbush.eks.v1.AccessEntryService.
type EKSServer struct {
	eksv1.UnimplementedAccessEntryServiceServer
	svc   *Service
	authz *authz.Authorizer
}

var _ eksv1.AccessEntryServiceServer = (*EKSServer)(nil)

// NewEKSServer returns the EKS access-entry API on svc; every call is
// authorized by az first.
func NewEKSServer(svc *Service, az *authz.Authorizer) *EKSServer {
	return &EKSServer{svc: svc, authz: az}
}

func (s *EKSServer) wire(ctx context.Context, op string, err error) error {
	return errdefs.Wire(ctx, s.svc.log, op, validation.Conform(op, err))
}

// pathARN decodes an ARN taken from a URL path label: the façade keeps
// reserved characters escaped so that the "/" of an ARN cannot split a
// route. A real ARN never contains "%", so a gRPC caller's plain ARN
// passes unchanged.
func pathARN(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if dec, err := url.PathUnescape(s); err == nil {
		return dec
	}
	return s
}

// authorizeCluster checks an action whose resource is the cluster
// (CreateAccessEntry, ListAccessEntries, as in AWS's service
// authorization reference).
func (s *EKSServer) authorizeCluster(ctx context.Context, action, cluster string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	return s.authz.Authorize(ctx, action, s.svc.ClusterARN(who.AccountID, cluster))
}

// authorizeEntry checks an action on an access entry. Its ARN ends in the
// entry's uuid, which only the record knows: it is read (fast; the
// decision does not need the latest write), and "*" stands in for an entry
// that does not exist, so a caller without permission gets
// AccessDeniedException whether or not the entry exists.
func (s *EKSServer) authorizeEntry(ctx context.Context, action, cluster, principalArn string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	p, err := ParsePrincipal(principalArn)
	if err != nil {
		// Nothing to name: authorize on the cluster's entries.
		return s.authz.Authorize(ctx, action, s.svc.ClusterARN(who.AccountID, cluster))
	}
	uid := "*"
	if c, _, err := s.svc.clusters.GetSerializable(ctx, clusterRef(who.AccountID, cluster)); err == nil {
		if rec, _, err := store.GetSerializableShared(ctx, s.svc.store, store.AccessEntryKey(c.GetUid(), p.Canonical()), newRecord); err == nil {
			uid = rec.GetUid()
		}
	}
	return s.authz.Authorize(ctx, action, s.svc.ARN(who.AccountID, cluster, p, uid))
}

// CreateAccessEntry implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) CreateAccessEntry(ctx context.Context, req *eksv1.CreateAccessEntryRequest) (*eksv1.CreateAccessEntryResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "CreateAccessEntry", err)
	}
	if err := s.authorizeCluster(ctx, "eks:CreateAccessEntry", req.GetClusterName()); err != nil {
		return nil, s.wire(ctx, "CreateAccessEntry", err)
	}
	rec, err := s.svc.Create(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, "CreateAccessEntry", err)
	}
	return &eksv1.CreateAccessEntryResponse{AccessEntry: ToAPI(rec)}, nil
}

// DescribeAccessEntry implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) DescribeAccessEntry(ctx context.Context, req *eksv1.DescribeAccessEntryRequest) (*eksv1.DescribeAccessEntryResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DescribeAccessEntry", err)
	}
	principal := pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:DescribeAccessEntry", req.GetClusterName(), principal); err != nil {
		return nil, s.wire(ctx, "DescribeAccessEntry", err)
	}
	rec, err := s.svc.Describe(ctx, req.GetClusterName(), principal)
	if err != nil {
		return nil, s.wire(ctx, "DescribeAccessEntry", err)
	}
	return &eksv1.DescribeAccessEntryResponse{AccessEntry: ToAPI(rec)}, nil
}

// ListAccessEntries implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) ListAccessEntries(ctx context.Context, req *eksv1.ListAccessEntriesRequest) (*eksv1.ListAccessEntriesResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListAccessEntries", err)
	}
	if err := s.authorizeCluster(ctx, "eks:ListAccessEntries", req.GetClusterName()); err != nil {
		return nil, s.wire(ctx, "ListAccessEntries", err)
	}
	arns, next, err := s.svc.List(ctx, req.GetClusterName(), req.GetAssociatedPolicyArn(), req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListAccessEntries", err)
	}
	return &eksv1.ListAccessEntriesResponse{AccessEntries: arns, NextToken: next}, nil
}

// UpdateAccessEntry implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) UpdateAccessEntry(ctx context.Context, req *eksv1.UpdateAccessEntryRequest) (*eksv1.UpdateAccessEntryResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "UpdateAccessEntry", err)
	}
	req.PrincipalArn = pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:UpdateAccessEntry", req.GetClusterName(), req.GetPrincipalArn()); err != nil {
		return nil, s.wire(ctx, "UpdateAccessEntry", err)
	}
	rec, err := s.svc.Update(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, "UpdateAccessEntry", err)
	}
	return &eksv1.UpdateAccessEntryResponse{AccessEntry: ToAPI(rec)}, nil
}

// DeleteAccessEntry implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) DeleteAccessEntry(ctx context.Context, req *eksv1.DeleteAccessEntryRequest) (*eksv1.DeleteAccessEntryResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DeleteAccessEntry", err)
	}
	principal := pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:DeleteAccessEntry", req.GetClusterName(), principal); err != nil {
		return nil, s.wire(ctx, "DeleteAccessEntry", err)
	}
	if err := s.svc.Delete(ctx, req.GetClusterName(), principal); err != nil {
		return nil, s.wire(ctx, "DeleteAccessEntry", err)
	}
	return &eksv1.DeleteAccessEntryResponse{}, nil
}

// AssociateAccessPolicy implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) AssociateAccessPolicy(ctx context.Context, req *eksv1.AssociateAccessPolicyRequest) (*eksv1.AssociateAccessPolicyResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "AssociateAccessPolicy", err)
	}
	req.PrincipalArn = pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:AssociateAccessPolicy", req.GetClusterName(), req.GetPrincipalArn()); err != nil {
		return nil, s.wire(ctx, "AssociateAccessPolicy", err)
	}
	rec, assoc, err := s.svc.Associate(ctx, req)
	if err != nil {
		return nil, s.wire(ctx, "AssociateAccessPolicy", err)
	}
	return &eksv1.AssociateAccessPolicyResponse{
		ClusterName:            rec.GetClusterName(),
		PrincipalArn:           rec.GetPrincipalArn(),
		AssociatedAccessPolicy: AssociationToAPI(assoc),
	}, nil
}

// DisassociateAccessPolicy implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) DisassociateAccessPolicy(ctx context.Context, req *eksv1.DisassociateAccessPolicyRequest) (*eksv1.DisassociateAccessPolicyResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "DisassociateAccessPolicy", err)
	}
	principal := pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:DisassociateAccessPolicy", req.GetClusterName(), principal); err != nil {
		return nil, s.wire(ctx, "DisassociateAccessPolicy", err)
	}
	if err := s.svc.Disassociate(ctx, req.GetClusterName(), principal, pathARN(req.GetPolicyArn())); err != nil {
		return nil, s.wire(ctx, "DisassociateAccessPolicy", err)
	}
	return &eksv1.DisassociateAccessPolicyResponse{}, nil
}

// ListAssociatedAccessPolicies implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) ListAssociatedAccessPolicies(ctx context.Context, req *eksv1.ListAssociatedAccessPoliciesRequest) (*eksv1.ListAssociatedAccessPoliciesResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListAssociatedAccessPolicies", err)
	}
	principal := pathARN(req.GetPrincipalArn())
	if err := s.authorizeEntry(ctx, "eks:ListAssociatedAccessPolicies", req.GetClusterName(), principal); err != nil {
		return nil, s.wire(ctx, "ListAssociatedAccessPolicies", err)
	}
	page, next, err := s.svc.ListAssociated(ctx, req.GetClusterName(), principal, req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListAssociatedAccessPolicies", err)
	}
	out := &eksv1.ListAssociatedAccessPoliciesResponse{
		ClusterName: req.GetClusterName(), PrincipalArn: principal, NextToken: next,
		AssociatedAccessPolicies: make([]*eksv1.AssociatedAccessPolicy, 0, len(page)),
	}
	for _, a := range page {
		out.AssociatedAccessPolicies = append(out.AssociatedAccessPolicies, AssociationToAPI(a))
	}
	return out, nil
}

// ListAccessPolicies implements eksv1.AccessEntryServiceServer.
func (s *EKSServer) ListAccessPolicies(ctx context.Context, req *eksv1.ListAccessPoliciesRequest) (*eksv1.ListAccessPoliciesResponse, error) {
	if err := validation.Check(ctx, req); err != nil {
		return nil, s.wire(ctx, "ListAccessPolicies", err)
	}
	if _, err := identity.AccountCaller(ctx); err != nil {
		return nil, s.wire(ctx, "ListAccessPolicies", err)
	}
	if err := s.authz.Authorize(ctx, "eks:ListAccessPolicies", "*"); err != nil {
		return nil, s.wire(ctx, "ListAccessPolicies", err)
	}
	page, next, err := s.svc.ListPolicies(req.MaxResults, req.GetNextToken())
	if err != nil {
		return nil, s.wire(ctx, "ListAccessPolicies", err)
	}
	out := &eksv1.ListAccessPoliciesResponse{NextToken: next, AccessPolicies: make([]*eksv1.AccessPolicy, 0, len(page))}
	for _, p := range page {
		out.AccessPolicies = append(out.AccessPolicies, &eksv1.AccessPolicy{Name: p.Name, Arn: p.ARN})
	}
	return out, nil
}
