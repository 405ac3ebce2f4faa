// Package review answers, for a cluster's guest agent, the two webhook
// questions of the cluster's kube-apiserver (docs/architecture.md):
//
//   - ReviewToken (TokenReview): who bears this `aws eks get-token` token?
//     The token is checked as aws-iam-authenticator checks it and its
//     presigned SigV4 signature verified against saltbush's key store
//     (package token); the signer is canonicalized (an assumed-role
//     session is its role plus the session name) and mapped to a
//     Kubernetes username and groups through the cluster's access entry
//     or, as the cluster's authentication mode allows, its aws-auth
//     ConfigMap, which the agent sends with the token.
//   - ReviewAccess (SubjectAccessReview): may this user do this? The
//     entry's associated access policies decide within their scopes
//     (package accesspolicy); when none allows, the answer is "no
//     opinion", so the cluster's RBAC still decides.
//
// Both are bound to the calling agent's certificate: the cluster asked
// about must be the incarnation the certificate names, and the agent's
// instance one of its members. Only an ACTIVE (or UPDATING) cluster
// authenticates anyone.
//
// What a review reads of etcd (the cluster record, the access entry) comes
// from a watch-fed View when it holds the cluster (view.go).
package review

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/saltbush/saltbush/errdefs"
	controlv1 "github.com/saltbush/saltbush/gen/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/server/token"
)

// Clusters reads cluster records.
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	GetSerializable(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
}

// Keys is the key store: the credential of an active access key.
type Keys interface {
	Lookup(ctx context.Context, akid string) (iam.Credential, bool, error)
}

// Entries reads the access entry of a principal on a cluster incarnation.
type Entries interface {
	Binding(ctx context.Context, clusterUID string, p access.Principal) (access.Binding, bool, error)
}

// Service answers token and access reviews. It is safe for concurrent use.
type Service struct {
	clusters Clusters
	keys     Keys
	entries  Entries
	// view answers cluster and entry reads from memory when it holds
	// them; nil reads etcd every time.
	view     *View
	awsAuth  awsAuthMemo
	tokens   *token.Verifier
	policies *accesspolicy.Catalog
	log      *slog.Logger
	reviews  *prometheus.CounterVec
}

// NewService returns the review service; its metrics are registered on reg.
// view may be nil (every review reads etcd).
func NewService(clusters Clusters, keys Keys, entries Entries, view *View, tokens *token.Verifier, policies *accesspolicy.Catalog, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	s := &Service{
		clusters: clusters, keys: keys, entries: entries, view: view, tokens: tokens, policies: policies, log: log,
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_access_reviews_total",
			Help: "Token and access reviews answered for guest agents, by review (token, access) and result (authenticated, unauthenticated, allowed, no_opinion).",
		}, []string{"review", "result"}),
	}
	if reg != nil {
		if err := reg.Register(s.reviews); err != nil {
			return nil, fmt.Errorf("review metrics: %w", err)
		}
	}
	return s, nil
}

// agentCluster returns the cluster a request names, if the calling agent
// may ask about it: the cluster must be the incarnation the agent's
// certificate names, and the agent one of its members. Every refusal says
// the same, so an agent learns nothing about other clusters.
func (s *Service) agentCluster(ctx context.Context, name *deliveryv1.ClusterName) (*storagev1.ClusterRecord, error) {
	who, ok := identity.FromContext(ctx)
	if !ok || who.Agent == nil {
		return nil, errdefs.AccessDenied("Only guest agents may ask for token and access reviews.")
	}
	refused := errdefs.AccessDenied("Agent %s of cluster %s may only ask about its own cluster.", who.Agent.Instance, who.Agent.ClusterUID)
	if identity.ValidateAccountID(name.GetAccountId()) != nil || name.GetName() == "" {
		return nil, errdefs.InvalidParameter("cluster must name an account id and a cluster name.")
	}
	if c, ok := s.view.cluster(who.Agent.ClusterUID, name.GetAccountId(), name.GetName()); ok && member(c, who.Agent.Instance) {
		return c, nil
	}
	// Not in the view, or not a member there (the member may have been
	// added an instant ago on another replica): etcd says.
	ref := &controlv1.ClusterRef{AccountId: name.GetAccountId(), Name: name.GetName()}
	// A serializable read; a miss or another incarnation is confirmed
	// linearizably (the cluster may be new to this member).
	c, _, err := s.clusters.GetSerializable(ctx, ref)
	if err != nil || c.GetUid() != who.Agent.ClusterUID {
		c, _, err = s.clusters.Get(ctx, ref)
	}
	var apiErr *errdefs.Error
	switch {
	case errors.As(err, &apiErr):
		return nil, refused.WithCause(err)
	case err != nil:
		return nil, err
	case c.GetUid() != who.Agent.ClusterUID:
		return nil, refused
	}
	// The incarnation exists at this name: later reviews of it are
	// answered from the view once it has loaded.
	s.view.want(c.GetUid(), name.GetAccountId(), name.GetName())
	if member(c, who.Agent.Instance) {
		return c, nil
	}
	return nil, refused
}

