package accesspolicy

import (
	"fmt"
	"strings"
	"testing"
)

func TestValidateScope(t *testing.T) {
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("ns-%d", i)
		}
		return out
	}
	tests := []struct {
		name    string
		scope   Scope
		wantErr string // substring; "" for valid
	}{
		{"cluster", Scope{Type: "cluster"}, ""},
		{"cluster, empty list", Scope{Type: "cluster", Namespaces: []string{}}, ""},
		{"cluster with namespaces", Scope{Type: "cluster", Namespaces: []string{"dev"}}, "can't be specified when the access scope type is cluster"},
		{"one namespace", nsScope("dev"), ""},
		{"several namespaces", nsScope("dev", "prod", "team-*"), ""},
		{"wildcard after a hyphen", nsScope("dev-*"), ""},
		{"wildcard after a letter", nsScope("dev*"), ""},
		{"wildcard after one character", nsScope("a*"), ""},
		{"digits", nsScope("0", "123abc"), ""},
		{"63 characters", nsScope(strings.Repeat("a", 63)), ""},
		{"63 characters and a wildcard", nsScope(strings.Repeat("a", 63) + "*"), ""},
		{"overlapping patterns", nsScope("dev*", "dev-a"), ""},
		{"at the namespace limit", nsScope(many(MaxScopeNamespaces)...), ""},

		{"no type", Scope{}, `access scope type "" isn't valid`},
		{"capitalised type", Scope{Type: "Cluster"}, `access scope type "Cluster" isn't valid`},
		{"unknown type", Scope{Type: "global"}, "Valid values are cluster and namespace"},
		{"namespace without namespaces", Scope{Type: "namespace"}, "At least one namespace is required"},
		{"over the namespace limit", nsScope(many(MaxScopeNamespaces + 1)...), "at most 100 namespaces; 101 were specified"},
		{"empty name", nsScope("dev", ""), `namespace "" isn't valid: a namespace can't be empty`},
		{"lone wildcard", nsScope("*"), "a wildcard must follow a namespace name prefix"},
		{"wildcard first", nsScope("*-dev"), "allowed only once, as the last character"},
		{"wildcard in the middle", nsScope("dev*a"), "allowed only once, as the last character"},
		{"two wildcards", nsScope("dev**"), "allowed only once, as the last character"},
		{"uppercase", nsScope("Dev"), "only lowercase letters, numbers and hyphens"},
		{"dot", nsScope("dev.a"), "only lowercase letters, numbers and hyphens"},
		{"underscore", nsScope("dev_a"), "only lowercase letters, numbers and hyphens"},
		{"space", nsScope("dev a"), "only lowercase letters, numbers and hyphens"},
		{"leading hyphen", nsScope("-dev"), "must start with a lowercase letter or a number"},
		{"leading hyphen before a wildcard", nsScope("-*"), "must start with a lowercase letter or a number"},
		{"trailing hyphen", nsScope("dev-"), "must end with a lowercase letter or a number"},
		{"64 characters", nsScope(strings.Repeat("a", 64)), "at most 63 characters"},
		{"64 characters and a wildcard", nsScope(strings.Repeat("a", 64) + "*"), "at most 63 characters"},
		{"duplicate", nsScope("dev", "prod", "dev"), `"dev" is specified more than once`},
		{"duplicate pattern", nsScope("team-*", "team-*"), `"team-*" is specified more than once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateScope(tt.scope)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateScope(%+v) = %v, want nil", tt.scope, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateScope(%+v) = %v, want an error containing %q", tt.scope, err, tt.wantErr)
			}
			// The text is the whole API message: a sentence, no prefix.
			if msg := err.Error(); !strings.HasSuffix(msg, ".") || msg[0] < 'A' || msg[0] > 'Z' {
				t.Errorf("message %q is not a bare sentence", msg)
			}
		})
	}
}

func TestMatchNamespace(t *testing.T) {
	tests := []struct {
		name      string
		patterns  []string
		namespace string
		want      string // matching pattern; "" for none
	}{
		{"exact", []string{"dev"}, "dev", "dev"},
		{"exact is not a prefix", []string{"dev"}, "dev2", ""},
		{"exact is not a suffix", []string{"dev"}, "mydev", ""},
		{"wildcard matches the prefix itself", []string{"dev*"}, "dev", "dev*"},
		{"wildcard matches longer names", []string{"dev*"}, "devops", "dev*"},
		{"hyphen wildcard", []string{"team-*"}, "team-a", "team-*"},
		{"hyphen wildcard needs the hyphen", []string{"team-*"}, "teamx", ""},
		{"hyphen wildcard needs more than the stem", []string{"team-*"}, "team", ""},
		{"wildcard is a prefix, not a substring", []string{"team-*"}, "my-team-a", ""},
		{"second pattern", []string{"prod", "team-*"}, "team-b", "team-*"},
		{"first match wins", []string{"team-*", "team-a"}, "team-a", "team-*"},
		{"none", []string{"prod", "team-*"}, "dev", ""},
		{"no patterns", nil, "dev", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := matchNamespace(tt.patterns, tt.namespace)
			if ok != (tt.want != "") || got != tt.want {
				t.Fatalf("matchNamespace(%q, %q) = %q, %v; want %q", tt.patterns, tt.namespace, got, ok, tt.want)
			}
		})
	}
}
