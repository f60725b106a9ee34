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

// TestSpawnIntoCgroup: both of bwrap's spawners, the launcher's own and
// the keeper's, fork the child straight into the execution's cgroup2
// directory, so it needs no move there, and say so.
func TestSpawnIntoCgroup(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	kl := keeperLauncher(t, keeperDir(t))
	for _, tc := range []struct {
		name string
		s    spawner
		l    *Launcher
	}{
		{"exec", execSpawner{}, l},
		{"keeper", keeperSpawner{kl.keeper}, kl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.l.cgroups.Create(sandboxtest.CgroupName(t), cgroup.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Remove() })
			if g.Unified() == "" {
				sandboxtest.Unavailable(t, "no cgroup2 directory on this host (%+v)", tc.l.cgroups.Info())
			}
			out, child := spawnCat(t, tc.s, spawnRequest{key: "into-" + tc.name, cgroup: g.Unified(), cgroups: g.Dirs()})
			if child.cgroup() != g.Unified() {
				t.Errorf("spawned says it was forked into %q, want %q", child.cgroup(), g.Unified())
			}
			for line := range strings.SplitSeq(out, "\n") {
				if path, ok := strings.CutPrefix(line, "0::"); ok && (path == "/" || !strings.HasSuffix(g.Unified(), path)) {
					t.Errorf("born in %s, want %s", path, g.Unified())
				}
			}
			if !strings.Contains(out, "0::/") {
				t.Errorf("no cgroup2 line in %q", out)
			}
		})
	}
}

// spawnCat spawns cat /proc/self/cgroup as req and returns its output,
// once it exited and (from a keeper) was forgotten.
func spawnCat(t *testing.T, s spawner, req spawnRequest) (string, spawned) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.path, req.args, req.files = "/bin/cat", []string{"cat", "/proc/self/cgroup"}, []*os.File{nil, w, w}
	if _, ok := s.(keeperSpawner); ok {
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		req.files[0] = null // the keeper takes no nil descriptor
	}
	child, err := s.spawn(t.Context(), req)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	if ws, _, err := child.wait(); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("cat: %v, %v: %s", ws, err, out)
	}
	if kc, ok := child.(*keeperChild); ok {
		if err := kc.c.Forget(req.key); err != nil {
			t.Fatal(err)
		}
	}
	return string(out), child
}
