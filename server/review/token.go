package review

import (
	"context"
	"errors"
	"fmt"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/token"
)

// ReviewToken authenticates a bearer token for the calling agent's cluster.
// A token that does not authenticate is an answer (authenticated false,
// with the reason), not an error; errors are for refused callers and
// outages.
func (s *Service) ReviewToken(ctx context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	c, err := s.agentCluster(ctx, req.GetCluster())
	if err != nil {
		return nil, err
	}
	resp, err := s.reviewToken(ctx, c, req.GetToken(), req.GetAwsAuth())
	if err != nil {
		return nil, err
	}
	// No audiences in the answer: a webhook's audiences are trusted by the
	// apiserver over its own, and an EKS token is bound to no audience
	// (aws-iam-authenticator returns none), so the apiserver's implicit
	// audiences apply.
	result := "unauthenticated"
	if resp.GetAuthenticated() {
		result = "authenticated"
	}
	s.reviews.WithLabelValues("token", result).Inc()
	return resp, nil
}

func unauthenticated(format string, args ...any) *deliveryv1.ReviewTokenResponse {
	return &deliveryv1.ReviewTokenResponse{Error: fmt.Sprintf(format, args...)}
}

func (s *Service) reviewToken(ctx context.Context, c *storagev1.ClusterRecord, raw string, cm *deliveryv1.AwsAuthConfigMap) (*deliveryv1.ReviewTokenResponse, error) {
	if !serving(c) {
		return unauthenticated("cluster %s is %s: it authenticates no one until it is ACTIVE", c.GetName(), statusName(c)), nil
	}
	id, err := s.tokens.Verify(ctx, raw, c.GetName())
	var terr *token.Error
	if errors.As(err, &terr) {
		return unauthenticated("%s", terr.Message), nil
	}
	if err != nil {
		return nil, fmt.Errorf("verify token for cluster %s: %w", c.GetName(), err)
	}
	var cred iam.Credential
	var ok bool
	if id.SessionToken != "" {
		// A role session's temporary credentials (server/iam/session.go).
		cred, ok, err = s.keys.LookupSession(ctx, id.AccessKeyID, id.SessionToken)
		if errors.Is(err, iam.ErrSessionExpired) {
			return unauthenticated("the role session of the token has expired"), nil
		}
	} else {
		cred, ok, err = s.keys.Lookup(ctx, id.AccessKeyID)
	}
	if err != nil {
		return nil, fmt.Errorf("look up access key: %w", err)
	}
	if !ok {
		// Deactivated (or the session revoked) between the signature
		// check and now.
		return unauthenticated("the access key of the token is not active"), nil
	}
	signer, ok := access.ParseSigner(cred.PrincipalARN)
	if !ok {
		return unauthenticated("the signer %s is not an IAM principal", cred.PrincipalARN), nil
	}
	who := identityOf{signer: signer, accessKeyID: id.AccessKeyID}
	username, groups, ok, err := s.mapSigner(ctx, c, who, cm)
	if err != nil {
		return nil, err
	}
	if !ok {
		if usesConfigMap(c) {
			return unauthenticated("ARN %s is not mapped: it has no access entry on cluster %s and the cluster's aws-auth ConfigMap does not map it", signer.ARN, c.GetName()), nil
		}
		return unauthenticated("ARN %s is not mapped: it has no access entry on cluster %s", signer.ARN, c.GetName()), nil
	}
	extra := map[string]*deliveryv1.ExtraValue{
		extraARN:          {Values: []string{signer.ARN}},
		extraCanonicalARN: {Values: []string{signer.Principal.Canonical()}},
		extraSessionName:  {Values: []string{signer.SessionName}},
		extraAccessKeyID:  {Values: []string{id.AccessKeyID}},
		extraPrincipalID:  {Values: []string{signer.Principal.ID()}},
	}
	return &deliveryv1.ReviewTokenResponse{
		Authenticated: true,
		User: &deliveryv1.UserInfo{
			Username: username,
			Uid:      who.uid(),
			Groups:   groups,
			Extra:    extra,
		},
	}, nil
}

// usesConfigMap reports whether a cluster's authentication mode lets its
// aws-auth ConfigMap map users (CONFIG_MAP or API_AND_CONFIG_MAP). In API
// mode (and for a record with no mode) the ConfigMap is ignored.
func usesConfigMap(c *storagev1.ClusterRecord) bool {
	switch c.GetAccessConfig().GetAuthenticationMode() {
	case "CONFIG_MAP", "API_AND_CONFIG_MAP":
		return true
	}
	return false
}

// mapSigner maps a verified signer to its Kubernetes username and groups.
//
// The signer's access entry is consulted first in every mode, and wins:
//   - API: access entries only; the aws-auth ConfigMap is ignored.
//   - API_AND_CONFIG_MAP: the entry when the signer has one, otherwise
//     aws-auth, as EKS does.
//   - CONFIG_MAP: aws-auth. The only entry that can exist in this mode is
//     the cluster creator's bootstrap admin entry (CreateAccessEntry is
//     refused in CONFIG_MAP mode, and a cluster's mode only ever moves
//     towards API), and AWS likewise keeps the creator an administrator of
//     a CONFIG_MAP cluster without any aws-auth mapping.
func (s *Service) mapSigner(ctx context.Context, c *storagev1.ClusterRecord, who identityOf, cm *deliveryv1.AwsAuthConfigMap) (username string, groups []string, ok bool, err error) {
	b, ok, err := s.binding(ctx, c, who.signer.Principal)
	if err != nil {
		return "", nil, false, err
	}
	if ok {
		return who.render(b.Username), b.Groups, true, nil
	}
	if !usesConfigMap(c) || cm == nil {
		return "", nil, false, nil
	}
	auth, perr := s.awsAuth.get(c.GetUid(), cm)
	if perr != nil {
		// aws-iam-authenticator logs and keeps the good entries.
		s.log.WarnContext(ctx, "aws-auth ConfigMap entries skipped", "cluster", c.GetName(), "uid", c.GetUid(),
			"configmap_uid", cm.GetUid(), "resource_version", cm.GetResourceVersion(), "error", perr)
	}
	m, ok := auth.lookup(who.signer)
	if !ok {
		return "", nil, false, nil
	}
	groups = make([]string, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, who.render(g))
	}
	return who.render(m.username), groups, true, nil
}
