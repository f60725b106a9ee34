//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

const testRoot = "/sys/fs/cgroup"

// require skips (or fails in CI) when the host lacks a feature.
func require(t testing.TB, have bool, what string, info Info) {
	t.Helper()
	if !have {
		sandboxtest.Unavailable(t, "host cgroups (%+v) cannot enforce %s", info, what)
	}
}

// testCreate creates a group on the real host and removes it when the
// test ends, whatever happened.
func testCreate(t *testing.T, h *Host, lim Limits) *Group {
	t.Helper()
	c, err := h.Create(sandboxtest.CgroupName(t), lim)
	if err != nil {
		t.Fatalf("create(%+v): %v", lim, err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Errorf("cleanup remove: %v", err)
		}
	})
	return c
}

// startHeld starts `sh -c script` whose script first does `read x`,
// moves it into c, and returns a writer that releases it. Adding before
// release means every fork of the script happens inside the group.
func startHeld(t *testing.T, c *Group, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read x; "+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("stdin pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sh: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := c.Add(cmd.Process.Pid); err != nil {
		t.Fatalf("add(%d): %v", cmd.Process.Pid, err)
	}
	return cmd, stdin
}

// wait waits for cmd for at most d; on timeout it kills the process
// so the waiting goroutine, owned here, always ends before we return.
func wait(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
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

// assertGone fails unless every directory of c has been removed.
func assertGone(t *testing.T, c *Group) {
	t.Helper()
	if len(c.dirs) == 0 {
		t.Fatal("group had no directories to remove")
	}
	for _, dir := range c.dirs {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists after remove (stat err %v)", dir, err)
		}
		if _, err := os.Stat(filepath.Dir(dir)); err != nil {
			t.Errorf("shared parent %s was removed: %v", filepath.Dir(dir), err)
		}
	}
}

// mountedLayout reads /proc/self/mountinfo, an oracle independent of
// detect, and returns the expected version and v1 controllers.
func mountedLayout(t *testing.T) (string, map[string]bool) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("open mountinfo: %v", err)
	}
	defer f.Close()
	var v2At string
	v1 := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		mountPoint, fsType, superOpts, ok := parseMountinfo(sc.Text())
		if !ok {
			continue
		}
		switch {
		case fsType == "cgroup2":
			v2At = mountPoint
		case fsType == "cgroup" && strings.HasPrefix(mountPoint, testRoot+"/"):
			for _, opt := range strings.Split(superOpts, ",") {
				v1[opt] = true
			}
		}
	}
	switch {
	case v2At == testRoot:
		return "v2", v1
	case v2At != "" && len(v1) > 0:
		return "hybrid", v1
	case v2At != "":
		return "v2", v1
	case len(v1) > 0:
		return "v1", v1
	}
	return "none", v1
}

// parseMountinfo splits one mountinfo line: fields before " - " hold
// the mount point (5th), fields after it the type and super options.
func parseMountinfo(line string) (mountPoint, fsType, superOpts string, ok bool) {
	pre, post, found := strings.Cut(line, " - ")
	preF, postF := strings.Fields(pre), strings.Fields(post)
	if !found || len(preF) < 5 || len(postF) < 3 {
		return "", "", "", false
	}
	return preF[4], postF[0], postF[2], true
}

func TestDetectThisHost(t *testing.T) {
	t.Parallel()
	wantVersion, v1 := mountedLayout(t)
	info := detect(testRoot).Info()
	if info.Version != wantVersion {
		t.Fatalf("Info().Version = %q, mountinfo says %q (info %+v)", info.Version, wantVersion, info)
	}
	if wantVersion != "hybrid" {
		t.Logf("host is %s, not hybrid: only the version is checked (%+v)", wantVersion, info)
		return
	}
	// On a hybrid host the v1 mounts carry memory and pids, and cgroup2 or
	// the v1 freezer provides the group kill.
	want := Info{Version: "hybrid", Memory: v1["memory"], Pids: v1["pids"], CPU: v1["cpu"], Kill: true}
	if info != want {
		t.Errorf("Info() = %+v, want %+v", info, want)
	}
	if !info.Memory || !info.Pids || !info.Kill {
		t.Errorf("hybrid host should enforce memory, pids and kill: %+v", info)
	}
}

