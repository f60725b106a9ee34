//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// spawnerCase is one of bwrap's spawners with the launcher it serves.
type spawnerCase struct {
	name string
	s    spawner
	l    *Launcher
}

// bothSpawners returns the launcher's own spawner and a keeper's.
func bothSpawners(t *testing.T) []spawnerCase {
	l := needLauncher(t)
	kl := keeperLauncher(t, keeperDir(t))
	return []spawnerCase{{"exec", execSpawner{}, l}, {"keeper", keeperSpawner{kl.keeper}, kl}}
}

// TestSpawnIntoCgroup: both of bwrap's spawners, the launcher's own and
// the keeper's, fork the child straight into the execution's cgroup2
// directory, so it needs no move there, and say so.
func TestSpawnIntoCgroup(t *testing.T) {
	t.Parallel()
	spawners := bothSpawners(t)
	for _, tc := range spawners {
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
			if !slices.Equal(child.born(), []string{g.Unified()}) {
				t.Errorf("spawned says it was born in %q, want %q", child.born(), g.Unified())
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

// TestSpawnBornInV1: with ceilings in cgroup v1 hierarchies, both of
// bwrap's spawners have it born in every directory of its group, v1 ones
// included (the forking thread enters them alone), so that none needs a
// move, and say so; the forking thread is back in its own groups after
// the spawn, and after a spawn that failed while it was inside.
func TestSpawnBornInV1(t *testing.T) {
	t.Parallel()
	spawners := bothSpawners(t)
	for _, tc := range spawners {
		t.Run(tc.name, func(t *testing.T) {
			g := v1Group(t, tc.l)
			out, child := spawnCat(t, tc.s, spawnRequest{key: "v1-" + tc.name, cgroup: g.Unified(), enter: g.V1(), cgroups: g.Dirs()})
			if born := child.born(); !sameSet(born, g.Dirs()) {
				t.Errorf("spawned says it was born in %q, want every directory %q", born, g.Dirs())
			}
			checkBornIn(t, out, g.V1())
			pid := os.Getpid()
			if tc.name == "keeper" {
				pid = tc.l.keeper.conn().Pid()
			}
			threadsHome(t, pid)
			req := spawnRequest{key: "v1-fail-" + tc.name, path: "/nonexistent/bwrap", args: []string{"bwrap"},
				cgroup: g.Unified(), enter: g.V1(), cgroups: g.Dirs(), files: []*os.File{devNull(t), devNull(t), devNull(t)}}
			if _, err := tc.s.spawn(t.Context(), req); err == nil {
				t.Fatal("a missing program started")
			}
			threadsHome(t, pid)
		})
	}
}

// TestSpawnV1Fallback: a directory the forking thread cannot enter is
// not reported as born in, so that the launcher moves bwrap there; the
// others still are.
func TestSpawnV1Fallback(t *testing.T) {
	t.Parallel()
	spawners := bothSpawners(t)
	for _, tc := range spawners {
		t.Run(tc.name, func(t *testing.T) {
			g := v1Group(t, tc.l)
			v1 := g.V1()
			// A v1 directory gone before the fork: entering it fails.
			gone := filepath.Join(filepath.Dir(v1[0]), sandboxtest.CgroupName(t)+"-gone")
			if err := os.Mkdir(gone, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			enter := append([]string{gone}, v1...)
			out, child := spawnCat(t, tc.s, spawnRequest{key: "v1fb-" + tc.name, cgroup: g.Unified(), enter: enter, cgroups: append(g.Dirs(), gone)})
			if born := child.born(); slices.Contains(born, gone) || !sameSet(born, g.Dirs()) {
				t.Errorf("spawned says it was born in %q, want %q and not %s", born, g.Dirs(), gone)
			}
			checkBornIn(t, out, v1)
		})
	}
}

// v1Group creates a group with every ceiling, in l's hierarchies, and
// skips the test when none of them lives in a cgroup v1 hierarchy.
func v1Group(t *testing.T, l *Launcher) *cgroup.Group {
	t.Helper()
	g, err := l.cgroups.Create(sandboxtest.CgroupName(t), cgroup.Limits{MemoryBytes: 256 << 20, Pids: minPids, CPUWeight: 100})
	if err != nil {
		sandboxtest.Unavailable(t, "no group with every ceiling: %v", err)
	}
	t.Cleanup(func() { g.Remove() })
	if len(g.V1()) == 0 {
		sandboxtest.Unavailable(t, "no ceiling in a cgroup v1 hierarchy on this host (%+v)", l.cgroups.Info())
	}
	return g
}

// checkBornIn checks that out, a /proc/PID/cgroup, places the process
// in each of the v1 directories dirs.
func checkBornIn(t *testing.T, out string, dirs []string) {
	t.Helper()
	for _, dir := range dirs {
		rel := "/" + filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir)
		found := false
		for line := range strings.SplitSeq(out, "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && parts[1] != "" && strings.HasSuffix(parts[2], rel) && strings.HasSuffix(dir, parts[2]) {
				found = true
			}
		}
		if !found {
			t.Errorf("not born in %s: /proc/self/cgroup is %q", dir, out)
		}
	}
}

// threadsHome checks that every thread of pid sits in the groups of the
// process's first thread: no forking thread stayed in an execution's.
func threadsHome(t *testing.T, pid int) {
	t.Helper()
	want, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		got, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/cgroup", pid, task.Name()))
		if err != nil {
			continue // a thread that just exited
		}
		if string(got) != string(want) {
			t.Errorf("thread %s of %d sits in\n%s\nnot in its process's\n%s", task.Name(), pid, got, want)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
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
	req.path, req.files = "/bin/cat", []*os.File{nil, w, w}
	if req.args == nil {
		req.args = []string{"cat", "/proc/self/cgroup"}
	}
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
