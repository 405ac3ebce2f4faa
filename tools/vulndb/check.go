package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func mainCheck(args []string) {
	fl := flag.NewFlagSet("vulndb check", flag.ExitOnError)
	accept := fl.String("accept", "", "file of accepted vulnerabilities: lines of `ID module@version reason`")
	_ = fl.Parse(args) // ExitOnError
	if fl.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: vulndb check [-accept FILE] REPORT.json")
		os.Exit(2)
	}
	accepted := map[string]string{}
	if *accept != "" {
		var err error
		if accepted, err = readAccepted(*accept); err != nil {
			fmt.Fprintln(os.Stderr, "vulndb:", err)
			os.Exit(2)
		}
	}
	f, err := os.Open(fl.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(2)
	}
	defer func() { _ = f.Close() }() // read only
	found, err := reachable(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(2)
	}
	failed := 0
	used := map[string]bool{}
	for _, v := range found {
		if reason, ok := accepted[v.key()]; ok {
			used[v.key()] = true
			fmt.Printf("govulncheck: accepted %s in %s (fixed in %s): %s\n", v.id, v.at(), v.fixed, reason)
			continue
		}
		failed++
		fmt.Printf("govulncheck: %s in %s is reachable (fixed in %s): https://pkg.go.dev/vuln/%s\n    %s\n", v.id, v.at(), v.fixed, v.id, v.trace)
	}
	// An acceptance that matches nothing is left over from a module (or Go
	// toolchain) version the code no longer uses: say so, so that the list
	// shrinks as versions move. It does not fail the check.
	stale := make([]string, 0, len(accepted))
	for k := range accepted {
		if !used[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		fmt.Printf("govulncheck: %s accepts %s, which the report does not find reachable: remove the line\n", *accept, k)
	}
	fmt.Printf("govulncheck: %d reachable vulnerabilities, %d accepted, %d not\n", len(found), len(found)-failed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// readAccepted reads lines `GO-YYYY-NNNN module@version reason…`; blank
// lines and lines starting with # are skipped. A reason is required.
func readAccepted(path string) (map[string]string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file the Makefile names
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.Contains(fields[1], "@") {
			return nil, fmt.Errorf("%s:%d: want `ID module@version reason`", path, i+1)
		}
		m[fields[0]+" "+fields[1]] = strings.Join(fields[2:], " ")
	}
	return m, nil
}

type finding struct {
	id, module, version, fixed, trace string
}

func (v finding) at() string  { return v.module + "@" + v.version }
func (v finding) key() string { return v.id + " " + v.at() }

// reachable returns the symbol-level findings of a govulncheck JSON stream,
// one per vulnerability and module, sorted. A finding whose first frame names
// a function is one whose vulnerable symbol the code calls.
func reachable(r io.Reader) ([]finding, error) {
	type frame struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
		Receiver string `json:"receiver"`
	}
	type message struct {
		Config *struct {
			ScanLevel string `json:"scan_level"`
		} `json:"config"`
		Finding *struct {
			OSV          string  `json:"osv"`
			FixedVersion string  `json:"fixed_version"`
			Trace        []frame `json:"trace"`
		} `json:"finding"`
	}
	dec := json.NewDecoder(bufio.NewReader(r))
	seen := map[string]finding{}
	sawConfig := false
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		if m.Config != nil {
			if m.Config.ScanLevel != "symbol" {
				return nil, fmt.Errorf("govulncheck scanned at level %q, want symbol", m.Config.ScanLevel)
			}
			sawConfig = true
		}
		if m.Finding == nil || len(m.Finding.Trace) == 0 || m.Finding.Trace[0].Function == "" {
			continue
		}
		t := m.Finding.Trace
		v := finding{id: m.Finding.OSV, module: t[0].Module, version: t[0].Version, fixed: m.Finding.FixedVersion}
		if _, ok := seen[v.key()]; ok {
			continue
		}
		calls := make([]string, 0, len(t))
		for i := len(t) - 1; i >= 0; i-- {
			name := t[i].Function
			if t[i].Receiver != "" {
				name = strings.TrimPrefix(t[i].Receiver, "*") + "." + name
			}
			calls = append(calls, t[i].Package+"."+name)
		}
		v.trace = strings.Join(calls, " -> ")
		seen[v.key()] = v
	}
	if !sawConfig {
		return nil, errors.New("no govulncheck config message: not govulncheck -format json output")
	}
	out := make([]finding, 0, len(seen))
	for _, v := range seen {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, nil
}
