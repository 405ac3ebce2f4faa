package accesspolicy

import (
	"strings"
	"testing"
)

func clusterScope() Scope { return Scope{Type: ScopeCluster} }

func nsScope(namespaces ...string) Scope {
	return Scope{Type: ScopeNamespace, Namespaces: namespaces}
}

// res is a resource request; core-group resources have group "".
func res(verb, group, resource, namespace string) Attributes {
	return Attributes{Verb: verb, APIGroup: group, Version: "v1", Resource: resource, Namespace: namespace}
}

// sub is a subresource request.
func sub(verb, group, resource, subresource, namespace string) Attributes {
	a := res(verb, group, resource, namespace)
	a.Subresource = subresource
	return a
}

// named gives a request an object name (get, update, delete, ...).
func named(a Attributes, name string) Attributes {
	a.Name = name
	return a
}

// url is a non-resource request.
func url(verb, path string) Attributes {
	return Attributes{NonResource: true, Verb: verb, Path: path}
}

type authzCase struct {
	name  string
	scope Scope
	attrs Attributes
	want  bool
}

// runPolicyCases authorizes each case with the one association policy at
// the case's scope.
func runPolicyCases(t *testing.T, policy string, cases []authzCase) {
	t.Helper()
	c := NewCatalog()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assocs := []Association{{PolicyARN: ARNPrefix + policy, Scope: tc.scope}}
			d := c.Authorize(assocs, tc.attrs)
			if d.Allowed != tc.want {
				t.Fatalf("Authorize(%s at %+v, %+v) = %+v, want allowed=%v", policy, tc.scope, tc.attrs, d, tc.want)
			}
			if d.Allowed && !strings.Contains(d.Reason, policy) {
				t.Errorf("reason %q does not name %s", d.Reason, policy)
			}
			if !d.Allowed && d.Reason != NoOpinionReason {
				t.Errorf("reason %q, want the no-opinion reason", d.Reason)
			}
		})
	}
}

func TestAuthorizeClusterAdmin(t *testing.T) {
	runPolicyCases(t, "AmazonEKSClusterAdminPolicy", []authzCase{
		// Cluster scope: everything, including cluster-scoped resources
		// and non-resource URLs.
		{"cluster: delete a node", clusterScope(), named(res("delete", "", "nodes", ""), "ip-10-0-0-1"), true},
		{"cluster: create a clusterrole", clusterScope(), res("create", "rbac.authorization.k8s.io", "clusterroles", ""), true},
		{"cluster: escalate a clusterrole", clusterScope(), named(res("escalate", "rbac.authorization.k8s.io", "clusterroles", ""), "x"), true},
		{"cluster: get secrets in dev", clusterScope(), res("get", "", "secrets", "dev"), true},
		{"cluster: list pods in all namespaces", clusterScope(), res("list", "", "pods", ""), true},
		{"cluster: exec into a pod", clusterScope(), sub("create", "", "pods", "exec", "prod"), true},
		{"cluster: custom resources", clusterScope(), res("deletecollection", "example.com", "widgets", "prod"), true},
		{"cluster: get /healthz", clusterScope(), url("get", "/healthz"), true},
		{"cluster: get /metrics", clusterScope(), url("get", "/metrics"), true},
		{"cluster: post any url", clusterScope(), url("post", "/apis/anything"), true},

		// Namespace dev: everything inside dev, nothing outside it.
		{"dev: delete pods in dev", nsScope("dev"), res("delete", "", "pods", "dev"), true},
		{"dev: create secrets in dev", nsScope("dev"), res("create", "", "secrets", "dev"), true},
		{"dev: create rolebindings in dev", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), true},
		{"dev: get the dev namespace object", nsScope("dev"), named(res("get", "", "namespaces", "dev"), "dev"), true},
		{"dev: get pods in prod", nsScope("dev"), res("get", "", "pods", "prod"), false},
		{"dev: get pods in dev2", nsScope("dev"), res("get", "", "pods", "dev2"), false},
		{"dev: list pods in all namespaces", nsScope("dev"), res("list", "", "pods", ""), false},
		{"dev: list nodes", nsScope("dev"), res("list", "", "nodes", ""), false},
		{"dev: list namespaces", nsScope("dev"), res("list", "", "namespaces", ""), false},
		{"dev: create a clusterrole", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "clusterroles", ""), false},
		{"dev: get /healthz", nsScope("dev"), url("get", "/healthz"), false},

		// Namespace team-*: prefix match.
		{"team-*: create deployments in team-a", nsScope("team-*"), res("create", "apps", "deployments", "team-a"), true},
		{"team-*: delete pods in team-payments", nsScope("team-*"), res("delete", "", "pods", "team-payments"), true},
		{"team-*: get pods in teamx", nsScope("team-*"), res("get", "", "pods", "teamx"), false},
		{"team-*: get pods in team", nsScope("team-*"), res("get", "", "pods", "team"), false},
		{"team-*: get pods in my-team-a", nsScope("team-*"), res("get", "", "pods", "my-team-a"), false},
		{"team-*: list nodes", nsScope("team-*"), res("list", "", "nodes", ""), false},
		{"team-*: get /healthz", nsScope("team-*"), url("get", "/healthz"), false},
	})
}

