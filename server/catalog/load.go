package catalog

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// File names inside the catalogue; catalog/addons/README.md documents them.
const (
	addonFileName  = "addon.yaml"
	schemaFileName = "schema.json"
	bundleDirName  = "bundle"
)

var (
	// addonNameRE is AWS's addonName shape narrowed to what is also a valid
	// file name and Kubernetes label value.
	addonNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,98}[a-z0-9])?$`)
	// kubernetesVersionRE is a Kubernetes minor version as EKS spells it:
	// "1.33", never "v1.33" or "1.33.2".
	kubernetesVersionRE = regexp.MustCompile(`^[1-9][0-9]*\.(0|[1-9][0-9]*)$`)
	// addonVersionRE is the AWS add-on version shape the catalogue uses.
	// Ordering "newest first" depends on parsing it, so nothing looser is
	// accepted.
	addonVersionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-eksbuild\.([1-9][0-9]*))?$`)
	// dnsLabelRE is a Kubernetes namespace name (RFC 1123 label).
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// dnsSubdomainRE is a Kubernetes object name such as a service account.
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
)

// The values AWS uses for architecture and computeTypes; anything else in the
// catalogue is a typo that a client filtering on these would trip over.
var (
	knownArchitectures = []string{"amd64", "arm64"}
	knownComputeTypes  = []string{"auto", "ec2", "fargate", "hybrid"}
)

// addonFile is addon.yaml. Field names follow the AWS wire names so that the
// file reads like a DescribeAddonVersions answer.
type addonFile struct {
	Name             string        `json:"name"`
	Type             string        `json:"type"`
	Publisher        string        `json:"publisher"`
	Owner            string        `json:"owner"`
	DefaultNamespace string        `json:"defaultNamespace"`
	Hidden           bool          `json:"hidden"`
	Versions         []versionFile `json:"versions"`
}

type versionFile struct {
	Version                string              `json:"version"`
	Compatibilities        []compatibilityFile `json:"compatibilities"`
	RequiresConfiguration  bool                `json:"requiresConfiguration"`
	RequiresIAMPermissions bool                `json:"requiresIamPermissions"`
	Architecture           []string            `json:"architecture"`
	ComputeTypes           []string            `json:"computeTypes"`
	PodIdentity            []podIdentityFile   `json:"podIdentity"`
}

type compatibilityFile struct {
	ClusterVersion   string   `json:"clusterVersion"`
	DefaultVersion   bool     `json:"defaultVersion"`
	PlatformVersions []string `json:"platformVersions"`
}

type podIdentityFile struct {
	ServiceAccount             string   `json:"serviceAccount"`
	RecommendedManagedPolicies []string `json:"recommendedManagedPolicies"`
}

func load(fsys fs.FS) (*Catalog, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("catalogue: %w", err)
	}
	c := &Catalog{byName: map[string]*Addon{}}
	for _, e := range entries {
		if !e.IsDir() {
			continue // addons.go, README.md
		}
		a, err := loadAddon(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		c.addons = append(c.addons, a)
		c.byName[a.Name] = a
	}
	if len(c.addons) == 0 {
		return nil, errors.New("catalogue: no add-ons")
	}
	// fs.ReadDir already sorts by name; sorting again keeps Addons' contract
	// independent of the fs implementation.
	slices.SortFunc(c.addons, func(a, b *Addon) int { return cmp.Compare(a.Name, b.Name) })
	return c, nil
}

