//go:build linux

package keeper

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestSpawnInto: a child spawned with Into is forked straight into that
// cgroup2 directory (it needs no move, and the reply says so); a
// directory the kernel cannot fork into (a cgroup v1 one) falls back to
// a fork where the keeper is, unplaced.
func TestSpawnInto(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "cgroups need root")
	}
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	parent := sandboxtest.CgroupParent(t)
	var unified, v1 string
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		var st unix.Statfs_t
		if unix.Statfs(hier, &st) != nil {
			continue
		}
		dir := filepath.Join(hier, parent, "into")
		if st.Type == unix.CGROUP2_SUPER_MAGIC && unified == "" {
			unified = dir
		} else if st.Type == unix.CGROUP_SUPER_MAGIC && v1 == "" {
			v1 = dir
		} else {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if unified == "" {
		sandboxtest.Unavailable(t, "no cgroup2 hierarchy")
	}
	sp, out := spawnCat(t, c, "placed", unified)
	if !sp.Placed {
		t.Errorf("spawn into %s: not placed", unified)
	}
	rel := "0::/" + parent + "/into\n"
	if !strings.Contains(out, rel) {
		t.Errorf("forked into %s, its /proc/self/cgroup is %q, want the line %q", unified, out, rel)
	}
	if v1 == "" {
		return
	}
	sp, out = spawnCat(t, c, "v1", v1)
	if sp.Placed || !strings.Contains(out, "0::/") {
		t.Errorf("spawn into v1 %s: placed %v, /proc/self/cgroup %q", v1, sp.Placed, out)
	}
}

// spawnCat spawns cat /proc/self/cgroup with Into dir and returns what
// it wrote.
func spawnCat(t *testing.T, c *Client, key, dir string) (Spawned, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sp, err := c.Spawn(t.Context(), SpawnRequest{Key: key, Path: "/bin/cat", Args: []string{"cat", "/proc/self/cgroup"},
		Files: []*os.File{devNull(t), w, w}, Cgroups: []string{dir}, Into: dir})
	w.Close()
	if err != nil {
		t.Fatalf("spawn %s into %s: %v", key, dir, err)
	}
	out, _ := io.ReadAll(r)
	if ws := <-c.Exit(key); ws.ExitStatus() != 0 {
		t.Fatalf("cat in %s: %v: %s", dir, ws, out)
	}
	if err := c.Forget(key); err != nil {
		t.Fatal(err)
	}
	return sp, string(out)
}
