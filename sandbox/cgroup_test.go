//go:build linux

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// The cgroup helpers of the tests that run real sandboxes. They look at
// the hierarchies with plain file operations, not through package cgroup,
// whose own tests cover it.

const cgroupTestRoot = "/sys/fs/cgroup"

// cgroupRequire skips (or fails in CI) when the host lacks a feature.
func cgroupRequire(t testing.TB, have bool, what string, info CgroupInfo) {
	t.Helper()
	if !have {
		sandboxtest.Unavailable(t, "host cgroups (%+v) cannot enforce %s", info, what)
	}
}

// cgroupTestName derives a unique, valid cgroup name from the test name.
func cgroupTestName(t testing.TB) string {
	t.Helper()
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(base) > 40 {
		base = base[:40]
	}
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatalf("read random suffix: %v", err)
	}
	return base + "-" + hex.EncodeToString(suffix)
}

// cgroupWait waits for cmd for at most d; on timeout it kills the process
// so the waiting goroutine, owned here, always ends before we return.
func cgroupWait(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after %v", cmd.Args, d)
		return nil
	}
}

// cgroupTestFSType returns the filesystem magic of dir, 0 when unreadable.
func cgroupTestFSType(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// cgroupTestHierarchies lists the cgroup hierarchies mounted under the
// test root, found by filesystem type rather than by the code under test.
func cgroupTestHierarchies(t testing.TB) []string {
	t.Helper()
	var dirs []string
	for _, name := range []string{"unified", "memory", "pids", "cpu", "cpuacct", "freezer"} {
		dir, err := filepath.EvalSymlinks(filepath.Join(cgroupTestRoot, name))
		if err != nil || slices.Contains(dirs, dir) {
			continue
		}
		if typ := cgroupTestFSType(dir); typ == unix.CGROUP_SUPER_MAGIC || typ == unix.CGROUP2_SUPER_MAGIC {
			dirs = append(dirs, dir)
		}
	}
	if cgroupTestFSType(cgroupTestRoot) == unix.CGROUP2_SUPER_MAGIC {
		dirs = append(dirs, cgroupTestRoot)
	}
	return dirs
}

// cgroupTestParent returns a cgroup parent name unique to the test, and
// removes that parent in every hierarchy when the test ends, failing the
// test if something of it could not be removed.
func cgroupTestParent(t testing.TB) string {
	t.Helper()
	parent := "tgtest-" + cgroupTestName(t)
	t.Cleanup(func() {
		for _, hier := range cgroupTestHierarchies(t) {
			if err := cgroupTestRemoveTree(filepath.Join(hier, parent)); err != nil {
				t.Errorf("remove the test's cgroup parent: %v", err)
			}
		}
	})
	return parent
}

// cgroupTestTree lists dir and the directories below it, top down; a
// missing dir holds nothing.
func cgroupTestTree(dir string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return dirs, err
}

// cgroupTestRemoveTree kills what runs below dir, then removes dir and
// what is below it, deepest first, retrying briefly while killed tasks
// still count as members. A failed test leaves nothing behind.
func cgroupTestRemoveTree(dir string) error {
	dirs, err := cgroupTestTree(dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range slices.Backward(dirs) {
		for {
			cgroupTestKillMembers(d)
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove %s: %w", d, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// cgroupTestKillMembers SIGKILLs every process dir lists.
func cgroupTestKillMembers(dir string) {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
