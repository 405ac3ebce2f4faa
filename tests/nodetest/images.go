package nodetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is a container image the node's registry serves, assembled from
// files of this machine (programs built from Go modules, and for
// kube-proxy Debian's iptables).
type Image struct {
	// Ref is the image as pods name it: host-less, exactly as the
	// catalogue renders it (coredns/coredns:1.12.1).
	Ref string
	// Files are the image's content.
	Files []File
	// Entrypoint is the image's ENTRYPOINT.
	Entrypoint []string
	// User is the image's USER ("": root).
	User string
}

// File is one file of an image: the file at Source on this machine,
// stored at Path with Mode; a Link instead makes Path a symbolic link.
type File struct {
	Path   string
	Source string
	Mode   os.FileMode
	Link   string
}

// imagePATH is every image's PATH, as in the upstream images.
const imagePATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// emptyDirs are in every image: mount points the kubelet and the
// catalogue's pods use (/etc/resolv.conf, /tmp for metrics-server's
// certificates, /run/xtables.lock for kube-proxy), made before a read-only
// root takes effect.
var emptyDirs = []string{"etc", "tmp", "run", "var", "var/run", "dev", "proc", "sys"}

// build assembles the image: one layer over an empty base.
func (img Image) build() (v1.Image, error) {
	layer, err := img.layer()
	if err != nil {
		return nil, fmt.Errorf("nodetest: image %s: %w", img.Ref, err)
	}
	// An OCI image: its manifest may list an uncompressed layer.
	oci := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err := mutate.AppendLayers(oci, layer)
	if err != nil {
		return nil, fmt.Errorf("nodetest: image %s: %w", img.Ref, err)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("nodetest: image %s: %w", img.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config.Entrypoint = img.Entrypoint
	cf.Config.User = img.User
	cf.Config.Env = []string{"PATH=" + imagePATH}
	return mutate.ConfigFile(base, cf)
}

// layer writes the files into one uncompressed tar layer: it crosses
// loopback once, and compressing hundreds of megabytes in a test binary
// built with the race detector (which instruments compress/flate too)
// would cost minutes of the node's start.
func (img Image) layer() (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		for _, p := range parents(d) {
			if dirs[p] {
				continue
			}
			dirs[p] = true
			mode := int64(0o755)
			if p == "tmp" {
				mode = 0o1777
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range emptyDirs {
		if err := addDir(d); err != nil {
			return nil, err
		}
	}
	files := slices.Clone(img.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		if err := addDir(path.Dir(name)); err != nil {
			return nil, err
		}
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.Link, Mode: 0o777}); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode.Perm()), Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return static.NewLayer(buf.Bytes(), types.OCIUncompressedLayer), nil
}

// parents are d and its parents, outermost first ("a/b" → a, a/b); none
// for ".".
func parents(d string) []string {
	d = path.Clean(d)
	if d == "." || d == "/" {
		return nil
	}
	return append(parents(path.Dir(d)), d)
}

// hostProgram returns the files that make a dynamically linked program of
// this machine run inside an image: the program, every library ldd names
// (and the loader), each at its path here, and links names → program.
func hostProgram(program string, links ...string) ([]File, error) {
	real, err := filepath.EvalSymlinks(program)
	if err != nil {
		return nil, err
	}
	files := []File{{Path: real, Source: real}}
	for _, l := range links {
		files = append(files, File{Path: l, Link: real})
	}
	libs, err := sharedLibraries(real)
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		files = append(files, lib...)
	}
	return files, nil
}

// sharedLibraries lists what ldd says program loads: for each library the
// path the loader looks up, and (when that is a link) the file it points
// to.
func sharedLibraries(program string) ([][]File, error) {
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	var libs [][]File
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			p = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			p = f[0] // the loader
		default:
			continue // linux-vdso
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		lib := []File{{Path: real, Source: real, Mode: 0o755}}
		if real != p {
			lib = append(lib, File{Path: p, Link: real})
		}
		libs = append(libs, lib)
	}
	return libs, nil
}

// iptablesFiles are Debian's iptables (the nf_tables backend, which the
// node's own kube-proxy uses too) for the kube-proxy image, as upstream's
// kube-proxy image carries Debian's: the multi-call binary under the names
// kube-proxy runs, its libraries and its extension modules.
func iptablesFiles() ([]File, error) {
	multi, err := exec.LookPath("xtables-nft-multi")
	if err != nil {
		return nil, fmt.Errorf("nodetest: xtables-nft-multi (Debian package iptables): %w", err)
	}
	var links []string
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		links = append(links, "/usr/sbin/"+n)
	}
	files, err := hostProgram(multi, links...)
	if err != nil {
		return nil, fmt.Errorf("nodetest: iptables: %w", err)
	}
	// Extensions (-m comment, -j MARK...) are loaded at run time.
	mods, _ := filepath.Glob("/usr/lib/*-linux-gnu/xtables/*.so")
	if len(mods) == 0 {
		return nil, fmt.Errorf("nodetest: no iptables extension modules under /usr/lib/*-linux-gnu/xtables")
	}
	for _, m := range mods {
		files = append(files, File{Path: m, Source: m, Mode: 0o644})
		// A module may need libraries the program does not
		// (libxt_statistic, which kube-proxy's rules use, needs libm).
		libs, err := sharedLibraries(m)
		if err != nil {
			return nil, fmt.Errorf("nodetest: iptables module %s: %w", m, err)
		}
		for _, lib := range libs {
			files = append(files, lib...)
		}
	}
	for _, etc := range []string{"/etc/protocols", "/etc/ethertypes"} {
		if _, err := os.Stat(etc); err == nil {
			files = append(files, File{Path: etc, Source: etc, Mode: 0o644})
		}
	}
	return dedupe(files), nil
}

// dedupe keeps the first file of each path.
func dedupe(files []File) []File {
	seen := map[string]bool{}
	var out []File
	for _, f := range files {
		p := path.Clean(f.Path)
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, f)
	}
	return out
}
