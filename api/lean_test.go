package api

// The contracts module stays lean (docs/adr/0007-contracts-module.md): a
// service that imports it must not pull in saltbush's server, etcd,
// Kubernetes or the AWS SDK. Its own requirements are protobuf, gRPC,
// grpc-gateway's runtime and the google.api annotations.

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// self is the contracts module: the one module under
// github.com/saltbush/saltbush it may name.
const self = "github.com/saltbush/saltbush/api"

// forbidden reports whether the module path is one the contracts module
// must not depend on: etcd, Kubernetes, the AWS SDK and saltbush's other
// modules, each with everything below it.
func forbidden(module string) bool {
	if module == self {
		return false
	}
	for _, p := range []string{"go.etcd.io", "k8s.io", "sigs.k8s.io", "github.com/aws", "github.com/saltbush/saltbush"} {
		if module == p || strings.HasPrefix(module, p+"/") {
			return true
		}
	}
	return false
}

func TestForbidden(t *testing.T) {
	tests := []struct {
		name   string
		module string
		want   bool
	}{
		{name: "the contracts module itself", module: self, want: false},
		{name: "saltbush's server module", module: "github.com/saltbush/saltbush", want: true},
		{name: "another saltbush module", module: "github.com/saltbush/saltbush/tools", want: true},
		{name: "a path that only starts like the contracts module", module: "github.com/saltbush/saltbush/apis", want: true},
		{name: "etcd's client", module: "go.etcd.io/etcd/client/v3", want: true},
		{name: "etcd's bbolt", module: "go.etcd.io/bbolt", want: true},
		{name: "Kubernetes' API types", module: "k8s.io/api", want: true},
		{name: "controller-runtime", module: "sigs.k8s.io/controller-runtime", want: true},
		{name: "the AWS SDK", module: "github.com/aws/aws-sdk-go-v2", want: true},
		{name: "smithy", module: "github.com/aws/smithy-go", want: true},
		{name: "a look-alike of github.com/aws", module: "github.com/awslabs/thing", want: false},
		{name: "gRPC", module: "google.golang.org/grpc", want: false},
		{name: "protobuf", module: "google.golang.org/protobuf", want: false},
		{name: "grpc-gateway", module: "github.com/grpc-ecosystem/grpc-gateway/v2", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forbidden(tt.module); got != tt.want {
				t.Errorf("forbidden(%q) = %v, want %v", tt.module, got, tt.want)
			}
		})
	}
}

// goCmd runs the go command in this module alone (no workspace) and
// returns its standard output.
func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	// GOWORK=off: a go.work beside the module would mix the server's
	// module into the build list and hide what this module needs.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestLean: neither the packages this module builds and tests nor its
// module graph reach a forbidden module.
func TestLean(t *testing.T) {
	// Each package with the module it comes from (none for the standard
	// library).
	pkgs := goCmd(t, "list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	for line := range strings.Lines(pkgs) {
		pkg, module, _ := strings.Cut(strings.TrimSpace(line), " ")
		if forbidden(module) {
			t.Errorf("package %s of module %s is a dependency of the contracts module", pkg, module)
		}
	}

	// Every requirement in the graph, whether or not a package of it is
	// built: requiring a heavy module pins its versions on every user of
	// this one, even unused. Each module but this one appears on the
	// right of some edge; it is reported once, with what requires it.
	graph := goCmd(t, "mod", "graph")
	requiredBy := map[string][]string{}
	edges := 0
	for line := range strings.Lines(graph) {
		from, to, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		edges++
		if path, _, _ := strings.Cut(to, "@"); forbidden(path) {
			requiredBy[path] = append(requiredBy[path], from)
		}
	}
	if edges == 0 {
		t.Fatalf("go mod graph printed no requirement: is this the contracts module?\n%s", graph)
	}
	for _, path := range slices.Sorted(maps.Keys(requiredBy)) {
		t.Errorf("the module graph holds %s, required by %s", path, strings.Join(requiredBy[path], ", "))
	}
}