func TestAuthorizeAdmin(t *testing.T) {
	runPolicyCases(t, "AmazonEKSAdminPolicy", []authzCase{
		{"cluster: create rolebindings in dev", clusterScope(), res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), true},
		{"cluster: update roles", clusterScope(), named(res("update", "rbac.authorization.k8s.io", "roles", "dev"), "reader"), true},
		{"cluster: create clusterroles", clusterScope(), res("create", "rbac.authorization.k8s.io", "clusterroles", ""), false},
		{"cluster: create clusterrolebindings", clusterScope(), res("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""), false},
		{"cluster: bind roles", clusterScope(), named(res("bind", "rbac.authorization.k8s.io", "roles", "dev"), "reader"), false},
		{"cluster: list namespaces", clusterScope(), res("list", "", "namespaces", ""), true},
		{"cluster: delete a namespace", clusterScope(), named(res("delete", "", "namespaces", "dev"), "dev"), false},
		{"cluster: get namespaces/status", clusterScope(), named(sub("get", "", "namespaces", "status", "dev"), "dev"), true},
		{"cluster: list nodes", clusterScope(), res("list", "", "nodes", ""), false},
		{"cluster: get secrets", clusterScope(), named(res("get", "", "secrets", "dev"), "db"), true},
		{"cluster: create secrets", clusterScope(), res("create", "", "secrets", "dev"), true},
		{"cluster: create pods/exec", clusterScope(), sub("create", "", "pods", "exec", "dev"), true},
		{"cluster: get pods/log", clusterScope(), sub("get", "", "pods", "log", "dev"), true},
		{"cluster: update pods/status", clusterScope(), sub("update", "", "pods", "status", "dev"), false},
		{"cluster: impersonate serviceaccounts", clusterScope(), named(res("impersonate", "", "serviceaccounts", "dev"), "builder"), true},
		{"cluster: impersonate users", clusterScope(), named(res("impersonate", "", "users", ""), "alice"), false},
		{"cluster: create localsubjectaccessreviews", clusterScope(), res("create", "authorization.k8s.io", "localsubjectaccessreviews", "dev"), true},
		{"cluster: create subjectaccessreviews", clusterScope(), res("create", "authorization.k8s.io", "subjectaccessreviews", ""), false},
		{"cluster: patch deployments/scale", clusterScope(), sub("patch", "apps", "deployments", "scale", "dev"), true},
		{"cluster: update deployments/status", clusterScope(), sub("update", "apps", "deployments", "status", "dev"), false},
		{"cluster: create ingresses", clusterScope(), res("create", "networking.k8s.io", "ingresses", "dev"), true},
		{"cluster: create crds", clusterScope(), res("create", "apiextensions.k8s.io", "customresourcedefinitions", ""), false},
		{"cluster: custom resources", clusterScope(), res("list", "example.com", "widgets", "dev"), false},
		{"cluster: get /healthz", clusterScope(), url("get", "/healthz"), false},

		{"dev: create rolebindings in dev", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), true},
		{"dev: create rolebindings in prod", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "rolebindings", "prod"), false},
		{"dev: create clusterroles", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "clusterroles", ""), false},
		{"dev: create deployments in dev", nsScope("dev"), res("create", "apps", "deployments", "dev"), true},
		{"dev: get secrets in dev", nsScope("dev"), res("get", "", "secrets", "dev"), true},
		{"dev: get the dev namespace object", nsScope("dev"), named(res("get", "", "namespaces", "dev"), "dev"), true},
		{"dev: list namespaces", nsScope("dev"), res("list", "", "namespaces", ""), false},
		{"dev: list nodes", nsScope("dev"), res("list", "", "nodes", ""), false},
		{"dev: list pods in all namespaces", nsScope("dev"), res("list", "", "pods", ""), false},

		{"team-*: create rolebindings in team-a", nsScope("team-*"), res("create", "rbac.authorization.k8s.io", "rolebindings", "team-a"), true},
		{"team-*: create rolebindings in teamx", nsScope("team-*"), res("create", "rbac.authorization.k8s.io", "rolebindings", "teamx"), false},
		{"team-*: create clusterrolebindings", nsScope("team-*"), res("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""), false},
		{"team-*: list namespaces", nsScope("team-*"), res("list", "", "namespaces", ""), false},
	})
}

