// Command vulndb builds a local Go vulnerability database, the layout that
// `govulncheck -db file://DIR` reads, from one pinned version of the module
// golang.org/x/vulndb fetched through the Go module proxy. vuln.go.dev, where
// govulncheck looks by default, is not reachable from every machine that runs
// `make lint`; the module proxy is.
//
// The module's data/osv/<ID>.json files are the OSV entries. The database is:
//
//	index/db.json       {"modified": <newest entry, or the module version's time>}
//	index/modules.json  [{"path": <module>, "vulns": [{"id", "modified", "fixed"}]}], sorted
//	ID/<ID>.json        the OSV entry, byte for byte
//
// which is the schema of golang.org/x/vuln v1.9.0's internal/client
// (schema.go, index.go): "fixed" is the newest fix that no later
// "introduced" supersedes, and an entry with no such fix has none.
//
// Usage:
//
//	vulndb build -version v0.0.0-… -sum h1:… -out DIR
//	vulndb check -accept FILE REPORT.json
//
// build fails unless the module's hash is the pinned -sum, so a database is
// always the one the Makefile names. DIR is replaced whole, atomically.
//
// check reads the output of `govulncheck -format json` and fails if a
// vulnerable symbol is reachable, unless FILE accepts that vulnerability at
// that module version; accepted ones are still printed, and so is every
// acceptance that matches nothing (left over from an older version), without
// failing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

const modulePath = "golang.org/x/vulndb"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vulndb build|check [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "build":
		mainBuild(os.Args[2:])
	case "check":
		mainCheck(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: vulndb build|check [flags]")
		os.Exit(2)
	}
}

func mainBuild(args []string) {
	fl := flag.NewFlagSet("vulndb build", flag.ExitOnError)
	version := fl.String("version", "", "version of "+modulePath+" to build from")
	sum := fl.String("sum", "", "expected go.sum hash (h1:…) of that version's module zip")
	out := fl.String("out", "", "directory to write the database to (replaced)")
	goCmd := fl.String("go", envOr("GO", "go"), "the go command")
	_ = fl.Parse(args) // ExitOnError
	if *version == "" || *sum == "" || *out == "" || fl.NArg() != 0 {
		fl.Usage()
		os.Exit(2)
	}
	n, err := run(*goCmd, *version, *sum, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
	fmt.Printf("vulndb: %d entries from %s@%s in %s\n", n, modulePath, *version, *out)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// download is what `go mod download -json` says of one module version.
type download struct {
	Dir   string
	Info  string
	Sum   string
	Error string
}

func run(goCmd, version, sum, out string) (int, error) {
	dl, err := fetch(goCmd, version)
	if err != nil {
		return 0, err
	}
	if dl.Sum != sum {
		return 0, fmt.Errorf("%s@%s has hash %s, the Makefile pins %s", modulePath, version, dl.Sum, sum)
	}
	versionTime, err := infoTime(dl.Info)
	if err != nil {
		return 0, err
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o750); err != nil {
		return 0, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), filepath.Base(out)+".tmp-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone once renamed; removes a half-built one otherwise
	n, err := build(os.DirFS(filepath.Join(dl.Dir, "data", "osv")), tmp, versionTime)
	if err != nil {
		return 0, err
	}
	if err := os.RemoveAll(out); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, out)
}

// fetch downloads the module through the module proxy (GOPROXY), outside any
// module so that no go.mod or go.sum is touched; the go command checks the
// zip against the checksum database as it does for any module.
func fetch(goCmd, version string) (*download, error) {
	dir, err := os.MkdirTemp("", "vulndb-fetch-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // an empty working directory, nothing to keep
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "mod", "download", "-json", modulePath+"@"+version) //nolint:gosec // G204: the go command and a version from the Makefile
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var dl download
	if err := json.Unmarshal(stdout.Bytes(), &dl); err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %v: %s", modulePath, version, errors.Join(runErr, err), stderr.String())
	}
	if dl.Error != "" || runErr != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %s %v", modulePath, version, dl.Error, runErr)
	}
	return &dl, nil
}

func infoTime(path string) (time.Time, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the .info file go mod download named
	if err != nil {
		return time.Time{}, err
	}
	var info struct{ Time time.Time }
	if err := json.Unmarshal(b, &info); err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return info.Time, nil
}

// entry is the part of an OSV entry the indexes are made of.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []osvRange `json:"ranges"`
	} `json:"affected"`
}

type osvRange struct {
	Type   string `json:"type"`
	Events []struct {
		Introduced string `json:"introduced"`
		Fixed      string `json:"fixed"`
	} `json:"events"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

// build writes the database for the OSV entries in osv into dir and returns
// how many entries it holds. The database's modified time is the newest
// entry's, or the module version's when that is later: the vulndb
// repository leaves "modified" unset in data/osv and fills it in when it
// publishes.
func build(osv fs.FS, dir string, versionTime time.Time) (int, error) {
	names, err := fs.Glob(osv, "*.json")
	if err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, errors.New("no data/osv/*.json in the module")
	}
	if err := os.MkdirAll(filepath.Join(dir, "ID"), 0o750); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "index"), 0o750); err != nil {
		return 0, err
	}
	modified := versionTime
	modules := map[string]*moduleMeta{}
	for _, name := range names {
		b, err := fs.ReadFile(osv, name)
		if err != nil {
			return 0, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return 0, fmt.Errorf("data/osv/%s: %w", name, err)
		}
		if name != e.ID+".json" {
			return 0, fmt.Errorf("data/osv/%s holds entry %q: OSV entries are named <ID>.json", name, e.ID)
		}
		if e.Modified.After(modified) {
			modified = e.Modified
		}
		for _, a := range e.Affected {
			m := modules[a.Package.Name]
			if m == nil {
				m = &moduleMeta{Path: a.Package.Name, Vulns: []moduleVuln{}}
				modules[a.Package.Name] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: nonSupersededFix(a.Ranges)})
		}
		if err := os.WriteFile(filepath.Join(dir, "ID", name), b, 0o600); err != nil {
			return 0, err
		}
	}

	index := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		sort.Slice(m.Vulns, func(i, j int) bool { return m.Vulns[i].ID < m.Vulns[j].ID })
		index = append(index, m)
	}
	sort.Slice(index, func(i, j int) bool { return index[i].Path < index[j].Path })
	if err := writeJSON(filepath.Join(dir, "index", "modules.json"), index); err != nil {
		return 0, err
	}
	// db.json last: its presence says the database is whole.
	if err := writeJSON(filepath.Join(dir, "index", "db.json"), struct {
		Modified time.Time `json:"modified"`
	}{modified}); err != nil {
		return 0, err
	}
	return len(names), nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// nonSupersededFix is the newest "fixed" version of the SEMVER ranges, or ""
// when a later "introduced" reopens it: golang.org/x/vuln v1.9.0's
// internal/semver.NonSupersededFix, which govulncheck uses to skip entries a
// module's version is past.
func nonSupersededFix(ranges []osvRange) string {
	var latest string
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, e := range r.Events {
			if e.Fixed != "" && less(latest, e.Fixed) {
				latest = e.Fixed
			}
		}
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && less(latest, e.Introduced) {
				latest = ""
				break
			}
		}
	}
	return latest
}

// less compares OSV versions, which carry no "v" (or a "go") prefix.
func less(a, b string) bool {
	return semver.Compare(canonical(a), canonical(b)) < 0
}

func canonical(v string) string {
	return "v" + strings.TrimPrefix(strings.TrimPrefix(v, "v"), "go")
}
