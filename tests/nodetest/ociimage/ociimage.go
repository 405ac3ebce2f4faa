// Package ociimage assembles the test node's container images from files
// of this machine: one uncompressed layer over an empty OCI image, with
// the entrypoint, user and PATH the upstream images have. It is shared by
// tests/nodetest, which describes the images, and its registry program,
// which builds and serves them.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path"
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

// Entry is an image and where a registry keeps it: the registry
// program's input, one per image.
type Entry struct {
	// Target is the repository path and tag (coredns/coredns:1.12.1).
	Target string `json:"target"`
	Image  Image  `json:"image"`
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

// Build assembles the image: one layer over an empty base.
func (img Image) Build() (v1.Image, error) {
	layer, err := img.layer()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	// An OCI image: its manifest may list an uncompressed layer.
	oci := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err := mutate.AppendLayers(oci, layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
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
// loopback once, and compressing hundreds of megabytes would cost more
// than it saves.
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