func TestAuthorizeEdit(t *testing.T) {
	runPolicyCases(t, "AmazonEKSEditPolicy", []authzCase{
		{"cluster: create deployments", clusterScope(), res("create", "apps", "deployments", "dev"), true},
		{"cluster: delete statefulsets", clusterScope(), named(res("delete", "apps", "statefulsets", "dev"), "db"), true},
		{"cluster: patch deployments/scale", clusterScope(), sub("patch", "apps", "deployments", "scale", "dev"), true},
		{"cluster: create deployments/rollback", clusterScope(), sub("create", "apps", "deployments", "rollback", "dev"), true},
		{"cluster: update deployments/status", clusterScope(), sub("update", "apps", "deployments", "status", "dev"), false},
		{"cluster: create jobs", clusterScope(), res("create", "batch", "jobs", "dev"), true},
		{"cluster: create roles", clusterScope(), res("create", "rbac.authorization.k8s.io", "roles", "dev"), false},
		{"cluster: create rolebindings", clusterScope(), res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), false},
		{"cluster: get roles", clusterScope(), res("get", "rbac.authorization.k8s.io", "roles", "dev"), false},
		{"cluster: create localsubjectaccessreviews", clusterScope(), res("create", "authorization.k8s.io", "localsubjectaccessreviews", "dev"), false},
		{"cluster: get secrets", clusterScope(), res("get", "", "secrets", "dev"), true},
		{"cluster: update secrets", clusterScope(), named(res("update", "", "secrets", "dev"), "db"), true},
		{"cluster: create pods/exec", clusterScope(), sub("create", "", "pods", "exec", "dev"), true},
		{"cluster: create pods/portforward", clusterScope(), sub("create", "", "pods", "portforward", "dev"), true},
		{"cluster: impersonate serviceaccounts", clusterScope(), named(res("impersonate", "", "serviceaccounts", "dev"), "builder"), true},
		{"cluster: list namespaces", clusterScope(), res("list", "", "namespaces", ""), true},
		{"cluster: create namespaces", clusterScope(), res("create", "", "namespaces", ""), false},
		{"cluster: list nodes", clusterScope(), res("list", "", "nodes", ""), false},
		{"cluster: create endpoints", clusterScope(), res("create", "", "endpoints", "dev"), false},
		{"cluster: get /healthz", clusterScope(), url("get", "/healthz"), false},

		{"dev: create deployments in dev", nsScope("dev"), res("create", "apps", "deployments", "dev"), true},
		{"dev: create deployments in prod", nsScope("dev"), res("create", "apps", "deployments", "prod"), false},
		{"dev: create rolebindings in dev", nsScope("dev"), res("create", "rbac.authorization.k8s.io", "rolebindings", "dev"), false},
		{"dev: list nodes", nsScope("dev"), res("list", "", "nodes", ""), false},
		{"dev: list namespaces", nsScope("dev"), res("list", "", "namespaces", ""), false},

		{"team-*: update configmaps in team-a", nsScope("team-*"), named(res("update", "", "configmaps", "team-a"), "cfg"), true},
		{"team-*: update configmaps in teamx", nsScope("team-*"), named(res("update", "", "configmaps", "teamx"), "cfg"), false},
		{"team-*: create roles in team-a", nsScope("team-*"), res("create", "rbac.authorization.k8s.io", "roles", "team-a"), false},
	})
}

