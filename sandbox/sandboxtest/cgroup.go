//go:build linux

package sandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup helpers of tests that make real cgroups. They look at the
// hierarchies with plain file operations, not through the code under test.

const cgroupRoot = "/sys/fs/cgroup"

// CgroupName derives a unique, valid cgroup name from the test name.
func CgroupName(t testing.TB) string {
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

// fsType returns the filesystem magic of dir, 0 when unreadable.
func fsType(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// CgroupHierarchies lists the cgroup hierarchies mounted under the
// test root, found by filesystem type rather than by the code under test.
func CgroupHierarchies(t testing.TB) []string {
	t.Helper()
	return cgroupHierarchies()
}

// SharedCgroupParent returns the cgroup parent of a launcher shared by a
// test binary's tests (pkg names the package), unique to this process,
// so that tests never share the default parent of a real server.
func SharedCgroupParent(pkg string) string { return fmt.Sprintf("tgtest-%s-%d", pkg, os.Getpid()) }

// RemoveCgroupParent removes parent and what is below it in every
// hierarchy: the end of a shared launcher.
func RemoveCgroupParent(parent string) error {
	var errs []error
	for _, hier := range cgroupHierarchies() {
		errs = append(errs, RemoveCgroupTree(filepath.Join(hier, parent)))
	}
	return errors.Join(errs...)
}

func cgroupHierarchies() []string {
	var dirs []string
	for _, name := range []string{"unified", "memory", "pids", "cpu", "cpuacct", "freezer"} {
		dir, err := filepath.EvalSymlinks(filepath.Join(cgroupRoot, name))
		if err != nil || slices.Contains(dirs, dir) {
			continue
		}
		if typ := fsType(dir); typ == unix.CGROUP_SUPER_MAGIC || typ == unix.CGROUP2_SUPER_MAGIC {
			dirs = append(dirs, dir)
		}
	}
	if fsType(cgroupRoot) == unix.CGROUP2_SUPER_MAGIC {
		dirs = append(dirs, cgroupRoot)
	}
	return dirs
}

// CgroupParent returns a cgroup parent name unique to the test, and
// removes that parent in every hierarchy when the test ends, failing the
// test if something of it could not be removed.
func CgroupParent(t testing.TB) string {
	t.Helper()
	parent := "tgtest-" + CgroupName(t)
	t.Cleanup(func() {
		for _, hier := range CgroupHierarchies(t) {
			if err := RemoveCgroupTree(filepath.Join(hier, parent)); err != nil {
				t.Errorf("remove the test's cgroup parent: %v", err)
			}
		}
	})
	return parent
}

// CgroupTree lists dir and the directories below it, top down; a
// missing dir holds nothing.
func CgroupTree(dir string) ([]string, error) {
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

// RemoveCgroupTree kills what runs below dir, then removes dir and
// what is below it, deepest first, retrying briefly while killed tasks
// still count as members. A failed test leaves nothing behind.
func RemoveCgroupTree(dir string) error {
	dirs, err := CgroupTree(dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range slices.Backward(dirs) {
		for {
			killMembers(d)
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

// killMembers SIGKILLs every process dir lists.
func killMembers(dir string) {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