func loadAddon(fsys fs.FS, dir string) (*Addon, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("addon %s: %s", dir, fmt.Sprintf(format, args...))
	}
	raw, err := fs.ReadFile(fsys, path.Join(dir, addonFileName))
	if err != nil {
		return nil, fail("%v", err)
	}
	f, err := decodeAddonFile(raw)
	if err != nil {
		return nil, fail("%v", err)
	}
	if f.Name != dir {
		return nil, fail("%s names the add-on %q, its directory says %q", addonFileName, f.Name, dir)
	}
	if err := checkAddonFile(f); err != nil {
		return nil, fail("%v", err)
	}
	a := newAddon(f)
	for _, vf := range f.Versions {
		if _, dup := a.byVersion[vf.Version]; dup {
			return nil, fail("version %s is listed twice", vf.Version)
		}
		v, err := loadVersion(fsys, a, vf)
		if err != nil {
			return nil, err
		}
		a.Versions = append(a.Versions, v)
		a.byVersion[v.Version] = v
	}
	slices.SortFunc(a.Versions, func(x, y *Version) int { return CompareVersions(y.Version, x.Version) })

	// Every version directory must be listed: an unlisted one is either a
	// forgotten entry or a leftover, and neither should ship silently.
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fail("%v", err)
	}
	for _, e := range entries {
		if e.Name() == addonFileName {
			continue
		}
		if _, ok := a.byVersion[e.Name()]; !ok || !e.IsDir() {
			return nil, fail("%s is not a version listed in %s", e.Name(), addonFileName)
		}
	}

	// Exactly one default per Kubernetes version the add-on supports, so that
	// CreateAddon without addonVersion has one answer.
	defaults := map[string][]string{}
	for _, v := range a.Versions {
		for _, c := range v.Compatibilities {
			if _, ok := defaults[c.ClusterVersion]; !ok {
				defaults[c.ClusterVersion] = nil
			}
			if c.Default {
				defaults[c.ClusterVersion] = append(defaults[c.ClusterVersion], v.Version)
			}
		}
	}
	for _, kv := range slices.Sorted(maps.Keys(defaults)) {
		switch d := defaults[kv]; len(d) {
		case 1:
		case 0:
			return nil, fail("no default version for Kubernetes %s", kv)
		default:
			return nil, fail("%d default versions for Kubernetes %s: %s", len(d), kv, strings.Join(d, ", "))
		}
	}
	return a, nil
}

// decodeAddonFile decodes addon.yaml strictly.
func decodeAddonFile(raw []byte) (addonFile, error) {
	// YAML to JSON first, then a strict JSON decode: yaml.Unmarshal would
	// coerce an unquoted clusterVersion 1.30 into the string "1.3", and an
	// unknown or duplicated key is a typo that would otherwise fall back to a
	// zero value (requiresConfiguration: false).
	var f addonFile
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return f, fmt.Errorf("%s: %v", addonFileName, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %v", addonFileName, err)
	}
	return f, nil
}

// newAddon is the add-on addon.yaml describes, without versions yet.
func newAddon(f addonFile) *Addon {
	return &Addon{
		Name:             f.Name,
		Type:             f.Type,
		Publisher:        f.Publisher,
		Owner:            f.Owner,
		DefaultNamespace: f.DefaultNamespace,
		Hidden:           f.Hidden,
		byVersion:        map[string]*Version{},
	}
}

// checkAddonFile checks addon.yaml's add-on level fields.
func checkAddonFile(f addonFile) error {
	switch {
	case !addonNameRE.MatchString(f.Name):
		return fmt.Errorf("name %q is not a valid add-on name", f.Name)
	case f.Type == "" || f.Publisher == "" || f.Owner == "":
		return errors.New("type, publisher and owner are required")
	case !dnsLabelRE.MatchString(f.DefaultNamespace):
		return fmt.Errorf("defaultNamespace %q is not a valid namespace name", f.DefaultNamespace)
	case len(f.Versions) == 0:
		return errors.New("no versions")
	}
	return nil
}

