// Package imports checks saltbush's import rules (run by `make lint`): the
// guest agent stays lean, the façade stays above the server it fronts, and
// the leaf packages stay leaves. A broken rule fails naming the import
// chain that breaks it.
package imports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/saltbush/saltbush"

// graph maps each package to the packages it imports directly.
type graph map[string][]string

// rule forbids the packages matched by root from depending, directly or
// transitively, on any package forbidden matches.
type rule struct {
	name      string
	root      func(pkg string) bool
	forbidden func(pkg string) bool
}

// under reports whether pkg is path or below it.
func under(pkg, path string) bool {
	return pkg == path || strings.HasPrefix(pkg, path+"/")
}

func anyUnder(paths ...string) func(string) bool {
	return func(pkg string) bool {
		for _, p := range paths {
			if under(pkg, p) {
				return true
			}
		}
		return false
	}
}

// leaf forbids everything of saltbush but self, and everything of etcd.
func leaf(self string) func(string) bool {
	return func(pkg string) bool {
		return pkg != self && (under(pkg, module) || under(pkg, "go.etcd.io"))
	}
}

var rules = []rule{
	{
		name: "the guest agent links neither the server, the store, etcd's server nor the grpc-gateway",
		root: anyUnder(module+"/guest", module+"/cmd/saltbush-agent"),
		forbidden: anyUnder(
			module+"/server",
			module+"/store",
			"go.etcd.io/etcd/server",
			"github.com/grpc-ecosystem/grpc-gateway",
		),
	},
	{
		// The server wires the façade in (server/facade.go), never the
		// other way round: what the façade needs of a service's package it
		// is handed through gateway.Config, or shares in a leaf.
		name:      "the façade imports nothing of the server",
		root:      anyUnder(module + "/gateway"),
		forbidden: anyUnder(module + "/server"),
	},
	{
		name:      "presence imports nothing of saltbush",
		root:      func(pkg string) bool { return pkg == module+"/presence" },
		forbidden: leaf(module + "/presence"),
	},
	{
		name:      "errdefs imports only the standard library and gRPC",
		root:      func(pkg string) bool { return pkg == module+"/errdefs" },
		forbidden: leaf(module + "/errdefs"),
	},
	{
		name:      "tlsclient imports only the standard library",
		root:      func(pkg string) bool { return pkg == module+"/tlsclient" },
		forbidden: leaf(module + "/tlsclient"),
	},
	{
		// The agent and every binary link it: the standard library only.
		name:      "release imports nothing of saltbush",
		root:      func(pkg string) bool { return pkg == module+"/release" },
		forbidden: leaf(module + "/release"),
	},
}

// patterns are what `go list` loads: every root of every rule.
var patterns = []string{"./guest/...", "./cmd/saltbush-agent", "./gateway/...", "./presence", "./errdefs", "./tlsclient"}

// violations returns, for each root of r in g, the shortest import chain
// from the root to a forbidden package, sorted.
func violations(g graph, r rule) []string {
	var roots []string
	for pkg := range g {
		if r.root(pkg) {
			roots = append(roots, pkg)
		}
	}
	sort.Strings(roots)
	var out []string
	for _, root := range roots {
		if chain := shortestChain(g, root, r.forbidden); chain != nil {
			out = append(out, strings.Join(chain, " -> "))
		}
	}
	return out
}

// shortestChain is a breadth-first search from root to the first package
// bad matches; nil when there is none.
func shortestChain(g graph, root string, bad func(string) bool) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if pkg != root && bad(pkg) {
			var chain []string
			for p := pkg; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		imports := append([]string(nil), g[pkg]...)
		sort.Strings(imports)
		for _, imp := range imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = pkg
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// load is the import graph of patterns and all their dependencies.
func load(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Imports"}, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		g[p.ImportPath] = p.Imports
	}
	return g
}

