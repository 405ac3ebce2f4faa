// Package accesspolicy owns the Amazon EKS access-policy catalogue and the
// authorization decision EKS makes for an access entry's associated access
// policies.
//
// The catalogue is the fixed list ListAccessPolicies returns, each policy
// with the Kubernetes RBAC rules AWS publishes for it. The rule tables are
// transcribed from the Amazon EKS User Guide page "Review access policy
// permissions" (anchor access-policy-permissions); where that page describes
// a policy only in prose, the policy carries no rules (see rules.go) rather
// than rules guessed from the prose.
//
// Authorize answers a Kubernetes SubjectAccessReview for the principal of
// one access entry the way the Kubernetes RBAC authorizer would if each
// association were a binding of its policy: a cluster-scoped association
// behaves as a ClusterRoleBinding, a namespace-scoped one as a RoleBinding
// in each namespace its scope matches. Like EKS's authorization webhook it
// never denies: when no association allows a request the decision has no
// opinion, so the cluster's own RBAC still decides.
package accesspolicy

import "strings"

// ARNPrefix is the ARN of every access policy, less the policy's name.
const ARNPrefix = "arn:aws:eks::aws:cluster-access-policy/"

// Policy is one access policy of the catalogue.
type Policy struct {
	// Name is the policy's name, such as AmazonEKSViewPolicy.
	Name string
	// ARN is ARNPrefix + Name.
	ARN string
	// Rules are the policy's Kubernetes RBAC rules; empty when AWS
	// publishes no rule table for it.
	Rules []Rule
}

// Rule is a Kubernetes RBAC PolicyRule (rbac.authorization.k8s.io/v1),
// with the same meaning: a request matches when its verb, API group,
// resource (as "resource" or "resource/subresource") and name match, or,
// for a non-resource request, its verb and URL path.
type Rule struct {
	APIGroups       []string
	Resources       []string
	Verbs           []string
	ResourceNames   []string
	NonResourceURLs []string
}

// Association is an access policy associated with an access entry, with
// the scope it was associated at.
type Association struct {
	PolicyARN string
	Scope     Scope
}

// Attributes are the request attributes of a SubjectAccessReview:
// authorization.k8s.io/v1 ResourceAttributes, or NonResourceAttributes
// when NonResource is set (then only Verb and Path count).
type Attributes struct {
	Verb        string
	APIGroup    string
	Version     string
	Resource    string
	Subresource string
	Name        string
	Namespace   string
	NonResource bool
	Path        string
}

// Decision is the access policies' answer to one request.
type Decision struct {
	// Allowed is true when an associated policy allows the request.
	Allowed bool
	// Reason names the allowing policy and its scope, or says that the
	// access policies have no opinion.
	Reason string
}

// NoOpinionReason is the reason of every decision that does not allow. It
// is not a denial: EKS's webhook answers NoOpinion, and the cluster's RBAC
// (the access entry's Kubernetes groups) still decides.
const NoOpinionReason = "no opinion: no associated EKS access policy allows the request"

// Catalog is the access-policy catalogue. It is immutable after NewCatalog
// and safe for concurrent use.
type Catalog struct {
	policies []Policy
	byARN    map[string]*compiledPolicy
	// verbBits numbers every verb some rule names (other than "*"), so a
	// rule's verbs are a bit set and a request's verb is looked up once.
	verbBits map[string]uint64
}

// NewCatalog returns the catalogue of every access policy AWS lists, with
// its rules compiled for Authorize.
func NewCatalog() *Catalog {
	return newCatalog(policyTable())
}

// newCatalog compiles policies, which it keeps: the caller must not modify
// them afterwards.
func newCatalog(policies []Policy) *Catalog {
	c := &Catalog{
		policies: policies,
		byARN:    make(map[string]*compiledPolicy, len(policies)),
		verbBits: make(map[string]uint64),
	}
	for _, p := range policies {
		for _, r := range p.Rules {
			for _, v := range r.Verbs {
				if _, seen := c.verbBits[v]; v != verbAll && !seen {
					if len(c.verbBits) == 64 {
						// The table is fixed; this is a programming error
						// caught by the first test that builds a catalog.
						panic("accesspolicy: more than 64 distinct verbs in the rule tables")
					}
					c.verbBits[v] = 1 << uint(len(c.verbBits))
				}
			}
		}
	}
	for i, p := range policies {
		cp := c.compile(p)
		cp.index = i
		c.byARN[p.ARN] = cp
	}
	return c
}