func loadVersion(fsys fs.FS, a *Addon, f versionFile) (*Version, error) {
	v := &Version{
		Addon:                  a,
		Version:                f.Version,
		RequiresConfiguration:  f.RequiresConfiguration,
		RequiresIAMPermissions: f.RequiresIAMPermissions,
		Architectures:          f.Architecture,
		ComputeTypes:           f.ComputeTypes,
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("addon %s version %s: %s", a.Name, f.Version, fmt.Sprintf(format, args...))
	}
	if !addonVersionRE.MatchString(f.Version) {
		return nil, fail("not a version of the form v1.2.3-eksbuild.4")
	}
	if len(f.Compatibilities) == 0 {
		return nil, fail("no compatibilities")
	}
	seen := map[string]bool{}
	for _, c := range f.Compatibilities {
		if !kubernetesVersionRE.MatchString(c.ClusterVersion) {
			return nil, fail("clusterVersion %q is not a Kubernetes minor version such as \"1.33\"", c.ClusterVersion)
		}
		if seen[c.ClusterVersion] {
			return nil, fail("clusterVersion %s is listed twice", c.ClusterVersion)
		}
		seen[c.ClusterVersion] = true
		pv := c.PlatformVersions
		if len(pv) == 0 {
			pv = []string{"*"} // saltbush has no EKS platform versions
		}
		if slices.Contains(pv, "") {
			return nil, fail("clusterVersion %s: empty platform version", c.ClusterVersion)
		}
		v.Compatibilities = append(v.Compatibilities, Compatibility{
			ClusterVersion:   c.ClusterVersion,
			PlatformVersions: pv,
			Default:          c.DefaultVersion,
		})
	}
	slices.SortFunc(v.Compatibilities, func(x, y Compatibility) int {
		return compareKubernetesVersions(x.ClusterVersion, y.ClusterVersion)
	})
	if err := checkEnum("architecture", f.Architecture, knownArchitectures); err != nil {
		return nil, fail("%v", err)
	}
	if err := checkEnum("computeTypes", f.ComputeTypes, knownComputeTypes); err != nil {
		return nil, fail("%v", err)
	}
	sas := map[string]bool{}
	for _, p := range f.PodIdentity {
		if !dnsSubdomainRE.MatchString(p.ServiceAccount) {
			return nil, fail("podIdentity service account %q is not a valid name", p.ServiceAccount)
		}
		if sas[p.ServiceAccount] {
			return nil, fail("podIdentity service account %s is listed twice", p.ServiceAccount)
		}
		sas[p.ServiceAccount] = true
		for _, arn := range p.RecommendedManagedPolicies {
			if !strings.HasPrefix(arn, "arn:") {
				return nil, fail("podIdentity %s: %q is not a policy ARN", p.ServiceAccount, arn)
			}
		}
		v.PodIdentity = append(v.PodIdentity, PodIdentity(p))
	}

	dir := path.Join(a.Name, f.Version)
	if err := loadSchema(fsys, dir, v); err != nil {
		return nil, fail("%v", err)
	}
	if err := loadBundle(fsys, dir, v); err != nil {
		return nil, fail("%v", err)
	}
	if err := checkVersion(v); err != nil {
		return nil, fail("%v", err)
	}
	return v, nil
}

func checkEnum(field string, got, known []string) error {
	if len(got) == 0 {
		return fmt.Errorf("%s is empty", field)
	}
	for i, g := range got {
		if !slices.Contains(known, g) {
			return fmt.Errorf("%s %q is not one of %s", field, g, strings.Join(known, ", "))
		}
		if slices.Contains(got[:i], g) {
			return fmt.Errorf("%s %q is listed twice", field, g)
		}
	}
	return nil
}

// loadSchema compiles schema.json. References outside the document are
// refused: a schema must not reach for the network or the disk at start.
func loadSchema(fsys fs.FS, dir string, v *Version) error {
	raw, err := fs.ReadFile(fsys, path.Join(dir, schemaFileName))
	if err != nil {
		return err
	}
	if err := checkNoRegistryHost(schemaFileName, raw); err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: %v", schemaFileName, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: not a JSON object", schemaFileName)
	}
	if obj["type"] != "object" {
		return fmt.Errorf("%s: the root must be \"type\": \"object\" (configurationValues is an object)", schemaFileName)
	}
	url := "saltbush:///addons/" + dir + "/" + schemaFileName
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("%s: %v", schemaFileName, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return fmt.Errorf("%s: %v", schemaFileName, err)
	}
	v.schema = sch
	v.Schema = strings.TrimSpace(string(raw))
	return nil
}

// refuseLoader fails every external $ref; the metaschemas the drafts need are
// built into the compiler and never reach a loader.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %s is not allowed", url)
}

// loadBundle parses every bundle/*.yaml as a template. Files render in name
// order, so a bundle orders its objects (namespace first) by file name.
func loadBundle(fsys fs.FS, dir string, v *Version) error {
	bdir := path.Join(dir, bundleDirName)
	entries, err := fs.ReadDir(fsys, bdir)
	if err != nil {
		return err
	}
	root := template.New(v.String()).Funcs(templateFuncs()).Option("missingkey=zero")
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".yaml" {
			return fmt.Errorf("%s/%s: a bundle holds only .yaml templates", bundleDirName, e.Name())
		}
		raw, err := fs.ReadFile(fsys, path.Join(bdir, e.Name()))
		if err != nil {
			return err
		}
		if err := checkNoRegistryHost(bundleDirName+"/"+e.Name(), raw); err != nil {
			return err
		}
		if _, err := root.New(e.Name()).Parse(string(raw)); err != nil {
			return fmt.Errorf("%s/%s: %v", bundleDirName, e.Name(), err)
		}
		v.files = append(v.files, e.Name())
	}
	if len(v.files) == 0 {
		return fmt.Errorf("%s/ holds no templates", bundleDirName)
	}
	v.bundle = root
	return nil
}

