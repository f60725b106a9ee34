//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// testTenants returns a tenant set on the real host under a parent
// of the test's own.
func testTenants(t *testing.T, lim Limits) *Tenants {
	t.Helper()
	sandboxtest.NeedRoot(t)
	h := detect(testRoot)
	h.parent = sandboxtest.CgroupParent(t)
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