// All returns every access policy in the order ListAccessPolicies returns
// them. The result is the caller's to keep or modify.
func (c *Catalog) All() []Policy {
	out := make([]Policy, len(c.policies))
	for i, p := range c.policies {
		out[i] = copyPolicy(p)
	}
	return out
}

// Lookup returns the access policy with the given ARN. The result is the
// caller's to keep or modify.
func (c *Catalog) Lookup(arn string) (Policy, bool) {
	cp, ok := c.byARN[arn]
	if !ok {
		return Policy{}, false
	}
	return copyPolicy(c.policies[cp.index]), true
}

// Authorize decides a request of an access entry's principal from the
// entry's associations: allowed when any association's policy, within its
// scope, has a rule matching the request; otherwise no opinion (never a
// denial). The first allowing association, in the order given, names the
// reason. Associations naming a policy not in the catalogue, or with a
// scope type other than cluster or namespace, contribute nothing; a
// cluster scope's namespaces are ignored (ValidateScope refuses them).
//
// As in RBAC, a namespace scope covers the request's Namespace attribute
// only: the API server gives a request for a namespace object
// (/api/v1/namespaces/dev) Namespace "dev", so a "dev" scope may read the
// dev namespace itself if its policy allows namespaces, but not list
// namespaces.
//
// It runs on every API request of a cluster, so it allocates nothing
// except the reason of an allow through a namespace scope.
func (c *Catalog) Authorize(assocs []Association, a Attributes) Decision {
	// Look the verb up once; a verb no rule names matches only "*" rules.
	verb := c.verbBits[a.Verb]
	for i := range assocs {
		as := &assocs[i]
		p, ok := c.byARN[as.PolicyARN]
		if !ok {
			continue
		}
		switch as.Scope.Type {
		case ScopeCluster:
			// A ClusterRoleBinding: every namespace, cluster-scoped
			// resources and non-resource URLs alike.
			if p.allows(&a, verb) {
				return Decision{Allowed: true, Reason: p.clusterReason}
			}
		case ScopeNamespace:
			// RoleBindings: only requests in a matching namespace. A
			// cluster-scoped resource or a collection across namespaces
			// has Namespace "", and non-resource URLs have none.
			if a.NonResource || a.Namespace == "" {
				continue
			}
			pattern, ok := matchNamespace(as.Scope.Namespaces, a.Namespace)
			if !ok {
				continue
			}
			if p.allows(&a, verb) {
				return Decision{Allowed: true, Reason: p.namespaceReasonPrefix + pattern + ") allows"}
			}
		}
	}
	return Decision{Reason: NoOpinionReason}
}

// verbAll, groupAll, resourceAll and urlAll are RBAC's wildcards.
const (
	verbAll     = "*"
	groupAll    = "*"
	resourceAll = "*"
	urlAll      = "*"
)

// compiledPolicy is a policy's rules in the form Authorize matches fast.
type compiledPolicy struct {
	index                 int // in Catalog.policies
	clusterReason         string
	namespaceReasonPrefix string
	resourceRules         []compiledRule
	nonResourceRules      []compiledRule
}

// compiledRule is a Rule with its wildcards and verbs resolved.
type compiledRule struct {
	anyVerb bool
	verbs   uint64 // bits of Catalog.verbBits

	anyGroup bool
	groups   []string

	anyResource bool
	resources   []string // exact, "resource" or "resource/subresource"
	anyOf       []string // subresources of "*/subresource" entries
	names       []string

	anyURL      bool
	urls        []string // exact paths
	urlPrefixes []string // paths of "prefix*" entries, without the '*'
}

func (c *Catalog) compile(p Policy) *compiledPolicy {
	cp := &compiledPolicy{
		clusterReason:         "EKS access policy " + p.Name + " (cluster scope) allows",
		namespaceReasonPrefix: "EKS access policy " + p.Name + " (namespace scope: ",
	}
	for _, r := range p.Rules {
		cr := c.compileRule(r)
		// As in RBAC, a rule with resources applies to resource requests
		// and one with URLs to non-resource requests; a rule may do both.
		if len(r.Resources) > 0 {
			cp.resourceRules = append(cp.resourceRules, cr)
		}
		if len(r.NonResourceURLs) > 0 {
			cp.nonResourceRules = append(cp.nonResourceRules, cr)
		}
	}
	return cp
}

