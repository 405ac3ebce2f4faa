package health

import (
	"strings"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// parse reads an object as the apiserver returns it (written as YAML).
func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

// statusCase is an object and what is said of it.
type statusCase struct {
	name string
	// obj is the object as the apiserver returns it.
	obj string
	// kstatus is what kstatus alone says of it: where it differs from
	// want, the agent's rules close a gap.
	kstatus status.Status
	// want is what objectStatus says, and message part of why.
	want    status.Status
	message string
}

// checkStatus judges each case's object as the cache holds it, trimmed,
// and requires the same verdict as for the whole object: a trim that drops
// a field a rule (or kstatus) reads fails here.
func checkStatus(t *testing.T, cases []statusCase, endpoints endpointLookup) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			whole := parse(t, tt.obj)
			out, err := trim(whole.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			cached := out.(*unstructured.Unstructured)
			k, err := status.Compute(cached)
			if err != nil {
				t.Fatal(err)
			}
			if k.Status != tt.kstatus {
				t.Errorf("kstatus says %s (%s), the table says %s", k.Status, k.Message, tt.kstatus)
			}
			got, err := objectStatus(cached, endpoints)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tt.want || !strings.Contains(got.Message, tt.message) {
				t.Errorf("objectStatus = %s (%q), want %s with %q", got.Status, got.Message, tt.want, tt.message)
			}
			fromWhole, err := objectStatus(whole, endpoints)
			if err != nil {
				t.Fatal(err)
			}
			if fromWhole.Status != got.Status || fromWhole.Message != got.Message {
				t.Errorf("trimmed: %s (%q); whole: %s (%q)", got.Status, got.Message, fromWhole.Status, fromWhole.Message)
			}
		})
	}
}

// noEndpoints is the lookup of a watcher that watches no EndpointSlices.
func noEndpoints(string, string) (bool, bool) { return false, false }

// The APIService of the metrics-server add-on, before its status.
const apiService = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  uid: 0b6f1f0e-3c1b-4d5e-9a51-2f1e8c9d7a10
  resourceVersion: "1187"
  creationTimestamp: "2025-06-01T10:00:00Z"
  labels:
    addons.saltbush.io/name: metrics-server
    app.kubernetes.io/managed-by: saltbush
  managedFields:
  - manager: eks
    operation: Apply
    apiVersion: apiregistration.k8s.io/v1
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service:
    name: metrics-server
    namespace: kube-system
    port: 443
`

// APIService has no generation or observedGeneration (its conditions are
// recomputed from the Service whatever changed), so no case is stale.
func TestAPIServiceStatus(t *testing.T) {
	checkStatus(t, []statusCase{
		{name: "available", obj: apiService + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:01:10Z"
    message: all checks passed
    reason: Passed
    status: "True"
    type: Available
`, kstatus: status.CurrentStatus, want: status.CurrentStatus, message: "Available=True (Passed)"},
		{name: "local, available on create", obj: `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.example.saltbush.io
  resourceVersion: "90"
  labels:
    addons.saltbush.io/name: example
spec:
  group: example.saltbush.io
  version: v1
  groupPriorityMinimum: 1000
  versionPriority: 15
status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: Local APIServices are always available
    reason: Local
    status: "True"
    type: Available
`, kstatus: status.CurrentStatus, want: status.CurrentStatus, message: "(Local)"},
		{name: "unavailable, missing endpoints", obj: apiService + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: endpointslices for service/metrics-server in "kube-system" have no addresses with port name "https"
    reason: MissingEndpoints
    status: "False"
    type: Available
`, kstatus: status.CurrentStatus, want: status.InProgressStatus,
			message: `Available=False (MissingEndpoints): endpointslices for service/metrics-server in "kube-system" have no addresses`},
		{name: "unavailable, failed discovery check", obj: apiService + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: 'failing or missing response from https://10.42.0.7:10250/apis/metrics.k8s.io/v1beta1: Get "https://10.42.0.7:10250/apis/metrics.k8s.io/v1beta1": dial tcp 10.42.0.7:10250: connect: connection refused'
    reason: FailedDiscoveryCheck
    status: "False"
    type: Available
`, kstatus: status.CurrentStatus, want: status.InProgressStatus, message: "Available=False (FailedDiscoveryCheck): failing or missing response"},
		{name: "unavailable, service not found", obj: apiService + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: service/metrics-server in "kube-system" is not present
    reason: ServiceNotFound
    status: "False"
    type: Available
`, kstatus: status.CurrentStatus, want: status.InProgressStatus, message: "Available=False (ServiceNotFound)"},
		{name: "unknown, the aggregator cannot tell", obj: apiService + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: 'service/metrics-server in "kube-system" cannot be checked due to: etcdserver: request timed out'
    reason: ServiceAccessError
    status: Unknown
    type: Available
`, kstatus: status.CurrentStatus, want: status.InProgressStatus, message: "Available=Unknown (ServiceAccessError)"},
		{name: "missing condition, not checked yet", obj: apiService + "status: {}\n",
			kstatus: status.CurrentStatus, want: status.InProgressStatus, message: "no Available condition"},
		{name: "being deleted", obj: strings.Replace(apiService, "  labels:", "  deletionTimestamp: \"2025-06-01T11:00:00Z\"\n  labels:", 1) + `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:01:10Z"
    message: all checks passed
    reason: Passed
    status: "True"
    type: Available
`, kstatus: status.TerminatingStatus, want: status.TerminatingStatus},
	}, noEndpoints)
}

