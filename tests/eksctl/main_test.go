// Package eksctl_test drives the real eksctl (github.com/weaveworks/eksctl,
// the version tools/eksctl/go.mod pins, built by `make eksctl`) against a
// real saltbush: the façade and the gRPC core in process
// (server/servertest), a cluster made ACTIVE through the provisioner's
// control API, a real Kubernetes control plane (tests/kubetest) and the
// real guest agent, so the add-ons eksctl creates really reach the
// cluster. eksctl reaches every AWS service through AWS_ENDPOINT_URL at
// the façade; what it may not do, and why, is in docs/clients.md.
package eksctl_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saltbush/saltbush/tests/agentproc"
	"github.com/saltbush/saltbush/tests/kubetest"
)

// binEnv names the variable holding the eksctl binary's path; the
// Makefile's unit target sets it to what `make eksctl` built.
const binEnv = "SALTBUSH_EKSCTL"

// eksctlModule is the module tools/eksctl/go.mod pins.
const eksctlModule = "github.com/weaveworks/eksctl"

// The binaries of this test binary, found or built by TestMain.
var (
	eksctlBinary  string
	eksctlVersion string // as tools/eksctl/go.mod pins it, e.g. v0.215.0
	agentBinary   string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	// A missing eksctl fails the package (it is never skipped): `make test`
	// builds it first.
	if eksctlBinary, eksctlVersion, err = findEksctl(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin, remove, err := agentproc.BuildTemp(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	agentBinary = bin
	return kubetest.RunTests(m, kubetest.Options{})
}

// findEksctl returns the eksctl binary ($SALTBUSH_EKSCTL, else the one
// `make eksctl` writes under bin/eksctl/) and the version the repository
// pins, or an error that says how to build it.
func findEksctl() (path, version string, err error) {
	// A test runs in its package's directory: the repository is two up.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", "", err
	}
	gomod := filepath.Join(root, "tools", "eksctl", "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", "", fmt.Errorf("eksctl: the pin: %w", err)
	}
	if version = requiredVersion(data, eksctlModule); version == "" {
		return "", "", fmt.Errorf("eksctl: %s requires no version of %s", gomod, eksctlModule)
	}
	path, from := os.Getenv(binEnv), "$"+binEnv
	if path == "" {
		path, from = filepath.Join(root, "bin", "eksctl", version, "eksctl"), "the repository's bin/eksctl"
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", "", fmt.Errorf("eksctl: %s not found (%s): run `make eksctl` to build it from the Go module proxy: %w", path, from, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", "", fmt.Errorf("eksctl: %s (%s) is not an executable file: run `make eksctl`", path, from)
	}
	return path, version, nil
}

// requiredVersion is the version a go.mod requires of module, or "".
func requiredVersion(gomod []byte, module string) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	return ""
}