func TestAuthorizeView(t *testing.T) {
	runPolicyCases(t, "AmazonEKSViewPolicy", []authzCase{
		{"cluster: list pods", clusterScope(), res("list", "", "pods", ""), true},
		{"cluster: watch deployments", clusterScope(), res("watch", "apps", "deployments", "dev"), true},
		{"cluster: get deployments/scale", clusterScope(), named(sub("get", "apps", "deployments", "scale", "dev"), "web"), true},
		{"cluster: get pods/log", clusterScope(), named(sub("get", "", "pods", "log", "dev"), "web-1"), true},
		{"cluster: get secrets", clusterScope(), named(res("get", "", "secrets", "dev"), "db"), false},
		{"cluster: list secrets", clusterScope(), res("list", "", "secrets", "dev"), false},
		{"cluster: get pods/exec", clusterScope(), sub("get", "", "pods", "exec", "dev"), false},
		{"cluster: create pods/exec", clusterScope(), sub("create", "", "pods", "exec", "dev"), false},
		{"cluster: update deployments", clusterScope(), named(res("update", "apps", "deployments", "dev"), "web"), false},
		{"cluster: create pods", clusterScope(), res("create", "", "pods", "dev"), false},
		{"cluster: get roles", clusterScope(), res("get", "rbac.authorization.k8s.io", "roles", "dev"), false},
		{"cluster: list namespaces", clusterScope(), res("list", "", "namespaces", ""), true},
		{"cluster: list nodes", clusterScope(), res("list", "", "nodes", ""), false},
		{"cluster: impersonate serviceaccounts", clusterScope(), res("impersonate", "", "serviceaccounts", "dev"), false},
		{"cluster: list custom resources", clusterScope(), res("list", "example.com", "widgets", "dev"), false},
		{"cluster: get /healthz", clusterScope(), url("get", "/healthz"), false},

		{"dev: list pods in dev", nsScope("dev"), res("list", "", "pods", "dev"), true},
		{"dev: list pods in prod", nsScope("dev"), res("list", "", "pods", "prod"), false},
		{"dev: get secrets in dev", nsScope("dev"), res("get", "", "secrets", "dev"), false},
		{"dev: list namespaces", nsScope("dev"), res("list", "", "namespaces", ""), false},
		{"dev: list nodes", nsScope("dev"), res("list", "", "nodes", ""), false},

		{"team-*: get services in team-a", nsScope("team-*"), res("get", "", "services", "team-a"), true},
		{"team-*: get services in teamx", nsScope("team-*"), res("get", "", "services", "teamx"), false},
		{"team-*: get secrets in team-a", nsScope("team-*"), res("get", "", "secrets", "team-a"), false},
	})
}

