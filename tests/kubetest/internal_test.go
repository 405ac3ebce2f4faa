package kubetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Image references lose tag and digest, not a registry port.
func TestImageRepository(t *testing.T) {
	for image, want := range map[string]string{
		"nginx":                       "nginx",
		"nginx:1.27":                  "nginx",
		"coredns/coredns:1.12.1":      "coredns/coredns",
		"team/app@sha256:0123abcd":    "team/app",
		"team/app:1.0@sha256:0123abc": "team/app",
		"localhost:5000/team/app":     "localhost:5000/team/app",
		"localhost:5000/team/app:2.1": "localhost:5000/team/app",
	} {
		if got := imageRepository(image); got != want {
			t.Errorf("imageRepository(%q) = %q, want %q", image, got, want)
		}
	}
}

// The whole reference wins over the repository; unknown images run.
func TestBehaviorFor(t *testing.T) {
	k := &Kubelet{behaviors: map[string]Behavior{}}
	k.behaviors["nginx"] = CrashLoopBackOff
	k.behaviors["nginx:1.27"] = Run
	k.behaviors["team/app:2.0"] = ImagePullBackOff
	for image, want := range map[string]Behavior{
		"nginx":        CrashLoopBackOff,
		"nginx:1.26":   CrashLoopBackOff,
		"nginx:1.27":   Run,
		"team/app:2.0": ImagePullBackOff,
		"team/app:2.1": Run,
		"other:1":      Run,
	} {
		if got := k.behaviorFor(image); got != want {
			t.Errorf("behaviorFor(%q) = %v, want %v", image, got, want)
		}
	}
}

// Missing binaries fail with a message that says how to build them.
func TestMissingBinariesSayMakeKube(t *testing.T) {
	t.Setenv(BinEnv, t.TempDir())
	_, err := findBinaries()
	if err == nil || !strings.Contains(err.Error(), "make kube") || !strings.Contains(err.Error(), apiServerBinary) {
		t.Fatalf("findBinaries with an empty %s: %v, want an error naming %s and `make kube`", BinEnv, err, apiServerBinary)
	}
}

// Without the variable the binaries are looked for in the repository's
// bin/kube, found from the working directory.
func TestRepoRoot(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("repoRoot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "tests", "kubetest")); err != nil {
		t.Errorf("repoRoot %s does not hold tests/kubetest: %v", root, err)
	}
}

// modulePath reads the module directive in its forms.
func TestModulePath(t *testing.T) {
	for gomod, want := range map[string]string{
		"module github.com/saltbush/saltbush\n\ngo 1.26\n": "github.com/saltbush/saltbush",
		"// c\nmodule \"example.com/q\" // note\n":         "example.com/q",
		"modulex example.com/no\n":                         "",
	} {
		if got := modulePath([]byte(gomod)); got != want {
			t.Errorf("modulePath(%q) = %q, want %q", gomod, got, want)
		}
	}
}

// hasFlag finds a flag in both spellings, not a flag it prefixes.
func TestHasFlag(t *testing.T) {
	args := []string{"--authorization-config=/a.yaml", "--v", "2"}
	for flag, want := range map[string]bool{
		"--authorization-config": true,
		"--v":                    true,
		"--authorization-mode":   false,
		"--authorization":        false,
	} {
		if got := hasFlag(args, flag); got != want {
			t.Errorf("hasFlag(%v, %q) = %v, want %v", args, flag, got, want)
		}
	}
}
