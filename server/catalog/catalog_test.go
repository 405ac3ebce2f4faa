package catalog

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// supportedKubernetesVersions are the Kubernetes versions saltbush clusters
// run; every add-on must be installable on each of them.
var supportedKubernetesVersions = []string{"1.32", "1.33", "1.34", "1.35", "1.36", "1.37"}

// embedded is loaded once for the package's tests: a loaded catalogue is
// immutable, and loading renders every bundle (seconds under -race).
var embedded = sync.OnceValues(Load)

func loadEmbedded(t testing.TB) *Catalog {
	t.Helper()
	c, err := embedded()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestLoad_EmbeddedCatalogue(t *testing.T) {
	c := loadEmbedded(t)
	tests := []struct {
		name                string
		typ, publisher, own string
		namespace           string
		hidden              bool
	}{
		{"aws-load-balancer-controller", "networking", "eks", "aws", "kube-system", false},
		{"argocd", "gitops", "argoproj", "community", "argocd", false},
		{"aws-ebs-csi-driver", "storage", "eks", "aws", "kube-system", false},
		{"coredns", "networking", "eks", "aws", "kube-system", false},
		{"eks-pod-identity-agent", "security", "eks", "aws", "kube-system", false},
		{"kube-proxy", "networking", "eks", "aws", "kube-system", false},
		{"vpc-cni", "networking", "eks", "aws", "kube-system", false},
		{"metrics-server", "observability", "eks", "aws", "kube-system", false},
		{"nvidia-device-plugin", "machine-learning", "nvidia", "community", "kube-system", true},
		{"saltbush-noop", "testing", "saltbush", "saltbush", "saltbush-noop", true},
		{"saltbush-pod-identity", "testing", "saltbush", "saltbush", "saltbush-pod-identity", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := c.Addon(tc.name)
			if !ok {
				t.Fatalf("add-on %s missing", tc.name)
			}
			if a.Name != tc.name || a.Type != tc.typ || a.Publisher != tc.publisher || a.Owner != tc.own ||
				a.DefaultNamespace != tc.namespace || a.Hidden != tc.hidden {
				t.Errorf("got %s type=%s publisher=%s owner=%s namespace=%s hidden=%v", a.Name, a.Type, a.Publisher,
					a.Owner, a.DefaultNamespace, a.Hidden)
			}
			if len(a.Versions) < 2 {
				t.Errorf("%d versions, want at least 2", len(a.Versions))
			}
			for _, v := range a.Versions {
				if v.Addon != a {
					t.Errorf("%s: Addon does not point back", v.Version)
				}
				if got, ok := a.Version(v.Version); !ok || got != v {
					t.Errorf("Version(%q) = %v, %v", v.Version, got, ok)
				}
				if v.Schema == "" || len(v.Architectures) == 0 || len(v.ComputeTypes) == 0 {
					t.Errorf("%s: schema, architectures or compute types empty", v.Version)
				}
				for _, comp := range v.Compatibilities {
					if !slices.Equal(comp.PlatformVersions, []string{"*"}) {
						t.Errorf("%s %s: platform versions %v", v.Version, comp.ClusterVersion, comp.PlatformVersions)
					}
				}
			}
			if _, ok := a.Version("v0.0.0-eksbuild.1"); ok {
				t.Error("unknown version found")
			}
		})
	}
	if _, ok := c.Addon("no-such-addon"); ok {
		t.Error("unknown add-on found")
	}
	var names []string
	for _, a := range c.Addons() {
		names = append(names, a.Name)
	}
	if !slices.IsSorted(names) || len(names) != len(tests) {
		t.Errorf("Addons() = %v, want the %d add-ons sorted by name", names, len(tests))
	}
}

// TestLoad_Independent checks that catalogues share nothing: there is no
// global state to leak between them.
func TestLoad_Independent(t *testing.T) {
	a := loadEmbedded(t)
	b, err := Load() // a second, separate load
	if err != nil {
		t.Fatal(err)
	}
	a.Addons()[0] = nil // Addons returns a copy
	if a.Addons()[0] == nil {
		t.Fatal("Addons exposes the catalogue's own slice")
	}
	ca, _ := a.Addon("coredns")
	cb, _ := b.Addon("coredns")
	if ca == cb {
		t.Fatal("two loads share add-ons")
	}
}