func member(c *storagev1.ClusterRecord, instance string) bool {
	for _, m := range c.GetMembers() {
		if m.GetInstanceId() == instance {
			return true
		}
	}
	return false
}

// binding returns p's access entry on cluster c, from the view when it
// holds the cluster's entries.
func (s *Service) binding(ctx context.Context, c *storagev1.ClusterRecord, p access.Principal) (access.Binding, bool, error) {
	if b, found, held, err := s.view.binding(c.GetUid(), p); held {
		return b, found, err
	}
	return s.entries.Binding(ctx, c.GetUid(), p)
}

// serving reports whether a cluster authenticates users: ACTIVE, or
// UPDATING (a cluster being upgraded keeps serving).
func serving(c *storagev1.ClusterRecord) bool {
	switch c.GetStatus() {
	case storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE, storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING:
		return true
	}
	return false
}

func statusName(c *storagev1.ClusterRecord) string {
	return strings.TrimPrefix(c.GetStatus().String(), "CLUSTER_STATUS_")
}

// Extra attribute keys, as aws-iam-authenticator sets them.
const (
	extraARN          = "arn"
	extraCanonicalARN = "canonicalArn"
	extraSessionName  = "sessionName"
	extraAccessKeyID  = "accessKeyId"
	extraPrincipalID  = "principalId"
)

// identityOf is what a verified signer is known as in Kubernetes.
type identityOf struct {
	signer      access.Signer
	accessKeyID string
}

// uid is TokenReview's user uid, as aws-iam-authenticator makes it.
func (i identityOf) uid() string {
	return "aws-iam-authenticator:" + i.signer.Principal.Account + ":" + i.signer.Principal.ID()
}

// render fills in a username or group template (of an access entry or an
// aws-auth mapping) the way aws-iam-authenticator renders its mappings.
// There is no EC2 API here to look up a node's private DNS name:
// {{EC2PrivateDNSName}} becomes the session name, which for a node role is
// the instance's name.
func (i identityOf) render(template string) string {
	if !strings.Contains(template, "{{") {
		return template
	}
	session := i.signer.SessionName
	// One pass per template present; the values (account ids, key ids,
	// session names of [\w+=,.@-]) hold no braces, so no replacement makes
	// another template appear.
	for _, r := range [...]struct{ template, value string }{
		{"{{AccountID}}", i.signer.Principal.Account},
		{"{{SessionName}}", strings.ReplaceAll(session, "@", "-")},
		{"{{SessionNameRaw}}", session},
		{"{{AccessKeyID}}", i.accessKeyID},
		{"{{EC2PrivateDNSName}}", session},
	} {
		if strings.Contains(template, r.template) {
			template = strings.ReplaceAll(template, r.template, r.value)
		}
	}
	return template
}

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
	cred, ok, err := s.keys.Lookup(ctx, id.AccessKeyID)
	if err != nil {
		return nil, fmt.Errorf("look up access key: %w", err)
	}
	if !ok {
		// Deactivated between the signature check and now.
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
