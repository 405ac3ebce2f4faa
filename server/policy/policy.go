// Package policy owns IAM-style policy documents: parsing them strictly and
// evaluating them against an action (`eks:CreateAddon`) and a resource ARN
// the way IAM evaluates identity-based policies: an explicit Deny wins over
// any Allow, and without an Allow the request is denied.
//
// Only what saltbush evaluates is accepted (Effect, Action, Resource, Sid);
// NotAction, NotResource, Condition and Principal are refused at parse time
// rather than silently ignored, so a document never grants more than it
// reads.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// MaxDocumentBytes is IAM's limit for a managed policy document.
const MaxDocumentBytes = 6144

// Effect is a statement's effect.
type Effect string

// The two effects.
const (
	Allow Effect = "Allow"
	Deny  Effect = "Deny"
)

// Document is a parsed policy document.
type Document struct {
	Version    string
	Statements []Statement
}

// Statement is one statement of a document.
type Statement struct {
	Sid       string
	Effect    Effect
	Actions   []string
	Resources []string
}

// Decision is the outcome of evaluating documents for one request.
type Decision int

// Decisions, as IAM names them.
const (
	// ImplicitDeny: no statement allows the request.
	ImplicitDeny Decision = iota
	// Allowed: some statement allows it and none denies it.
	Allowed
	// ExplicitDeny: a statement denies it (whatever else allows it).
	ExplicitDeny
)

func (d Decision) String() string {
	switch d {
	case Allowed:
		return "allow"
	case ExplicitDeny:
		return "explicit deny"
	}
	return "implicit deny"
}

// stringOrList is IAM's "one string or a list of strings" member.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
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

// statementJSON and documentJSON are the wire forms; unknown members are
// refused by the decoder.
type statementJSON struct {
	Sid      string       `json:"Sid"`
	Effect   string       `json:"Effect"`
	Action   stringOrList `json:"Action"`
	Resource stringOrList `json:"Resource"`
}

type documentJSON struct {
	Version   string          `json:"Version"`
	Statement json.RawMessage `json:"Statement"`
}

// actionPattern is service:action with IAM's wildcards, or "*".
var actionPattern = regexp.MustCompile(`^(\*|[a-z0-9-]+:[A-Za-z0-9*?]+)$`)

// Parse reads a policy document. The error names the offending statement
// and member.
func Parse(raw []byte) (*Document, error) {
	if len(raw) > MaxDocumentBytes {
		return nil, fmt.Errorf("policy document of %d bytes exceeds %d", len(raw), MaxDocumentBytes)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var doc documentJSON
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("policy document: %w", decodeError(err))
	}
	if dec.More() {
		return nil, errors.New("policy document: trailing data after the document")
	}
	switch doc.Version {
	case "2012-10-17", "2008-10-17":
	case "":
		doc.Version = "2008-10-17" // IAM's default when Version is absent
	default:
		return nil, fmt.Errorf("policy document: Version %q is not 2012-10-17 or 2008-10-17", doc.Version)
	}
	// Statement is one statement or a list of them.
	var stmts []statementJSON
	if len(doc.Statement) > 0 && strings.TrimSpace(string(doc.Statement))[0] == '{' {
		stmts = make([]statementJSON, 1)
		if err := strictDecode(doc.Statement, &stmts[0]); err != nil {
			return nil, fmt.Errorf("policy document: Statement: %w", err)
		}
	} else if err := strictDecode(doc.Statement, &stmts); err != nil {
		return nil, fmt.Errorf("policy document: Statement: %w", err)
	}
	if len(stmts) == 0 {
		return nil, errors.New("policy document: at least one Statement is required")
	}
	out := &Document{Version: doc.Version}
	for i, s := range stmts {
		name := fmt.Sprintf("Statement[%d]", i)
		if s.Sid != "" {
			name = fmt.Sprintf("Statement[%d] (Sid %q)", i, s.Sid)
		}
		st := Statement{Sid: s.Sid, Effect: Effect(s.Effect), Actions: s.Action, Resources: s.Resource}
		switch {
		case st.Effect != Allow && st.Effect != Deny:
			return nil, fmt.Errorf("%s: Effect must be Allow or Deny, got %q", name, s.Effect)
		case len(st.Actions) == 0:
			return nil, fmt.Errorf("%s: Action is required", name)
		case len(st.Resources) == 0:
			return nil, fmt.Errorf("%s: Resource is required", name)
		}
		for _, a := range st.Actions {
			if !actionPattern.MatchString(a) {
				return nil, fmt.Errorf("%s: Action %q is not service:action (wildcards * and ? allowed)", name, a)
			}
		}
		for _, r := range st.Resources {
			if r != "*" && !strings.HasPrefix(r, "arn:") {
				return nil, fmt.Errorf("%s: Resource %q is not an ARN or *", name, r)
			}
		}
		out.Statements = append(out.Statements, st)
	}
	return out, nil
}

// strictDecode decodes raw into v, refusing unknown members (NotAction,
// Condition, Principal, ... are not evaluated, so they must not pass).
func strictDecode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return decodeError(dec.Decode(v))
}

// decodeError says what is wrong with a document in a policy's words,
// not the JSON decoder's: callers show it to AWS clients.
func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("it is empty or ends early")
	case errors.As(err, &syntax):
		return fmt.Errorf("it is not valid JSON (at character %d)", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Errorf("member %s must be %s", typ.Field, jsonKind(typ.Type.Kind().String()))
		}
		return fmt.Errorf("it must be %s", jsonKind(typ.Type.Kind().String()))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if field, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return fmt.Errorf("member %s is not supported: only Version, Statement, Sid, Effect, Action and Resource are evaluated", field)
	}
	return errors.New(msg)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "a list"
	case "string":
		return "a string"
	}
	return "of another type"
}

// Evaluate decides whether the documents allow action on resource. Actions
// match case-insensitively, resources case-sensitively; both take IAM's
// wildcards (* any run of characters, ? one character).
func Evaluate(docs []*Document, action, resource string) Decision {
	allowed := false
	for _, d := range docs {
		for _, st := range d.Statements {
			if !anyMatch(st.Actions, action, true) || !anyMatch(st.Resources, resource, false) {
				continue
			}
			if st.Effect == Deny {
				return ExplicitDeny
			}
			allowed = true
		}
	}
	if allowed {
		return Allowed
	}
	return ImplicitDeny
}

func anyMatch(patterns []string, value string, foldCase bool) bool {
	for _, p := range patterns {
		if foldCase {
			if wildcardMatch(strings.ToLower(p), strings.ToLower(value)) {
				return true
			}
		} else if wildcardMatch(p, value) {
			return true
		}
	}
	return false
}

// wildcardMatch reports whether s matches pattern, where * matches any run
// of characters (including none and including ':' and '/') and ? exactly
// one. It runs in O(len(p)·len(s)) at worst, with no recursion, so a
// hostile pattern cannot make evaluation slow.
func wildcardMatch(pattern, s string) bool {
	p, str := []rune(pattern), []rune(s)
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(str) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == str[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