func TestDetectNone(t *testing.T) {
	t.Parallel()
	// A plain directory imitating the layout must not pass for cgroupfs.
	root := t.TempDir()
	for _, d := range []string{"unified", "memory", "pids"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := detect(root).Info()
	if want := (Info{Version: "none"}); got != want {
		t.Errorf("Info() = %+v, want %+v", got, want)
	}
}

func TestUnenforceable(t *testing.T) {
	t.Parallel()
	h := detect(t.TempDir())
	tests := []struct {
		name    string
		lim     Limits
		ceiling string
	}{
		{"memory", Limits{MemoryBytes: 32 << 20}, "memory"},
		{"pids", Limits{Pids: 5}, "pids"},
		{"cpu", Limits{CPUWeight: 100}, "cpu"},
		{"all", Limits{MemoryBytes: 1 << 30, Pids: 64, CPUWeight: 50}, "memory, pids, cpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := h.Create("unenforceable", tt.lim)
			if !errors.Is(err, ErrUnenforceable) {
				t.Fatalf("create(%+v) = %v, %v; want ErrUnenforceable", tt.lim, c, err)
			}
			if !strings.Contains(err.Error(), tt.ceiling) {
				t.Errorf("error %q does not name the %s ceiling", err, tt.ceiling)
			}
		})
	}
}

func TestNoLimitsOnBareHost(t *testing.T) {
	t.Parallel()
	// Without cgroups and without ceilings the group is empty but usable,
	// so the launcher needs no special case.
	c, err := detect(t.TempDir()).Create("bare", Limits{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := c.Add(os.Getpid()); err != nil {
		t.Errorf("add: %v", err)
	}
	if got := c.Pids(); len(got) != 0 {
		t.Errorf("pids() = %v, want none", got)
	}
	if err := c.Kill(); err != nil {
		t.Errorf("kill: %v", err)
	}
	if err := c.Remove(); err != nil {
		t.Errorf("remove: %v", err)
	}
	if got := c.Events(); got != (Events{}) {
		t.Errorf("events() = %+v, want zero", got)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	h := detect(t.TempDir())
	tests := []struct {
		name string
		lim  Limits
	}{
		{"", Limits{}},
		{".", Limits{}},
		{"..", Limits{}},
		{"a/b", Limits{}},
		{"../escape", Limits{}},
		{"space name", Limits{}},
		{"nul\x00", Limits{}},
		{"é", Limits{}},
		{strings.Repeat("a", 65), Limits{}},
		{"ok", Limits{MemoryBytes: -1}},
		{"ok", Limits{Pids: -1}},
		{"ok", Limits{CPUWeight: -1}},
		{"ok", Limits{CPUWeight: 10001}},
	}
	for _, tt := range tests {
		if _, err := h.Create(tt.name, tt.lim); err == nil || errors.Is(err, ErrUnenforceable) {
			t.Errorf("create(%q, %+v) = %v, want an invalid-input error", tt.name, tt.lim, err)
		}
	}
	for _, name := range []string{"a", "exec-1.2_3", "...", strings.Repeat("Z", 64)} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
}

func FuzzName(f *testing.F) {
	for _, s := range []string{"a", ".", "..", "a/b", "exec-1", strings.Repeat("x", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		// An accepted name must stay exactly one element below the parent.
		parent := "/sys/fs/cgroup/x/termgate"
		joined := filepath.Join(parent, name)
		if filepath.Dir(joined) != parent || filepath.Base(joined) != name {
			t.Errorf("accepted name %q escapes %s: %s", name, parent, joined)
		}
	})
}

func TestCPUShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		weight int
		want   int64
	}{
		{1, 10}, {100, 1024}, {50, 512}, {10000, 102400},
	}
	for _, tt := range tests {
		if got := cpuShares(tt.weight); got != tt.want {
			t.Errorf("cpuShares(%d) = %d, want %d", tt.weight, got, tt.want)
		}
	}
}

func TestWritesLimits(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	h := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	info := h.Info()
	tests := []struct {
		name  string
		have  bool
		lim   Limits
		files map[string]string // either version's file, value read back
	}{
		{"memory", info.Memory, Limits{MemoryBytes: 64 << 20}, map[string]string{
			"memory.max": "67108864", "memory.limit_in_bytes": "67108864",
		}},
		{"pids", info.Pids, Limits{Pids: 7}, map[string]string{"pids.max": "7"}},
		{"cpu", info.CPU, Limits{CPUWeight: 50}, map[string]string{
			"cpu.weight": "50", "cpu.shares": "512",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require(t, tt.have, tt.name, info)
			c, err := h.Create(sandboxtest.CgroupName(t), tt.lim)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = c.Remove() })
			assertLimit(t, c, tt.files)
			if tt.name == "memory" {
				assertNoSwap(t, c)
			}
			if err := c.Remove(); err != nil {
				t.Fatalf("remove: %v", err)
			}
			assertGone(t, c)
			if err := c.Remove(); err != nil {
				t.Errorf("second remove: %v", err)
			}
		})
	}
}

