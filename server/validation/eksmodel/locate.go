package eksmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sources are the model sources on this machine.
type Sources struct {
	// Botocore is the path of botocore's service-2.json(.gz), BotocoreName
	// "botocore 1.43.11".
	Botocore, BotocoreName string
	// SDKDir is the directory of the EKS module of the AWS SDK for Go v2
	// this repository's go.mod requires, SDKName its module and version.
	SDKDir, SDKName string
}

// Locate finds the sources: botocore through python3 (unless botocorePath
// names the model), the SDK's module through `go list -m`, run in dir (a
// directory of this repository's module).
func Locate(ctx context.Context, dir, botocorePath string) (Sources, error) {
	var src Sources
	out, err := exec.CommandContext(ctx, "python3", "-c",
		"import botocore,os;print(os.path.dirname(botocore.__file__));print(botocore.__version__)").Output()
	switch {
	case err != nil && botocorePath == "":
		return src, fmt.Errorf("find botocore (python3 -c 'import botocore'): %w", err)
	case err == nil:
		lines := strings.Fields(string(out))
		if len(lines) != 2 {
			return src, fmt.Errorf("python3 printed %q for botocore's directory and version", out)
		}
		src.BotocoreName = "botocore " + lines[1]
		if botocorePath == "" {
			path := filepath.Join(lines[0], "data", "eks", "2017-11-01", "service-2.json")
			if _, err := os.Stat(path); err != nil {
				path += ".gz"
			}
			botocorePath = path
		}
	}
	src.Botocore = botocorePath
	if src.BotocoreName == "" {
		src.BotocoreName = "botocore (" + filepath.Base(botocorePath) + ")"
	}

	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-json", SDKModule)
	cmd.Dir = dir
	out, err = cmd.Output()
	if err != nil {
		return src, fmt.Errorf("find %s (go list -m): %w", SDKModule, err)
	}
	var mod struct{ Path, Version, Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return src, fmt.Errorf("go list -m -json %s: %w", SDKModule, err)
	}
	if mod.Dir == "" {
		// Not downloaded yet: the module cache fills on demand.
		dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", SDKModule+"@"+mod.Version) //nolint:gosec // G204: the version go list read from go.mod
		dl.Dir = dir
		out, err := dl.Output()
		if err != nil {
			return src, fmt.Errorf("go mod download %s@%s: %w", SDKModule, mod.Version, err)
		}
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			return src, fmt.Errorf("go mod download %s@%s printed %q", SDKModule, mod.Version, out)
		}
	}
	src.SDKDir, src.SDKName = mod.Dir, mod.Path+" "+mod.Version
	return src, nil
}

// Load reads both sources and merges them.
func Load(src Sources) (*Model, []Provenance, error) {
	boto, err := ReadBotocore(src.Botocore)
	if err != nil {
		return nil, nil, err
	}
	sdk, err := ReadSDK(src.SDKDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", src.SDKName, err)
	}
	return Merge(boto, src.BotocoreName, sdk, src.SDKName)
}
