package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// BenchmarkAgentStartupRSS builds programs that do nothing but import (and
// so initialize) some of the agent's dependencies, starts each b.N times
// and reads its RSS once main runs: the floor under BenchmarkAgentIdle's
// figure, before the agent connects, lists or applies anything. A Go
// program's package initializers are spread over its whole text, and the
// kernel maps a binary's cached pages in 64 KiB runs around each fault,
// so most of a binary's pages are resident from the start: the resident
// file pages follow the binary's size, whatever the program then does.
func BenchmarkAgentStartupRSS(b *testing.B) {
	cases := []struct {
		name    string
		imports []string
	}{
		{"nothing", nil},
		{"grpc", []string{"google.golang.org/grpc"}},
		{"kstatus", []string{"github.com/fluxcd/cli-utils/pkg/kstatus/status"}},
		{"client-go clientset", []string{"k8s.io/client-go/kubernetes"}},
		{"controller-runtime client", []string{"sigs.k8s.io/controller-runtime/pkg/client"}},
		{"fluxcd ssa", []string{"github.com/fluxcd/pkg/ssa"}},
		{"the agent's packages", []string{
			"github.com/saltbush/saltbush/guest/agent", "github.com/saltbush/saltbush/guest/config",
			"github.com/saltbush/saltbush/guest/webhook",
		}},
	}
	type row struct {
		name            string
		binary          int64
		anon, file, all float64 // MiB, medians
	}
	// go test runs each sub-benchmark once with b.N 1 before the run it
	// reports: the last run of each case is its row.
	rows := make([]row, len(cases))
	for i, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			bin := buildImporter(b, tc.imports)
			st, err := os.Stat(bin)
			if err != nil {
				b.Fatal(err)
			}
			var anon, file, all []float64
			b.ResetTimer()
			for range b.N {
				a, f := startedRSS(b, bin)
				anon, file, all = append(anon, a), append(file, f), append(all, a+f)
			}
			b.StopTimer()
			r := row{name: tc.name, binary: st.Size(), anon: median(anon), file: median(file), all: median(all)}
			b.ReportMetric(r.all, "rss-MiB")
			b.ReportMetric(r.file, "file-MiB")
			rows[i] = r
		})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "programs that only import, started and read once main runs (medians):\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "imports\tbinary MB\tRSS MiB\tanonymous MiB\tthe binary's pages MiB\tof the binary\t")
	for _, r := range rows {
		if r.name == "" {
			continue // not run (-bench named only some cases)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f %%\t\n", r.name, float64(r.binary)/1e6, r.all, r.anon, r.file,
			100*r.file*(1<<20)/float64(r.binary))
	}
	_ = tw.Flush()
	fmt.Print("\n" + saveSummary("agent-startup-rss", sb.String()))
}

// buildImporter builds a program importing imports and returns its path.
// Its source goes under testdata/ (the go command builds it within this
// module, with the module's versions, but ./... leaves it out), built
// with the flags `make` builds the agent with.
func buildImporter(b *testing.B, imports []string) string {
	b.Helper()
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		b.Fatal(err)
	}
	src, err := os.MkdirTemp("testdata", "importer-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = os.RemoveAll(src)
		_ = os.Remove("testdata") // only when empty: nothing else is kept there
	})
	var sb strings.Builder
	sb.WriteString("package main\n\nimport (\n\t\"os\"\n\t\"time\"\n")
	for _, p := range imports {
		fmt.Fprintf(&sb, "\n\t_ %q", p)
	}
	sb.WriteString("\n)\n\nfunc main() {\n\t_, _ = os.Stdout.WriteString(\"ready\\n\")\n\ttime.Sleep(time.Hour)\n}\n")
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "importer")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+filepath.ToSlash(src))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %v: %v\n%s", imports, err, out)
	}
	return bin
}

// startedRSS starts bin, waits for its "ready" line (its initializers have
// run) and returns its anonymous and file-backed RSS in MiB.
func startedRSS(b *testing.B, bin string) (anon, file float64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		b.Fatalf("%s: %q, %v", bin, line, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	kib := func(field string) float64 {
		for l := range strings.SplitSeq(string(status), "\n") {
			if rest, ok := strings.CutPrefix(l, field+":"); ok {
				var v float64
				if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &v); err == nil {
					return v
				}
			}
		}
		b.Fatalf("/proc/%d/status has no %s", cmd.Process.Pid, field)
		return 0
	}
	return kib("RssAnon") / 1024, kib("RssFile") / 1024
}

// median is the middle of s, or the mean of its two middle values; s is
// left as it was.
func median(s []float64) float64 {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
