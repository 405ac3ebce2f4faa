package catalog

import (
	"strings"
	"testing"
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
