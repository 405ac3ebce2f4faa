// Package catalog owns the managed add-on catalogue: which add-ons exist, their
// versions and Kubernetes compatibilities, the JSON Schema their
// configurationValues must satisfy, and the templates that turn a desired
// add-on into Kubernetes manifests.
//
// The catalogue is data (catalog/addons, embedded into both the server and the
// agent) rather than code, so that the server answering DescribeAddonVersions
// and the agent rendering a bundle can never disagree about what a version is.
// Everything is parsed, compiled and test-rendered once, in Load: a malformed
// file stops the process at start instead of failing one CreateAddon later.
//
// A Catalog and everything reachable from it is immutable after Load and safe
// for concurrent use; callers must treat the exported slices as read-only.
package catalog

import (
	"io/fs"
	"slices"
	"text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/saltbush/saltbush/catalog/addons"
)

// Catalog is a loaded, validated set of add-ons.
type Catalog struct {
	addons []*Addon // sorted by name
	byName map[string]*Addon
}

// Load reads the catalogue embedded from catalog/addons.
func Load() (*Catalog, error) {
	return LoadFS(addons.FS())
}

// LoadFS reads a catalogue laid out as catalog/addons/README.md describes from
// fsys. Every top-level directory is an add-on; top-level files are ignored
// (that is where the Go source and README live). It fails on the first
// malformed file, naming the add-on and version.
func LoadFS(fsys fs.FS) (*Catalog, error) {
	return load(fsys)
}

// Addon returns the add-on called name, hidden ones included: a hidden add-on
// is creatable by name, it is only left out of unfiltered listings.
func (c *Catalog) Addon(name string) (*Addon, bool) {
	a, ok := c.byName[name]
	return a, ok
}

// Addons returns every add-on sorted by name, hidden ones included; the caller
// decides whether a listing shows them.
func (c *Catalog) Addons() []*Addon {
	return slices.Clone(c.addons)
}

// Addon is one catalogue entry, the AddonInfo of DescribeAddonVersions.
type Addon struct {
	// Name is the addonName, also the directory name in the catalogue.
	Name string
	// Type is AWS's add-on category ("networking", "storage", ...), used by
	// the DescribeAddonVersions types filter.
	Type string
	// Publisher and Owner are echoed on the wire and filterable.
	Publisher string
	Owner     string
	// DefaultNamespace is where the bundle goes when the caller gives no
	// namespaceConfig.
	DefaultNamespace string
	// Hidden add-ons exist and can be created, but DescribeAddonVersions
	// omits them unless asked for by name (the GPU device plugin and the
	// no-op test add-on).
	Hidden bool
	// Versions is newest first, the order DescribeAddonVersions lists them.
	Versions []*Version

	byVersion map[string]*Version
}

// Version returns the named version of the add-on.
func (a *Addon) Version(v string) (*Version, bool) {
	ver, ok := a.byVersion[v]
	return ver, ok
}

// DefaultVersion returns the version CreateAddon picks for
// kubernetesVersion (for example "1.33") when no addonVersion is given: the
// newest version flagged default for it that is not retired. Load
// guarantees exactly one flagged version per Kubernetes version in the
// embedded catalogue; a published version flagged default is newer than it
// or not picked. An add-on with no flagged version for kubernetesVersion
// (a published one may have none) defaults to its newest compatible
// version.
func (a *Addon) DefaultVersion(kubernetesVersion string) (*Version, bool) {
	var newest *Version
	for _, v := range a.Versions { // newest first
		if v.Retired {
			continue
		}
		for _, c := range v.Compatibilities {
			if c.ClusterVersion != kubernetesVersion {
				continue
			}
			if c.Default {
				return v, true
			}
			if newest == nil {
				newest = v
			}
		}
	}
	return newest, newest != nil
}

// Version is one version of an add-on: the AddonVersionInfo on the wire, plus
// what it takes to validate configuration for it and render it.
type Version struct {
	// Addon points back to the add-on this version belongs to.
	Addon *Addon
	// Version is the AWS-style version string, for example
	// "v1.11.3-eksbuild.1".
	Version string
	// Compatibilities lists the Kubernetes versions the version runs on,
	// oldest first.
	Compatibilities []Compatibility
	// RequiresConfiguration means CreateAddon must carry configurationValues.
	RequiresConfiguration bool
	// RequiresIAMPermissions is echoed as requiresIamPermissions.
	RequiresIAMPermissions bool
	// Architectures is the wire's "architecture" list (amd64, arm64).
	Architectures []string
	// ComputeTypes is the wire's "computeTypes" list.
	ComputeTypes []string
	// PodIdentity lists the service accounts that take AWS credentials, as
	// DescribeAddonConfiguration's podIdentityConfiguration returns them.
	PodIdentity []PodIdentity
	// Schema is the JSON Schema text for configurationValues, exactly as
	// DescribeAddonConfiguration returns it.
	Schema string
	// Published marks a version an operator published (ParsePublished)
	// rather than one embedded in the binary.
	Published bool
	// Retired marks a published version an operator retired: it is no
	// longer listed or offered to new add-ons, and add-ons on it keep
	// rendering.
	Retired bool

	schema *jsonschema.Schema
	bundle *template.Template
	files  []string // bundle template names, in render order
}

// Compatible reports whether the version runs on kubernetesVersion
// ("1.33").
func (v *Version) Compatible(kubernetesVersion string) bool {
	for _, c := range v.Compatibilities {
		if c.ClusterVersion == kubernetesVersion {
			return true
		}
	}
	return false
}

// String names the version the way every error from this package does.
func (v *Version) String() string {
	return "addon " + v.Addon.Name + " version " + v.Version
}

// Compatibility is one Kubernetes version a Version runs on.
type Compatibility struct {
	// ClusterVersion is a Kubernetes minor version, "1.33".
	ClusterVersion string
	// PlatformVersions is AWS's EKS platform version list; saltbush has no
	// platform versions, so the catalogue says ["*"].
	PlatformVersions []string
	// Default marks the version CreateAddon picks for ClusterVersion.
	Default bool
}

// PodIdentity names a service account of the add-on that needs AWS
// credentials and the managed policies AWS recommends for it.
type PodIdentity struct {
	ServiceAccount             string
	RecommendedManagedPolicies []string
}
