package review

import (
	"context"
	"fmt"
	"strings"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/accesspolicy"
)

// ReviewAccess answers a SubjectAccessReview for the calling agent's
// cluster from the user's access entry: allowed when an associated policy
// allows the request within its scope, no opinion otherwise. It never
// denies.
func (s *Service) ReviewAccess(ctx context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	c, err := s.agentCluster(ctx, req.GetCluster())
	if err != nil {
		return nil, err
	}
	attrs, err := attributes(req)
	if err != nil {
		return nil, err
	}
	resp, err := s.reviewAccess(ctx, c, req, attrs)
	if err != nil {
		return nil, err
	}
	result := "no_opinion"
	if resp.GetAllowed() {
		result = "allowed"
	}
	s.reviews.WithLabelValues("access", result).Inc()
	return resp, nil
}

func noOpinion(format string, args ...any) *deliveryv1.ReviewAccessResponse {
	return &deliveryv1.ReviewAccessResponse{Reason: "no opinion: " + fmt.Sprintf(format, args...)}
}

// attributes converts a request's attributes; exactly one kind is given.
func attributes(req *deliveryv1.ReviewAccessRequest) (accesspolicy.Attributes, error) {
	r, n := req.GetResourceAttributes(), req.GetNonResourceAttributes()
	switch {
	case (r == nil) == (n == nil):
		return accesspolicy.Attributes{}, errdefs.InvalidParameter("Exactly one of resourceAttributes and nonResourceAttributes must be given.")
	case n != nil:
		if n.GetVerb() == "" || n.GetPath() == "" {
			return accesspolicy.Attributes{}, errdefs.InvalidParameter("nonResourceAttributes need a verb and a path.")
		}
		return accesspolicy.Attributes{NonResource: true, Verb: n.GetVerb(), Path: n.GetPath()}, nil
	}
	if r.GetVerb() == "" {
		return accesspolicy.Attributes{}, errdefs.InvalidParameter("resourceAttributes need a verb.")
	}
	return accesspolicy.Attributes{
		Verb: r.GetVerb(), APIGroup: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource(),
		Subresource: r.GetSubresource(), Name: r.GetName(), Namespace: r.GetNamespace(),
	}, nil
}

// one returns the single value of an extra attribute ("" when absent,
// repeated, or given under two spellings: an ambiguous attribute names
// nothing). Keys match case-insensitively: an aggregated API server (e.g.
// metrics-server) receives the user's extras as X-Remote-Extra- headers
// and asks its delegated SubjectAccessReview with the keys lowercased.
func one(extra map[string]*deliveryv1.ExtraValue, key string) string {
	value, found := "", 0
	for k, v := range extra {
		if !strings.EqualFold(k, key) {
			continue
		}
		found++
		if vs := v.GetValues(); len(vs) == 1 {
			value = vs[0]
		} else {
			value = ""
		}
	}
	if found != 1 {
		return ""
	}
	return value
}

func (s *Service) reviewAccess(ctx context.Context, c *storagev1.ClusterRecord, req *deliveryv1.ReviewAccessRequest, attrs accesspolicy.Attributes) (*deliveryv1.ReviewAccessResponse, error) {
	if !serving(c) {
		return noOpinion("cluster %s is %s", c.GetName(), statusName(c)), nil
	}
	// The user's entry is found from the extra attributes token review
	// set; the username and uid must then be the ones token review gives
	// that principal, so a user who is not an access entry's principal
	// (a service account, a certificate user, or anyone impersonating
	// extra attributes) gets no opinion.
	p, err := access.ParsePrincipal(one(req.GetExtra(), extraCanonicalARN))
	if err != nil {
		return noOpinion("user %s is not an access entry's principal", req.GetUser()), nil
	}
	b, ok, err := s.binding(ctx, c, p)
	if err != nil {
		return nil, err
	}
	if !ok {
		return noOpinion("%s has no access entry on cluster %s", p.Canonical(), c.GetName()), nil
	}
	who := identityOf{
		signer:      access.Signer{Principal: p, SessionName: one(req.GetExtra(), extraSessionName)},
		accessKeyID: one(req.GetExtra(), extraAccessKeyID),
	}
	if req.GetUser() != who.render(b.Username) || (req.GetUid() != "" && req.GetUid() != who.uid()) {
		return noOpinion("user %s is not the username of %s's access entry", req.GetUser(), p.Canonical()), nil
	}
	d := s.policies.Authorize(b.Policies, attrs)
	return &deliveryv1.ReviewAccessResponse{Allowed: d.Allowed, Reason: d.Reason}, nil
}
