package catalog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const roleAnnotation = "eks.amazonaws.com/role-arn"

// testCA is a cluster CA as the cluster record stores it: base64 of PEM.
var testCA = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("prod-ca")}))

// prod is the render params of an ACTIVE cluster, every fact known.
func prod() RenderParams {
	return RenderParams{
		ClusterName:              "prod",
		ServiceIPv4CIDR:          "10.43.0.0/16",
		Endpoint:                 "https://10.0.0.1:6443",
		CertificateAuthorityData: testCA,
		Region:                   "us-east-1",
	}
}

// object is one rendered Kubernetes object.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) name() string { s, _ := o.meta()["name"].(string); return s }
func (o object) meta() map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}
func (o object) namespace() (string, bool) {
	ns, ok := o.meta()["namespace"].(string)
	return ns, ok
}
func (o object) annotation(k string) string {
	a, _ := o.meta()["annotations"].(map[string]any)
	s, _ := a[k].(string)
	return s
}

// parseBundle splits Render's output independently of the package's own
// splitter and checks every document is a Kubernetes object.
func parseBundle(t *testing.T, out []byte) []object {
	t.Helper()
	if len(out) == 0 || !bytes.HasSuffix(out, []byte("\n")) {
		t.Fatalf("output %q is empty or not newline-terminated", out)
	}
	var objs []object
	for i, doc := range strings.Split("\n"+string(out), "\n---\n") {
		var o object
		if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		if s, _ := o["apiVersion"].(string); s == "" || o.kind() == "" || o.name() == "" {
			t.Fatalf("document %d lacks apiVersion, kind or metadata.name:\n%s", i, doc)
		}
		objs = append(objs, o)
	}
	return objs
}

func find(objs []object, kind, name string) (object, bool) {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o, true
		}
	}
	return nil, false
}

// images collects every container image in the objects.
func images(v any) []string {
	var out []string
	switch t := v.(type) {
	case object:
		return images(map[string]any(t))
	case map[string]any:
		for k, e := range t {
			if s, ok := e.(string); ok && k == "image" {
				out = append(out, s)
				continue
			}
			out = append(out, images(e)...)
		}
	case []any:
		for _, e := range t {
			out = append(out, images(e)...)
		}
	}
	return out
}

// hostless reports whether an image reference names no registry: the first
// path component of a multi-component name would be a host if it had a dot,
// a port or were localhost.
func hostless(ref string) bool {
	first, rest, multi := strings.Cut(ref, "/")
	if !multi {
		return rest == "" && ref != ""
	}
	return !strings.ContainsAny(first, ".:") && first != "localhost"
}

func TestRender_EveryVersion(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			t.Run(a.Name+"/"+v.Version, func(t *testing.T) {
				t.Parallel()
				examples, err := v.Examples()
				if err != nil || len(examples) == 0 {
					t.Fatalf("examples: %v, %d", err, len(examples))
				}
				cases := []struct {
					name   string
					values map[string]any
				}{
					{"empty values", nil},
					{"sample values", examples[0]},
				}
				var outputs [][]byte
				for _, tc := range cases {
					p := prod()
					p.Values = tc.values
					out, err := v.Render(p)
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					if bytes.Contains(out, []byte("<no value>")) {
						t.Fatalf("%s: a template printed a missing value:\n%s", tc.name, out)
					}
					objs := parseBundle(t, out)
					for _, o := range objs {
						if ns, ok := o.namespace(); ok && ns != a.DefaultNamespace {
							t.Errorf("%s: %s %s in namespace %s, want %s", tc.name, o.kind(), o.name(), ns, a.DefaultNamespace)
						}
					}
					for _, img := range images(objs) {
						if !hostless(img) {
							t.Errorf("%s: image %q names a registry host", tc.name, img)
						}
					}
					_, hasNamespace := find(objs, "Namespace", a.DefaultNamespace)
					if want := a.DefaultNamespace != "kube-system"; hasNamespace != want {
						t.Errorf("%s: Namespace object rendered = %v, want %v", tc.name, hasNamespace, want)
					}
					outputs = append(outputs, out)
				}
				if bytes.Equal(outputs[0], outputs[1]) {
					t.Error("sample values do not change the rendered bundle")
				}
			})
		}
	}
}