// crd is Argo CD's Application CRD with extra metadata lines (indented
// two spaces) and a status.
func crd(meta, st string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: applications.argoproj.io
  uid: 5d0c2b3a-7e54-4b0b-8a1e-1c2d3e4f5a6b
  resourceVersion: "1093"
  creationTimestamp: "2025-06-01T10:00:00Z"
  labels:
    addons.saltbush.io/name: argocd
` + meta + `spec:
  group: argoproj.io
  names:
    kind: Application
    listKind: ApplicationList
    plural: applications
    shortNames: [app, apps]
    singular: application
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
` + st
}

const (
	namesAccepted = `  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: no conflicts found
    reason: NoConflicts
    status: "True"
    type: NamesAccepted
`
	namesConflict = `  - lastTransitionTime: "2025-06-01T10:05:00Z"
    message: '"apps" is already in use'
    reason: ShortNamesConflict
    status: "False"
    type: NamesAccepted
`
	established = `  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: the initial names have been accepted
    reason: InitialNamesAccepted
    status: "True"
    type: Established
`
	acceptedNames = `status:
  acceptedNames:
    kind: Application
    listKind: ApplicationList
    plural: applications
    shortNames: [app, apps]
    singular: application
  storedVersions: [v1alpha1]
  conditions:
`
)

// kstatus already judges CRDs (crdConditions); the agent's rule only
// makes NamesAccepted=False fail whatever the order of the conditions.
func TestCRDStatus(t *testing.T) {
	checkStatus(t, []statusCase{
		{name: "established", obj: crd("  generation: 1\n", acceptedNames+namesAccepted+established),
			kstatus: status.CurrentStatus, want: status.CurrentStatus, message: "Established=True"},
		{name: "just created, no conditions", obj: crd("  generation: 1\n", `status:
  acceptedNames:
    kind: ""
    plural: ""
  conditions: null
  storedVersions: [v1alpha1]
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "Install in progress"},
		{name: "installing", obj: crd("  generation: 1\n", acceptedNames+namesAccepted+`  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: the initial names have been accepted
    reason: Installing
    status: "False"
    type: Established
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "Install in progress"},
		{name: "names not accepted", obj: crd("  generation: 1\n", `status:
  acceptedNames:
    kind: ""
    plural: ""
  storedVersions: [v1alpha1]
  conditions:
`+namesConflict+`  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: not all names are accepted
    reason: NotAccepted
    status: "False"
    type: Established
`), kstatus: status.FailedStatus, want: status.FailedStatus, message: `"apps" is already in use`},
		// Established is never reset: a later generation whose names
		// conflict stays Established.
		{name: "established, new names conflict", obj: crd("  generation: 2\n", acceptedNames+namesConflict+established),
			kstatus: status.FailedStatus, want: status.FailedStatus, message: `"apps" is already in use`},
		{name: "established, new names conflict, Established listed first",
			obj:     crd("  generation: 2\n", acceptedNames+established+namesConflict),
			kstatus: status.CurrentStatus, want: status.FailedStatus, message: "NamesAccepted=False (ShortNamesConflict)"},
		// With CRDObservedGenerationTracking the apiserver keeps
		// status.observedGeneration, which kstatus checks first.
		{name: "stale observedGeneration", obj: crd("  generation: 3\n",
			strings.Replace(acceptedNames, "status:\n", "status:\n  observedGeneration: 2\n", 1)+namesAccepted+established),
			kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "generation is 3, but latest observed generation is 2"},
		{name: "being deleted", obj: crd("  generation: 1\n  deletionTimestamp: \"2025-06-01T11:00:00Z\"\n  finalizers: [customresourcecleanup.apiextensions.k8s.io]\n",
			acceptedNames+namesAccepted+established+`  - lastTransitionTime: "2025-06-01T11:00:00Z"
    message: CustomResource deletion is in progress
    reason: InstanceDeletionInProgress
    status: "True"
    type: Terminating
`), kstatus: status.TerminatingStatus, want: status.TerminatingStatus},
	}, noEndpoints)
}

// mutatingWebhooks is a MutatingWebhookConfiguration of the AWS Load
// Balancer Controller's shape with the given webhooks.
func mutatingWebhooks(hooks string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: aws-load-balancer-webhook
  uid: 2f0e9d8c-1b2a-4c3d-8e7f-6a5b4c3d2e1f
  resourceVersion: "2210"
  generation: 1
  creationTimestamp: "2025-06-01T10:00:00Z"
  labels:
    addons.saltbush.io/name: aws-load-balancer-controller
  annotations:
    addons.saltbush.io/inject-ca-from: kube-system/aws-load-balancer-tls
` + hooks
}

// serviceHook is a webhook calling a Service in namespace.
func serviceHook(name, namespace, service string) string {
	return `- name: ` + name + `
  admissionReviewVersions: [v1beta1]
  clientConfig:
    caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lRCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K
    service:
      name: ` + service + `
      namespace: ` + namespace + `
      path: /mutate-v1-pod
      port: 443
  failurePolicy: Fail
  matchPolicy: Equivalent
  namespaceSelector:
    matchExpressions:
    - key: elbv2.k8s.aws/pod-readiness-gate-inject
      operator: In
      values: [enabled]
  objectSelector: {}
  reinvocationPolicy: Never
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
    scope: '*'
  sideEffects: None
  timeoutSeconds: 10
`
}

// endpointSlice is an EndpointSlice of service in kube-system whose one
// endpoint has the given conditions.
func endpointSlice(service, conditions string) string {
	return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ` + service + `-x7k2p
  namespace: kube-system
  resourceVersion: "2301"
  generateName: ` + service + `-
  labels:
    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
    kubernetes.io/service-name: ` + service + `
addressType: IPv4
endpoints:
- addresses: [10.42.0.12]
  conditions: ` + conditions + `
  nodeName: node-1
  targetRef:
    kind: Pod
    name: aws-load-balancer-controller-7d9c6b5f4-abcde
    namespace: kube-system
    uid: 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d
ports:
- name: webhook-server
  port: 9443
  protocol: TCP
`
}

// sliceLookup is the endpointLookup of a watcher that watches the
// EndpointSlices of kube-system only, which are docs, trimmed as the
// cache holds them.
func sliceLookup(t *testing.T, docs []string) endpointLookup {
	t.Helper()
	var list []any
	for _, d := range docs {
		s := &discoveryv1.EndpointSlice{}
		if err := yaml.Unmarshal([]byte(d), s); err != nil {
			t.Fatal(err)
		}
		out, err := trimEndpointSlice(s)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, out)
	}
	return func(namespace, name string) (bool, bool) {
		if namespace != "kube-system" {
			return false, false
		}
		return hasReadyEndpoint(list, name), true
	}
}

func TestWebhookConfigurationStatus(t *testing.T) {
	const svc = "aws-load-balancer-webhook-service"
	ready := endpointSlice(svc, "{ready: true, serving: true, terminating: false}")
	oneHook := mutatingWebhooks("webhooks:\n" + serviceHook("mpod.elbv2.k8s.aws", "kube-system", svc))
	tests := []struct {
		name    string
		obj     string
		slices  []string // the EndpointSlices of kube-system
		want    status.Status
		message string
	}{
		{name: "ready endpoint", obj: oneHook, slices: []string{ready}, want: status.CurrentStatus},
		{name: "no EndpointSlice", obj: oneHook, want: status.InProgressStatus,
			message: "webhook mpod.elbv2.k8s.aws: Service kube-system/" + svc + " has no ready endpoint"},
		{name: "EndpointSlice without endpoints", obj: oneHook, slices: []string{strings.Split(ready, "endpoints:")[0] + "endpoints: null\n"},
			want: status.InProgressStatus, message: "has no ready endpoint"},
		{name: "endpoint not ready", obj: oneHook, slices: []string{endpointSlice(svc, "{ready: false, serving: false, terminating: false}")},
			want: status.InProgressStatus, message: "has no ready endpoint"},
		{name: "endpoint terminating", obj: oneHook, slices: []string{endpointSlice(svc, "{ready: false, serving: true, terminating: true}")},
			want: status.InProgressStatus, message: "has no ready endpoint"},
		{name: "endpoint readiness unknown", obj: oneHook, slices: []string{endpointSlice(svc, "{}")}, want: status.CurrentStatus},
		{name: "only another Service's endpoints", obj: oneHook, slices: []string{endpointSlice("kube-dns", "{ready: true}")},
			want: status.InProgressStatus, message: "has no ready endpoint"},
		{name: "namespace not watched", obj: mutatingWebhooks("webhooks:\n" + serviceHook("mpod.elbv2.k8s.aws", "lbc", svc)),
			want: status.InProgressStatus, message: "the endpoints of Service lbc/" + svc + " are not watched yet"},
		{name: "URL", obj: mutatingWebhooks(`webhooks:
- name: external.example.com
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://webhook.example.com/mutate
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 10
`), want: status.CurrentStatus},
		{name: "one webhook of two without endpoint", obj: mutatingWebhooks("webhooks:\n" +
			serviceHook("mpod.elbv2.k8s.aws", "kube-system", svc) + serviceHook("mservice.elbv2.k8s.aws", "kube-system", "other-webhook")),
			slices: []string{ready}, want: status.InProgressStatus,
			message: "webhook mservice.elbv2.k8s.aws: Service kube-system/other-webhook has no ready endpoint"},
		{name: "validating, no endpoint", obj: strings.Replace(oneHook, "kind: MutatingWebhookConfiguration", "kind: ValidatingWebhookConfiguration", 1),
			want: status.InProgressStatus, message: "has no ready endpoint"},
		{name: "validating, ready endpoint", obj: strings.Replace(oneHook, "kind: MutatingWebhookConfiguration", "kind: ValidatingWebhookConfiguration", 1),
			slices: []string{ready}, want: status.CurrentStatus},
		{name: "no webhooks", obj: mutatingWebhooks(""), want: status.CurrentStatus},
		{name: "being deleted", obj: strings.Replace(oneHook, "  labels:", "  deletionTimestamp: \"2025-06-01T11:00:00Z\"\n  labels:", 1),
			want: status.TerminatingStatus},
	}
	for _, tt := range tests {
		// kstatus has no rule for webhook configurations and they have no
		// status: it calls every one of them Current (or Terminating).
		kstatus := status.CurrentStatus
		if tt.want == status.TerminatingStatus {
			kstatus = status.TerminatingStatus
		}
		checkStatus(t, []statusCase{{name: tt.name, obj: tt.obj, kstatus: kstatus, want: tt.want, message: tt.message}},
			sliceLookup(t, tt.slices))
	}
}

func TestServiceStatus(t *testing.T) {
	service := func(spec, st string) string {
		return `apiVersion: v1
kind: Service
metadata:
  name: argocd-server
  namespace: argocd
  uid: 7c6b5a49-3827-4160-a5f4-e3d2c1b0a987
  resourceVersion: "3051"
  creationTimestamp: "2025-06-01T10:00:00Z"
  labels:
    addons.saltbush.io/name: argocd
spec:
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: 8080
  selector:
    app.kubernetes.io/name: argocd-server
  sessionAffinity: None
` + spec + st
	}
	// A LoadBalancer Service is Current without its ingress (rules.go
	// says why): the apiserver allocates its cluster IP on create.
	checkStatus(t, []statusCase{
		{name: "ClusterIP", obj: service("  type: ClusterIP\n  clusterIP: 10.43.12.7\n  clusterIPs: [10.43.12.7]\n", "status:\n  loadBalancer: {}\n"),
			kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "headless", obj: service("  type: ClusterIP\n  clusterIP: None\n  clusterIPs: [None]\n", "status:\n  loadBalancer: {}\n"),
			kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "LoadBalancer without ingress", obj: service(`  type: LoadBalancer
  clusterIP: 10.43.12.7
  clusterIPs: [10.43.12.7]
  allocateLoadBalancerNodePorts: true
  externalTrafficPolicy: Cluster
`, "status:\n  loadBalancer: {}\n"), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "LoadBalancer with ingress", obj: service(`  type: LoadBalancer
  clusterIP: 10.43.12.7
  clusterIPs: [10.43.12.7]
  externalTrafficPolicy: Cluster
`, "status:\n  loadBalancer:\n    ingress:\n    - hostname: k8s-argocd-abc.elb.us-west-2.amazonaws.com\n"),
			kstatus: status.CurrentStatus, want: status.CurrentStatus},
	}, noEndpoints)
}

func TestPodDisruptionBudgetStatus(t *testing.T) {
	pdb := func(generation, st string) string {
		return `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: coredns
  namespace: kube-system
  uid: 1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d
  resourceVersion: "1502"
  generation: ` + generation + `
  labels:
    addons.saltbush.io/name: coredns
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      k8s-app: kube-dns
` + st
	}
	// The policy's verdict (DisruptionAllowed) is not the add-on's
	// readiness (rules.go): kstatus only waits for the controller.
	checkStatus(t, []statusCase{
		{name: "observed, disruptions allowed", obj: pdb("1", `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:30Z"
    message: ""
    observedGeneration: 1
    reason: SufficientPods
    status: "True"
    type: DisruptionAllowed
  currentHealthy: 2
  desiredHealthy: 1
  disruptionsAllowed: 1
  expectedPods: 2
  observedGeneration: 1
`), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "observed, no disruption allowed", obj: pdb("1", `status:
  conditions:
  - lastTransitionTime: "2025-06-01T10:00:30Z"
    message: ""
    observedGeneration: 1
    reason: InsufficientPods
    status: "False"
    type: DisruptionAllowed
  currentHealthy: 1
  desiredHealthy: 1
  disruptionsAllowed: 0
  expectedPods: 2
  observedGeneration: 1
`), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "just created, not observed", obj: pdb("1", `status:
  currentHealthy: 0
  desiredHealthy: 0
  disruptionsAllowed: 0
  expectedPods: 0
`), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "stale observedGeneration", obj: pdb("2", `status:
  currentHealthy: 2
  desiredHealthy: 1
  disruptionsAllowed: 1
  expectedPods: 2
  observedGeneration: 1
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "latest observed generation is 1"},
	}, noEndpoints)
}