func (c *Catalog) compileRule(r Rule) compiledRule {
	var cr compiledRule
	for _, v := range r.Verbs {
		if v == verbAll {
			cr.anyVerb = true
		} else {
			cr.verbs |= c.verbBits[v]
		}
	}
	for _, g := range r.APIGroups {
		if g == groupAll {
			cr.anyGroup = true
		}
		cr.groups = append(cr.groups, g)
	}
	for _, res := range r.Resources {
		switch {
		case res == resourceAll:
			cr.anyResource = true
		case strings.HasPrefix(res, "*/"):
			cr.anyOf = append(cr.anyOf, res[2:])
		default:
			cr.resources = append(cr.resources, res)
		}
	}
	cr.names = append(cr.names, r.ResourceNames...)
	for _, u := range r.NonResourceURLs {
		switch {
		case u == urlAll:
			cr.anyURL = true
		case strings.HasSuffix(u, "*"):
			// RBAC trims every trailing '*' before the prefix test.
			cr.urlPrefixes = append(cr.urlPrefixes, strings.TrimRight(u, "*"))
		default:
			cr.urls = append(cr.urls, u)
		}
	}
	return cr
}

// allows reports whether any of the policy's rules matches a; verb is the
// request verb's bit (0 when no rule names it).
func (p *compiledPolicy) allows(a *Attributes, verb uint64) bool {
	if a.NonResource {
		for i := range p.nonResourceRules {
			r := &p.nonResourceRules[i]
			if r.verbMatches(verb) && r.urlMatches(a.Path) {
				return true
			}
		}
		return false
	}
	for i := range p.resourceRules {
		r := &p.resourceRules[i]
		if r.verbMatches(verb) && r.groupMatches(a.APIGroup) &&
			r.resourceMatches(a.Resource, a.Subresource) && r.nameMatches(a.Name) {
			return true
		}
	}
	return false
}

func (r *compiledRule) verbMatches(verb uint64) bool {
	return r.anyVerb || r.verbs&verb != 0
}

func (r *compiledRule) groupMatches(group string) bool {
	if r.anyGroup {
		return true
	}
	for _, g := range r.groups {
		if g == group {
			return true
		}
	}
	return false
}

// resourceMatches is RBAC's ResourceMatches: "*", the exact resource (or
// "resource/subresource" when the request names a subresource), or
// "*/subresource". Like RBAC, "pods/*" is not a wildcard: it matches only
// a subresource literally named "*".
func (r *compiledRule) resourceMatches(resource, subresource string) bool {
	if r.anyResource {
		return true
	}
	for _, res := range r.resources {
		if combinedEquals(res, resource, subresource) {
			return true
		}
	}
	if subresource != "" {
		for _, sub := range r.anyOf {
			if sub == subresource {
				return true
			}
		}
	}
	return false
}

// combinedEquals reports whether rule == resource, or rule ==
// resource+"/"+subresource when subresource is set, without building the
// combined string.
func combinedEquals(rule, resource, subresource string) bool {
	if subresource == "" {
		return rule == resource
	}
	return len(rule) == len(resource)+1+len(subresource) &&
		rule[:len(resource)] == resource &&
		rule[len(resource)] == '/' &&
		rule[len(resource)+1:] == subresource
}

// nameMatches is RBAC's ResourceNameMatches: names restrict only when the
// rule lists some, and then a request without a name (list, watch, create,
// deletecollection) never matches.
func (r *compiledRule) nameMatches(name string) bool {
	if len(r.names) == 0 {
		return true
	}
	for _, n := range r.names {
		if n == name {
			return true
		}
	}
	return false
}

// urlMatches is RBAC's NonResourceURLMatches: "*", the exact path, or a
// path starting with a "prefix*" entry's prefix.
func (r *compiledRule) urlMatches(path string) bool {
	if r.anyURL {
		return true
	}
	for _, u := range r.urls {
		if u == path {
			return true
		}
	}
	for _, prefix := range r.urlPrefixes {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

func copyPolicy(p Policy) Policy {
	out := Policy{Name: p.Name, ARN: p.ARN}
	if p.Rules != nil {
		out.Rules = make([]Rule, len(p.Rules))
		for i, r := range p.Rules {
			out.Rules[i] = Rule{
				APIGroups:       cloneStrings(r.APIGroups),
				Resources:       cloneStrings(r.Resources),
				Verbs:           cloneStrings(r.Verbs),
				ResourceNames:   cloneStrings(r.ResourceNames),
				NonResourceURLs: cloneStrings(r.NonResourceURLs),
			}
		}
	}
	return out
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}