func TestAuthorizeAdminView(t *testing.T) {
	runPolicyCases(t, "AmazonEKSAdminViewPolicy", []authzCase{
		{"cluster: get secrets", clusterScope(), named(res("get", "", "secrets", "dev"), "db"), true},
		{"cluster: list secrets in all namespaces", clusterScope(), res("list", "", "secrets", ""), true},
		{"cluster: list nodes", clusterScope(), res("list", "", "nodes", ""), true},
		{"cluster: get clusterroles", clusterScope(), res("get", "rbac.authorization.k8s.io", "clusterroles", ""), true},
		{"cluster: watch custom resources", clusterScope(), res("watch", "example.com", "widgets", "dev"), true},
		{"cluster: get pods/log", clusterScope(), sub("get", "", "pods", "log", "dev"), true},
		{"cluster: create pods", clusterScope(), res("create", "", "pods", "dev"), false},
		{"cluster: delete secrets", clusterScope(), named(res("delete", "", "secrets", "dev"), "db"), false},
		{"cluster: create pods/exec", clusterScope(), sub("create", "", "pods", "exec", "dev"), false},
		{"cluster: impersonate serviceaccounts", clusterScope(), res("impersonate", "", "serviceaccounts", "dev"), false},
		{"cluster: get /healthz", clusterScope(), url("get", "/healthz"), false},

		{"dev: get secrets in dev", nsScope("dev"), res("get", "", "secrets", "dev"), true},
		{"dev: get secrets in prod", nsScope("dev"), res("get", "", "secrets", "prod"), false},
		{"dev: list nodes", nsScope("dev"), res("list", "", "nodes", ""), false},
		{"dev: list namespaces", nsScope("dev"), res("list", "", "namespaces", ""), false},

		{"team-*: get secrets in team-a", nsScope("team-*"), res("get", "", "secrets", "team-a"), true},
		{"team-*: get secrets in teamx", nsScope("team-*"), res("get", "", "secrets", "teamx"), false},
		{"team-*: update secrets in team-a", nsScope("team-*"), res("update", "", "secrets", "team-a"), false},
	})
}

func TestAuthorizeHybrid(t *testing.T) {
	runPolicyCases(t, "AmazonEKSHybridPolicy", []authzCase{
		{"cluster: list nodes", clusterScope(), res("list", "", "nodes", ""), true},
		{"cluster: get a node", clusterScope(), named(res("get", "", "nodes", ""), "n1"), false},
		{"cluster: list pods", clusterScope(), res("list", "", "pods", ""), false},
	})
}

func TestAuthorizePoliciesWithoutPublishedRules(t *testing.T) {
	// Policies AWS describes only in prose have no rules, so they allow
	// nothing, not even what cluster-admin would.
	c := NewCatalog()
	for _, p := range c.All() {
		if len(p.Rules) > 0 {
			continue
		}
		d := c.Authorize([]Association{{PolicyARN: p.ARN, Scope: clusterScope()}}, res("get", "", "pods", "dev"))
		if d.Allowed {
			t.Errorf("%s allowed get pods: %+v", p.Name, d)
		}
	}
}