// checkCA is a certificate authority as a cluster record stores it (base64
// PEM) for checkVersion. Render checks the PEM framing, not the certificate.
var checkCA = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("catalog-check")}))

// checkParams are the cluster facts of a real ACTIVE cluster, for
// checkVersion.
func checkParams() RenderParams {
	return RenderParams{
		ClusterName:              "catalog-check",
		ServiceIPv4CIDR:          "10.43.0.0/16",
		Endpoint:                 "https://10.0.0.1:6443",
		CertificateAuthorityData: checkCA,
		Region:                   "us-east-1",
	}
}

// checkVersion proves at load time that the version is usable: an empty
// configuration is accepted unless configuration is required, and the bundle
// renders to valid objects on a cluster with all its facts, with empty
// values, into a custom namespace with IAM roles, and with every example the
// schema carries. On a cluster that has none of its facts yet (not ACTIVE)
// it renders too, or fails only because a fact is missing.
func checkVersion(v *Version) error {
	if !v.RequiresConfiguration {
		if err := v.schema.Validate(map[string]any{}); err != nil {
			return fmt.Errorf("requiresConfiguration is false but %s rejects empty configuration: %v", schemaFileName, err)
		}
	}
	roles := map[string]string{}
	for _, p := range v.PodIdentity {
		roles[p.ServiceAccount] = "arn:aws:iam::111122223333:role/catalog-check-" + p.ServiceAccount
	}
	withRoles := checkParams()
	withRoles.Namespace = "saltbush-catalog-check"
	withRoles.ServiceAccountRoleARN = "arn:aws:iam::111122223333:role/catalog-check"
	withRoles.PodIdentityRoles = roles
	type renderCase struct {
		name        string
		p           RenderParams
		mayLackFact bool // the render may fail with a *MissingFactError
	}
	cases := []renderCase{
		{"empty values", checkParams(), false},
		{"custom namespace and roles", withRoles, false},
		{"no cluster facts", RenderParams{ClusterName: "catalog-check"}, true},
	}
	examples, err := v.examples()
	if err != nil {
		return err
	}
	for i, ex := range examples {
		p := checkParams()
		p.Values = ex
		cases = append(cases, renderCase{"example " + strconv.Itoa(i), p, false})
	}
	for _, tc := range cases {
		out, err := v.render(tc.p)
		var missing *MissingFactError
		if tc.mayLackFact && errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return fmt.Errorf("render with %s: %w", tc.name, err)
		}
		// text/template prints a missing value as "<no value>", which is valid
		// YAML and would only fail on the kube-apiserver. Catalogue data is
		// ours, so it is caught here rather than in every Render.
		if bytes.Contains(out, []byte("<no value>")) {
			return fmt.Errorf("render with %s: a template printed a missing value (\"<no value>\"); use default or with", tc.name)
		}
	}
	return nil
}

// Examples returns the schema's root "examples" as values ready for Render.
// They document what configurationValues look like, Load has validated each
// against the schema and rendered it, and tests use them as sample values.
func (v *Version) Examples() ([]map[string]any, error) {
	ex, err := v.examples()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v, err)
	}
	return ex, nil
}

func (v *Version) examples() ([]map[string]any, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(v.Schema))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", schemaFileName, err)
	}
	raw, _ := doc.(map[string]any)["examples"].([]any)
	var out []map[string]any
	for i, ex := range raw {
		obj, ok := ex.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: examples[%d] is not an object", schemaFileName, i)
		}
		if err := v.schema.Validate(obj); err != nil {
			return nil, fmt.Errorf("%s: examples[%d] does not satisfy the schema: %v", schemaFileName, i, err)
		}
		out = append(out, normalizeNumbers(obj).(map[string]any))
	}
	return out, nil
}