func TestDefaultVersion_ExactlyOnePerKubernetesVersion(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		for _, kv := range supportedKubernetesVersions {
			t.Run(a.Name+"/"+kv, func(t *testing.T) {
				var compatible, defaults []string
				for _, v := range a.Versions {
					if !v.Compatible(kv) {
						continue
					}
					compatible = append(compatible, v.Version)
					for _, comp := range v.Compatibilities {
						if comp.ClusterVersion == kv && comp.Default {
							defaults = append(defaults, v.Version)
						}
					}
				}
				if len(compatible) == 0 {
					t.Fatal("no compatible version")
				}
				if len(defaults) != 1 {
					t.Fatalf("default versions %v, want exactly one", defaults)
				}
				got, ok := a.DefaultVersion(kv)
				if !ok || got.Version != defaults[0] {
					t.Fatalf("DefaultVersion = %v, %v; want %s", got, ok, defaults[0])
				}
				if !got.Compatible(kv) {
					t.Fatal("default version is not compatible")
				}
			})
		}
	}
}

func TestDefaultVersion_UnknownKubernetesVersion(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("coredns")
	for _, kv := range []string{"1.20", "", "v1.33", "1.33.0"} {
		t.Run(kv, func(t *testing.T) {
			if v, ok := a.DefaultVersion(kv); ok {
				t.Fatalf("DefaultVersion(%q) = %s", kv, v.Version)
			}
		})
	}
}

func TestVersions_NewestFirst(t *testing.T) {
	c := loadEmbedded(t)
	for _, a := range c.Addons() {
		t.Run(a.Name, func(t *testing.T) {
			for i := 1; i < len(a.Versions); i++ {
				if CompareVersions(a.Versions[i-1].Version, a.Versions[i].Version) <= 0 {
					t.Errorf("%s listed before %s", a.Versions[i-1].Version, a.Versions[i].Version)
				}
			}
		})
	}
}

func TestRequiresConfiguration_NoopHasBoth(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("saltbush-noop")
	plain, ok1 := a.Version("v1.0.0-eksbuild.1")
	required, ok2 := a.Version("v1.1.0-eksbuild.1")
	if !ok1 || !ok2 {
		t.Fatal("noop versions missing")
	}
	if plain.RequiresConfiguration || !required.RequiresConfiguration {
		t.Fatalf("requiresConfiguration: v1.0.0=%v v1.1.0=%v", plain.RequiresConfiguration, required.RequiresConfiguration)
	}
	for _, kv := range supportedKubernetesVersions {
		if d, _ := a.DefaultVersion(kv); d != plain {
			t.Errorf("default for %s is %v, want the version that needs no configuration", kv, d)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want int
	}{
		{"equal", "v1.2.3-eksbuild.1", "v1.2.3-eksbuild.1", 0},
		{"numeric minor", "v1.10.0-eksbuild.1", "v1.9.0-eksbuild.1", 1},
		{"numeric patch", "v1.2.10", "v1.2.9", 1},
		{"eksbuild", "v1.2.3-eksbuild.2", "v1.2.3-eksbuild.10", -1},
		{"no eksbuild is older", "v1.2.3", "v1.2.3-eksbuild.1", -1},
		{"major", "v2.0.0-eksbuild.1", "v1.99.99-eksbuild.99", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CompareVersions(tc.a, tc.b); got != tc.want {
				t.Fatalf("CompareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// TestKubeProxy_VersionSkew holds kube-proxy to Kubernetes' skew policy: never
// newer than the apiserver, at most three minor versions older; and the
// default for a Kubernetes version is the newest version that runs on it.
func TestKubeProxy_VersionSkew(t *testing.T) {
	c := loadEmbedded(t)
	a, _ := c.Addon("kube-proxy")
	for _, v := range a.Versions {
		parts := versionParts(v.Version)
		for _, comp := range v.Compatibilities {
			t.Run(v.Version+"/"+comp.ClusterVersion, func(t *testing.T) {
				own := fmt.Sprintf("%d.%d", parts[0], parts[1])
				if compareKubernetesVersions(own, comp.ClusterVersion) > 0 {
					t.Fatalf("kube-proxy %s is newer than Kubernetes %s", own, comp.ClusterVersion)
				}
				var clusterMinor int
				if _, err := fmt.Sscanf(comp.ClusterVersion, "1.%d", &clusterMinor); err != nil {
					t.Fatal(err)
				}
				if parts[0] != 1 || clusterMinor-parts[1] > 3 {
					t.Fatalf("kube-proxy %s is more than three minor versions older than Kubernetes %s", own, comp.ClusterVersion)
				}
				if d, _ := a.DefaultVersion(comp.ClusterVersion); CompareVersions(d.Version, v.Version) < 0 {
					t.Fatalf("default for %s is %s, older than %s", comp.ClusterVersion, d.Version, v.Version)
				}
			})
		}
	}
}
