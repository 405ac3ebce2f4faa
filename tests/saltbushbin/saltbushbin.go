// Package saltbushbin gives tests the real saltbush binary (cmd/saltbush),
// for what only the process shows: `saltbush serve` killed and restarted,
// `saltbush admin` as an operator runs it, the unit files of docs/examples.
package saltbushbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Env names a saltbush binary that Path returns instead of building one:
// `make unit` builds it once for every test package that runs saltbush,
// where each would otherwise link its own.
const Env = "SALTBUSH_BIN"

// Build compiles cmd/saltbush into dir and returns the binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "saltbush")
	// -buildvcs=auto: the binary says the commit it was built from
	// (package release), whatever GOFLAGS the environment sets.
	cmd := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "github.com/saltbush/saltbush/cmd/saltbush")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build saltbush: %v\n%s", err, out)
	}
	return bin, nil
}

// Path returns the binary Env names, or else one built into a temporary
// directory of tb's.
func Path(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv(Env); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			tb.Fatalf("%s: %v", Env, err)
		}
		return bin
	}
	bin, err := Build(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}