// assertLimit finds, in any directory of c, one of files and checks
// the value the kernel reports.
func assertLimit(t *testing.T, c *Group, files map[string]string) {
	t.Helper()
	for _, dir := range c.dirs {
		for file, want := range files {
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				continue
			}
			if got := strings.TrimSpace(string(data)); got != want {
				t.Errorf("%s/%s = %q, want %q", dir, file, got, want)
			}
			return
		}
	}
	t.Errorf("none of %v found in %v", slices.Sorted(maps.Keys(files)), c.dirs)
}

// assertNoSwap checks that swap cannot extend the memory ceiling,
// where the host accounts swap at all.
func assertNoSwap(t *testing.T, c *Group) {
	t.Helper()
	for _, dir := range c.dirs {
		if data, err := os.ReadFile(filepath.Join(dir, "memory.swap.max")); err == nil {
			if got := strings.TrimSpace(string(data)); got != "0" {
				t.Errorf("memory.swap.max = %q, want 0", got)
			}
		}
		memsw, err1 := os.ReadFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
		limit, err2 := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
		if err1 == nil && err2 == nil && string(memsw) != string(limit) {
			t.Errorf("memsw limit %q != memory limit %q", memsw, limit)
		}
	}
}

func TestKillChild(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	h := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	require(t, h.Info().Kill, "a group kill", h.Info())
	c := testCreate(t, h, Limits{})

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := c.Add(cmd.Process.Pid); err != nil {
		t.Fatalf("add: %v", err)
	}
	if got := c.Pids(); !slices.Contains(got, cmd.Process.Pid) {
		t.Fatalf("pids() = %v, want it to list %d", got, cmd.Process.Pid)
	}
	if err := c.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	err := wait(t, cmd, 5*time.Second)
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ProcessState.String() != "signal: killed" {
		t.Errorf("sleep ended with %v, want signal: killed", err)
	}
	if err := c.Kill(); err != nil {
		t.Errorf("second kill: %v", err)
	}
	if err := c.Remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	assertGone(t, c)
}

func TestPidsLimit(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	h := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	require(t, h.Info().Pids, "a pids ceiling", h.Info())
	c := testCreate(t, h, Limits{Pids: 5})

	cmd, stdin := startHeld(t, c, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait")
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("release sh: %v", err)
	}
	hits := poll(t, func() int64 { return c.Events().PidsMaxHits })
	if hits == 0 {
		t.Errorf("events().PidsMaxHits = 0 after forking 10 children under pids.max 5")
	}
	if n := len(c.Pids()); n > 5 {
		t.Errorf("%d processes in a group capped at 5", n)
	}
	if err := c.Remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	_ = wait(t, cmd, 5*time.Second)
	assertGone(t, c)
}

