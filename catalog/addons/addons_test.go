package addons

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

func TestFS_HoldsTheCatalogue(t *testing.T) {
	for _, name := range []string{"coredns/addon.yaml", "saltbush-noop/addon.yaml"} {
		t.Run(name, func(t *testing.T) {
			if _, err := fs.Stat(FS(), name); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The Go source and README stay out of the embedded data.
	for _, name := range []string{"addons.go", "README.md"} {
		t.Run("without "+name, func(t *testing.T) {
			if _, err := fs.Stat(FS(), name); err == nil {
				t.Fatalf("%s is embedded", name)
			}
		})
	}
}

// Registry hosts are kept out of the catalogue: where images come from is the
// nodes' mirror configuration. server/catalog checks every rendered image;
// these catch references anywhere in the files, such as descriptions and
// template literals.
var (
	// host[:port]/path:tag, the host being a dotted name or carrying a port.
	hostRef = regexp.MustCompile(`\b[a-z0-9-]+(\.[a-z0-9-]+)*(\.[a-z0-9-]+|:[0-9]+)/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9_.-]*`)
	// An image: line whose reference starts with a host (a dot or a port
	// before the first slash), tagged or not.
	hostImage = regexp.MustCompile(`(?m)^\s*-?\s*image:\s*"?[^\s"/{]*[.:][^\s"/]*/`)
)

func registryHost(text string) string {
	if m := hostRef.FindString(text); m != "" {
		return m
	}
	return strings.TrimSpace(hostImage.FindString(text))
}

func TestFS_NoRegistryHosts(t *testing.T) {
	err := fs.WalkDir(FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS(), path)
		if err != nil {
			return err
		}
		if m := registryHost(string(b)); m != "" {
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
			if got := registryHost(tc.text) != ""; got != tc.want {
				t.Fatalf("registryHost = %v, want %v", got, tc.want)
			}
		})
	}
}
