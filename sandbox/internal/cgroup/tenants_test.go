//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// testHierarchies lists the cgroup hierarchies mounted under the
// test root, found by filesystem type rather than by the code under test.
func testHierarchies(t testing.TB) []string {
	t.Helper()
	var dirs []string
	for _, name := range []string{"unified", "memory", "pids", "cpu", "cpuacct", "freezer"} {
		dir, err := filepath.EvalSymlinks(filepath.Join(testRoot, name))
		if err != nil || slices.Contains(dirs, dir) {
			continue
		}
		if typ := fsType(dir); typ == unix.CGROUP_SUPER_MAGIC || typ == unix.CGROUP2_SUPER_MAGIC {
			dirs = append(dirs, dir)
		}
	}
	if fsType := fsType(testRoot); fsType == unix.CGROUP2_SUPER_MAGIC {
		dirs = append(dirs, testRoot)
	}
	return dirs
}

// testParent returns a cgroup parent name unique to the test, and
// removes that parent in every hierarchy when the test ends, failing the
// test if something of it could not be removed.
func testParent(t testing.TB) string {
	t.Helper()
	parent := "tgtest-" + testName(t)
	t.Cleanup(func() {
		for _, hier := range testHierarchies(t) {
			if err := testRemoveTree(filepath.Join(hier, parent)); err != nil {
				t.Errorf("remove the test's cgroup parent: %v", err)
			}
		}
	})
	return parent
}

// testRemoveTree kills what runs below dir, then removes dir and
// what is below it, deepest first, retrying briefly while killed tasks
// still count as members. A failed test leaves nothing behind.
func testRemoveTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	killErr := (&Group{name: dir, dirs: dirs}).killEach()
	deadline := time.Now().Add(5 * time.Second)
	errs := []error{killErr}
	for _, d := range slices.Backward(dirs) {
		errs = append(errs, rmdir(d, deadline))
	}
	return errors.Join(errs...)
}

// testTenants returns a tenant set on the real host under a parent
// of the test's own.
func testTenants(t *testing.T, lim Limits) *Tenants {
	t.Helper()
	sandboxtest.NeedRoot(t)
	h := detect(testRoot)
	h.parent = testParent(t)
	return NewTenants(h, lim)
}

func TestTenantsConcurrentStarts(t *testing.T) {
	t.Parallel()
	ts := testTenants(t, Limits{MemoryBytes: 256 << 20, Pids: 100, CPUWeight: 100})
	require(t, ts.host.Info().Memory && ts.host.Info().Pids && ts.host.Info().CPU, "memory, pids and cpu", ts.host.Info())
	// Rounds of 16 concurrent first starts and last ends: each round makes
	// the tenant's directories and removes them again, racing itself.
	for round := range 5 {
		groups := make([]*Group, 16)
		errs := make([]error, 16)
		var wg sync.WaitGroup
		for i := range groups {
			wg.Go(func() { groups[i], errs[i] = ts.Create("a", fmt.Sprintf("x%d-%d", round, i), Limits{}) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, start %d: %v", round, i, err)
			}
		}
		for _, c := range groups {
			wg.Go(func() {
				if err := c.Remove(); err != nil {
					t.Errorf("remove: %v", err)
				}
			})
		}
		wg.Wait()
		for _, hier := range ts.host.hierarchies() {
			if _, err := os.Stat(filepath.Join(hier, ts.base("a"))); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("round %d: tenant directory left in %s (stat: %v)", round, hier, err)
			}
		}
	}
}

func TestTenantsLimitsRewritten(t *testing.T) {
	t.Parallel()
	ts := testTenants(t, Limits{MemoryBytes: 64 << 20, CPUWeight: 100})
	h := ts.host
	if h.v1["memory"] == "" || h.v1["pids"] == "" || h.v1["cpu"] == "" {
		require(t, false, "v1 memory, pids and cpu hierarchies", h.Info())
	}
	// An earlier configuration left the tenant's directories with lower
	// ceilings, and a pids ceiling it no longer asks for.
	old := map[string][][2]string{
		"memory": {{"memory.limit_in_bytes", "33554432"}, {"memory.memsw.limit_in_bytes", "33554432"}},
		"pids":   {{"pids.max", "5"}},
		"cpu":    {{"cpu.shares", "2"}},
	}
	for ctl, files := range old {
		dir := filepath.Join(h.v1[ctl], ts.base("a"))
		if _, err := ensure(h.v1[ctl], ts.base("a")); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := writeIfExists(dir, f[0], f[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := ts.Create("a", "x1", Limits{})
	if err != nil {
		t.Fatalf("create under the adopted tenant directory: %v", err)
	}
	want := map[string][][2]string{
		"memory": {{"memory.limit_in_bytes", "67108864"}, {"memory.memsw.limit_in_bytes", "67108864"}},
		"pids":   {{"pids.max", "max"}},
		"cpu":    {{"cpu.shares", "1024"}},
	}
	for ctl, files := range want {
		dir := filepath.Join(h.v1[ctl], ts.base("a"))
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(dir, f[0]))
			if errors.Is(err, fs.ErrNotExist) && f[0] == "memory.memsw.limit_in_bytes" {
				continue // no swap accounting
			}
			if got := strings.TrimSpace(string(data)); err != nil || got != f[1] {
				t.Errorf("%s/%s = %q (%v), want %q", dir, f[0], got, err, f[1])
			}
		}
	}
	if err := c.Remove(); err != nil {
		t.Errorf("remove: %v", err)
	}
}
