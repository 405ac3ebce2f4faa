// Package eksauth is the EKS Auth API beside the façade: the one
// operation EKS Pod Identity's node agent calls, AssumeRoleForPodIdentity
// (POST /clusters/{clusterName}/assume-role-for-pod-identity, REST-JSON,
// SigV4 signing name eks-auth; botocore's eks-auth/2023-11-26 model). It
// exchanges a pod's projected service-account token (audience
// pods.eks.amazonaws.com) for the credentials of the role its service
// account's pod identity association names (docs/architecture.md, "Pod
// credentials").
//
// EKS Auth is a service of its own (its own model, endpoint and signing
// name), so it is served here, by hand, as STS is, rather than by the EKS
// façade's generated gateway.
package eksauth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/store"
)

// Audience is the audience of a pod identity token, and ServicePrincipal
// the principal a pod identity role's trust policy names.
const (
	Audience         = "pods.eks.amazonaws.com"
	ServicePrincipal = "pods.eks.amazonaws.com"
	// Action is what the node agent's own policies must allow on the
	// cluster's ARN.
	Action = "eks-auth:AssumeRoleForPodIdentity"
)

// Session tags of a pod identity session (unless the association's
// disableSessionTags).
const (
	TagClusterARN     = "eks-cluster-arn"
	TagClusterName    = "eks-cluster-name"
	TagNamespace      = "kubernetes-namespace"
	TagServiceAccount = "kubernetes-service-account"
	TagPodName        = "kubernetes-pod-name"
	TagPodUID         = "kubernetes-pod-uid"
)

// MaxSessionDuration bounds a pod identity session (the role's own
// MaxSessionDuration bounds it further).
const MaxSessionDuration = 6 * time.Hour

// Keys issues role sessions (iam.Service).
type Keys interface {
	AssumeRole(ctx context.Context, in iam.AssumeRoleInput) (iam.Session, error)
	GetRole(ctx context.Context, arn string) (*storagev1.PrincipalRecord, error)
}

// Associations finds a service account's pod identity association
// (podidentity.Service).
type Associations interface {
	ForServiceAccount(ctx context.Context, uid, namespace, serviceAccount string) (*storagev1.PodIdentityAssociationRecord, error)
}

// Service answers AssumeRoleForPodIdentity.
type Service struct {
	store        *store.Store
	issuers      *oidc.Issuers
	associations Associations
	keys         Keys
	authz        *authz.Authorizer
	region       string
	now          func() time.Time
	log          *slog.Logger
}

// NewService returns the EKS Auth service.
func NewService(st *store.Store, issuers *oidc.Issuers, associations Associations, keys Keys, az *authz.Authorizer,
	region string, now func() time.Time, log *slog.Logger) *Service {
	return &Service{store: st, issuers: issuers, associations: associations, keys: keys, authz: az, region: region, now: now, log: log}
}

// Result is what AssumeRoleForPodIdentity answers.
type Result struct {
	Namespace, ServiceAccount     string
	AssociationARN, AssociationID string
	AssumedRoleARN, AssumedRoleID string
	Session                       iam.Session
}

