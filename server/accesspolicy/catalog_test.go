package accesspolicy

import (
	"slices"
	"testing"
)

func TestCatalogAll(t *testing.T) {
	want := []string{
		"AmazonEKSAdminPolicy",
		"AmazonEKSAdminViewPolicy",
		"AmazonEKSAutoNodePolicy",
		"AmazonEKSBlockStorageClusterPolicy",
		"AmazonEKSBlockStoragePolicy",
		"AmazonEKSClusterAdminPolicy",
		"AmazonEKSComputeClusterPolicy",
		"AmazonEKSComputePolicy",
		"AmazonEKSEditPolicy",
		"AmazonEKSHybridPolicy",
		"AmazonEKSLoadBalancingClusterPolicy",
		"AmazonEKSLoadBalancingPolicy",
		"AmazonEKSNetworkingClusterPolicy",
		"AmazonEKSNetworkingPolicy",
		"AmazonEKSViewPolicy",
		"AmazonEMRJobPolicy",
		"AmazonSagemakerHyperpodClusterPolicy",
		"AmazonSagemakerHyperpodControllerPolicy",
		"AmazonSagemakerHyperpodSystemNamespacePolicy",
	}
	all := NewCatalog().All()
	var got []string
	for _, p := range all {
		got = append(got, p.Name)
		if p.ARN != "arn:aws:eks::aws:cluster-access-policy/"+p.Name {
			t.Errorf("%s: ARN %q", p.Name, p.ARN)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("All() names = %q,\nwant %q", got, want)
	}
	// AWS lists the policies sorted by name.
	if !slices.IsSorted(got) {
		t.Errorf("All() is not sorted by name: %q", got)
	}
}

func TestCatalogLookup(t *testing.T) {
	c := NewCatalog()
	tests := []struct {
		name   string
		arn    string
		wantOK bool
	}{
		{"cluster admin", ARNPrefix + "AmazonEKSClusterAdminPolicy", true},
		{"last policy", ARNPrefix + "AmazonSagemakerHyperpodSystemNamespacePolicy", true},
		{"name only", "AmazonEKSClusterAdminPolicy", false},
		{"other partition", "arn:aws-cn:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy", false},
		{"case differs", ARNPrefix + "amazoneksclusteradminpolicy", false},
		{"unknown", ARNPrefix + "AmazonEKSRootPolicy", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := c.Lookup(tt.arn)
			if ok != tt.wantOK {
				t.Fatalf("Lookup(%q) ok = %v, want %v", tt.arn, ok, tt.wantOK)
			}
			if ok && p.ARN != tt.arn {
				t.Fatalf("Lookup(%q) = %s", tt.arn, p.ARN)
			}
		})
	}
}

func TestCatalogIsImmutable(t *testing.T) {
	c := NewCatalog()
	viewARN := ARNPrefix + "AmazonEKSViewPolicy"
	secrets := res("get", "", "secrets", "dev")

	// Scribble over everything the accessors hand out.
	for _, p := range [][]Policy{c.All(), {must(c.Lookup(viewARN))}} {
		for i := range p {
			p[i].Name = "changed"
			for j := range p[i].Rules {
				for k := range p[i].Rules[j].Resources {
					p[i].Rules[j].Resources[k] = "*"
				}
				p[i].Rules[j].Verbs[0] = "*"
			}
			p[i].Rules = append(p[i].Rules, Rule{APIGroups: list("*"), Resources: list("*"), Verbs: list("*")})
		}
	}

	if p, _ := c.Lookup(viewARN); p.Name != "AmazonEKSViewPolicy" || p.Rules[0].Verbs[0] != "get" {
		t.Fatalf("catalogue changed through its accessors: %+v", p)
	}
	if d := c.Authorize([]Association{{PolicyARN: viewARN, Scope: clusterScope()}}, secrets); d.Allowed {
		t.Fatalf("view allows secrets after its copies were modified: %+v", d)
	}
	// A second catalogue is unaffected too (no shared state).
	if p, _ := NewCatalog().Lookup(viewARN); p.Rules[0].Verbs[0] != "get" {
		t.Fatalf("a new catalogue sees the changes: %+v", p)
	}
}

func must(p Policy, ok bool) Policy {
	if !ok {
		panic("policy not found")
	}
	return p
}

// TestRuleTablesWellFormed checks the transcribed tables are what RBAC
// would accept, and that rules exist exactly for the policies AWS
// publishes a table for.
func TestRuleTablesWellFormed(t *testing.T) {
	published := map[string]bool{
		"AmazonEKSAdminPolicy":        true,
		"AmazonEKSAdminViewPolicy":    true,
		"AmazonEKSClusterAdminPolicy": true,
		"AmazonEKSEditPolicy":         true,
		"AmazonEKSHybridPolicy":       true,
		"AmazonEKSViewPolicy":         true,
	}
	for _, p := range NewCatalog().All() {
		t.Run(p.Name, func(t *testing.T) {
			if got := len(p.Rules) > 0; got != published[p.Name] {
				t.Fatalf("has rules = %v, want %v (AWS publishes a table: %v)", got, published[p.Name], published[p.Name])
			}
			for i, r := range p.Rules {
				if len(r.Verbs) == 0 {
					t.Errorf("rule %d has no verbs", i)
				}
				// RBAC refuses a rule with both, or neither.
				if (len(r.Resources) > 0) == (len(r.NonResourceURLs) > 0) {
					t.Errorf("rule %d: resources %q and nonResourceURLs %q", i, r.Resources, r.NonResourceURLs)
				}
				if len(r.Resources) > 0 && len(r.APIGroups) == 0 {
					t.Errorf("rule %d has resources but no API groups", i)
				}
				if len(r.NonResourceURLs) > 0 && len(r.APIGroups) > 0 {
					t.Errorf("rule %d has API groups on non-resource URLs", i)
				}
				for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
					if s != "" && (s[0] == ' ' || s[len(s)-1] == ' ') {
						t.Errorf("rule %d: stray space in %q", i, s)
					}
				}
			}
		})
	}
}

// TestRuleRowCounts pins the number of rows and grants transcribed per
// policy, so a change to a table is deliberate.
func TestRuleRowCounts(t *testing.T) {
	tests := []struct {
		policy     string
		rows       int
		resources  int // resource entries over all rows
		verbGrants int // resource entries × verbs over all rows
	}{
		{"AmazonEKSAdminPolicy", 22, 103, 389},
		{"AmazonEKSEditPolicy", 20, 100, 372},
		{"AmazonEKSViewPolicy", 10, 56, 168},
		{"AmazonEKSAdminViewPolicy", 1, 1, 3},
		{"AmazonEKSClusterAdminPolicy", 2, 1, 1},
		{"AmazonEKSHybridPolicy", 1, 1, 1},
	}
	c := NewCatalog()
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			p, _ := c.Lookup(ARNPrefix + tt.policy)
			var resources, grants int
			for _, r := range p.Rules {
				resources += len(r.Resources)
				grants += len(r.Resources) * len(r.Verbs)
			}
			if len(p.Rules) != tt.rows || resources != tt.resources || grants != tt.verbGrants {
				t.Fatalf("rows %d, resources %d, grants %d; want %d, %d, %d", len(p.Rules), resources, grants, tt.rows, tt.resources, tt.verbGrants)
			}
		})
	}
}
