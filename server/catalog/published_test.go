package catalog_test

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/saltbush/saltbush/server/catalog"
)

// exampleDir is the private add-on docs/operators.md publishes.
const exampleDir = "../../docs/examples/private-addon/acme-agent"

func TestParsePublishedExample(t *testing.T) {
	for _, v := range []string{"v1.0.0", "v1.1.0"} {
		t.Run(v, func(t *testing.T) {
			files, err := catalog.ReadVersion(os.DirFS(exampleDir), v)
			if err != nil {
				t.Fatal(err)
			}
			p, err := catalog.ParsePublished(files, v)
			if err != nil {
				t.Fatal(err)
			}
			if p.Version.Version != v || p.Version.Addon.Name != "acme-agent" || !p.Version.Published {
				t.Fatalf("parsed %s %s", p.Version.Addon.Name, p.Version.Version)
			}
			// What is stored parses to the same version and digest.
			again, err := catalog.ParseStored(p.Files)
			if err != nil {
				t.Fatal(err)
			}
			if again.Digest != p.Digest || again.Digest != catalog.FilesDigest(p.Files) {
				t.Fatalf("digest %s, stored %s", p.Digest, again.Digest)
			}
			if n := strings.Count(string(p.Files["addon.yaml"]), "version: v"); n != 1 {
				t.Fatalf("the stored addon.yaml lists %d versions", n)
			}
		})
	}
}

// TestReadVersionStopsAtTheBound: a directory with a large file is refused
// naming the file, before the file is read.
func TestReadVersionStopsAtTheBound(t *testing.T) {
	fsys := fstest.MapFS{
		"addon.yaml":                  {Data: []byte("name: x\n")},
		"v1.0.0/schema.json":          {Data: []byte("{}")},
		"v1.0.0/bundle/00-big.yaml":   {Data: make([]byte, 10<<20)},
		"v1.0.0/bundle/10-more.yaml":  {Data: []byte("kind: ConfigMap\n")},
		"v2.0.0/bundle/00-other.yaml": {Data: make([]byte, 10<<20)},
	}
	_, err := catalog.ReadVersion(fsys, "v1.0.0")
	if err == nil || !strings.Contains(err.Error(), "v1.0.0/bundle/00-big.yaml") || !strings.Contains(err.Error(), "at most 786432 bytes") {
		t.Fatalf("err = %v", err)
	}
	// Another version's files are not read at all.
	delete(fsys, "v1.0.0/bundle/00-big.yaml")
	files, err := catalog.ReadVersion(fsys, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("read %d files", len(files))
	}
}

func TestMergeOffers(t *testing.T) {
	files, err := catalog.ReadVersion(os.DirFS(exampleDir), "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	old, err := catalog.ParsePublished(files, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if files, err = catalog.ReadVersion(os.DirFS(exampleDir), "v1.1.0"); err != nil {
		t.Fatal(err)
	}
	cur, err := catalog.ParsePublished(files, "v1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	offers := []catalog.Offer{{Published: old}, {Published: cur, Accounts: []string{"222233334444"}}}
	tests := []struct {
		name     string
		offers   []catalog.Offer
		account  string
		versions string // newest first; "" when the account sees none
		def      string // default for 1.34
	}{
		{"everyone sees the unscoped version", offers, "111122223333", "v1.0.0", "v1.0.0"},
		{"the scoped account sees both", offers, "222233334444", "v1.1.0,v1.0.0", "v1.1.0"},
		{"a retired version stays, flagged, and is no default", []catalog.Offer{{Published: old}, {Published: cur, Retired: true}}, "1", "v1.1.0,v1.0.0", "v1.0.0"},
		{"nothing visible", offers[1:], "111122223333", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ok := catalog.Merge(nil, tt.offers, tt.account)
			if !ok {
				if tt.versions != "" {
					t.Fatal("not visible")
				}
				return
			}
			var got []string
			for _, v := range a.Versions {
				got = append(got, v.Version)
			}
			if strings.Join(got, ",") != tt.versions {
				t.Fatalf("versions %v, want %s", got, tt.versions)
			}
			d, ok := a.DefaultVersion("1.34")
			if !ok || d.Version != tt.def {
				t.Fatalf("default %v, want %s", d, tt.def)
			}
		})
	}
}
