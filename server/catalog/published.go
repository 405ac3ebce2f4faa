package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing/fstest"

	"sigs.k8s.io/yaml"
)

// MaxPublishedBytes bounds the files of one published version. They
// travel in one request to saltbush's gRPC port, which takes at most 1 MiB
// per message, and are stored as one etcd value; a bundle is manifests and
// a schema, not images, and the largest embedded version holds about 30
// KiB.
const MaxPublishedBytes = 768 << 10

// Published is one add-on version an operator published, parsed and
// validated exactly as the embedded catalogue is.
type Published struct {
	// Version is the parsed version; Version.Addon carries the add-on level
	// fields of the published addon.yaml.
	Version *Version
	// Files are the version's files as stored: addon.yaml rewritten to list
	// this version only, {version}/schema.json and {version}/bundle/*.yaml.
	Files map[string][]byte
	// Digest identifies Files (FilesDigest).
	Digest string
}

// ParsePublished validates one version of an add-on directory, given as a
// map from paths relative to the directory to file contents. Only version's
// files are kept: addon.yaml may list other versions, whose files are
// ignored. A file that belongs to no listed version is an error, as in the
// embedded catalogue.
//
// Every error names the file and the rule it breaks.
func ParsePublished(files map[string][]byte, version string) (*Published, error) {
	total := 0
	for _, b := range files {
		total += len(b)
	}
	if total > MaxPublishedBytes {
		return nil, fmt.Errorf("the add-on directory holds %d bytes; a published version may hold at most %d", total, MaxPublishedBytes)
	}
	raw, ok := files[addonFileName]
	if !ok {
		return nil, fmt.Errorf("%s is missing", addonFileName)
	}
	f, err := decodeAddonFile(raw)
	if err != nil {
		return nil, err
	}
	if err := checkAddonFile(f); err != nil {
		return nil, fmt.Errorf("%s: %v", addonFileName, err)
	}
	if err := checkNoRegistryHost(addonFileName, raw); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(f.Versions, func(v versionFile) bool { return v.Version == version })
	if i < 0 {
		return nil, fmt.Errorf("%s: version %q is not listed", addonFileName, version)
	}
	listed := map[string]bool{}
	for _, v := range f.Versions {
		if listed[v.Version] {
			return nil, fmt.Errorf("%s: version %s is listed twice", addonFileName, v.Version)
		}
		listed[v.Version] = true
	}

	// The stored directory: addon.yaml with this version only, and this
	// version's files.
	one := f
	one.Versions = []versionFile{f.Versions[i]}
	addonYAML, err := yaml.Marshal(one)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", addonFileName, err)
	}
	kept := map[string][]byte{addonFileName: addonYAML}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if name == addonFileName {
			continue
		}
		if !fsValidPath(name) {
			return nil, fmt.Errorf("%s: not a relative path inside the add-on directory", name)
		}
		dir, rest, _ := strings.Cut(name, "/")
		switch {
		case !listed[dir] || rest == "":
			return nil, fmt.Errorf("%s is not in a version listed in %s", name, addonFileName)
		case dir == version:
			kept[name] = files[name]
		}
	}
	p, err := parsePublished(kept)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ParseStored parses a version as ParsePublished stored it.
func ParseStored(files map[string][]byte) (*Published, error) {
	return parsePublished(files)
}

// parsePublished loads a stored directory (addon.yaml listing one version)
// with the embedded catalogue's loader, under the add-on's name.
func parsePublished(files map[string][]byte) (*Published, error) {
	f, err := decodeAddonFile(files[addonFileName])
	if err != nil {
		return nil, err
	}
	if err := checkAddonFile(f); err != nil {
		return nil, fmt.Errorf("%s: %v", addonFileName, err)
	}
	if len(f.Versions) != 1 {
		return nil, fmt.Errorf("%s: a stored version lists exactly one version, not %d", addonFileName, len(f.Versions))
	}
	fsys := fstest.MapFS{}
	for name, b := range files {
		fsys[path.Join(f.Name, name)] = &fstest.MapFile{Data: b}
	}
	a := newAddon(f)
	v, err := loadVersion(fsys, a, f.Versions[0])
	if err != nil {
		// loadVersion names the add-on and version; the files are
		// relative to the version directory in its message.
		return nil, err
	}
	a.Versions = []*Version{v}
	a.byVersion[v.Version] = v
	v.Published = true
	return &Published{Version: v, Files: files, Digest: FilesDigest(files)}, nil
}

// fsValidPath reports whether name is a clean relative slash path without
// "." or ".." elements.
func fsValidPath(name string) bool {
	return name != "" && path.Clean(name) == name && !path.IsAbs(name) &&
		!slices.Contains(strings.Split(name, "/"), "..") && name != "."
}