func TestNamespaceStatus(t *testing.T) {
	checkStatus(t, []statusCase{
		{name: "active", obj: `apiVersion: v1
kind: Namespace
metadata:
  name: argocd
  uid: 4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a
  resourceVersion: "980"
  labels:
    addons.saltbush.io/name: argocd
    kubernetes.io/metadata.name: argocd
spec:
  finalizers: [kubernetes]
status:
  phase: Active
`, kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "terminating", obj: `apiVersion: v1
kind: Namespace
metadata:
  name: argocd
  resourceVersion: "4410"
  deletionTimestamp: "2025-06-01T11:00:00Z"
  labels:
    addons.saltbush.io/name: argocd
spec:
  finalizers: [kubernetes]
status:
  conditions:
  - lastTransitionTime: "2025-06-01T11:00:05Z"
    message: 'Some resources are remaining: pods. has 1 resource instances'
    reason: SomeResourcesRemain
    status: "True"
    type: NamespaceContentRemaining
  phase: Terminating
`, kstatus: status.TerminatingStatus, want: status.TerminatingStatus},
	}, noEndpoints)
}

// TestStatuslessKindsStatus: the catalogue's kinds that have no status
// (or, ConfigMap and Secret, a kstatus rule saying so) are Current at once.
func TestStatuslessKindsStatus(t *testing.T) {
	var cases []statusCase
	for _, doc := range []string{
		"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: coredns\n  namespace: kube-system\n  resourceVersion: \"1\"\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  namespace: kube-system\n  resourceVersion: \"1\"\ndata:\n  Corefile: \".:53 {}\"\n",
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: aws-load-balancer-tls\n  namespace: kube-system\n  resourceVersion: \"1\"\ntype: kubernetes.io/tls\ndata:\n  tls.crt: \"\"\n  tls.key: \"\"\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: system:coredns\n  resourceVersion: \"1\"\nrules:\n- apiGroups: [\"\"]\n  resources: [endpoints]\n  verbs: [list, watch]\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: system:coredns\n  resourceVersion: \"1\"\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: system:coredns\nsubjects:\n- kind: ServiceAccount\n  name: coredns\n  namespace: kube-system\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: argocd-server\n  namespace: argocd\n  resourceVersion: \"1\"\nrules: []\n",
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: argocd-server\n  namespace: argocd\n  resourceVersion: \"1\"\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: argocd-server\n",
		"apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: ebs.csi.aws.com\n  resourceVersion: \"1\"\nspec:\n  attachRequired: true\n  podInfoOnMount: false\n",
		"apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: alb\n  resourceVersion: \"1\"\n  generation: 1\nspec:\n  controller: ingress.k8s.aws/alb\n",
	} {
		kind := strings.TrimPrefix(strings.Split(doc, "\n")[1], "kind: ")
		cases = append(cases, statusCase{name: kind, obj: doc, kstatus: status.CurrentStatus, want: status.CurrentStatus})
	}
	checkStatus(t, cases, noEndpoints)
}

