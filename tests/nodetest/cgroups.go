package nodetest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMount is where the cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// cgroupV1Hierarchies are the directories of the mounted cgroup v1
// hierarchies (cpu, memory, pids, name=systemd...), not the unified one.
// Co-mounted controllers appear once (their symlinks are skipped).
func cgroupV1Hierarchies() []string {
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || e.Type()&fs.ModeSymlink != 0 || e.Name() == "unified" {
			continue
		}
		dir := filepath.Join(cgroupMount, e.Name())
		var st syscall.Statfs_t
		if syscall.Statfs(dir, &st) != nil || st.Type != cgroupSuperMagic {
			continue
		}
		out = append(out, dir)
	}
	return out
}

// cgroupSuperMagic is the statfs type of a cgroup v1 mount.
const cgroupSuperMagic = 0x27e0eb

// makeCgroupRoot creates the node's cgroup root in every hierarchy: the
// kubelet refuses a --cgroup-root that does not exist. A new cpuset
// cgroup has no CPUs or memory nodes until given its parent's.
func makeCgroupRoot(root string) error {
	for _, h := range cgroupV1Hierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("nodetest: cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return fmt.Errorf("nodetest: %w", err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("nodetest: %w", err)
			}
		}
	}
	return nil
}

// killCgroupRoot kills every process in the node's cgroups (containers
// the kubelet did not stop) and reports how many it signalled.
func killCgroupRoot(root string) int {
	killed := map[int]bool{}
	for _, h := range cgroupV1Hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			procs, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(procs)) {
				pid, err := strconv.Atoi(f)
				if err != nil || killed[pid] {
					continue
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
				killed[pid] = true
			}
			return nil
		})
	}
	return len(killed)
}

// removeCgroupRoot removes the node's cgroups, deepest first. A cgroup
// still holding a process cannot be removed; the error names it.
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupV1Hierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
