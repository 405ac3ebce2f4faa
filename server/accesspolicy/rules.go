package accesspolicy

// The rule tables below are transcribed from the Amazon EKS User Guide,
// "Review access policy permissions": one Rule per table row, rows in the
// page's order, an empty "Kubernetes API groups" cell being the core group
// "". Where the page describes a policy only in prose, the policy has no
// rules: its summary is kept as a comment, and no rule is guessed from it,
// so the catalogue never grants what AWS has not published. Such policies
// still authorize nothing through Authorize, which answers no opinion and
// leaves the decision to the cluster's RBAC.
//
// Kubernetes' own user-facing roles (cluster-admin, admin, edit, view) are
// close to the first policies but not identical; where they differ the
// table follows AWS's page, not Kubernetes.

// policyNames returns the access policies' names in the order
// ListAccessPolicies returns them. AWS's sample output in the user guide
// lists the policies sorted by name, and this list is sorted the same way
// (a test checks it).
func policyNames() []string {
	return []string{
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
}

// policyTable returns a fresh copy of the catalogue, in policyNames order.
func policyTable() []Policy {
	rules := map[string][]Rule{
		"AmazonEKSAdminPolicy":        adminRules(),
		"AmazonEKSAdminViewPolicy":    adminViewRules(),
		"AmazonEKSClusterAdminPolicy": clusterAdminRules(),
		"AmazonEKSEditPolicy":         editRules(),
		"AmazonEKSHybridPolicy":       hybridRules(),
		"AmazonEKSViewPolicy":         viewRules(),

		// Prose only on the page, no rule table:
		//
		// AmazonEKSAutoNodePolicy: for EKS Auto Mode node components
		// (kube-proxy, ipamd, coredns, ebs-csi-driver, neuron,
		// node-monitoring-agent), each through its own service account.
		//
		// AmazonEKSBlockStoragePolicy, AmazonEKSLoadBalancingPolicy,
		// AmazonEKSNetworkingPolicy: leader-election leases
		// (coordination.k8s.io), restricted to lease names the page does
		// not give. AmazonEKSComputePolicy likewise, plus get and watch on
		// all leases.
		//
		// AmazonEKSBlockStorageClusterPolicy, AmazonEKSComputeClusterPolicy,
		// AmazonEKSLoadBalancingClusterPolicy,
		// AmazonEKSNetworkingClusterPolicy: EKS Auto Mode's storage,
		// compute, load-balancing and networking controllers; summarised
		// by capability, without groups, resource names or exact verbs.
		//
		// AmazonEMRJobPolicy and the AmazonSagemakerHyperpod* policies: the
		// page does not describe them at all.
	}
	names := policyNames()
	out := make([]Policy, len(names))
	for i, name := range names {
		out[i] = Policy{Name: name, ARN: ARNPrefix + name, Rules: rules[name]}
	}
	return out
}

// Verb sets the tables repeat. Functions, not variables, so that no two
// rules share a slice.
func readVerbs() []string { return []string{"get", "list", "watch"} }

func writeVerbs() []string {
	return []string{"create", "delete", "deletecollection", "patch", "update"}
}

func rule(group string, resources []string, verbs []string) Rule {
	return Rule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

func list(s ...string) []string { return s }

// clusterAdminRules: AmazonEKSClusterAdminPolicy, Kubernetes' cluster-admin.
func clusterAdminRules() []Rule {
	return []Rule{
		{APIGroups: list("*"), Resources: list("*"), Verbs: list("*")},
		{NonResourceURLs: list("*"), Verbs: list("*")},
	}
}

// adminViewRules: AmazonEKSAdminViewPolicy, read access to every resource,
// Secrets included. (No non-resource URLs.)
func adminViewRules() []Rule {
	return []Rule{
		{APIGroups: list("*"), Resources: list("*"), Verbs: readVerbs()},
	}
}

// hybridRules: AmazonEKSHybridPolicy, for EKS hybrid nodes.
func hybridRules() []Rule {
	return []Rule{
		{APIGroups: list("*"), Resources: list("nodes"), Verbs: list("list")},
	}
}

// adminRules: AmazonEKSAdminPolicy, close to Kubernetes' admin role.
func adminRules() []Rule {
	return []Rule{
		rule("apps", list("daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"), writeVerbs()),
		rule("apps", list("controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"), readVerbs()),
		rule("authorization.k8s.io", list("localsubjectaccessreviews"), list("create")),
		rule("autoscaling", list("horizontalpodautoscalers"), writeVerbs()),
		rule("autoscaling", list("horizontalpodautoscalers", "horizontalpodautoscalers/status"), readVerbs()),
		rule("batch", list("cronjobs", "jobs"), writeVerbs()),
		rule("batch", list("cronjobs", "cronjobs/status", "jobs", "jobs/status"), readVerbs()),
		rule("discovery.k8s.io", list("endpointslices"), readVerbs()),
		rule("extensions", list("daemonsets", "deployments", "deployments/rollback", "deployments/scale", "ingresses", "networkpolicies", "replicasets", "replicasets/scale", "replicationcontrollers/scale"), writeVerbs()),
		rule("extensions", list("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses", "ingresses/status", "networkpolicies", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale"), readVerbs()),
		rule("networking.k8s.io", list("ingresses", "ingresses/status", "networkpolicies"), readVerbs()),
		rule("networking.k8s.io", list("ingresses", "networkpolicies"), writeVerbs()),
		rule("policy", list("poddisruptionbudgets"), writeVerbs()),
		rule("policy", list("poddisruptionbudgets", "poddisruptionbudgets/status"), readVerbs()),
		rule("rbac.authorization.k8s.io", list("rolebindings", "roles"), list("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")),
		rule("", list("configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"), readVerbs()),
		rule("", list("pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"), readVerbs()),
		rule("", list("configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"), writeVerbs()),
		rule("", list("pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"), writeVerbs()),
		rule("", list("serviceaccounts"), list("impersonate")),
		rule("", list("bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"), readVerbs()),
		rule("", list("namespaces"), readVerbs()),
	}
}

// editRules: AmazonEKSEditPolicy, close to Kubernetes' edit role: the
// admin rows without RBAC roles and bindings or local subject access
// reviews.
func editRules() []Rule {
	return []Rule{
		rule("apps", list("daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"), writeVerbs()),
		rule("apps", list("controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"), readVerbs()),
		rule("autoscaling", list("horizontalpodautoscalers", "horizontalpodautoscalers/status"), readVerbs()),
		rule("autoscaling", list("horizontalpodautoscalers"), writeVerbs()),
		rule("batch", list("cronjobs", "jobs"), writeVerbs()),
		rule("batch", list("cronjobs", "cronjobs/status", "jobs", "jobs/status"), readVerbs()),
		rule("discovery.k8s.io", list("endpointslices"), readVerbs()),
		rule("extensions", list("daemonsets", "deployments", "deployments/rollback", "deployments/scale", "ingresses", "networkpolicies", "replicasets", "replicasets/scale", "replicationcontrollers/scale"), writeVerbs()),
		rule("extensions", list("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses", "ingresses/status", "networkpolicies", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale"), readVerbs()),
		rule("networking.k8s.io", list("ingresses", "networkpolicies"), writeVerbs()),
		rule("networking.k8s.io", list("ingresses", "ingresses/status", "networkpolicies"), readVerbs()),
		rule("policy", list("poddisruptionbudgets"), writeVerbs()),
		rule("policy", list("poddisruptionbudgets", "poddisruptionbudgets/status"), readVerbs()),
		rule("", list("namespaces"), readVerbs()),
		rule("", list("pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"), readVerbs()),
		rule("", list("serviceaccounts"), list("impersonate")),
		rule("", list("pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"), writeVerbs()),
		rule("", list("configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"), writeVerbs()),
		rule("", list("configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"), readVerbs()),
		rule("", list("bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"), readVerbs()),
	}
}

// viewRules: AmazonEKSViewPolicy, close to Kubernetes' view role: read
// access to most resources, not Secrets and not the pod subresources that
// reach into containers.
func viewRules() []Rule {
	return []Rule{
		rule("apps", list("controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"), readVerbs()),
		rule("autoscaling", list("horizontalpodautoscalers", "horizontalpodautoscalers/status"), readVerbs()),
		rule("batch", list("cronjobs", "cronjobs/status", "jobs", "jobs/status"), readVerbs()),
		rule("discovery.k8s.io", list("endpointslices"), readVerbs()),
		rule("extensions", list("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses", "ingresses/status", "networkpolicies", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale"), readVerbs()),
		rule("networking.k8s.io", list("ingresses", "ingresses/status", "networkpolicies"), readVerbs()),
		rule("policy", list("poddisruptionbudgets", "poddisruptionbudgets/status"), readVerbs()),
		rule("", list("configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"), readVerbs()),
		rule("", list("bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"), readVerbs()),
		rule("", list("namespaces"), readVerbs()),
	}
}
