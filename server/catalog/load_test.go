package catalog

import (
	"maps"
	"strings"
	"testing"
	"testing/fstest"
)

const demoAddon = `name: demo
type: testing
publisher: saltbush
owner: saltbush
defaultNamespace: demo
versions:
  - version: v1.0.0-eksbuild.1
    compatibilities:
      - {clusterVersion: "1.32", defaultVersion: true}
      - {clusterVersion: "1.33", defaultVersion: false}
    requiresConfiguration: false
    requiresIamPermissions: false
    architecture: [amd64]
    computeTypes: [ec2]
  - version: v1.1.0-eksbuild.1
    compatibilities:
      - {clusterVersion: "1.33", defaultVersion: true}
    requiresConfiguration: false
    requiresIamPermissions: false
    architecture: [amd64, arm64]
    computeTypes: [ec2]
`

const demoSchema = `{"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integer"}}}`

const demoTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  namespace: {{ quote .Namespace }}
data:
  n: {{ quote (default 1 .Values.n) }}
`

// demoFS is a small valid catalogue; each test case breaks one thing.
func demoFS() fstest.MapFS {
	return fstest.MapFS{
		"README.md":                                   {Data: []byte("top-level files are ignored")},
		"demo/addon.yaml":                             {Data: []byte(demoAddon)},
		"demo/v1.0.0-eksbuild.1/schema.json":          {Data: []byte(demoSchema)},
		"demo/v1.0.0-eksbuild.1/bundle/10-cm.yaml":    {Data: []byte(demoTemplate)},
		"demo/v1.1.0-eksbuild.1/schema.json":          {Data: []byte(demoSchema)},
		"demo/v1.1.0-eksbuild.1/bundle/10-cm.yaml":    {Data: []byte(demoTemplate)},
		"demo/v1.1.0-eksbuild.1/bundle/00-ns.yaml":    {Data: []byte("{{ if .CreateNamespace }}apiVersion: v1\nkind: Namespace\nmetadata: {name: {{ quote .Namespace }}}\n{{ end }}")},
		"other/addon.yaml":                            {Data: []byte(strings.ReplaceAll(demoAddon, "name: demo", "name: other"))},
		"other/v1.0.0-eksbuild.1/schema.json":         {Data: []byte(demoSchema)},
		"other/v1.0.0-eksbuild.1/bundle/10-cm.yaml":   {Data: []byte(demoTemplate)},
		"other/v1.1.0-eksbuild.1/schema.json":         {Data: []byte(demoSchema)},
		"other/v1.1.0-eksbuild.1/bundle/10-cm.yaml":   {Data: []byte(demoTemplate)},
		"other/v1.1.0-eksbuild.1/bundle/20-more.yaml": {Data: []byte("# only a comment\n")},
	}
}

func TestLoadFS_Valid(t *testing.T) {
	c, err := LoadFS(demoFS())
	if err != nil {
		t.Fatal(err)
	}
	a, ok := c.Addon("demo")
	if !ok || len(c.Addons()) != 2 {
		t.Fatalf("add-ons %v", c.Addons())
	}
	if a.Versions[0].Version != "v1.1.0-eksbuild.1" {
		t.Errorf("newest first: got %s", a.Versions[0].Version)
	}
	old := a.Versions[1]
	if got := old.Compatibilities[0].PlatformVersions; len(got) != 1 || got[0] != "*" {
		t.Errorf("platform versions default to [*], got %v", got)
	}
	if d, _ := a.DefaultVersion("1.33"); d != a.Versions[0] {
		t.Errorf("default for 1.33: %v", d)
	}
	if d, _ := a.DefaultVersion("1.32"); d != old {
		t.Errorf("default for 1.32: %v", d)
	}
	if old.Schema != demoSchema {
		t.Errorf("Schema %q, want the file's text", old.Schema)
	}
}

// TestLoadFS_BundleNeedingClusterFacts checks that a bundle may fail for
// want of a cluster fact before the cluster is ACTIVE, and must render with
// the facts of a real cluster.
func TestLoadFS_BundleNeedingClusterFacts(t *testing.T) {
	m := demoFS()
	m["demo/v1.0.0-eksbuild.1/bundle/10-cm.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(demoTemplate,
		"\ndata:\n", "\ndata:\n  server: {{ quote (required \"endpoint\" .Endpoint) }}\n  dns: {{ quote (required \"serviceIpv4Cidr\" .ClusterDNSIP) }}\n", 1))}
	c, err := LoadFS(m)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Addon("demo")
	v, _ := a.Version("v1.0.0-eksbuild.1")
	out, err := v.Render(checkParams())
	if err != nil {
		t.Fatalf("Render = %v", err)
	}
	var data map[string]any
	for _, o := range parseBundle(t, out) {
		if o.kind() == "ConfigMap" {
			data, _ = o["data"].(map[string]any)
		}
	}
	if data["server"] != "https://10.0.0.1:6443" || data["dns"] != "10.43.0.10" {
		t.Fatalf("ConfigMap data %v, want server https://10.0.0.1:6443 and dns 10.43.0.10\n%s", data, out)
	}
}

func TestLoadFS_Rejects(t *testing.T) {
	const v1 = "demo/v1.0.0-eksbuild.1/"
	replace := func(path, old, new string) func(fstest.MapFS) {
		return func(m fstest.MapFS) {
			m[path] = &fstest.MapFile{Data: []byte(strings.Replace(string(m[path].Data), old, new, 1))}
		}
	}
	set := func(path, data string) func(fstest.MapFS) {
		return func(m fstest.MapFS) { m[path] = &fstest.MapFile{Data: []byte(data)} }
	}
	tests := []struct {
		name   string
		break_ func(fstest.MapFS)
		want   string
	}{
		{"empty catalogue", func(m fstest.MapFS) { maps.DeleteFunc(m, func(string, *fstest.MapFile) bool { return true }) }, "no add-ons"},
		{"addon.yaml missing", func(m fstest.MapFS) { delete(m, "demo/addon.yaml") }, "addon demo: open"},
		{"addon.yaml not YAML", set("demo/addon.yaml", "name: [demo"), "addon demo: addon.yaml"},
		{"unknown field", replace("demo/addon.yaml", "type: testing", "type: testing\nhiden: true"), `addon demo: addon.yaml: json: unknown field "hiden"`},
		{"unknown field in a version", replace("demo/addon.yaml", "requiresConfiguration: false", "requireConfiguration: false"), "unknown field"},
		{"duplicate key", replace("demo/addon.yaml", "type: testing", "type: testing\ntype: storage"), "addon demo: addon.yaml"},
		{"name differs from directory", replace("demo/addon.yaml", "name: demo", "name: demo2"), "its directory says"},
		{"invalid name", func(m fstest.MapFS) {
			for k, v := range m {
				if strings.HasPrefix(k, "demo/") {
					delete(m, k)
					k = "Demo/" + strings.TrimPrefix(k, "demo/")
					if strings.HasSuffix(k, "addon.yaml") {
						v = &fstest.MapFile{Data: []byte(strings.Replace(string(v.Data), "name: demo", "name: Demo", 1))}
					}
					m[k] = v
				}
			}
		}, "not a valid add-on name"},
		{"no publisher", replace("demo/addon.yaml", "publisher: saltbush\n", ""), "type, publisher and owner are required"},
		{"invalid default namespace", replace("demo/addon.yaml", "defaultNamespace: demo", "defaultNamespace: Demo_NS"), "defaultNamespace"},
		{"duplicate version", replace("demo/addon.yaml", "version: v1.1.0-eksbuild.1", "version: v1.0.0-eksbuild.1"),
			"addon demo: version v1.0.0-eksbuild.1 is listed twice"},
		{"version format", replace("demo/addon.yaml", "version: v1.1.0-eksbuild.1", "version: 1.1.0"),
			"addon demo version 1.1.0: not a version"},
		{"kubernetes version with v", replace("demo/addon.yaml", `"1.32"`, `"v1.32"`), `clusterVersion "v1.32" is not a Kubernetes minor version`},
		{"kubernetes patch version", replace("demo/addon.yaml", `"1.32"`, `"1.32.1"`), `clusterVersion "1.32.1"`},
		{"unquoted kubernetes version", replace("demo/addon.yaml", `"1.32"`, `1.30`), "cannot unmarshal number into Go struct field"},
		{"kubernetes version twice", replace("demo/addon.yaml", `{clusterVersion: "1.33", defaultVersion: false}`, `{clusterVersion: "1.32", defaultVersion: false}`),
			"clusterVersion 1.32 is listed twice"},
		{"no compatibilities", replace("demo/addon.yaml", "  - version: v1.1.0-eksbuild.1\n    compatibilities:\n      - {clusterVersion: \"1.33\", defaultVersion: true}\n",
			"  - version: v1.1.0-eksbuild.1\n    compatibilities: []\n"), "no compatibilities"},
		{"two defaults for one kubernetes version", replace("demo/addon.yaml", `{clusterVersion: "1.33", defaultVersion: false}`, `{clusterVersion: "1.33", defaultVersion: true}`),
			"2 default versions for Kubernetes 1.33: v1.1.0-eksbuild.1, v1.0.0-eksbuild.1"},
		{"no default for a kubernetes version", replace("demo/addon.yaml", `{clusterVersion: "1.32", defaultVersion: true}`, `{clusterVersion: "1.32", defaultVersion: false}`),
			"no default version for Kubernetes 1.32"},
		{"unknown architecture", replace("demo/addon.yaml", "architecture: [amd64]", "architecture: [x86_64]"), `architecture "x86_64" is not one of`},
		{"no compute types", replace("demo/addon.yaml", "computeTypes: [ec2]", "computeTypes: []"), "computeTypes is empty"},
		{"pod identity without ARN", replace("demo/addon.yaml", "computeTypes: [ec2]", "computeTypes: [ec2]\n    podIdentity: [{serviceAccount: demo, recommendedManagedPolicies: [AmazonS3ReadOnlyAccess]}]"),
			"is not a policy ARN"},
		{"schema missing", func(m fstest.MapFS) { delete(m, v1+"schema.json") }, "addon demo version v1.0.0-eksbuild.1: open"},
		{"schema not JSON", set(v1+"schema.json", `{"type": "object",}`), "addon demo version v1.0.0-eksbuild.1: schema.json"},
		{"schema does not compile", set(v1+"schema.json", `{"type": "object", "properties": {"n": {"type": "nope"}}}`),
			"addon demo version v1.0.0-eksbuild.1: schema.json"},
		{"schema bad pattern", set(v1+"schema.json", `{"type": "object", "properties": {"n": {"type": "string", "pattern": "("}}}`), "schema.json"},
		{"schema root not an object", set(v1+"schema.json", `{"type": "string"}`), `the root must be "type": "object"`},
		{"schema external reference", set(v1+"schema.json", `{"type": "object", "properties": {"n": {"$ref": "https://example.com/n.json"}}}`),
			"schema.json"},
		{"schema rejects empty configuration", set(v1+"schema.json", `{"type": "object", "required": ["n"]}`),
			"requiresConfiguration is false but schema.json rejects empty configuration"},
		{"example violates schema", set(v1+"schema.json", `{"type": "object", "properties": {"n": {"type": "integer"}}, "examples": [{"n": "x"}]}`),
			"examples[0] does not satisfy the schema"},
		{"bundle missing", func(m fstest.MapFS) { delete(m, v1+"bundle/10-cm.yaml") }, "addon demo version v1.0.0-eksbuild.1: open"},
		{"bundle file not YAML", set(v1+"bundle/notes.txt", "x"), "a bundle holds only .yaml templates"},
		{"broken template", set(v1+"bundle/10-cm.yaml", "kind: {{ .Values.n "), "addon demo version v1.0.0-eksbuild.1: bundle/10-cm.yaml"},
		{"unknown template function", set(v1+"bundle/10-cm.yaml", "kind: {{ upper .Namespace }}"), `function "upper" not defined`},
		{"template fails to execute", set(v1+"bundle/10-cm.yaml", "kind: {{ .Values.n.x }}"), "render with empty values"},
		{"template renders invalid YAML", replace(v1+"bundle/10-cm.yaml", "  name: demo", "  name: [demo"), "10-cm.yaml document 0: not valid YAML"},
		{"template renders a list", set(v1+"bundle/10-cm.yaml", "- a\n- b\n"), "not a Kubernetes object but an array"},
		{"template renders no kind", replace(v1+"bundle/10-cm.yaml", "kind: ConfigMap\n", ""), "every object needs apiVersion, kind and metadata.name"},
		{"template renders nothing", set(v1+"bundle/10-cm.yaml", "# nothing\n"), "the bundle rendered no objects"},
		{"template prints a missing value", replace(v1+"bundle/10-cm.yaml", `{{ quote (default 1 .Values.n) }}`, `"{{ .Values.n }}"`),
			`printed a missing value`},
		{"namespaced object without namespace", replace(v1+"bundle/10-cm.yaml", "  namespace: {{ quote .Namespace }}\n", ""),
			"ConfigMap demo must be in namespace demo, not <nil>"},
		{"namespaced object in a fixed namespace", replace(v1+"bundle/10-cm.yaml", "{{ quote .Namespace }}", "kube-system"),
			"ConfigMap demo must be in namespace demo, not kube-system"},
		{"cluster-scoped object with namespace", set(v1+"bundle/20-cr.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x, namespace: demo}\n"),
			"ClusterRole x is cluster-scoped but has a namespace"},
		{"system namespace created", set(v1+"bundle/00-ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system}\n"),
			"namespace kube-system belongs to the cluster"},
		{"object rendered twice", set(v1+"bundle/20-cm.yaml", demoTemplate), "is rendered twice"},
		{"template needs a fact no cluster has", replace(v1+"bundle/10-cm.yaml", `{{ quote (default 1 .Values.n) }}`, `{{ quote (required "podCIDR" "") }}`),
			"render with empty values: 10-cm.yaml: the bundle needs the cluster's podCIDR"},
		{"template broken before the cluster is ACTIVE", replace(v1+"bundle/10-cm.yaml", "kind: ConfigMap", "kind: {{ if .Endpoint }}ConfigMap{{ end }}"),
			"render with no cluster facts: 10-cm.yaml document 0: every object needs apiVersion, kind and metadata.name"},
		{"unlisted version directory", set("demo/v2.0.0-eksbuild.1/schema.json", demoSchema), "v2.0.0-eksbuild.1 is not a version listed in addon.yaml"},
		{"stray file in the add-on", set("demo/notes.md", "x"), "notes.md is not a version listed in addon.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := demoFS()
			tc.break_(m)
			_, err := LoadFS(m)
			if err == nil {
				t.Fatal("LoadFS succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
