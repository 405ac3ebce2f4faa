// Package compat builds the saltbush binaries of earlier contract
// baselines from this repository's own history, for the compatibility
// suite (this directory's tests) and the rolling upgrade of tests/load: an
// old agent against a new host, a new agent against an old host, replicas
// of two releases over one etcd.
//
// CHANGELOG.md names each released baseline and the commit that recorded
// it; docs/contracts.md ("Upgrades") says which of them a binary must work
// with (Window).
package compat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Window is how many released baselines older than this binary it works
// with, in both directions (docs/contracts.md, "Upgrades").
const Window = 2

// BinEnv names the directory that keeps the built binaries between runs
// (`make unit` sets bin/compat); bin/compat of the repository when unset.
const BinEnv = "SALTBUSH_COMPAT_BIN"

// Baseline is one released contract baseline, as CHANGELOG.md lists it.
type Baseline struct {
	// Number is the baseline's (its ADR's) number.
	Number int
	// Date is the section's date, YYYY-MM-DD.
	Date string
	// Commit recorded the baseline image (40 hex digits).
	Commit string
	// Image is the SHA-256 of the image as Commit holds it.
	Image string
}

func (b Baseline) String() string {
	return fmt.Sprintf("baseline %d (%s)", b.Number, b.Commit[:12])
}

var (
	sectionRE = regexp.MustCompile(`^## Contract baseline (\d+) — (\d{4}-\d{2}-\d{2})$`)
	commitRE  = regexp.MustCompile("^- commit: `([0-9a-f]{40})`$")
	imageRE   = regexp.MustCompile("^- image: `([0-9a-f]{64})`$")
)

// ReadChangelog returns the baselines CHANGELOG.md lists, newest first,
// each with its commit and image. A section missing either, or numbers
// not falling by one, is an error: the file is what the suite builds from.
func ReadChangelog(path string) ([]Baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Baseline
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if m := sectionRE.FindStringSubmatch(t); m != nil {
			n, _ := strconv.Atoi(m[1])
			if len(out) > 0 && n != out[len(out)-1].Number-1 {
				return nil, fmt.Errorf("%s:%d: baseline %d follows baseline %d", path, line, n, out[len(out)-1].Number)
			}
			out = append(out, Baseline{Number: n, Date: m[2]})
			continue
		}
		if len(out) == 0 {
			continue
		}
		cur := &out[len(out)-1]
		if m := commitRE.FindStringSubmatch(t); m != nil {
			cur.Commit = m[1]
		} else if m := imageRE.FindStringSubmatch(t); m != nil {
			cur.Image = m[1]
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no \"## Contract baseline N — DATE\" section", path)
	}
	for _, b := range out {
		if b.Commit == "" || b.Image == "" {
			return nil, fmt.Errorf("%s: baseline %d lacks its commit or image line", path, b.Number)
		}
	}
	return out, sc.Err()
}

// Repo is the repository the suite runs in: its root and HEAD.
type Repo struct {
	Root string
	Head string
}

// OpenRepo finds the repository around the working directory.
func OpenRepo(ctx context.Context) (Repo, error) {
	root, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return Repo{}, err
	}
	head, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return Repo{}, err
	}
	return Repo{Root: root, Head: head}, nil
}

// ImageAt is the SHA-256 of the baseline image as commit holds it (under
// api/proto/ since the contracts became a module, proto/ before).
func (r Repo) ImageAt(ctx context.Context, commit string) (string, error) {
	for _, path := range []string{"api/proto/baseline.binpb", "proto/baseline.binpb"} {
		b, err := gitBytes(ctx, r.Root, "show", commit+":"+path)
		if err == nil {
			sum := sha256.Sum256(b)
			return hex.EncodeToString(sum[:]), nil
		}
	}
	return "", fmt.Errorf("commit %s holds no baseline image", commit)
}

