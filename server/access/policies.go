package access

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// autoNodePolicy may be associated only with EC2 (EKS Auto Mode) entries,
// and is the only policy those may have.
const autoNodePolicy = accesspolicy.ARNPrefix + "AmazonEKSAutoNodePolicy"

// maxAssociations bounds an entry's associations, so one record stays
// small (the catalogue has fewer policies than this anyway).
const maxAssociations = 50

// scopeFromAPI validates an access scope and returns its stored form.
func scopeFromAPI(cluster string, s *eksv1.AccessScope) (storagev1.AccessScopeType, []string, error) {
	if s == nil {
		return 0, nil, invalid(cluster, "accessScope is required.")
	}
	if err := accesspolicy.ValidateScope(accesspolicy.Scope{Type: s.GetType(), Namespaces: s.GetNamespaces()}); err != nil {
		return 0, nil, invalid(cluster, "%v", err)
	}
	switch s.GetType() {
	case accesspolicy.ScopeCluster:
		return storagev1.AccessScopeType_ACCESS_SCOPE_TYPE_CLUSTER, nil, nil
	default:
		return storagev1.AccessScopeType_ACCESS_SCOPE_TYPE_NAMESPACE, slices.Clone(s.GetNamespaces()), nil
	}
}

// Associate associates an access policy with an entry, or replaces the
// scope of the association it already has (one per policy). associatedAt
// is kept; modifiedAt moves only when the scope changed.
func (s *Service) Associate(ctx context.Context, req *eksv1.AssociateAccessPolicyRequest) (*storagev1.AccessEntryRecord, *storagev1.AssociatedPolicyRecord, error) {
	cn := req.GetClusterName()
	_, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := s.policies.Lookup(req.GetPolicyArn()); !ok {
		return nil, nil, invalid(cn, "The policyArn %s is not a valid access policy. ListAccessPolicies lists them.", clip(req.GetPolicyArn()))
	}
	scopeType, namespaces, err := scopeFromAPI(cn, req.GetAccessScope())
	if err != nil {
		return nil, nil, err
	}
	rec := &storagev1.AccessEntryRecord{}
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		return s.updateEntry(ctx, sc, req.GetPrincipalArn(), rec, func(r *storagev1.AccessEntryRecord, _ string, _ *store.Txn) error {
			if err := associable(cn, r.GetType(), req.GetPolicyArn()); err != nil {
				return err
			}
			now := timestamppb.New(s.cfg.Now())
			i := slices.IndexFunc(r.GetPolicies(), func(p *storagev1.AssociatedPolicyRecord) bool {
				return p.GetPolicyArn() == req.GetPolicyArn()
			})
			if i < 0 {
				if len(r.GetPolicies()) >= maxAssociations {
					return errdefs.ResourceLimitExceeded("An access entry may have at most %d associated access policies.", maxAssociations).
						WithField("clusterName", cn)
				}
				r.Policies = append(r.Policies, &storagev1.AssociatedPolicyRecord{
					PolicyArn: req.GetPolicyArn(), ScopeType: scopeType, Namespaces: namespaces,
					AssociatedAt: now, ModifiedAt: now,
				})
			} else {
				assoc := r.GetPolicies()[i]
				if assoc.GetScopeType() != scopeType || !sameSet(assoc.GetNamespaces(), namespaces) {
					assoc.ScopeType, assoc.Namespaces, assoc.ModifiedAt = scopeType, namespaces, now
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, errdefs.Wrap(err, "associate %q with access entry %q of cluster %q", req.GetPolicyArn(), req.GetPrincipalArn(), cn)
	}
	i := slices.IndexFunc(rec.GetPolicies(), func(p *storagev1.AssociatedPolicyRecord) bool { return p.GetPolicyArn() == req.GetPolicyArn() })
	return rec, rec.GetPolicies()[i], nil
}

// associable says whether an entry of type t may have policyArn.
func associable(cluster string, t storagev1.AccessEntryType, policyArn string) error {
	switch {
	case t == storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2:
		if policyArn != autoNodePolicy {
			return invalid(cluster, "Access entries of type EC2 can only be associated with %s.", autoNodePolicy)
		}
	case t != storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD:
		return standardOnly(cluster)
	case policyArn == autoNodePolicy:
		return invalid(cluster, "%s can only be associated with access entries of type EC2.", autoNodePolicy)
	}
	return nil
}

// Disassociate removes one association; a policy that is not associated
// is a ResourceNotFoundException.
func (s *Service) Disassociate(ctx context.Context, cluster, principalArn, policyArn string) error {
	_, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return err
	}
	err = s.scopes.Write(ctx, ref, func(sc clusterscope.Scope) error {
		return s.updateEntry(ctx, sc, principalArn, &storagev1.AccessEntryRecord{}, func(r *storagev1.AccessEntryRecord, _ string, _ *store.Txn) error {
			i := slices.IndexFunc(r.GetPolicies(), func(p *storagev1.AssociatedPolicyRecord) bool { return p.GetPolicyArn() == policyArn })
			if i < 0 {
				return errdefs.NotFound("The policy %s is not associated with the access entry of %s.", clip(policyArn), clip(principalArn)).
					WithField("clusterName", cluster)
			}
			r.Policies = slices.Delete(r.Policies, i, i+1)
			return nil
		})
	})
	return errdefs.Wrap(err, "disassociate %q from access entry %q of cluster %q", policyArn, principalArn, cluster)
}

// ListAssociated returns one page of an entry's associations, in policy
// ARN order (so a page resumes after the last ARN listed even when
// associations change in between).
func (s *Service) ListAssociated(ctx context.Context, cluster, principalArn string, maxResults *int32, nextToken string) ([]*storagev1.AssociatedPolicyRecord, string, error) {
	rec, err := s.Describe(ctx, cluster, principalArn)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", errdefs.WithField(err, "clusterName", cluster)
	}
	// The scope names the entry incarnation: a token does not continue a
	// listing of another entry, or of a recreated one.
	scope := "ListAssociatedAccessPolicies/" + rec.GetUid()
	all := slices.Clone(rec.GetPolicies())
	slices.SortFunc(all, func(a, b *storagev1.AssociatedPolicyRecord) int {
		return strings.Compare(a.GetPolicyArn(), b.GetPolicyArn())
	})
	start := 0
	if nextToken != "" {
		after, err := s.store.OpenPageToken(nextToken, scope)
		if err != nil {
			// The model lists InvalidRequestException, not
			// InvalidParameterException, for this operation: the one its
			// validation errors get too.
			return nil, "", errdefs.InvalidRequest("The nextToken provided is not valid.").WithCause(err).WithField("clusterName", cluster)
		}
		start, _ = slices.BinarySearchFunc(all, after, func(p *storagev1.AssociatedPolicyRecord, t string) int {
			return strings.Compare(p.GetPolicyArn(), t)
		})
		if start < len(all) && all[start].GetPolicyArn() == after {
			start++
		}
	}
	end := min(start+limit, len(all))
	next := ""
	if end < len(all) {
		next = s.store.SealPageToken(scope, all[end-1].GetPolicyArn())
	}
	return all[start:end], next, nil
}

// ListPolicies returns one page of the access-policy catalogue.
func (s *Service) ListPolicies(maxResults *int32, nextToken string) ([]accesspolicy.Policy, string, error) {
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", err
	}
	const scope = "ListAccessPolicies"
	all := s.policies.All()
	start := 0
	if nextToken != "" {
		after, err := s.store.OpenPageToken(nextToken, scope)
		if err != nil {
			return nil, "", paging.InvalidToken(err)
		}
		start = slices.IndexFunc(all, func(p accesspolicy.Policy) bool { return p.ARN == after }) + 1
		if start == 0 {
			return nil, "", paging.InvalidToken(fmt.Errorf("policy %q is not in the catalogue", after))
		}
	}
	end := min(start+limit, len(all))
	next := ""
	if end < len(all) {
		next = s.store.SealPageToken(scope, all[end-1].ARN)
	}
	return all[start:end], next, nil
}

// sameSet reports whether two namespace lists name the same namespaces:
// re-associating a scope in another order changes nothing.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
