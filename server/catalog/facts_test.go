package catalog

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestClusterDNSIP(t *testing.T) {
	tests := []struct {
		name    string
		cidr    string
		want    string
		wantErr string
	}{
		{"K3s default", "10.43.0.0/16", "10.43.0.10", ""},
		{"EKS default", "10.100.0.0/16", "10.100.0.10", ""},
		{"EKS in 172.16/12", "172.20.0.0/16", "172.20.0.10", ""},
		{"kubeadm default", "10.96.0.0/12", "10.96.0.10", ""},
		{"smallest EKS range", "192.168.4.0/24", "192.168.4.10", ""},
		{"smallest usable range", "10.0.0.16/28", "10.0.0.26", ""},
		{"too small", "10.0.0.8/29", "", "too small"},
		{"a single address", "10.0.0.1/32", "", "too small"},
		{"not a network address", "10.43.1.0/16", "", "did you mean 10.43.0.0/16?"},
		{"IPv6", "fd00:43::/108", "", "not IPv4"},
		{"no prefix length", "10.43.0.0", "", "not a CIDR block"},
		{"empty", "", "", "not a CIDR block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClusterDNSIP(tc.cidr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ClusterDNSIP(%q) = %q, %v; want an error with %q", tc.cidr, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ClusterDNSIP(%q) = %q, %v; want %s", tc.cidr, got, err, tc.want)
			}
		})
	}
}

// field walks a rendered object along path (map keys, or "0" for a list's
// first element).
func field(o object, path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			if p != "0" || len(c) == 0 {
				return nil
			}
			cur = c[0]
		default:
			return nil
		}
	}
	return cur
}

// TestRender_CorednsServiceHoldsTheClusterDNSAddress checks that kube-dns
// takes the address every kubelet is told is the cluster DNS server.
func TestRender_CorednsServiceHoldsTheClusterDNSAddress(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("coredns")
	tests := []struct {
		name, cidr, want string
	}{
		{"K3s", "10.43.0.0/16", "10.43.0.10"},
		{"EKS 10.100", "10.100.0.0/16", "10.100.0.10"},
		{"EKS 172.20", "172.20.0.0/16", "172.20.0.10"},
	}
	for _, v := range a.Versions {
		for _, tc := range tests {
			t.Run(v.Version+"/"+tc.name, func(t *testing.T) {
				p := prod()
				p.ServiceIPv4CIDR = tc.cidr
				out, err := v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				svc, ok := find(parseBundle(t, out), "Service", "kube-dns")
				if !ok {
					t.Fatal("no kube-dns Service")
				}
				if got := field(svc, "spec", "clusterIP"); got != tc.want {
					t.Fatalf("kube-dns clusterIP = %v, want %s", got, tc.want)
				}
			})
		}
	}
}