// InWindow is the baselines a binary built from HEAD must work with: the
// Window newest of those recorded by a commit before HEAD (HEAD's own
// release is itself, not an older one), newest first. A clone without
// that history is an error that says so.
func (r Repo) InWindow(ctx context.Context, all []Baseline) ([]Baseline, error) {
	var out []Baseline
	for _, b := range all {
		if len(out) == Window {
			break
		}
		if b.Commit == r.Head {
			continue
		}
		if _, err := git(ctx, r.Root, "cat-file", "-e", b.Commit+"^{commit}"); err != nil {
			return nil, fmt.Errorf("%s: the commit is not in this clone (a shallow clone? git fetch --unshallow): %w", b, err)
		}
		if _, err := git(ctx, r.Root, "merge-base", "--is-ancestor", b.Commit, r.Head); err != nil {
			return nil, fmt.Errorf("%s: not an ancestor of HEAD %s: %w", b, r.Head[:12], err)
		}
		out = append(out, b)
	}
	if len(out) < Window {
		return nil, fmt.Errorf("%d released baselines before HEAD, the window needs %d", len(out), Window)
	}
	return out, nil
}

// Binaries are one release's saltbush and saltbush-agent.
type Binaries struct {
	Baseline Baseline
	Saltbush string
	Agent    string
}

// Build returns the binaries of b, built from the repository's history
// into BinEnv's directory (or the repository's bin/compat) once and kept:
// a later call finds them. Concurrent builds of one commit (two test
// binaries) wait for each other. The source is exported with git
// archive, so the build sees exactly the commit, and removed after.
func (r Repo) Build(ctx context.Context, b Baseline) (Binaries, error) {
	dir := os.Getenv(BinEnv)
	if dir == "" {
		dir = filepath.Join(r.Root, "bin", "compat")
	}
	out := filepath.Join(dir, b.Commit)
	bins := Binaries{Baseline: b, Saltbush: filepath.Join(out, "saltbush"), Agent: filepath.Join(out, "saltbush-agent")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bins, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, b.Commit+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return bins, err
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return bins, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	// The stamp is written last: binaries without it are a build that
	// did not finish.
	stamp := filepath.Join(out, ".built")
	if _, err := os.Stat(stamp); err == nil {
		return bins, nil
	}
	src, err := os.MkdirTemp(dir, "src-"+b.Commit[:12]+"-")
	if err != nil {
		return bins, err
	}
	defer func() { _ = os.RemoveAll(src) }()
	archive := exec.CommandContext(ctx, "git", "-C", r.Root, "archive", "--format=tar", b.Commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return bins, err
	}
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return bins, err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return bins, fmt.Errorf("git archive %s: %v: %s", b.Commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return bins, fmt.Errorf("untar %s: %v: %s", b.Commit, err, untarErr.String())
	}
	if err := os.RemoveAll(out); err != nil {
		return bins, err
	}
	// No .git in the export: -buildvcs=false, or the go command refuses.
	// The toolchain is this build's (GOTOOLCHAIN, which the Makefile
	// sets), whatever the old go.mod says.
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", out+"/", "./cmd/saltbush", "./cmd/saltbush-agent")
	build.Dir = src
	if msg, err := build.CombinedOutput(); err != nil {
		return bins, fmt.Errorf("build %s: %v\n%s", b, err, msg)
	}
	return bins, os.WriteFile(stamp, []byte(b.Commit+"\n"), 0o644)
}

// Flags are the long flags a binary's subcommand takes, from its --help.
func Flags(ctx context.Context, binary string, subcommand ...string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, binary, append(subcommand, "--help")...)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s %s --help: %v\n%s", binary, strings.Join(subcommand, " "), err, msg)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllSubmatch(msg, -1) {
		flags[string(m[1])] = true
	}
	if len(flags) == 0 {
		return nil, errors.New(binary + ": its --help lists no flags")
	}
	return flags, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	b, err := gitBytes(ctx, dir, args...)
	return strings.TrimSpace(string(b)), err
}

func gitBytes(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
