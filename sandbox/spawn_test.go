//go:build linux

package sandbox

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestSpawnIntoCgroup: bwrap's spawner forks the child straight into the
// execution's cgroup2 directory, so it needs no move there, and says so.
func TestSpawnIntoCgroup(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	g, err := l.cgroups.Create(sandboxtest.CgroupName(t), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	if g.Unified() == "" {
		sandboxtest.Unavailable(t, "no cgroup2 directory on this host (%+v)", l.cgroups.Info())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	child, err := execSpawner{}.spawn(t.Context(), spawnRequest{path: "/bin/cat", args: []string{"cat", "/proc/self/cgroup"},
		files: []*os.File{nil, w, w}, cgroup: g.Unified()})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	if ws, _, err := child.wait(); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("cat: %v, %v: %s", ws, err, out)
	}
	if child.cgroup() != g.Unified() {
		t.Errorf("spawned says it was forked into %q, want %q", child.cgroup(), g.Unified())
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok && (path == "/" || !strings.HasSuffix(g.Unified(), path)) {
			t.Errorf("born in %s, want %s", path, g.Unified())
		}
	}
	if !strings.Contains(string(out), "0::/") {
		t.Errorf("no cgroup2 line in %q", out)
	}
}