func TestMemoryOOM(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	h := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	require(t, h.Info().Memory, "a memory ceiling", h.Info())
	c := testCreate(t, h, Limits{MemoryBytes: 32 << 20})

	// tail keeps the last lines; input without a newline is one line that
	// grows until the ceiling stops it.
	cmd, stdin := startHeld(t, c, "head -c 200000000 /dev/zero | tail")
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("release sh: %v", err)
	}
	err := wait(t, cmd, 30*time.Second)
	if err == nil {
		t.Errorf("sh allocating 200 MB under a 32 MiB ceiling exited 0")
	}
	ev := c.Events()
	if ev.OOMKills == 0 {
		t.Errorf("events().OOMKills = 0 after exceeding the ceiling (%v)", err)
	}
	if ev.CPUUsage <= 0 {
		t.Errorf("events().CPUUsage = %v after copying data", ev.CPUUsage)
	}
	t.Logf("sh: %v; events: %+v", err, ev)
}

// poll returns f's first non-zero value, checking for at most 5s:
// counters move asynchronously to the process that triggers them.
func poll(t *testing.T, f func() int64) int64 {
	var v int64
	sandboxtest.Eventually(t, 5*time.Second, func() bool { v = f(); return v != 0 })
	return v
}

func TestKillV1Fallbacks(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	real := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	if len(real.v1) == 0 {
		// A pure v2 host never takes these paths, so even CI skips.
		t.Skip("no v1 hierarchies: the freezer and signal fallbacks do not apply")
	}
	// Hiding cgroup2 turns a hybrid host into a v1 one; hiding the freezer
	// too leaves only the signal loop.
	tests := []struct {
		name       string
		hide       []string
		wantFrozen bool
	}{
		{"freezer", nil, true},
		{"signals", []string{"freezer"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &Host{version: "v1", v1: maps.Clone(real.v1)}
			for _, ctl := range tt.hide {
				delete(h.v1, ctl)
			}
			if got := h.v1["freezer"] != ""; got != tt.wantFrozen {
				t.Skip("host has no v1 freezer")
			}
			c := testCreate(t, h, Limits{})
			if len(c.dirs) == 0 {
				t.Skip("no v1 freezer or cpuacct hierarchy to track processes")
			}
			cmd, stdin := startHeld(t, c, "for i in 1 2 3; do sleep 60 & done; wait")
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatalf("release sh: %v", err)
			}
			if n := poll(t, func() int64 { return int64(len(c.Pids())) / 4 }); n == 0 {
				t.Fatalf("pids() = %v, want sh and 3 sleeps", c.Pids())
			}
			if err := c.Kill(); err != nil {
				t.Fatalf("kill: %v", err)
			}
			_ = wait(t, cmd, 5*time.Second)
			if err := c.Remove(); err != nil {
				t.Fatalf("remove: %v", err)
			}
			assertGone(t, c)
		})
	}
}

// TestAddExcept: a process forked into the cgroup2 directory is moved
// into the group's other directories only.
func TestAddExcept(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	h := Detect(testRoot, sandboxtest.CgroupParent(t)) // not a real server's parent
	info := h.Info()
	require(t, info.Version == "hybrid" && info.Pids, "pids in v1 beside a cgroup2 directory", info)
	c := testCreate(t, h, Limits{Pids: 64})
	if c.Unified() == "" || len(c.Dirs()) < 2 {
		t.Fatalf("want a cgroup2 directory and another, have %v", c.Dirs())
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := c.AddExcept(cmd.Process.Pid, []string{c.Unified()}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range c.Dirs() {
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if in := len(strings.TrimSpace(string(procs))) > 0; in != (dir != c.Unified()) {
			t.Errorf("%s holds %q", dir, procs)
		}
	}
}

// TestDetectReadOnly: a hierarchy mounted read-only, as a container
// runtime mounts the cgroups of an unprivileged container, counts as
// absent, so a ceiling that needs it is refused up front.
func TestDetectReadOnly(t *testing.T) {
	sandboxtest.NeedRoot(t)
	src := filepath.Join(testRoot, "pids")
	if fsType(src) != unix.CGROUP_SUPER_MAGIC {
		t.Skip("no v1 pids hierarchy at " + src)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "pids")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if got := detect(root).Info(); !got.Pids {
		t.Fatalf("writable bind of %s: %+v, want pids", src, got)
	}
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	if got := detect(root).Info(); got.Pids || got.Version != "none" {
		t.Errorf("read-only bind of %s: %+v, want no pids and version none", src, got)
	}
}