// TestWorkloadStatus: workloads keep kstatus's verdict.
func TestWorkloadStatus(t *testing.T) {
	deployment := func(generation, st string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: metrics-server
  namespace: kube-system
  resourceVersion: "2001"
  generation: ` + generation + `
  labels:
    addons.saltbush.io/name: metrics-server
spec:
  progressDeadlineSeconds: 600
  replicas: 2
  selector:
    matchLabels:
      k8s-app: metrics-server
  template:
    metadata:
      labels:
        k8s-app: metrics-server
    spec:
      containers:
      - name: metrics-server
        image: registry.k8s.io/metrics-server/metrics-server:v0.8.0
` + st
	}
	const available = `  conditions:
  - lastTransitionTime: "2025-06-01T10:01:00Z"
    message: Deployment has minimum availability.
    reason: MinimumReplicasAvailable
    status: "True"
    type: Available
  - lastTransitionTime: "2025-06-01T10:00:00Z"
    message: ReplicaSet "metrics-server-6d94bc8694" has successfully progressed.
    reason: NewReplicaSetAvailable
    status: "True"
    type: Progressing
`
	daemonSet := func(st string) string {
		return `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-proxy
  namespace: kube-system
  resourceVersion: "2101"
  generation: 1
  labels:
    addons.saltbush.io/name: kube-proxy
spec:
  selector:
    matchLabels:
      k8s-app: kube-proxy
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 10%
  template:
    spec:
      containers:
      - name: kube-proxy
        image: registry.k8s.io/kube-proxy:v1.34.1
` + st
	}
	statefulSet := func(st string) string {
		return `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: argocd-application-controller
  namespace: argocd
  resourceVersion: "3101"
  generation: 2
  labels:
    addons.saltbush.io/name: argocd
spec:
  replicas: 1
  serviceName: argocd-application-controller
  selector:
    matchLabels:
      app.kubernetes.io/name: argocd-application-controller
  updateStrategy:
    type: RollingUpdate
  template:
    spec:
      containers:
      - name: argocd-application-controller
        image: quay.io/argoproj/argocd:v3.1.5
` + st
	}
	checkStatus(t, []statusCase{
		{name: "Deployment available", obj: deployment("1", "status:\n"+available+
			"  availableReplicas: 2\n  observedGeneration: 1\n  readyReplicas: 2\n  replicas: 2\n  updatedReplicas: 2\n"),
			kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "Deployment rolling out", obj: deployment("2", "status:\n"+available+
			"  availableReplicas: 2\n  observedGeneration: 2\n  readyReplicas: 2\n  replicas: 3\n  updatedReplicas: 1\n"),
			kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "Updated: 1/2"},
		{name: "Deployment stale observedGeneration", obj: deployment("2", "status:\n"+available+
			"  availableReplicas: 2\n  observedGeneration: 1\n  readyReplicas: 2\n  replicas: 2\n  updatedReplicas: 2\n"),
			kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "latest observed generation is 1"},
		{name: "DaemonSet available", obj: daemonSet(`status:
  currentNumberScheduled: 3
  desiredNumberScheduled: 3
  numberAvailable: 3
  numberMisscheduled: 0
  numberReady: 3
  observedGeneration: 1
  updatedNumberScheduled: 3
`), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "DaemonSet not observed yet", obj: daemonSet(`status:
  currentNumberScheduled: 0
  desiredNumberScheduled: 0
  numberMisscheduled: 0
  numberReady: 0
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "observedGeneration not found"},
		{name: "DaemonSet unavailable", obj: daemonSet(`status:
  currentNumberScheduled: 3
  desiredNumberScheduled: 3
  numberAvailable: 2
  numberMisscheduled: 0
  numberReady: 2
  numberUnavailable: 1
  observedGeneration: 1
  updatedNumberScheduled: 3
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "Available: 2/3"},
		{name: "StatefulSet ready", obj: statefulSet(`status:
  availableReplicas: 1
  collisionCount: 0
  currentReplicas: 1
  currentRevision: argocd-application-controller-5c7d8f9b6
  observedGeneration: 2
  readyReplicas: 1
  replicas: 1
  updateRevision: argocd-application-controller-5c7d8f9b6
  updatedReplicas: 1
`), kstatus: status.CurrentStatus, want: status.CurrentStatus},
		{name: "StatefulSet updating", obj: statefulSet(`status:
  availableReplicas: 1
  currentReplicas: 1
  currentRevision: argocd-application-controller-5c7d8f9b6
  observedGeneration: 2
  readyReplicas: 1
  replicas: 1
  updateRevision: argocd-application-controller-7f8e9d0c1
  updatedReplicas: 0
`), kstatus: status.InProgressStatus, want: status.InProgressStatus, message: "revision"},
	}, noEndpoints)
}

// TestTrimWebhooksAndSlices: the cache keeps of webhook configurations and
// EndpointSlices what the rules read (the tables above prove the verdicts)
// and not the rest.
func TestTrimWebhooksAndSlices(t *testing.T) {
	out, err := trim(parse(t, mutatingWebhooks("webhooks:\n"+serviceHook("mpod.elbv2.k8s.aws", "kube-system", "svc"))))
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, _ := unstructured.NestedSlice(out.(*unstructured.Unstructured).Object, "webhooks")
	if len(hooks) != 1 {
		t.Fatalf("webhooks trimmed to %v", hooks)
	}
	h := hooks[0].(map[string]any)
	if _, ok, _ := unstructured.NestedString(h, "clientConfig", "caBundle"); ok {
		t.Error("caBundle kept in the cache")
	}
	if _, ok := h["rules"]; ok {
		t.Error("rules kept in the cache")
	}
	if ns, _, _ := unstructured.NestedString(h, "clientConfig", "service", "namespace"); ns != "kube-system" {
		t.Errorf("clientConfig.service trimmed to %v", h["clientConfig"])
	}
	s := &discoveryv1.EndpointSlice{}
	if err := yaml.Unmarshal([]byte(endpointSlice("svc", "{ready: true}")), s); err != nil {
		t.Fatal(err)
	}
	o, err := trimEndpointSlice(s)
	if err != nil {
		t.Fatal(err)
	}
	ts := o.(*discoveryv1.EndpointSlice)
	if len(ts.Endpoints) != 1 || len(ts.Endpoints[0].Addresses) != 0 || ts.Endpoints[0].TargetRef != nil || len(ts.Ports) != 0 {
		t.Errorf("EndpointSlice trimmed to %+v, want its endpoints' conditions only", ts)
	}
	if ts.Labels[discoveryv1.LabelServiceName] != "svc" || !hasReadyEndpoint([]any{ts}, "svc") {
		t.Errorf("the trimmed EndpointSlice lost its Service or its ready endpoint: %+v", ts)
	}
}
