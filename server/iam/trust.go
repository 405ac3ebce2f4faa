package iam

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Trust-policy actions: the ones a role's trust policy grants.
const (
	ActionAssumeRole                = "sts:AssumeRole"
	ActionAssumeRoleWithWebIdentity = "sts:AssumeRoleWithWebIdentity"
	ActionTagSession                = "sts:TagSession"
)

// TrustPolicy is a parsed role trust policy: which principals may call
// sts:AssumeRole, sts:AssumeRoleWithWebIdentity (and sts:TagSession) on the
// role, under which conditions. It is an IAM resource-based policy reduced
// to what saltbush evaluates: Effect, Action, Principal (AWS, Federated
// OIDC providers, Service) and Condition with the operators and keys of
// condition.go. NotPrincipal, NotAction and anything else are refused when
// the policy is set, never ignored, so a trust policy never lets in more
// than it reads.
type TrustPolicy struct {
	Statements []TrustStatement
}

// TrustStatement is one statement of a trust policy.
type TrustStatement struct {
	Sid    string
	Effect string
	// Actions are sts:AssumeRole, sts:AssumeRoleWithWebIdentity,
	// sts:TagSession, sts:* or *.
	Actions []string
	// Anyone is the bare Principal "*".
	Anyone bool
	// Principals are AWS principals: "*" (any AWS principal), an account
	// id, an account root ARN, an IAM user or role ARN, or an assumed-role
	// session ARN.
	Principals []string
	// Federated are OIDC provider ARNs
	// (arn:aws:iam::{account}:oidc-provider/{host and path}).
	Federated []string
	// Services are service principals (pods.eks.amazonaws.com).
	Services []string
	// Conditions must all hold.
	Conditions []Condition
}

type trustStatementJSON struct {
	Sid       string          `json:"Sid"`
	Effect    string          `json:"Effect"`
	Action    stringList      `json:"Action"`
	Principal json.RawMessage `json:"Principal"`
	Condition json.RawMessage `json:"Condition"`
}

type trustDocumentJSON struct {
	Version   string          `json:"Version"`
	Id        string          `json:"Id"` //nolint:revive // IAM's member name
	Statement json.RawMessage `json:"Statement"`
}

// stringList is IAM's "one string or a list of strings".
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("must be a string or a list of strings")
	}
	*s = many
	return nil
}

// MaxTrustPolicyBytes is IAM's limit for a role trust policy.
const MaxTrustPolicyBytes = 2048