// TestRender_KubeProxyTalksToTheRealEndpoint checks that kube-proxy's
// kubeconfig names the cluster's endpoint and CA, never the kubernetes
// Service that only kube-proxy makes routable, and that the DaemonSet runs
// with it.
func TestRender_KubeProxyTalksToTheRealEndpoint(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("kube-proxy")
	for _, v := range a.Versions {
		t.Run(v.Version, func(t *testing.T) {
			p := prod()
			p.Endpoint = "https://api.prod.internal:6443"
			out, err := v.Render(p)
			if err != nil {
				t.Fatal(err)
			}
			objs := parseBundle(t, out)
			cm, ok := find(objs, "ConfigMap", "kube-proxy")
			if !ok {
				t.Fatal("no kube-proxy ConfigMap")
			}
			var kubeconfig struct {
				Clusters []struct {
					Cluster map[string]string `json:"cluster"`
				} `json:"clusters"`
				Users []struct {
					User map[string]string `json:"user"`
				} `json:"users"`
			}
			kc, _ := field(cm, "data", "kubeconfig.conf").(string)
			if err := yaml.Unmarshal([]byte(kc), &kubeconfig); err != nil || len(kubeconfig.Clusters) != 1 || len(kubeconfig.Users) != 1 {
				t.Fatalf("kubeconfig.conf (%v):\n%s", err, kc)
			}
			if got := kubeconfig.Clusters[0].Cluster; got["server"] != p.Endpoint || got["certificate-authority-data"] != testCA {
				t.Errorf("kubeconfig cluster = %v, want server %s and the cluster CA as given", got, p.Endpoint)
			}
			if got := kubeconfig.Users[0].User["tokenFile"]; got != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
				t.Errorf("kubeconfig user token file = %q, want the service account's", got)
			}
			var config map[string]any
			if err := yaml.Unmarshal([]byte(field(cm, "data", "config.conf").(string)), &config); err != nil {
				t.Fatal(err)
			}
			if got := field(object(config), "clientConnection", "kubeconfig"); got != "/var/lib/kube-proxy/kubeconfig.conf" {
				t.Errorf("clientConnection.kubeconfig = %v", got)
			}
			if config["mode"] != "iptables" || config["kind"] != "KubeProxyConfiguration" {
				t.Errorf("config mode %v kind %v", config["mode"], config["kind"])
			}
			if _, ok := config["clusterCIDR"]; ok {
				t.Errorf("clusterCIDR set without configuration: %v", config["clusterCIDR"])
			}

			ds, ok := find(objs, "DaemonSet", "kube-proxy")
			if !ok {
				t.Fatal("no kube-proxy DaemonSet")
			}
			spec, _ := field(ds, "spec", "template", "spec").(map[string]any)
			if spec["hostNetwork"] != true || spec["priorityClassName"] != "system-node-critical" {
				t.Errorf("hostNetwork %v, priorityClassName %v", spec["hostNetwork"], spec["priorityClassName"])
			}
			if got := field(object(spec), "tolerations", "0"); !mapEqual(got, map[string]any{"operator": "Exists"}) {
				t.Errorf("tolerations[0] = %v, want every taint tolerated", got)
			}
			cmd := strings.Join(toStrings(field(object(spec), "containers", "0", "command")), " ")
			if cmd != "kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)" {
				t.Errorf("command = %s", cmd)
			}
			if got := field(object(spec), "containers", "0", "securityContext", "privileged"); got != true {
				t.Errorf("privileged = %v", got)
			}
			volumes := map[string]any{}
			for _, vol := range spec["volumes"].([]any) {
				vol := vol.(map[string]any)
				volumes[vol["name"].(string)] = vol
			}
			if got := field(object(volumes), "kube-proxy", "configMap", "name"); got != "kube-proxy" {
				t.Errorf("kube-proxy volume = %v", volumes["kube-proxy"])
			}
			if got := field(object(volumes), "xtables-lock", "hostPath", "path"); got != "/run/xtables.lock" {
				t.Errorf("xtables-lock volume = %v", volumes["xtables-lock"])
			}
		})
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

func mapEqual(got any, want map[string]any) bool {
	m, ok := got.(map[string]any)
	if !ok || len(m) != len(want) {
		return false
	}
	for k, v := range want {
		if m[k] != v {
			return false
		}
	}
	return true
}

// TestRender_MissingFacts checks that a bundle which cannot work without a
// cluster fact fails with a *MissingFactError naming it (the cluster is not
// ACTIVE yet, or has no IPv4 service CIDR), and one that needs none renders.
func TestRender_MissingFacts(t *testing.T) {
	c := loadEmbedded(t)
	tests := []struct {
		name   string
		addon  string
		change func(*RenderParams)
		fact   string // "" when the render must succeed
	}{
		{"coredns without a service CIDR", "coredns", func(p *RenderParams) { p.ServiceIPv4CIDR = "" }, "serviceIpv4Cidr"},
		{"kube-proxy without an endpoint", "kube-proxy", func(p *RenderParams) { p.Endpoint = "" }, "endpoint"},
		{"kube-proxy without a CA", "kube-proxy", func(p *RenderParams) { p.CertificateAuthorityData = "" }, "certificateAuthorityData"},
		{"coredns before ACTIVE", "coredns", func(p *RenderParams) { p.Endpoint, p.CertificateAuthorityData = "", "" }, ""},
		{"metrics-server without any fact", "metrics-server", func(p *RenderParams) { *p = RenderParams{ClusterName: p.ClusterName} }, ""},
	}
	for _, tc := range tests {
		a, _ := c.Addon(tc.addon)
		for _, v := range a.Versions {
			t.Run(tc.name+"/"+v.Version, func(t *testing.T) {
				p := prod()
				tc.change(&p)
				_, err := v.Render(p)
				if tc.fact == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				var missing *MissingFactError
				if !errors.As(err, &missing) || missing.Fact != tc.fact {
					t.Fatalf("Render = %v, want a *MissingFactError for %s", err, tc.fact)
				}
				if !strings.HasPrefix(err.Error(), v.String()+": ") {
					t.Errorf("error %q does not name the version", err)
				}
			})
		}
	}
}

// TestRender_MetricsServerUpstreamRBAC checks the one place where the
// bundle depends on its namespace: upstream's RoleBinding in kube-system,
// an equivalent ClusterRole rule elsewhere.
func TestRender_MetricsServerUpstreamRBAC(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("metrics-server")
	for _, v := range a.Versions {
		for _, ns := range []string{"kube-system", "monitoring"} {
			t.Run(v.Version+"/"+ns, func(t *testing.T) {
				p := prod()
				p.Namespace = ns
				out, err := v.Render(p)
				if err != nil {
					t.Fatal(err)
				}
				objs := parseBundle(t, out)
				rb, hasBinding := find(objs, "RoleBinding", "metrics-server-auth-reader")
				role, _ := find(objs, "ClusterRole", "system:metrics-server")
				hasRule := strings.Contains(string(mustYAML(t, role)), "extension-apiserver-authentication")
				if want := ns == "kube-system"; hasBinding != want || hasRule == want {
					t.Fatalf("auth-reader RoleBinding %v, ClusterRole rule %v; want the RoleBinding only in kube-system", hasBinding, hasRule)
				}
				if hasBinding && field(rb, "roleRef", "name") != "extension-apiserver-authentication-reader" {
					t.Errorf("roleRef = %v", rb["roleRef"])
				}
				dep, _ := find(objs, "Deployment", "metrics-server")
				args := toStrings(field(dep, "spec", "template", "spec", "containers", "0", "args"))
				for _, want := range []string{"--secure-port=10250", "--cert-dir=/tmp", "--kubelet-use-node-status-port",
					"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname", "--metric-resolution=15s"} {
					if !slices.Contains(args, want) {
						t.Errorf("args %v lack %s", args, want)
					}
				}
				if slices.Contains(args, "--kubelet-insecure-tls") {
					t.Error("kubelet serving certificates are not verified")
				}
			})
		}
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