func TestAuthorizeCombinesAssociations(t *testing.T) {
	c := NewCatalog()
	assocs := []Association{
		{PolicyARN: ARNPrefix + "AmazonEKSViewPolicy", Scope: clusterScope()},
		{PolicyARN: ARNPrefix + "AmazonEKSAdminPolicy", Scope: nsScope("dev", "team-*")},
		{PolicyARN: ARNPrefix + "AmazonEKSAdminViewPolicy", Scope: nsScope("audit")},
	}
	tests := []struct {
		name       string
		attrs      Attributes
		want       bool
		wantReason string
	}{
		{"view anywhere", res("list", "", "pods", "prod"), true, "EKS access policy AmazonEKSViewPolicy (cluster scope) allows"},
		{"view across namespaces", res("list", "", "pods", ""), true, "EKS access policy AmazonEKSViewPolicy (cluster scope) allows"},
		{"admin in dev", res("create", "apps", "deployments", "dev"), true, "EKS access policy AmazonEKSAdminPolicy (namespace scope: dev) allows"},
		{"admin in team-a", res("create", "rbac.authorization.k8s.io", "rolebindings", "team-a"), true, "EKS access policy AmazonEKSAdminPolicy (namespace scope: team-*) allows"},
		{"secrets in audit", res("get", "", "secrets", "audit"), true, "EKS access policy AmazonEKSAdminViewPolicy (namespace scope: audit) allows"},
		{"secrets in dev through admin", res("get", "", "secrets", "dev"), true, "EKS access policy AmazonEKSAdminPolicy (namespace scope: dev) allows"},
		{"no write in prod", res("create", "apps", "deployments", "prod"), false, NoOpinionReason},
		{"no secrets in prod", res("get", "", "secrets", "prod"), false, NoOpinionReason},
		{"no nodes", res("list", "", "nodes", ""), false, NoOpinionReason},
		{"no healthz", url("get", "/healthz"), false, NoOpinionReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.Authorize(assocs, tt.attrs)
			if d.Allowed != tt.want || d.Reason != tt.wantReason {
				t.Fatalf("Authorize = %+v, want {Allowed:%v Reason:%q}", d, tt.want, tt.wantReason)
			}
		})
	}
}

func TestAuthorizeIgnoresWhatItCannotUse(t *testing.T) {
	c := NewCatalog()
	getPods := res("get", "", "pods", "dev")
	tests := []struct {
		name   string
		assocs []Association
	}{
		{"no associations", nil},
		{"unknown policy", []Association{{PolicyARN: ARNPrefix + "AmazonEKSRootPolicy", Scope: clusterScope()}}},
		{"policy name without the ARN", []Association{{PolicyARN: "AmazonEKSClusterAdminPolicy", Scope: clusterScope()}}},
		{"unknown scope type", []Association{{PolicyARN: ARNPrefix + "AmazonEKSClusterAdminPolicy", Scope: Scope{Type: "Cluster"}}}},
		{"empty scope type", []Association{{PolicyARN: ARNPrefix + "AmazonEKSClusterAdminPolicy"}}},
		{"namespace scope without namespaces", []Association{{PolicyARN: ARNPrefix + "AmazonEKSClusterAdminPolicy", Scope: nsScope()}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := c.Authorize(tt.assocs, getPods); d.Allowed || d.Reason != NoOpinionReason {
				t.Fatalf("Authorize = %+v, want no opinion", d)
			}
		})
	}
}

func TestAuthorizeReasons(t *testing.T) {
	c := NewCatalog()
	tests := []struct {
		name  string
		scope Scope
		attrs Attributes
		want  string
	}{
		{"cluster", clusterScope(), res("get", "", "pods", "dev"), "EKS access policy AmazonEKSViewPolicy (cluster scope) allows"},
		{"exact namespace", nsScope("prod", "dev"), res("get", "", "pods", "dev"), "EKS access policy AmazonEKSViewPolicy (namespace scope: dev) allows"},
		{"wildcard namespace", nsScope("dev*"), res("get", "", "pods", "dev-a"), "EKS access policy AmazonEKSViewPolicy (namespace scope: dev*) allows"},
		{"first matching pattern", nsScope("dev*", "dev-a"), res("get", "", "pods", "dev-a"), "EKS access policy AmazonEKSViewPolicy (namespace scope: dev*) allows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := c.Authorize([]Association{{PolicyARN: ARNPrefix + "AmazonEKSViewPolicy", Scope: tt.scope}}, tt.attrs)
			if !d.Allowed || d.Reason != tt.want {
				t.Fatalf("Authorize = %+v, want allowed with reason %q", d, tt.want)
			}
		})
	}
}

