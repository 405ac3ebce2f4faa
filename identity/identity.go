// Package identity carries the verified caller of a request through its
// context. Only the edges of saltbush set it: the façade after it has
// verified the request's SigV4 signature, and the gRPC server's interceptor
// from the connection's verified client certificate. Nothing reads identity
// from request metadata, so a caller cannot claim to be someone else by
// sending a header.
package identity

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/saltbush/saltbush/errdefs"
)

// Caller is who a request acts for.
type Caller struct {
	// AccountID is the 12-digit account every lookup is scoped to. It is
	// empty for a certificate identity that does not act for an account.
	AccountID string
	// PrincipalARN is the authenticated principal: an IAM user or role ARN,
	// the account root, or the SPIFFE id of a certificate identity.
	PrincipalARN string
	// AccessKeyID is the key a façade request was signed with.
	AccessKeyID string
	// Service is set for a saltbush service certificate
	// (spiffe://saltbush/service/{name}).
	Service string
	// Agent is set for a guest agent certificate
	// (spiffe://saltbush/agent/{cluster-uid}/{instance}).
	Agent *Agent
	// Delegated is true when a service acts for AccountID under a
	// delegation its policy grants.
	Delegated bool
	// SessionPolicy is the session policy of a role session (a policy
	// document, "" for none): authorization allows only what both it and
	// the role's policies allow.
	SessionPolicy string
}

// Agent names a guest agent: the cluster incarnation and the control-plane
// instance it runs on.
type Agent struct {
	ClusterUID string
	Instance   string
}

// IsRoot reports whether the caller is its account's root principal.
func (c Caller) IsRoot() bool {
	return c.AccountID != "" && c.Service == "" && c.Agent == nil && c.PrincipalARN == RootARN(c.AccountID)
}

// ctxKey is unexported so only this package can store a Caller.
type ctxKey struct{}

// NewContext returns ctx carrying c. It is called only at the trust
// boundary (gateway, gRPC interceptor), never with values a client sent.
func NewContext(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the caller of ctx, if one was set.
func FromContext(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

var accountPattern = regexp.MustCompile(`^[0-9]{12}$`)

// ValidateAccountID checks that id is a 12-digit account id.
func ValidateAccountID(id string) error {
	if !accountPattern.MatchString(id) {
		return fmt.Errorf("account id %q: must be 12 digits", id)
	}
	return nil
}

// RootARN is the ARN of an account's root principal.
func RootARN(accountID string) string { return "arn:aws:iam::" + accountID + ":root" }

// RootCaller is the account's root principal.
func RootCaller(accountID string) Caller {
	return Caller{AccountID: accountID, PrincipalARN: RootARN(accountID)}
}

// SPIFFE ids saltbush issues certificates for.
const (
	spiffePrefix  = "spiffe://saltbush/"
	servicePrefix = spiffePrefix + "service/"
	agentPrefix   = spiffePrefix + "agent/"
)

// segment is one path segment of a SPIFFE id saltbush issues: a DNS-label
// like name (service names, cluster uids, instance ids).
var segment = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ServiceID is the SPIFFE id of a saltbush service.
func ServiceID(name string) string { return servicePrefix + name }

// AgentID is the SPIFFE id of a guest agent.
func AgentID(clusterUID, instance string) string { return agentPrefix + clusterUID + "/" + instance }

// ValidateName checks a service name, cluster uid or instance id for use
// in a SPIFFE id.
func ValidateName(what, name string) error {
	if !segment.MatchString(name) {
		return fmt.Errorf("%s %q: must be 1-128 of letters, digits, '.', '_' and '-', starting with a letter or digit", what, name)
	}
	return nil
}

// FromSPIFFE returns the caller a certificate's SPIFFE id names: a service
// or an agent. Anything else is refused.
func FromSPIFFE(id string) (Caller, error) {
	switch {
	case strings.HasPrefix(id, servicePrefix):
		name := strings.TrimPrefix(id, servicePrefix)
		if err := ValidateName("service name", name); err != nil {
			return Caller{}, fmt.Errorf("SPIFFE id %q: %w", id, err)
		}
		return Caller{PrincipalARN: id, Service: name}, nil
	case strings.HasPrefix(id, agentPrefix):
		uid, instance, ok := strings.Cut(strings.TrimPrefix(id, agentPrefix), "/")
		if !ok {
			return Caller{}, fmt.Errorf("SPIFFE id %q: an agent id is %s{cluster-uid}/{instance}", id, agentPrefix)
		}
		if err := ValidateName("cluster uid", uid); err != nil {
			return Caller{}, fmt.Errorf("SPIFFE id %q: %w", id, err)
		}
		if err := ValidateName("instance", instance); err != nil {
			return Caller{}, fmt.Errorf("SPIFFE id %q: %w", id, err)
		}
		return Caller{PrincipalARN: id, Agent: &Agent{ClusterUID: uid, Instance: instance}}, nil
	default:
		return Caller{}, fmt.Errorf("SPIFFE id %q: not a saltbush service or agent id", id)
	}
}

// AccountCaller returns the caller of ctx for an operation on an
// account's resources: it must act for an account (a service identity
// that named none is refused with AccessDeniedException).
func AccountCaller(ctx context.Context) (Caller, error) {
	c, ok := FromContext(ctx)
	if !ok {
		// Every edge sets a caller; reaching here without one is a wiring bug.
		return Caller{}, errors.New("request has no authenticated caller")
	}
	if c.AccountID == "" {
		return Caller{}, errdefs.AccessDenied("%s acts for no account; EKS operations need one.", c.PrincipalARN)
	}
	return c, nil
}