func TestRender_Namespace(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			for _, ns := range []string{"team-a", "kube-system"} {
				t.Run(a.Name+"/"+v.Version+"/"+ns, func(t *testing.T) {
					p := prod()
					p.Namespace = ns
					out, err := v.Render(p)
					if err != nil {
						t.Fatal(err)
					}
					objs := parseBundle(t, out)
					namespaced := 0
					for _, o := range objs {
						if got, ok := o.namespace(); ok {
							namespaced++
							if got != ns {
								t.Errorf("%s %s in namespace %s, want %s", o.kind(), o.name(), got, ns)
							}
						}
						if o.kind() == "Namespace" && o.name() != ns {
							t.Errorf("bundle creates namespace %s", o.name())
						}
						// Bindings must point at the service accounts where they are.
						subjects, _ := o["subjects"].([]any)
						for _, s := range subjects {
							s := s.(map[string]any)
							if s["kind"] == "ServiceAccount" && s["namespace"] != ns {
								t.Errorf("%s %s binds a service account in %v", o.kind(), o.name(), s["namespace"])
							}
						}
					}
					if namespaced == 0 {
						t.Error("no namespaced object")
					}
					_, created := find(objs, "Namespace", ns)
					if want := ns != "kube-system"; created != want {
						t.Errorf("Namespace %s rendered = %v, want %v", ns, created, want)
					}
				})
			}
		}
	}
}

func TestRender_RoleARNs(t *testing.T) {
	const saRole = "arn:aws:iam::111122223333:role/addon"
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			t.Run(a.Name+"/"+v.Version, func(t *testing.T) {
				var sas []object
				out, err := v.Render(prod())
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range parseBundle(t, out) {
					if o.kind() == "ServiceAccount" {
						sas = append(sas, o)
						if got := o.annotation(roleAnnotation); got != "" {
							t.Errorf("service account %s annotated %q without a role", o.name(), got)
						}
					}
				}
				if len(sas) == 0 {
					if a.Name != "saltbush-noop" {
						t.Fatal("bundle has no service account")
					}
					return // the no-op add-on runs nothing
				}

				p := prod()
				p.ServiceAccountRoleARN = saRole
				out, err = v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				objs := parseBundle(t, out)
				annotated := 0
				for _, o := range objs {
					if o.kind() == "ServiceAccount" && o.annotation(roleAnnotation) == saRole {
						annotated++
					}
				}
				if annotated == 0 {
					t.Error("serviceAccountRoleArn is on no service account")
				}
				for _, pi := range v.PodIdentity {
					sa, ok := find(objs, "ServiceAccount", pi.ServiceAccount)
					if !ok {
						t.Fatalf("pod identity service account %s is not in the bundle", pi.ServiceAccount)
					}
					if got := sa.annotation(roleAnnotation); got != saRole {
						t.Errorf("service account %s annotated %q, want %q", pi.ServiceAccount, got, saRole)
					}
				}

				// A pod identity association wins over serviceAccountRoleArn.
				if len(v.PodIdentity) == 0 {
					return
				}
				roles := map[string]string{}
				for _, pi := range v.PodIdentity {
					roles[pi.ServiceAccount] = "arn:aws:iam::111122223333:role/pod-identity-" + pi.ServiceAccount
				}
				p.PodIdentityRoles = roles
				out, err = v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				objs = parseBundle(t, out)
				for sa, role := range roles {
					o, _ := find(objs, "ServiceAccount", sa)
					if got := o.annotation(roleAnnotation); got != role {
						t.Errorf("service account %s annotated %q, want %q", sa, got, role)
					}
				}
			})
		}
	}
}