// TestRuleMatching checks the RBAC matching rules on hand-made rules, for
// the forms the published tables do not use.
func TestRuleMatching(t *testing.T) {
	tests := []struct {
		name  string
		rule  Rule
		attrs Attributes
		want  bool
	}{
		{"exact", Rule{APIGroups: list("apps"), Resources: list("deployments"), Verbs: list("get")}, res("get", "apps", "deployments", "dev"), true},
		{"other verb", Rule{APIGroups: list("apps"), Resources: list("deployments"), Verbs: list("get")}, res("list", "apps", "deployments", "dev"), false},
		{"other group", Rule{APIGroups: list("apps"), Resources: list("deployments"), Verbs: list("get")}, res("get", "extensions", "deployments", "dev"), false},
		{"core group is not any group", Rule{APIGroups: list(""), Resources: list("pods"), Verbs: list("get")}, res("get", "example.com", "pods", "dev"), false},
		{"verb wildcard", Rule{APIGroups: list(""), Resources: list("pods"), Verbs: list("*")}, res("frobnicate", "", "pods", "dev"), true},
		{"verb no rule names", Rule{APIGroups: list(""), Resources: list("pods"), Verbs: list("get")}, res("frobnicate", "", "pods", "dev"), false},
		{"group wildcard", Rule{APIGroups: list("*"), Resources: list("widgets"), Verbs: list("get")}, res("get", "example.com", "widgets", "dev"), true},
		{"resource wildcard covers subresources", Rule{APIGroups: list(""), Resources: list("*"), Verbs: list("get")}, sub("get", "", "pods", "log", "dev"), true},
		{"resource does not cover its subresources", Rule{APIGroups: list(""), Resources: list("pods"), Verbs: list("get")}, sub("get", "", "pods", "log", "dev"), false},
		{"subresource does not cover its resource", Rule{APIGroups: list(""), Resources: list("pods/log"), Verbs: list("get")}, res("get", "", "pods", "dev"), false},
		{"resource/subresource", Rule{APIGroups: list(""), Resources: list("pods/log"), Verbs: list("get")}, sub("get", "", "pods", "log", "dev"), true},
		{"resource/subresource, other subresource", Rule{APIGroups: list(""), Resources: list("pods/log"), Verbs: list("get")}, sub("get", "", "pods", "logs", "dev"), false},
		{"resource/subresource, other resource", Rule{APIGroups: list(""), Resources: list("pods/log"), Verbs: list("get")}, sub("get", "", "pod", "log", "dev"), false},
		{"*/scale matches any scale", Rule{APIGroups: list("*"), Resources: list("*/scale"), Verbs: list("update")}, sub("update", "apps", "statefulsets", "scale", "dev"), true},
		{"*/scale not other subresources", Rule{APIGroups: list("*"), Resources: list("*/scale"), Verbs: list("update")}, sub("update", "apps", "statefulsets", "status", "dev"), false},
		{"*/scale not the resource", Rule{APIGroups: list("*"), Resources: list("*/scale"), Verbs: list("update")}, res("update", "apps", "statefulsets", "dev"), false},
		// RBAC has no "resource/*" wildcard: the entry is compared as a
		// literal string.
		{"pods/* is literal, not a wildcard", Rule{APIGroups: list(""), Resources: list("pods/*"), Verbs: list("get")}, sub("get", "", "pods", "log", "dev"), false},
		{"pods/* matches a literal * subresource", Rule{APIGroups: list(""), Resources: list("pods/*"), Verbs: list("get")}, sub("get", "", "pods", "*", "dev"), true},
		{"resource names allow the name", Rule{APIGroups: list(""), Resources: list("configmaps"), ResourceNames: list("cfg"), Verbs: list("get", "list", "create")}, named(res("get", "", "configmaps", "dev"), "cfg"), true},
		{"resource names refuse other names", Rule{APIGroups: list(""), Resources: list("configmaps"), ResourceNames: list("cfg"), Verbs: list("get", "list", "create")}, named(res("get", "", "configmaps", "dev"), "other"), false},
		{"resource names refuse list", Rule{APIGroups: list(""), Resources: list("configmaps"), ResourceNames: list("cfg"), Verbs: list("get", "list", "create")}, res("list", "", "configmaps", "dev"), false},
		{"resource names refuse create", Rule{APIGroups: list(""), Resources: list("configmaps"), ResourceNames: list("cfg"), Verbs: list("get", "list", "create")}, res("create", "", "configmaps", "dev"), false},
		{"url exact", Rule{NonResourceURLs: list("/healthz"), Verbs: list("get")}, url("get", "/healthz"), true},
		{"url exact, not a prefix", Rule{NonResourceURLs: list("/healthz"), Verbs: list("get")}, url("get", "/healthz/etcd"), false},
		{"url prefix", Rule{NonResourceURLs: list("/healthz/*"), Verbs: list("get")}, url("get", "/healthz/etcd"), true},
		{"url prefix excludes the bare path", Rule{NonResourceURLs: list("/healthz/*"), Verbs: list("get")}, url("get", "/healthz"), false},
		{"url wildcard", Rule{NonResourceURLs: list("*"), Verbs: list("get")}, url("get", "/version"), true},
		{"url verb", Rule{NonResourceURLs: list("*"), Verbs: list("get")}, url("post", "/version"), false},
		{"resource rule ignores urls", Rule{APIGroups: list("*"), Resources: list("*"), Verbs: list("*")}, url("get", "/healthz"), false},
		{"url rule ignores resources", Rule{NonResourceURLs: list("*"), Verbs: list("*")}, res("get", "", "pods", "dev"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := catalogOf(Policy{Name: "TestPolicy", ARN: ARNPrefix + "TestPolicy", Rules: []Rule{tt.rule}})
			d := c.Authorize([]Association{{PolicyARN: ARNPrefix + "TestPolicy", Scope: clusterScope()}}, tt.attrs)
			if d.Allowed != tt.want {
				t.Fatalf("rule %+v on %+v: allowed=%v, want %v", tt.rule, tt.attrs, d.Allowed, tt.want)
			}
		})
	}
}

