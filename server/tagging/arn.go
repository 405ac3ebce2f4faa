package tagging

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/saltbush/saltbush/identity"
)

// ARN is a parsed EKS resource ARN:
// arn:aws:eks:{region}:{account}:{type}/{path...}.
type ARN struct {
	Raw     string
	Region  string
	Account string
	// Type is the resource type: cluster, addon, access-entry.
	Type string
	// Path is the rest, split on "/": [name] for a cluster,
	// [cluster, addon, uuid] for an add-on.
	Path []string
}

// ParseARN parses an EKS resource ARN. Path labels arrive percent-encoded
// from the façade (its unescaping mode keeps reserved characters escaped so
// that "/" in an ARN cannot split a route), so they are decoded here; a real
// ARN never contains "%".
func ParseARN(raw string) (ARN, error) {
	s := raw
	if strings.Contains(s, "%") {
		dec, err := url.PathUnescape(s)
		if err != nil {
			return ARN{}, fmt.Errorf("resource ARN %q is not validly percent-encoded", raw)
		}
		s = dec
	}
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != "aws" || parts[2] != "eks" {
		return ARN{}, fmt.Errorf("resource ARN %q is not an EKS ARN (arn:aws:eks:region:account:type/name)", s)
	}
	if err := identity.ValidateAccountID(parts[4]); err != nil {
		return ARN{}, fmt.Errorf("resource ARN %q: %w", s, err)
	}
	typ, rest, ok := strings.Cut(parts[5], "/")
	if !ok || typ == "" || rest == "" {
		return ARN{}, fmt.Errorf("resource ARN %q names no resource", s)
	}
	path := strings.Split(rest, "/")
	for _, p := range path {
		if p == "" {
			return ARN{}, fmt.Errorf("resource ARN %q has an empty path segment", s)
		}
	}
	return ARN{Raw: s, Region: parts[3], Account: parts[4], Type: typ, Path: path}, nil
}
