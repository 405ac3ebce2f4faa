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

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/token"
)

// Keys is the key store: the credential of an active access key, or of a
// valid role session presented with its session token.
type Keys interface {
	Lookup(ctx context.Context, akid string) (iam.Credential, bool, error)
	LookupSession(ctx context.Context, akid, sessionToken string) (iam.Credential, bool, error)
}

// Entries reads the access entry of a principal on a cluster incarnation.
type Entries interface {
	Binding(ctx context.Context, clusterUID string, p access.Principal) (access.Binding, bool, error)
}

// Service answers token and access reviews. It is safe for concurrent use.
type Service struct {
	clusters clusterscope.Reader
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
func NewService(clusters clusterscope.Reader, keys Keys, entries Entries, view *View, tokens *token.Verifier, policies *accesspolicy.Catalog, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
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
