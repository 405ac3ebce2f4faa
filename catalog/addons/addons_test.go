package addons_test

import (
	"io/fs"
	"testing"

	"github.com/saltbush/saltbush/catalog/addons"
	"github.com/saltbush/saltbush/server/catalog"
)

func TestFS_HoldsTheCatalogue(t *testing.T) {
	for _, name := range []string{"coredns/addon.yaml", "saltbush-noop/addon.yaml"} {
		t.Run(name, func(t *testing.T) {
			if _, err := fs.Stat(addons.FS(), name); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The Go source and README stay out of the embedded data.
	for _, name := range []string{"addons.go", "README.md"} {
		t.Run("without "+name, func(t *testing.T) {
			if _, err := fs.Stat(addons.FS(), name); err == nil {
				t.Fatalf("%s is embedded", name)
			}
		})
	}
}

// Registry hosts are kept out of the catalogue: server/catalog's loader
// refuses them, and this test names every file that has one.
func TestFS_NoRegistryHosts(t *testing.T) {
	err := fs.WalkDir(addons.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(addons.FS(), path)
		if err != nil {
			return err
		}
		if m := catalog.RegistryHost(string(b)); m != "" {
			t.Errorf("%s: image reference with a registry host: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRegistryHost(t *testing.T) {
	tests := []struct {
		text string
		want bool
	}{
		{`image: "registry.example.com/team/app:v1"`, true},
		{`default "mirror.example:5000/app:1"`, true},
		{`  - image: mirror.example/app`, true},
		{`image: "coredns/coredns:1.11.4"`, false},
		{`image: {{ quote $image }}`, false},
		{`eks.amazonaws.com/role-arn: {{ quote . }}`, false},
		{`apiVersion: rbac.authorization.k8s.io/v1`, false},
		{`controller: ingress.k8s.aws/alb`, false},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			if got := catalog.RegistryHost(tc.text) != ""; got != tc.want {
				t.Fatalf("registryHost = %v, want %v", got, tc.want)
			}
		})
	}
}