// contains marks an expected value that is a substring of a string field.
type contains string

// TestRender_ValuesTakeEffect checks configurationValues reach the objects
// they configure.
func TestRender_ValuesTakeEffect(t *testing.T) {
	c := loadEmbedded(t)
	tests := []struct {
		name      string
		addon     string
		raw       string
		kind, obj string
		path      []string
		want      any // compared with reflect.DeepEqual, or contained in the string found when want is contains
	}{
		{"coredns replicas", "coredns", `replicaCount: 5`, "Deployment", "coredns", []string{"spec", "replicas"}, 5.0},
		{"coredns default replicas", "coredns", ``, "Deployment", "coredns", []string{"spec", "replicas"}, 2.0},
		{"coredns empty tolerations clear the defaults", "coredns", `tolerations: []`, "Deployment", "coredns",
			[]string{"spec", "template", "spec", "tolerations"}, nil},
		{"coredns image override", "coredns", `image: {repository: mirror/coredns, tag: "1.12.9"}`, "Deployment", "coredns",
			[]string{"spec", "template", "spec", "containers", "0", "image"}, "mirror/coredns:1.12.9"},
		{"coredns resources", "coredns", `resources: {limits: {memory: 1Gi}}`, "Deployment", "coredns",
			[]string{"spec", "template", "spec", "containers", "0", "resources"}, map[string]any{"limits": map[string]any{"memory": "1Gi"}}},
		{"coredns corefile", "coredns", `corefile: ".:53 {\n  forward . 1.1.1.1\n}\n"`, "ConfigMap", "coredns",
			[]string{"data", "Corefile"}, ".:53 {\n  forward . 1.1.1.1\n}\n"},
		{"coredns pdb disabled", "coredns", `podDisruptionBudget: {enabled: false}`, "PodDisruptionBudget", "coredns", nil, nil},
		{"kube-proxy mode", "kube-proxy", `mode: nftables`, "ConfigMap", "kube-proxy", []string{"data", "config.conf"}, contains(`mode: "nftables"`)},
		{"kube-proxy cluster CIDR", "kube-proxy", `clusterCIDR: 10.42.0.0/16`, "ConfigMap", "kube-proxy", []string{"data", "config.conf"},
			contains(`clusterCIDR: "10.42.0.0/16"`)},
		{"vpc-cni env", "vpc-cni", `env: {WARM_IP_TARGET: "5"}`, "DaemonSet", "aws-node",
			[]string{"spec", "template", "spec", "containers", "0", "env", "2"}, map[string]any{"name": "WARM_IP_TARGET", "value": "5"}},
		{"ebs controller replicas", "aws-ebs-csi-driver", `controller: {replicaCount: 4}`, "Deployment", "ebs-csi-controller",
			[]string{"spec", "replicas"}, 4.0},
		{"ebs node taints", "aws-ebs-csi-driver", `node: {tolerateAllTaints: false}`, "DaemonSet", "ebs-csi-node",
			[]string{"spec", "template", "spec", "tolerations", "0", "key"}, "CriticalAddonsOnly"},
		{"metrics-server extra args", "metrics-server", `args: ["--v=2"]`, "Deployment", "metrics-server",
			[]string{"spec", "template", "spec", "containers", "0", "args", "5"}, "--v=2"},
		{"load balancer controller cluster name", "aws-load-balancer-controller", ``, "Deployment", "aws-load-balancer-controller",
			[]string{"spec", "template", "spec", "containers", "0", "args", "0"}, "--cluster-name=prod"},
		{"load balancer controller ingress class", "aws-load-balancer-controller", `ingressClass: internal`, "IngressClass", "internal",
			[]string{"spec", "controller"}, "ingress.k8s.aws/alb"},
		{"argocd server service type", "argocd", `server: {serviceType: LoadBalancer}`, "Service", "argocd-server",
			[]string{"spec", "type"}, "LoadBalancer"},
		{"nvidia MIG strategy", "nvidia-device-plugin", `migStrategy: mixed`, "DaemonSet", "nvidia-device-plugin-daemonset",
			[]string{"spec", "template", "spec", "containers", "0", "env", "0", "value"}, "mixed"},
		{"noop message", "saltbush-noop", `{"message": "hello: world", "replicaCount": 7}`, "ConfigMap", "saltbush-noop",
			[]string{"data", "message"}, "hello: world"},
		{"noop labels", "saltbush-noop", `{labels: {team: platform}, message: m}`, "ConfigMap", "saltbush-noop",
			[]string{"metadata", "labels", "team"}, "platform"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := c.Addon(tc.addon)
			v := a.Versions[0]
			values, err := v.ParseConfiguration(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			p := prod()
			p.Values = values
			out, err := v.Render(p)
			if err != nil {
				t.Fatal(err)
			}
			o, ok := find(parseBundle(t, out), tc.kind, tc.obj)
			if tc.path == nil { // the object must be gone
				if ok {
					t.Fatalf("%s %s rendered", tc.kind, tc.obj)
				}
				return
			}
			if !ok {
				t.Fatalf("%s %s not rendered:\n%s", tc.kind, tc.obj, out)
			}
			var got any = map[string]any(o)
			for _, p := range tc.path {
				switch cur := got.(type) {
				case map[string]any:
					got = cur[p]
				case []any:
					var i int
					if _, err := fmt.Sscan(p, &i); err != nil {
						t.Fatalf("%v: %q is not an index: %v", tc.path, p, err)
					}
					if i >= len(cur) {
						t.Fatalf("%v: index %d out of %d", tc.path, i, len(cur))
					}
					got = cur[i]
				default:
					got = nil
				}
			}
			if s, ok := tc.want.(contains); ok {
				if gs, _ := got.(string); !strings.Contains(gs, string(s)) {
					t.Fatalf("%v = %q, want it to contain %q", tc.path, gs, s)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v = %#v, want %#v", tc.path, got, tc.want)
			}
		})
	}
}

func TestRender_Deterministic(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, v := range a.Versions {
			t.Run(a.Name+"/"+v.Version, func(t *testing.T) {
				examples, _ := v.Examples()
				p := prod()
				p.Namespace = "team-a"
				p.ServiceAccountRoleARN = "arn:aws:iam::111122223333:role/addon"
				p.Values = examples[0]
				first, err := v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 5 {
					again, err := v.Render(p)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(first, again) {
						t.Fatalf("render %d differs", i)
					}
				}
				// Values decoded by encoding/json (float64 numbers) render the same.
				j, _ := json.Marshal(examples[0])
				var decoded map[string]any
				if err := json.Unmarshal(j, &decoded); err != nil {
					t.Fatal(err)
				}
				p.Values = decoded
				again, err := v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(first, again) {
					t.Fatalf("values decoded as float64 render differently:\n%s\n---- vs ----\n%s", first, again)
				}
			})
		}
	}
}

