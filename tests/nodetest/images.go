package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/saltbush/saltbush/tests/nodetest/ociimage"
)

// Image is a container image the node's registry serves, assembled from
// files of this machine (programs built from Go modules, and for
// kube-proxy Debian's iptables).
type Image = ociimage.Image

// File is one file of an image.
type File = ociimage.File

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
