package iam

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Condition is one condition of a trust statement: an operator on a
// condition key with the values it is compared with. A statement applies
// only when every condition holds.
type Condition struct {
	// Operator is the base operator (StringEquals, StringLike, ArnLike…).
	Operator string
	// Set is "", "ForAnyValue" or "ForAllValues".
	Set string
	// IfExists: the condition holds when the key is absent.
	IfExists bool
	// Key is the condition key, lower-cased (keys are case-insensitive).
	Key    string
	Values []string
}

// conditionOperators are the operators trust policies of roles for pods
// use, each with whether it is negated.
var conditionOperators = map[string]bool{
	"StringEquals": false, "StringNotEquals": true,
	"StringEqualsIgnoreCase": false, "StringNotEqualsIgnoreCase": true,
	"StringLike": false, "StringNotLike": true,
	"ArnEquals": false, "ArnNotEquals": true, "ArnLike": false, "ArnNotLike": true,
}

// Condition keys: global ones saltbush sets, and an OIDC provider's
// ({issuer host and path}:sub, :aud, :amr).
var (
	globalConditionKey   = regexp.MustCompile(`^(aws:sourceaccount|aws:sourcearn|aws:tagkeys|aws:requesttag/[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}|sts:externalid|sts:rolesessionname)$`)
	providerConditionKey = regexp.MustCompile(`^[^\s*?]+[./][^\s*?]*:(sub|aud|amr)$`)
)

// parseConditions reads a statement's Condition block strictly: known
// operators (with ForAnyValue:/ForAllValues: and IfExists), known keys, and
// values without policy variables (which saltbush does not expand, so a
// value holding one would never mean what it says).
func parseConditions(raw json.RawMessage) ([]Condition, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var block map[string]map[string]stringList
	if err := json.Unmarshal(raw, &block); err != nil {
		return nil, errors.New(`Condition must be an object of operators, each an object of condition keys and values`) //nolint:staticcheck // IAM's member name
	}
	var out []Condition
	for op, keys := range block {
		c := Condition{Operator: op}
		if set, rest, ok := strings.Cut(c.Operator, ":"); ok {
			if set != "ForAnyValue" && set != "ForAllValues" {
				return nil, fmt.Errorf("condition operator %q: only the ForAnyValue and ForAllValues qualifiers are supported", op)
			}
			c.Set, c.Operator = set, rest
		}
		if base, ok := strings.CutSuffix(c.Operator, "IfExists"); ok {
			c.Operator, c.IfExists = base, true
		}
		if _, ok := conditionOperators[c.Operator]; !ok {
			return nil, fmt.Errorf("condition operator %q is not supported: String and Arn operators (Equals, NotEquals, Like, NotLike) are", op)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("condition operator %q names no condition key", op)
		}
		for key, values := range keys {
			k := strings.ToLower(key)
			if !globalConditionKey.MatchString(k) && !providerConditionKey.MatchString(k) {
				return nil, fmt.Errorf("condition key %q is not supported: an OIDC provider's {issuer}:sub, :aud and :amr, aws:SourceAccount, aws:SourceArn, aws:RequestTag/…, aws:TagKeys, sts:ExternalId and sts:RoleSessionName are", key)
			}
			if len(values) == 0 {
				return nil, fmt.Errorf("condition key %q has no values", key)
			}
			for _, v := range values {
				if strings.Contains(v, "${") {
					return nil, fmt.Errorf("condition key %q: policy variables (%q) are not supported", key, v)
				}
			}
			cc := c
			cc.Key, cc.Values = k, values
			out = append(out, cc)
		}
	}
	// Map order is random; evaluation does not depend on it, but a stable
	// order keeps the parsed policy comparable.
	slices.SortFunc(out, func(a, b Condition) int {
		return strings.Compare(a.Set+a.Operator+a.Key, b.Set+b.Operator+b.Key)
	})
	return out, nil
}

// conditionsHold reports whether every condition holds for the request's
// context (keys lower-cased).
func conditionsHold(conds []Condition, ctx map[string][]string) bool {
	for _, c := range conds {
		if !c.holds(ctx[c.Key]) {
			return false
		}
	}
	return true
}

// holds evaluates one condition as IAM does: an absent key fails a
// positive operator and satisfies a negated one (and IfExists makes it
// hold either way); a positive operator holds when a request value matches
// one of the condition's values, a negated one when none does; ForAllValues
// holds when every request value matches (vacuously for none), ForAnyValue
// when at least one does.
func (c Condition) holds(values []string) bool {
	negated := conditionOperators[c.Operator]
	if len(values) == 0 {
		switch {
		case c.IfExists:
			return true
		case c.Set == "ForAllValues":
			return true
		case c.Set == "ForAnyValue":
			return false
		}
		return negated
	}
	if c.Set == "ForAllValues" {
		for _, v := range values {
			if c.matchesAny(v) == negated {
				return false
			}
		}
		return true
	}
	for _, v := range values {
		if c.matchesAny(v) {
			return !negated
		}
	}
	return negated
}

// matchesAny reports whether v matches one of the condition's values under
// its (non-negated) operator.
func (c Condition) matchesAny(v string) bool {
	for _, want := range c.Values {
		var ok bool
		switch c.Operator {
		case "StringEquals", "StringNotEquals":
			ok = v == want
		case "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase":
			ok = strings.EqualFold(v, want)
		case "StringLike", "StringNotLike":
			ok = globMatch(want, v)
		case "ArnEquals", "ArnNotEquals":
			ok = v == want
		case "ArnLike", "ArnNotLike":
			ok = arnLike(want, v)
		}
		if ok {
			return true
		}
	}
	return false
}

// globMatch matches IAM's wildcards: * any run of characters, ? one.
func globMatch(pattern, s string) bool {
	// path.Match treats "/" and "[" specially; IAM does not: everything
	// but * and ? is literal, and * crosses slashes.
	var b strings.Builder
	b.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(s)
}

// arnLike matches ARNs segment by segment (arn:partition:service:region:
// account:resource), each with IAM's wildcards, as ArnLike does.
func arnLike(pattern, arn string) bool {
	ps, as := strings.SplitN(pattern, ":", 6), strings.SplitN(arn, ":", 6)
	if len(ps) != 6 || len(as) != 6 {
		return false
	}
	for i := range ps {
		if !globMatch(ps[i], as[i]) {
			return false
		}
	}
	return true
}