var (
	trustAccount = regexp.MustCompile(`^[0-9]{12}$`)
	trustAction  = regexp.MustCompile(`^(?i)(\*|sts:\*|sts:AssumeRole|sts:AssumeRoleWithWebIdentity|sts:TagSession)$`)
	// oidcProviderARN is a Federated principal saltbush can verify: an IAM
	// OIDC provider (SAML providers and web identity federation with
	// public identity providers are not offered).
	oidcProviderARN  = regexp.MustCompile(`^arn:aws:iam::[0-9]{12}:oidc-provider/[^\s*?]+$`)
	servicePrincipal = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*\.amazonaws\.com$`)
	trustPrincipal   = regexp.MustCompile(`^arn:aws:(iam::[0-9]{12}:(root|(user|role)/([\x21-\x7e]*/)?[\w+=,.@-]{1,64})|sts::[0-9]{12}:assumed-role/[\w+=,.@-]{1,64}/[\w+=,.@-]{2,64})$`)
)

// ParseTrustPolicy reads a role trust policy strictly. Its error names the
// statement and member at fault, in words an AWS client shows as a
// MalformedPolicyDocument message.
func ParseTrustPolicy(raw string) (*TrustPolicy, error) {
	if len(raw) > MaxTrustPolicyBytes {
		return nil, fmt.Errorf("the trust policy of %d bytes exceeds %d", len(raw), MaxTrustPolicyBytes)
	}
	var doc trustDocumentJSON
	if err := strictJSON([]byte(raw), &doc); err != nil {
		return nil, fmt.Errorf("the trust policy is not a policy document: %w", err)
	}
	switch doc.Version {
	case "2012-10-17", "2008-10-17", "":
	default:
		return nil, fmt.Errorf("the trust policy's Version %q is not 2012-10-17 or 2008-10-17", doc.Version)
	}
	var stmts []trustStatementJSON
	trimmed := strings.TrimSpace(string(doc.Statement))
	switch {
	case trimmed == "":
		return nil, errors.New("the trust policy has no Statement")
	case trimmed[0] == '{':
		stmts = make([]trustStatementJSON, 1)
		if err := strictJSON(doc.Statement, &stmts[0]); err != nil {
			return nil, fmt.Errorf("the trust policy's Statement: %w", err)
		}
	default:
		if err := strictJSON(doc.Statement, &stmts); err != nil {
			return nil, fmt.Errorf("the trust policy's Statement: %w", err)
		}
	}
	if len(stmts) == 0 {
		return nil, errors.New("the trust policy has no Statement")
	}
	tp := &TrustPolicy{}
	for i, s := range stmts {
		name := fmt.Sprintf("Statement[%d]", i)
		if s.Sid != "" {
			name = fmt.Sprintf("Statement[%d] (Sid %q)", i, s.Sid)
		}
		if s.Effect != "Allow" && s.Effect != "Deny" {
			return nil, fmt.Errorf("%s: Effect must be Allow or Deny, got %q", name, s.Effect)
		}
		if len(s.Action) == 0 {
			return nil, fmt.Errorf("%s: Action is required", name)
		}
		for _, a := range s.Action {
			if !trustAction.MatchString(a) {
				return nil, fmt.Errorf("%s: Action %q is not sts:AssumeRole, sts:AssumeRoleWithWebIdentity, sts:TagSession, sts:* or *", name, a)
			}
		}
		st := TrustStatement{Sid: s.Sid, Effect: s.Effect, Actions: s.Action}
		if err := parseTrustPrincipal(s.Principal, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		conds, err := parseConditions(s.Condition)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		st.Conditions = conds
		tp.Statements = append(tp.Statements, st)
	}
	return tp, nil
}

// parseTrustPrincipal reads Principal: "*", or an object of AWS,
// Federated and Service principals (each one or many).
func parseTrustPrincipal(raw json.RawMessage, st *TrustStatement) error {
	if len(raw) == 0 {
		return errors.New("Principal is required") //nolint:staticcheck // IAM's member name starts the message
	}
	var star string
	if json.Unmarshal(raw, &star) == nil {
		if star != "*" {
			return fmt.Errorf("Principal %q must be \"*\" or an object of AWS, Federated or Service principals", star) //nolint:staticcheck // IAM's member name
		}
		st.Anyone = true
		return nil
	}
	var m map[string]stringList
	if err := json.Unmarshal(raw, &m); err != nil {
		return errors.New(`Principal must be "*" or an object of AWS, Federated or Service principals`) //nolint:staticcheck // IAM's member name
	}
	for kind, vs := range m {
		for _, v := range vs {
			switch kind {
			case "AWS":
				if v != "*" && !trustAccount.MatchString(v) && !trustPrincipal.MatchString(v) {
					return fmt.Errorf("Principal %q is not an account id, an account root, IAM user or role ARN, a role session ARN or *", v) //nolint:staticcheck // IAM's member name
				}
				st.Principals = append(st.Principals, v)
			case "Federated":
				if !oidcProviderARN.MatchString(v) {
					return fmt.Errorf("Federated principal %q is not an IAM OIDC provider ARN (arn:aws:iam::{account}:oidc-provider/{issuer host and path})", v) //nolint:staticcheck // IAM's principal type starts the message
				}
				st.Federated = append(st.Federated, v)
			case "Service":
				if !servicePrincipal.MatchString(v) {
					return fmt.Errorf("Service principal %q is not a service principal name such as pods.eks.amazonaws.com", v)
				}
				st.Services = append(st.Services, v)
			default:
				return fmt.Errorf("Principal type %q is not supported: AWS, Federated and Service principals may assume a role here", kind) //nolint:staticcheck // IAM's member name
			}
		}
	}
	if len(st.Principals)+len(st.Federated)+len(st.Services) == 0 {
		return errors.New("Principal names no principal") //nolint:staticcheck // IAM's member name
	}
	return nil
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// The decoder's words, without its package prefix; an unknown
		// member says what is evaluated instead.
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if field, ok := strings.CutPrefix(msg, "unknown field "); ok {
			return fmt.Errorf("member %s is not supported: only Version, Id, Statement, Sid, Effect, Action, Principal and Condition are evaluated", field)
		}
		return errors.New(msg)
	}
	if dec.More() {
		return errors.New("trailing data after the document")
	}
	return nil
}

// Caller is who asks to assume a role, as the trust policy sees it: an
// AWS principal (Account and ARN), a web identity (Federated) or a
// service (Service), with the request's condition keys.
type Caller struct {
	// Account is the caller's account (AWS principals only).
	Account string
	// ARN is the caller's principal: an IAM user or role ARN, or an
	// assumed-role session ARN (AWS principals only).
	ARN string
	// RoleARN is, for a role session, its role's ARN (path included);
	// empty otherwise.
	RoleARN string
	// Federated is the OIDC provider ARN of a web identity.
	Federated string
	// Service is the service principal acting.
	Service string
	// Context holds the request's condition keys (lower-cased) and their
	// values: {provider}:sub and :aud of a web identity, aws:SourceAccount,
	// aws:RequestTag/…, sts:ExternalId, …
	Context map[string][]string
}

// Allows reports whether the trust policy lets caller take action (an
// explicit Deny wins; without an Allow the answer is no).
func (tp *TrustPolicy) Allows(caller Caller, action string) bool {
	allowed := false
	for _, st := range tp.Statements {
		if !st.matchesAction(action) || !st.matchesPrincipal(caller) || !conditionsHold(st.Conditions, caller.Context) {
			continue
		}
		if st.Effect == "Deny" {
			return false
		}
		allowed = true
	}
	return allowed
}

func (st TrustStatement) matchesAction(action string) bool {
	for _, a := range st.Actions {
		if a == "*" || strings.EqualFold(a, "sts:*") || strings.EqualFold(a, action) {
			return true
		}
	}
	return false
}

// matchesPrincipal: the bare "*" is anyone. Among AWS principals, "*" is
// any AWS principal; an account id or root ARN is every principal of the
// account (whose own policies must then allow the call, as AWS requires);
// a user or role ARN matches exactly, and a role ARN also matches that
// role's sessions; a session ARN matches that session. A Federated
// principal matches a web identity of that provider, a Service principal
// that service.
func (st TrustStatement) matchesPrincipal(c Caller) bool {
	if st.Anyone {
		return true
	}
	if c.ARN != "" {
		for _, p := range st.Principals {
			switch {
			case p == "*":
				return true
			case p == c.Account, p == "arn:aws:iam::"+c.Account+":root":
				return true
			case p == c.ARN:
				return true
			case c.RoleARN != "" && (p == c.RoleARN || p == EffectivePrincipal(c.ARN)):
				return true
			}
		}
	}
	if c.Federated != "" && slices.Contains(st.Federated, c.Federated) {
		return true
	}
	return c.Service != "" && slices.Contains(st.Services, c.Service)
}