func TestRender_Errors(t *testing.T) {
	c := loadEmbedded(t)
	ebs, _ := c.Addon("aws-ebs-csi-driver")
	v := ebs.Versions[0]
	tests := []struct {
		name string
		p    RenderParams
		want string
	}{
		{"invalid namespace", RenderParams{ClusterName: "prod", Namespace: "Team_A"}, `namespace "Team_A" is not a valid namespace name`},
		{"namespace too long", RenderParams{ClusterName: "prod", Namespace: strings.Repeat("a", 64)}, "not a valid namespace name"},
		{"no cluster name", RenderParams{}, "cluster name is required"},
		{"unknown pod identity service account", RenderParams{ClusterName: "prod", PodIdentityRoles: map[string]string{"ebs-csi-node-sa": "arn:aws:iam::1:role/x"}},
			`service account "ebs-csi-node-sa"`},
		{"values that are not JSON", RenderParams{ClusterName: "prod", Values: map[string]any{"x": make(chan int)}}, "configuration values"},
		// Facts are checked whether or not the bundle uses them.
		{"service CIDR not a CIDR", RenderParams{ClusterName: "prod", ServiceIPv4CIDR: "10.43.0.0"}, `service IPv4 CIDR "10.43.0.0" is not a CIDR block`},
		{"service CIDR too small", RenderParams{ClusterName: "prod", ServiceIPv4CIDR: "10.43.0.0/29"}, "too small"},
		{"endpoint not https", RenderParams{ClusterName: "prod", Endpoint: "http://10.0.0.1:6443"}, `endpoint "http://10.0.0.1:6443" is not an https URL`},
		{"endpoint with a query", RenderParams{ClusterName: "prod", Endpoint: "https://10.0.0.1:6443/?x=1"}, "is not an https URL"},
		{"CA not base64", RenderParams{ClusterName: "prod", CertificateAuthorityData: "not base64!"}, "certificate authority data is not base64"},
		{"CA not PEM", RenderParams{ClusterName: "prod", CertificateAuthorityData: base64.StdEncoding.EncodeToString([]byte("ca"))},
			"no PEM CERTIFICATE block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Render(tc.p)
			if err == nil {
				t.Fatal("Render succeeded")
			}
			prefix := "addon aws-ebs-csi-driver version " + v.Version + ": "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want %q after %q", err, tc.want, prefix)
			}
		})
	}
}

