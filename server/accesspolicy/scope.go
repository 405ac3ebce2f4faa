package accesspolicy

import (
	"errors"
	"fmt"
	"strings"
)

// The access scope types (AccessScope.type in the EKS API).
const (
	// ScopeCluster grants a policy's rules cluster-wide, as a
	// ClusterRoleBinding would.
	ScopeCluster = "cluster"
	// ScopeNamespace grants a policy's rules in the scope's namespaces
	// only, as a RoleBinding in each would.
	ScopeNamespace = "namespace"
)

// MaxScopeNamespaces is the most namespaces one access scope may list.
// AWS documents no such limit (neither the API reference nor the user
// guide gives one); it is saltbush's own bound, so an association record
// and the namespace scan on every authorization stay small. It is set well
// above any listing in AWS's examples.
const MaxScopeNamespaces = 100

// maxNamespaceLength is the length limit of a Kubernetes namespace name (an
// RFC 1123 label).
const maxNamespaceLength = 63

// Scope is an association's access scope: Type ScopeCluster with no
// Namespaces, or ScopeNamespace with one or more namespaces, each a
// namespace name or a name prefix followed by one '*' ("dev-*" matches
// every namespace whose name starts with "dev-").
type Scope struct {
	Type       string
	Namespaces []string
}

// ValidateScope checks s as AssociateAccessPolicy would and returns nil or
// an error whose text is the whole message for the InvalidParameterException
// the caller answers with (no exception name or other prefix in it).
//
// A lone "*" is refused. AWS's user guide presents the wildcard as
// completing a name prefix ("specify dev-* to scope an access policy to all
// namespaces that start with dev-") and says nothing of a bare "*", which
// has no name in it at all; the way to grant a policy everywhere is the
// cluster scope. Refusing it keeps "every namespace" an explicit choice,
// and an association refused today can be allowed later, whereas one
// stored today could not be taken back.
func ValidateScope(s Scope) error {
	switch s.Type {
	case ScopeCluster:
		if len(s.Namespaces) > 0 {
			return errors.New("Namespaces can't be specified when the access scope type is cluster.") //nolint:staticcheck // ST1005: AWS's exact message
		}
		return nil
	case ScopeNamespace:
	default:
		return fmt.Errorf("The access scope type %q isn't valid. Valid values are cluster and namespace.", s.Type) //nolint:staticcheck // ST1005: AWS's exact message
	}
	if len(s.Namespaces) == 0 {
		return errors.New("At least one namespace is required when the access scope type is namespace.") //nolint:staticcheck // ST1005: AWS's exact message
	}
	if len(s.Namespaces) > MaxScopeNamespaces {
		return fmt.Errorf("An access scope can include at most %d namespaces; %d were specified.", MaxScopeNamespaces, len(s.Namespaces)) //nolint:staticcheck // ST1005: AWS's exact message
	}
	seen := make(map[string]struct{}, len(s.Namespaces))
	for _, ns := range s.Namespaces {
		if msg := namespacePatternProblem(ns); msg != "" {
			return fmt.Errorf("The namespace %q isn't valid: %s", ns, msg) //nolint:staticcheck // ST1005: AWS's exact message
		}
		if _, dup := seen[ns]; dup {
			return fmt.Errorf("The namespace %q is specified more than once.", ns) //nolint:staticcheck // ST1005: AWS's exact message
		}
		seen[ns] = struct{}{}
	}
	return nil
}

// namespacePatternProblem returns why ns is not a namespace name or a name
// prefix followed by one '*', or "" when it is.
func namespacePatternProblem(ns string) string {
	name, wildcard := strings.CutSuffix(ns, "*")
	switch {
	case ns == "":
		return "a namespace can't be empty."
	case ns == "*":
		return "a wildcard must follow a namespace name prefix, such as dev-*. To grant access across the cluster, use the cluster access scope type."
	case strings.Contains(name, "*"):
		return "the wildcard character '*' is allowed only once, as the last character."
	case len(name) > maxNamespaceLength:
		return "a namespace can be at most 63 characters."
	}
	for i := 0; i < len(name); i++ {
		if !isLowerAlnum(name[i]) && name[i] != '-' {
			return "a namespace can contain only lowercase letters, numbers and hyphens (-)."
		}
	}
	if !isLowerAlnum(name[0]) {
		return "a namespace must start with a lowercase letter or a number."
	}
	// A prefix may end in '-' ("dev-*"); a whole name may not.
	if !wildcard && !isLowerAlnum(name[len(name)-1]) {
		return "a namespace must end with a lowercase letter or a number."
	}
	return ""
}

func isLowerAlnum(b byte) bool {
	return 'a' <= b && b <= 'z' || '0' <= b && b <= '9'
}

// matchNamespace returns the first of patterns that matches namespace: the
// same name, or, for a pattern ending in '*', any name starting with what
// precedes the '*' (so "dev*" matches "dev" and "dev-a").
func matchNamespace(patterns []string, namespace string) (string, bool) {
	for _, p := range patterns {
		if prefix, wildcard := strings.CutSuffix(p, "*"); wildcard {
			if strings.HasPrefix(namespace, prefix) {
				return p, true
			}
		} else if p == namespace {
			return p, true
		}
	}
	return "", false
}