// FilesDigest is "sha256:" and the hex SHA-256 of files: each as its name,
// a NUL, its length in decimal, a NUL and its bytes, in name order.
func FilesDigest(files map[string][]byte) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(len(files[name]))))
		h.Write([]byte{0})
		h.Write(files[name])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Offer is a published version as the server holds it: who may see it and
// whether it is retired.
type Offer struct {
	Published *Published
	// Accounts that see the version; empty means every account.
	Accounts []string
	// Retired versions are left out of listings and refused to new add-ons.
	Retired bool
}

func (o Offer) visibleTo(account string) bool {
	return len(o.Accounts) == 0 || slices.Contains(o.Accounts, account)
}

// Source is the catalogue as one account sees it: the embedded add-ons and
// the versions operators published for the account. *Catalog is a Source
// of the embedded add-ons alone.
type Source interface {
	// Lookup returns the add-on called name, hidden ones included, with
	// every version the account sees, retired ones included (flagged): an
	// add-on on a retired version keeps rendering.
	Lookup(ctx context.Context, account, name string) (*Addon, bool, error)
	// List returns every add-on the account sees, sorted by name.
	List(ctx context.Context, account string) ([]*Addon, error)
}

// Lookup implements Source for the embedded catalogue.
func (c *Catalog) Lookup(_ context.Context, _, name string) (*Addon, bool, error) {
	a, ok := c.Addon(name)
	return a, ok, nil
}

// List implements Source for the embedded catalogue.
func (c *Catalog) List(_ context.Context, _ string) ([]*Addon, error) {
	return c.Addons(), nil
}

// Merge returns the add-on called name as account sees it: the embedded
// add-on (nil if there is none) with the offers of that name the account
// may see. A version the embedded catalogue has wins over a published one
// of the same name (publishing refuses that; a newer saltbush may embed a
// version an operator published before). The add-on level fields are the
// embedded add-on's, or else the newest published version's. It returns
// false when the account sees no version at all.
func Merge(embedded *Addon, offers []Offer, account string) (*Addon, bool) {
	var visible []*Version
	for _, o := range offers {
		if !o.visibleTo(account) {
			continue
		}
		v := o.Published.Version
		if embedded != nil {
			if _, dup := embedded.byVersion[v.Version]; dup {
				continue
			}
		}
		if o.Retired {
			cp := *v
			cp.Retired = true
			v = &cp
		}
		visible = append(visible, v)
	}
	if len(visible) == 0 {
		return embedded, embedded != nil
	}
	slices.SortFunc(visible, func(x, y *Version) int { return CompareVersions(y.Version, x.Version) })
	var a Addon
	if embedded != nil {
		a = *embedded
		a.Versions = slices.Clone(embedded.Versions)
	} else {
		a = *visible[0].Addon
		a.Versions = nil
	}
	a.byVersion = map[string]*Version{}
	for _, v := range a.Versions {
		a.byVersion[v.Version] = v
	}
	for _, v := range visible {
		if _, dup := a.byVersion[v.Version]; dup {
			continue // two offers of one version: the store's key forbids it
		}
		a.Versions = append(a.Versions, v)
		a.byVersion[v.Version] = v
	}
	slices.SortFunc(a.Versions, func(x, y *Version) int { return CompareVersions(y.Version, x.Version) })
	return &a, true
}

// ListedVersions returns the versions an addon.yaml lists, in its order.
func ListedVersions(addonYAML []byte) ([]string, error) {
	f, err := decodeAddonFile(addonYAML)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(f.Versions))
	for _, v := range f.Versions {
		out = append(out, v.Version)
	}
	return out, nil
}

// ReadVersion reads what publishing one version of an add-on directory
// sends: addon.yaml and every regular file under the version's directory,
// by slash path. It stops at the first file that would take the total past
// MaxPublishedBytes, naming it, so that a directory holding something
// large is refused before it is read whole.
func ReadVersion(fsys fs.FS, version string) (map[string][]byte, error) {
	files := map[string][]byte{}
	total := int64(0)
	add := func(name string, d fs.DirEntry) error {
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", name)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if total += info.Size(); total > MaxPublishedBytes {
			return fmt.Errorf("%s: a published version may hold at most %d bytes, and with this file it holds %d", name, MaxPublishedBytes, total)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		files[name] = b
		return nil
	}
	info, err := fs.Stat(fsys, addonFileName)
	if err != nil {
		return nil, err
	}
	if err := add(addonFileName, fs.FileInfoToDirEntry(info)); err != nil {
		return nil, err
	}
	if !fsValidPath(version) || strings.Contains(version, "/") {
		return nil, fmt.Errorf("version %q is not a directory name", version)
	}
	err = fs.WalkDir(fsys, version, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		return add(name, d)
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}
