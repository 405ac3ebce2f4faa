package nodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// BinEnv names the environment variable holding the directory `make node`
// builds the add-ons' programs into; the Makefile's unit target sets it
// to bin/node.
const BinEnv = "SALTBUSH_NODE_BIN"

// ProbeImage is the tests' workload image: this package's probe program
// (serve, lookup, get).
const ProbeImage = "saltbush/probe:test"

// catalogImage is one image of the catalogue that can be built here: the
// reference exactly as the catalogue renders it, and the program `make
// node` (or `make kube`) built for it.
type catalogImage struct {
	ref        string
	program    string // under BinEnv; kube-proxy comes from `make kube`
	entrypoint string
	user       string
}

// catalogImages are the add-on versions proven on a real node. Versions
// missing here have no image on the node: their pods cannot pull.
var catalogImages = []catalogImage{
	{ref: "coredns/coredns:1.12.1", program: "coredns-v1.12.1/coredns", entrypoint: "/coredns"},
	{ref: "coredns/coredns:1.11.4", program: "coredns-v1.11.4/coredns", entrypoint: "/coredns"},
	// As upstream's image: the nobody user.
	{ref: "metrics-server/metrics-server:v0.8.0", program: "metrics-server-v0.8.0/metrics-server", entrypoint: "/metrics-server", user: "65534"},
	{ref: "eks/kube-proxy:v1.37.2-eksbuild.1", program: "kube-proxy", entrypoint: "/usr/local/bin/kube-proxy"},
}

// CatalogImages returns the images of the catalogue that this machine can
// build, and the probe image; dir holds the probe's build. It fails, saying
// what to build, when a program is missing.
func CatalogImages(ctx context.Context, dir string) ([]Image, error) {
	binDir, err := nodeBinaries()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, ci := range catalogImages {
		var src string
		if ci.program == "kube-proxy" {
			if src, err = kubetest.Binary("kube-proxy"); err != nil {
				return nil, err
			}
		} else {
			src = filepath.Join(binDir, ci.program)
			if _, err := os.Stat(src); err != nil {
				return nil, fmt.Errorf("nodetest: %s (image %s): run `make node`: %w", src, ci.ref, err)
			}
		}
		img := Image{Ref: ci.ref, Entrypoint: []string{ci.entrypoint}, User: ci.user,
			Files: []File{{Path: ci.entrypoint, Source: src}}}
		if ci.program == "kube-proxy" {
			ipt, err := iptablesFiles()
			if err != nil {
				return nil, err
			}
			img.Files = append(img.Files, ipt...)
		}
		out = append(out, img)
	}
	probe, err := buildProgram(ctx, dir, "probe")
	if err != nil {
		return nil, err
	}
	out = append(out, Image{Ref: ProbeImage, Entrypoint: []string{"/probe"}, Files: []File{{Path: "/probe", Source: probe}}})
	return out, nil
}

// CatalogImageRefs are the references CatalogImages serves for the
// catalogue, for a test that checks them against what the catalogue
// renders.
func CatalogImageRefs() []string {
	var refs []string
	for _, ci := range catalogImages {
		refs = append(refs, ci.ref)
	}
	return refs
}

// nodeBinaries is BinEnv, else the repository's bin/node.
func nodeBinaries() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		return dir, nil
	}
	root, err := kubetest.RepoRoot()
	if err != nil {
		return "", errors.Join(fmt.Errorf("nodetest: %s is unset; run `make node`", BinEnv), err)
	}
	return filepath.Join(root, "bin", "node"), nil
}