// Model constraints (eks-auth/2023-11-26).
var (
	clusterNamePattern = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9\-_]*$`)
	jwtPattern         = regexp.MustCompile(`^[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+$`)
)

// The exceptions of the model that errdefs does not name.
const (
	InvalidTokenException   = "InvalidTokenException"
	ExpiredTokenException   = "ExpiredTokenException"
	InternalServerException = "InternalServerException"
)

// Validate checks the request's members against the model.
func Validate(cluster, token string) error {
	switch {
	case len(cluster) < 1 || len(cluster) > 100:
		return errdefs.InvalidParameter("1 validation error detected: Value '%s' at 'clusterName' failed to satisfy constraint: Member must have length between 1 and 100", clip(cluster))
	case !clusterNamePattern.MatchString(cluster):
		return errdefs.InvalidParameter("1 validation error detected: Value '%s' at 'clusterName' failed to satisfy constraint: Member must satisfy regular expression pattern: [0-9A-Za-z][A-Za-z0-9\\-_]*", clip(cluster))
	case token == "":
		return errdefs.InvalidParameter("1 validation error detected: Value at 'token' failed to satisfy constraint: Member must not be null")
	case len(token) > oidc.MaxTokenBytes || !jwtPattern.MatchString(token):
		// The token is a credential: never echoed.
		return &errdefs.Error{Exception: InvalidTokenException, Message: "The token is not a JSON Web Token."}
	}
	return nil
}

// AssumeRoleForPodIdentity verifies token as a service-account token of
// the caller's cluster (its issuer's keys, audience pods.eks.amazonaws.com,
// bound to a pod), finds the association of its service account, and
// issues a session of the association's role — trusted by
// pods.eks.amazonaws.com, with the session tags unless the association
// disables them — chained to its targetRoleArn when it has one, the
// association's policy limiting the pod's session. The caller (the node
// agent) must be allowed eks-auth:AssumeRoleForPodIdentity on the cluster.
func (s *Service) AssumeRoleForPodIdentity(ctx context.Context, clusterName, token string) (Result, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := Validate(clusterName, token); err != nil {
		return Result{}, err
	}
	clusterARN := "arn:aws:eks:" + s.region + ":" + who.AccountID + ":cluster/" + clusterName
	if err := s.authz.Authorize(ctx, Action, clusterARN); err != nil {
		return Result{}, err
	}
	cl := &storagev1.ClusterRecord{}
	if _, err := s.store.Get(ctx, store.ClusterKey(who.AccountID, clusterName), cl); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Result{}, errdefs.NotFound("No cluster found for name: %s.", clusterName)
		}
		return Result{}, fmt.Errorf("cluster %s: %w", clusterName, err)
	}
	claims, err := s.verify(ctx, cl, token)
	if err != nil {
		return Result{}, err
	}
	ns, sa := claims.Kubernetes.Namespace, claims.Kubernetes.ServiceAccount.Name
	assoc, err := s.associations.ForServiceAccount(ctx, cl.GetUid(), ns, sa)
	if err != nil {
		return Result{}, err
	}
	if assoc == nil {
		return Result{}, errdefs.NotFound("No Pod Identity Association found for service account %s in namespace %s of cluster %s.", sa, ns, clusterName)
	}
	var tags []*storagev1.SessionTag
	if !assoc.GetDisableSessionTags() {
		tags = []*storagev1.SessionTag{
			{Key: TagClusterARN, Value: cl.GetArn()}, {Key: TagClusterName, Value: cl.GetName()},
			{Key: TagNamespace, Value: ns}, {Key: TagServiceAccount, Value: sa},
			{Key: TagPodName, Value: claims.Kubernetes.Pod.Name}, {Key: TagPodUID, Value: claims.Kubernetes.Pod.UID},
		}
	}
	name := sessionName(clusterName, claims.Kubernetes.Pod.Name)
	duration, err := s.duration(ctx, assoc.GetRoleArn())
	if err != nil {
		return Result{}, err
	}
	// The association's policy limits the credentials the pod gets: the
	// target role's session when it chains, else the first.
	first := iam.AssumeRoleInput{
		Service: ServicePrincipal,
		Context: map[string][]string{"aws:sourceaccount": {cl.GetAccountId()}, "aws:sourcearn": {cl.GetArn()}},
		RoleARN: assoc.GetRoleArn(), SessionName: name, Duration: duration, Tags: tags,
	}
	if assoc.GetTargetRoleArn() == "" {
		first.SessionPolicy = assoc.GetPolicy()
	}
	sess, err := s.keys.AssumeRole(ctx, first)
	if err != nil {
		return Result{}, err
	}
	if target := assoc.GetTargetRoleArn(); target != "" {
		if sess, err = s.chain(ctx, sess, assoc, name, tags); err != nil {
			return Result{}, err
		}
	}
	signer, _ := access.ParseSigner(sess.ARN)
	return Result{
		Namespace: ns, ServiceAccount: sa, AssociationARN: assoc.GetArn(), AssociationID: assoc.GetAssociationId(),
		AssumedRoleARN: sess.ARN, AssumedRoleID: signer.Principal.ID() + ":" + name, Session: sess,
	}, nil
}

// verify checks the token against the cluster's issuer: a token of
// another cluster names another issuer and is refused.
func (s *Service) verify(ctx context.Context, cl *storagev1.ClusterRecord, token string) (oidc.Claims, error) {
	iss := cl.GetOidcIssuer()
	if iss == "" {
		return oidc.Claims{}, errdefs.InvalidRequest("Cluster %s has no OIDC issuer: its service-account tokens cannot be verified.", cl.GetName())
	}
	hosted, err := s.issuers.ForCluster(ctx, cl)
	if errors.Is(err, oidc.ErrUnknownIssuer) {
		return oidc.Claims{}, errdefs.ServiceUnavailable("The service-account keys of cluster %s are not known yet; its guest agent sends them.", cl.GetName())
	}
	if err != nil {
		return oidc.Claims{}, err
	}
	claims, err := oidc.Verify(token, hosted.Keys, oidc.Expect{Issuer: iss, Audience: Audience, Now: s.now()})
	if err != nil {
		exception := InvalidTokenException
		if oidc.FailureOf(err) == oidc.Expired {
			exception = ExpiredTokenException
		}
		return oidc.Claims{}, &errdefs.Error{Exception: exception, Message: err.Error()}
	}
	k := claims.Kubernetes
	if k.Namespace == "" || k.ServiceAccount.Name == "" || claims.Subject != "system:serviceaccount:"+k.Namespace+":"+k.ServiceAccount.Name {
		return oidc.Claims{}, &errdefs.Error{Exception: InvalidTokenException, Message: "The token is not a Kubernetes service-account token."}
	}
	if k.Pod == nil || k.Pod.Name == "" || k.Pod.UID == "" {
		return oidc.Claims{}, &errdefs.Error{Exception: InvalidTokenException, Message: "The token is not bound to a pod."}
	}
	return claims, nil
}

// duration is the first session's length: the role's MaxSessionDuration,
// at most MaxSessionDuration.
func (s *Service) duration(ctx context.Context, roleARN string) (time.Duration, error) {
	role, err := s.keys.GetRole(ctx, roleARN)
	if errdefs.IsException(err, errdefs.ResourceNotFoundException) {
		return 0, errdefs.AccessDenied("Service: %s is not authorized to perform: %s on resource: %s", ServicePrincipal, iam.ActionAssumeRole, roleARN)
	}
	if err != nil {
		return 0, err
	}
	return min(time.Duration(iam.MaxSessionSeconds(role))*time.Second, MaxSessionDuration), nil
}

// chain assumes the association's target role from the first role's
// session (role chaining): the first role's own policies must allow
// sts:AssumeRole on the target, and the target's trust policy must trust
// the first role (under the association's external id).
func (s *Service) chain(ctx context.Context, first iam.Session, assoc *storagev1.PodIdentityAssociationRecord, name string,
	tags []*storagev1.SessionTag) (iam.Session, error) {
	account, _ := iam.ParsePrincipal(first.RoleARN)
	caller := identity.Caller{AccountID: account, PrincipalARN: first.ARN, AccessKeyID: first.AccessKeyID}
	cctx := identity.NewContext(ctx, caller)
	target := assoc.GetTargetRoleArn()
	if err := s.authz.AuthorizeAssumeRole(cctx, iam.ActionAssumeRole, target); err != nil {
		return iam.Session{}, err
	}
	if len(tags) > 0 {
		if err := s.authz.AuthorizeAssumeRole(cctx, iam.ActionTagSession, target); err != nil {
			return iam.Session{}, err
		}
	}
	in := iam.AssumeRoleInput{Caller: caller, RoleARN: target, SessionName: name, Duration: iam.ChainedSessionLimit, Tags: tags,
		SessionPolicy: assoc.GetPolicy()}
	if ext := assoc.GetExternalId(); ext != "" {
		in.Context = map[string][]string{"sts:externalid": {ext}}
	}
	return s.keys.AssumeRole(cctx, in)
}

// sessionName is EKS's eks-{cluster}-{pod}-{random}, cut to STS's 64
// characters and its alphabet.
func sessionName(cluster, pod string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := "-" + hex.EncodeToString(b)
	name := "eks-" + cluster + "-" + pod
	name = strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == '.' || r == '@' || r == '=' || r == ',' || r == '+' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, name)
	if len(name)+len(suffix) > 64 {
		name = name[:64-len(suffix)]
	}
	return name + suffix
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}
