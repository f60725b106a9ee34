//go:build linux

package keeper

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/forker"
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

// TestSpawnEnter: a child spawned with Enter is born in those cgroup v1
// directories (the forking thread entered them, and left), and the reply
// says so; a directory it cannot enter is left out.
func TestSpawnEnter(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "cgroups need root")
	}
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	parent := sandboxtest.CgroupParent(t)
	var v1 string
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		var st unix.Statfs_t
		if unix.Statfs(hier, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC && strings.HasSuffix(hier, "/memory") {
			v1 = filepath.Join(hier, parent, "enter")
		}
	}
	if v1 == "" {
		sandboxtest.Unavailable(t, "no cgroup v1 memory hierarchy")
	}
	if err := os.MkdirAll(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(filepath.Dir(v1), "gone")
	rel := ":memory:/" + parent + "/enter\n"
	sp, out := spawnCatIn(t, c, "entered", SpawnRequest{Cgroups: []string{gone, v1}, Enter: []string{gone, v1}})
	if !slices.Equal(sp.Entered, []string{v1}) || !strings.Contains(out, rel) {
		t.Errorf("spawn entering %s: entered %q, /proc/self/cgroup %q, want the line %q", v1, sp.Entered, out, rel)
	}
}

// spawnCat spawns cat /proc/self/cgroup with Into dir and returns what
// it wrote.
func spawnCat(t *testing.T, c *Client, key, dir string) (Spawned, string) {
	t.Helper()
	return spawnCatIn(t, c, key, SpawnRequest{Cgroups: []string{dir}, Into: dir})
}

// spawnCatIn spawns cat /proc/self/cgroup with req's cgroups and returns
// what it wrote.
func spawnCatIn(t *testing.T, c *Client, key string, req SpawnRequest) (Spawned, string) {
	t.Helper()
	return spawnCatFile(t, c, key, "/proc/self/cgroup", req)
}

// spawnCatFile spawns cat of file as req asks and returns what it wrote.
func spawnCatFile(t *testing.T, c *Client, key, file string, req SpawnRequest) (Spawned, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.Key, req.Path, req.Args, req.Files = key, "/bin/cat", []string{"cat", file}, []*os.File{devNull(t), w, w}
	sp, err := c.Spawn(t.Context(), req)
	w.Close()
	if err != nil {
		t.Fatalf("spawn %s (%+v): %v", key, req, err)
	}
	out, _ := io.ReadAll(r)
	if ws := <-c.Exit(key); ws.ExitStatus() != 0 {
		t.Fatalf("cat %s (%+v): %v: %s", file, req, ws, out)
	}
	if err := c.Forget(key); err != nil {
		t.Fatal(err)
	}
	return sp, string(out)
}

// stuckMover claims to enter every directory and cannot leave; it moves
// no thread.
type stuckMover struct{}

func (stuckMover) Enter(dirs []string) []string { return dirs }
func (stuckMover) Return([]string) error        { return errors.New("cannot leave") }

// TestForkStranded: a forking thread that cannot leave the directories
// it entered fails the spawn with its child killed and reaped, and
// forks nothing after.
func TestForkStranded(t *testing.T) {
	null := devNull(t)
	fds := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	m := &message{Path: "/bin/sleep", Args: []string{"sleep", "60"}, Cgroups: []string{"/sys/fs/cgroup/memory/x"}, Enter: []string{"/sys/fs/cgroup/memory/x"}}
	// The stranded thread stays parked, locked (sandboxtest.Forker).
	f := forker.New(forker.Config{Mover: func() (v1thread.Mover, error) { return stuckMover{}, nil }, Idle: time.Minute})
	var errs [2]error
	f.Do(func(th *forker.Thread) {
		errs = [2]error{forkOn(th, m, fds).err, forkOn(th, m, fds).err}
	})
	for i, err := range errs {
		if !errors.Is(err, v1thread.ErrStranded) {
			t.Errorf("fork %d from a stranded thread: %v, want ErrStranded", i+1, err)
		}
	}
	if kids := children(t); kids != "" {
		t.Errorf("children left: %s", kids)
	}
}

// children lists this process's children of every thread.
func children(t *testing.T) string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, task := range tasks {
		b, _ := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		all = append(all, strings.Fields(string(b))...)
	}
	return strings.Join(all, " ")
}