// catalogOf builds a catalog of hand-made policies, compiled as NewCatalog
// compiles the real ones.
func catalogOf(policies ...Policy) *Catalog { return newCatalog(policies) }

func TestAuthorizeAllocations(t *testing.T) {
	c := NewCatalog()
	assocs := []Association{
		{PolicyARN: ARNPrefix + "AmazonEKSViewPolicy", Scope: clusterScope()},
		{PolicyARN: ARNPrefix + "AmazonEKSAdminPolicy", Scope: nsScope("dev", "team-*")},
	}
	tests := []struct {
		name  string
		attrs Attributes
		max   float64
	}{
		{"cluster allow", res("list", "", "pods", "prod"), 0},
		{"no opinion", res("create", "", "secrets", "prod"), 0},
		{"namespace allow builds its reason", res("create", "", "secrets", "team-a"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() { c.Authorize(assocs, tt.attrs) })
			if got > tt.max {
				t.Fatalf("Authorize allocates %v times, want at most %v", got, tt.max)
			}
		})
	}
}

func BenchmarkAuthorize(b *testing.B) {
	c := NewCatalog()
	// A typical developer entry: read access across the cluster, admin in
	// the team's namespaces, edit in a shared one.
	assocs := []Association{
		{PolicyARN: ARNPrefix + "AmazonEKSViewPolicy", Scope: clusterScope()},
		{PolicyARN: ARNPrefix + "AmazonEKSAdminPolicy", Scope: nsScope("team-payments-*", "payments")},
		{PolicyARN: ARNPrefix + "AmazonEKSEditPolicy", Scope: nsScope("shared")},
	}
	cases := []struct {
		name  string
		attrs Attributes
	}{
		{"cluster allow", named(res("get", "apps", "deployments", "prod"), "web")},
		{"namespace allow", sub("create", "", "pods", "exec", "team-payments-api")},
		{"no opinion", named(res("get", "", "secrets", "prod"), "db")},
		{"no opinion non-resource", url("get", "/healthz")},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Authorize(assocs, bc.attrs)
			}
		})
	}
}
