package kubetest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// BinEnv names the environment variable holding the directory of the
// control-plane binaries; the Makefile's unit target sets it to bin/kube.
const BinEnv = "SALTBUSH_KUBE_BIN"

// repoModule is the module whose root holds bin/kube when BinEnv is unset.
const repoModule = "github.com/saltbush/saltbush"

const (
	apiServerBinary         = "kube-apiserver"
	controllerManagerBinary = "kube-controller-manager"
	schedulerBinary         = "kube-scheduler"
)

// findBinaries returns the directory holding the three control-plane
// binaries, or an error that says how to build them.
func findBinaries() (string, error) {
	dir, from := os.Getenv(BinEnv), "$"+BinEnv
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("kubetest: %s is unset and %w; run `make kube` and set %s to its bin/kube", BinEnv, err, BinEnv)
		}
		dir, from = filepath.Join(root, "bin", "kube"), "the repository's bin/kube"
	}
	for _, name := range []string{apiServerBinary, controllerManagerBinary, schedulerBinary} {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("kubetest: %s not found in %s (%s): run `make kube` to build the Kubernetes control plane: %w", name, dir, from, err)
		}
		if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("kubetest: %s in %s (%s) is not an executable file: run `make kube`", name, dir, from)
		}
	}
	return dir, nil
}

// RepoRoot is the repository's root: the directory of the go.mod of
// module github.com/saltbush/saltbush above the working directory (a test
// runs in its package's directory). Built programs live in its bin/.
func RepoRoot() (string, error) { return repoRoot() }

// repoRoot walks up from the working directory (a test runs in its
// package's directory) to the go.mod of repoModule.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(data) == repoModule {
			return dir, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("read %s: %w", filepath.Join(dir, "go.mod"), err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", repoModule)
		}
		dir = parent
	}
}

// modulePath returns the path named by a go.mod's module directive, or ""
// when it has none.
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest = strings.TrimSpace(rest)
		if i := strings.Index(rest, "//"); i >= 0 {
			rest = strings.TrimSpace(rest[:i])
		}
		if unquoted, err := strconv.Unquote(rest); err == nil {
			return unquoted
		}
		return rest
	}
	return ""
}

// kubectlBinary is the real kubectl, built beside the control plane.
const kubectlBinary = "kubectl"

// Kubectl returns the path of the kubectl `make kube` builds from
// k8s.io/kubernetes/cmd/kubectl, or an error that says how to build it.
func Kubectl() (string, error) { return Binary(kubectlBinary) }

// Binary returns the path of another program `make kube` builds from the
// pinned k8s.io/kubernetes beside the control plane (kubelet, kube-proxy),
// or an error that says how to build it.
func Binary(name string) (string, error) {
	dir, err := findBinaries()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if info, err := os.Stat(path); err != nil || info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("kubetest: %s not found or not executable in %s: run `make kube`", name, dir)
	}
	return path, nil
}