func TestImportRules(t *testing.T) {
	g := load(t)
	for _, r := range rules {
		rootFound := false
		for pkg := range g {
			if r.root(pkg) {
				rootFound = true
				break
			}
		}
		if !rootFound {
			t.Errorf("%s: no package of the rule was loaded; the rule checks nothing", r.name)
			continue
		}
		for _, v := range violations(g, r) {
			t.Errorf("%s: %s", r.name, v)
		}
	}
}

// TestRulesCanFail runs each rule over a hand-made graph that breaks it, so
// a rule that matches nothing cannot pass silently.
func TestRulesCanFail(t *testing.T) {
	const m = module
	g := graph{
		m + "/cmd/saltbush-agent": {m + "/guest/agent", "fmt"},
		m + "/guest/agent":        {m + "/guest/kube", m + "/errdefs"},
		m + "/guest/kube":         {m + "/server/pki"},
		m + "/server/pki":         {m + "/store"},
		m + "/store":              {"go.etcd.io/etcd/client/v3"},
		m + "/guest/hostlink":     {"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"},
		m + "/guest/state":        {"go.etcd.io/etcd/server/v3/embed"},
		m + "/guest/apply":        {m + "/storeclient"}, // a name sharing a prefix is not the store
		m + "/errdefs":            {"fmt", "google.golang.org/grpc/status", m + "/store"},
		m + "/tlsclient":          {"crypto/tls", "go.etcd.io/etcd/client/pkg/v3/transport"},
		m + "/gateway":            {m + "/gateway/sigv4", m + "/server/validation", m + "/errdefs"},
		m + "/gateway/sigv4":      {m + "/identity"},
		m + "/identity":           {m + "/server/pki"},
		m + "/server/validation":  {m + "/errdefs"},
		m + "/presence":           {"google.golang.org/protobuf/proto", m + "/errdefs"},
		m + "/release":            {"runtime/debug", m + "/errdefs"},
	}
	want := map[string][]string{
		rules[0].name: {
			m + "/cmd/saltbush-agent -> " + m + "/guest/agent -> " + m + "/errdefs -> " + m + "/store",
			m + "/guest/agent -> " + m + "/errdefs -> " + m + "/store",
			m + "/guest/hostlink -> github.com/grpc-ecosystem/grpc-gateway/v2/runtime",
			m + "/guest/kube -> " + m + "/server/pki",
			m + "/guest/state -> go.etcd.io/etcd/server/v3/embed",
		},
		rules[1].name: {
			m + "/gateway -> " + m + "/server/validation",
			m + "/gateway/sigv4 -> " + m + "/identity -> " + m + "/server/pki",
		},
		rules[2].name: {m + "/presence -> " + m + "/errdefs"},
		rules[3].name: {m + "/errdefs -> " + m + "/store"},
		rules[4].name: {m + "/tlsclient -> go.etcd.io/etcd/client/pkg/v3/transport"},
		rules[5].name: {m + "/release -> " + m + "/errdefs"},
	}
	for _, r := range rules {
		got := violations(g, r)
		if fmt.Sprint(got) != fmt.Sprint(want[r.name]) {
			t.Errorf("%s:\n got  %q\n want %q", r.name, got, want[r.name])
		}
	}
	// And a clean graph passes every rule.
	clean := graph{
		m + "/cmd/saltbush-agent": {m + "/guest/agent"},
		m + "/guest/agent":        {m + "/errdefs", m + "/tlsclient", "google.golang.org/grpc"},
		m + "/errdefs":            {"fmt", "google.golang.org/grpc/status"},
		m + "/tlsclient":          {"crypto/tls"},
		m + "/gateway":            {m + "/gateway/sigv4", m + "/presence", m + "/serverless"}, // a name sharing a prefix is not the server
		m + "/gateway/sigv4":      {"crypto/hmac"},
		m + "/presence":           {"google.golang.org/protobuf/proto"},
	}
	for _, r := range rules {
		if v := violations(clean, r); len(v) != 0 {
			t.Errorf("%s: clean graph fails: %q", r.name, v)
		}
	}
}