// TestRender_UserStringsStayInTheirField feeds YAML-significant strings
// through the no-op add-on: quoting must keep them data.
func TestRender_UserStringsStayInTheirField(t *testing.T) {
	c := loadEmbedded(t)
	v := noopVersion(t, c, "v1.0.0-eksbuild.1")
	for _, msg := range []string{"a\n---\nkind: Secret", `"}: {`, "#comment", "- item", "<no value>", "{{ .ClusterName }}", "\u2028\x00"} {
		t.Run(fmt.Sprintf("%q", msg), func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"message": msg})
			values, err := v.ParseConfiguration(string(raw))
			if err != nil {
				t.Fatal(err)
			}
			out, err := v.Render(RenderParams{ClusterName: "prod", Values: values})
			if err != nil {
				t.Fatal(err)
			}
			objs := parseBundle(t, out)
			cm, ok := find(objs, "ConfigMap", "saltbush-noop")
			if !ok || len(objs) != 2 {
				t.Fatalf("objects %d, ConfigMap found %v", len(objs), ok)
			}
			if got := cm["data"].(map[string]any)["message"]; got != msg {
				t.Fatalf("message %q, want %q", got, msg)
			}
		})
	}
}

func TestHostless(t *testing.T) {
	tests := []struct {
		ref  string
		want bool
	}{
		{"coredns/coredns:1.11.3", true},
		{"eks/aws-load-balancer-controller:v2.8.2", true},
		{"redis:7", true},
		{"registry.example.com/eks/coredns:1", false},
		{"mirror:5000/x:1", false},
		{"localhost/x", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			if got := hostless(tc.ref); got != tc.want {
				t.Fatalf("hostless(%q) = %v", tc.ref, got)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one", "a: 1\n", []string{"a: 1\n"}},
		{"leading separator", "---\na: 1\n", []string{"\na: 1\n"}},
		{"two", "a: 1\n---\nb: 2\n", []string{"a: 1\n", "\nb: 2\n"}},
		{"comment-only documents dropped", "# x\n---\n\n---\na: 1\n--- # end\n", []string{"\na: 1\n"}},
		{"content after the marker", "--- {a: 1}\n", []string{" {a: 1}\n"}},
		{"dashes inside a line", "a: ---\nb: '----'\n", []string{"a: ---\nb: '----'\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range splitDocuments([]byte(tc.in)) {
				got = append(got, string(d))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
