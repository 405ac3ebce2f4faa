// Package authz decides whether the caller of a request may take an action
// on a resource: IAM-style policy evaluation (server/policy) against the
// action (eks:CreateAddon) and the resource ARN, the way AWS evaluates
// identity-based policies. An account's root principal may do anything in
// its account; every other IAM principal and every service identity may do
// only what its policies allow; an explicit Deny wins; guest agents take no
// EKS or control actions at all.
package authz

import (
	"context"
	"fmt"
	"strings"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/policy"
)

// Policies supplies the documents evaluated for a caller (iam.Cache).
type Policies interface {
	Policies(ctx context.Context, principalARN string) ([]*policy.Document, error)
	ServicePolicy(ctx context.Context, name string) (*policy.Document, bool, error)
}

// Authorizer answers "may the caller do this?". Services hold one and ask
// before touching a resource.
type Authorizer struct {
	policies Policies
}

// New returns an authorizer over p.
func New(p Policies) *Authorizer { return &Authorizer{policies: p} }

// Authorize returns nil when the caller of ctx may take action on
// resource (an ARN, or "*" for actions on no particular resource), and an
// AccessDeniedException naming both otherwise. The first action a request
// is authorized for is noted for its audit record.
func (a *Authorizer) Authorize(ctx context.Context, action, resource string) error {
	return a.authorize(ctx, action, resource, true)
}

// AuthorizeAssumeRole is Authorize for sts:AssumeRole and sts:TagSession on
// a role, which may belong to another account: there the role's trust
// policy (server/iam/trust.go, decided after this) is the role's account's
// consent, so the account wall does not apply to this one decision. The
// caller's own policies must still allow the action on the role's ARN.
func (a *Authorizer) AuthorizeAssumeRole(ctx context.Context, action, roleARN string) error {
	return a.authorize(ctx, action, roleARN, false)
}

func (a *Authorizer) authorize(ctx context.Context, action, resource string, wall bool) error {
	audit.Note(ctx, action, resource)
	who, ok := identity.FromContext(ctx)
	if !ok {
		return errdefs.AccessDenied("The request has no authenticated caller.")
	}
	decision, err := a.decide(ctx, who, action, resource, wall)
	if err != nil {
		return fmt.Errorf("authorize %s for %s on %s: %w", action, who.PrincipalARN, resource, err)
	}
	switch decision {
	case policy.Allowed:
		return nil
	case policy.ExplicitDeny:
		return errdefs.AccessDenied("User: %s is not authorized to perform: %s on resource: %s with an explicit deny in an identity-based policy",
			who.PrincipalARN, action, resource)
	default:
		return errdefs.AccessDenied("User: %s is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
			who.PrincipalARN, action, resource, action)
	}
}

// ActFor decides whether a service identity may act for account: its
// policy must allow saltbush:ActForAccount on the account's root ARN.
func (a *Authorizer) ActFor(ctx context.Context, service, account string) error {
	doc, ok, err := a.policies.ServicePolicy(ctx, service)
	if err != nil {
		return fmt.Errorf("delegation of service %s to account %s: %w", service, account, err)
	}
	if ok && policy.Evaluate([]*policy.Document{doc}, ActForAccount, identity.RootARN(account)) == policy.Allowed {
		return nil
	}
	return errdefs.AccessDenied("Service %s is not authorized to act for account %s.", identity.ServiceID(service), account)
}

// ActForAccount is the action a service's policy must allow, on the
// account's root ARN, before the service may act for that account.
const ActForAccount = "saltbush:ActForAccount"

func (a *Authorizer) decide(ctx context.Context, who identity.Caller, action, resource string, wall bool) (policy.Decision, error) {
	if who.Agent != nil {
		return policy.ImplicitDeny, nil
	}
	// Accounts are walls: nothing authorizes an action on another account's
	// resource (lookups are account-scoped too; this is the second wall).
	if acct, ok := resourceAccount(resource); wall && ok && who.AccountID != "" && acct != who.AccountID {
		return policy.ImplicitDeny, nil
	}
	if who.Service != "" {
		doc, ok, err := a.policies.ServicePolicy(ctx, who.Service)
		if err != nil || !ok {
			return policy.ImplicitDeny, err
		}
		return policy.Evaluate([]*policy.Document{doc}, action, resource), nil
	}
	if who.IsRoot() {
		return policy.Allowed, nil
	}
	docs, err := a.policies.Policies(ctx, who.PrincipalARN)
	if err != nil {
		return policy.ImplicitDeny, err
	}
	decision := policy.Evaluate(docs, action, resource)
	if who.SessionPolicy == "" || decision == policy.ExplicitDeny {
		return decision, nil
	}
	// A session policy limits the session to what both allow, as IAM's
	// session policies do: it never grants what the role's do not.
	session, err := policy.Parse([]byte(who.SessionPolicy))
	if err != nil {
		return policy.ImplicitDeny, fmt.Errorf("the session policy of %s: %w", who.PrincipalARN, err)
	}
	switch policy.Evaluate([]*policy.Document{session}, action, resource) {
	case policy.ExplicitDeny:
		return policy.ExplicitDeny, nil
	case policy.Allowed:
		return decision, nil
	}
	return policy.ImplicitDeny, nil
}

// resourceAccount returns the account field of an ARN
// (arn:partition:service:region:account:resource).
func resourceAccount(arn string) (string, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[4] == "" {
		return "", false
	}
	return parts[4], true
}

// PassRoles checks, as IAM checks iam:PassRole, that the caller may hand
// each role ARN to the service (add-on service accounts, pod identities,
// cluster roles). Empty ARNs, and ARNs that name no role of the caller's
// account, are skipped here: the request's validation refuses those with
// the InvalidParameterException AWS answers.
func (a *Authorizer) PassRoles(ctx context.Context, roleARNs ...string) error {
	who, _ := identity.FromContext(ctx)
	for _, arn := range roleARNs {
		if acct, ok := resourceAccount(arn); arn == "" || !ok || acct != who.AccountID {
			continue
		}
		if err := a.Authorize(ctx, "iam:PassRole", arn); err != nil {
			return err
		}
	}
	return nil
}
