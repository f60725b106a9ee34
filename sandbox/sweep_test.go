//go:build linux

package sandbox

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// cgroupTestCrash lays out, under parent in every hierarchy, what a
// crashed instance leaves: an execution without a tenant, with a live
// sleep in it, and a tenant with one execution. It returns the
// directories made and the sleep, which the caller must reap.
func cgroupTestCrash(t *testing.T, parent string) ([]string, *exec.Cmd) {
	t.Helper()
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill() })
	var made []string
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		execDir := filepath.Join(hier, parent, "x00000000000000aa")
		tenant := filepath.Join(hier, parent, "tenant-gone")
		for _, dir := range []string{filepath.Join(hier, parent), execDir, tenant, filepath.Join(tenant, "x00000000000000bb")} {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				t.Fatalf("make %s: %v", dir, err)
			}
		}
		made = append(made, execDir, tenant, filepath.Join(tenant, "x00000000000000bb"))
		if err := os.WriteFile(filepath.Join(execDir, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
			t.Fatalf("move the sleep into %s: %v", execDir, err)
		}
	}
	if len(made) == 0 {
		t.Skip("no cgroup hierarchy to leave anything in")
	}
	return made, sleep
}

// cgroupTestUnrelated makes directories that are no business of the
// sweep: a sibling of the parent and a child of it, both inside every
// hierarchy's root. They are removed when the test ends.
func cgroupTestUnrelated(t *testing.T, parent string) []string {
	t.Helper()
	var dirs []string
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		sibling := filepath.Join(hier, parent+"-other")
		for _, dir := range []string{sibling, filepath.Join(sibling, "x00000000000000cc")} {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("make %s: %v", dir, err)
			}
			dirs = append(dirs, dir)
		}
		t.Cleanup(func() {
			if err := sandboxtest.RemoveCgroupTree(sibling); err != nil {
				t.Errorf("remove %s: %v", sibling, err)
			}
		})
	}
	return dirs
}

func TestSweepRemovesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	parent := sandboxtest.CgroupParent(t)
	made, sleep := cgroupTestCrash(t, parent)
	unrelated := cgroupTestUnrelated(t, parent)
	var logs sandboxtest.SyncBuffer
	l := cgroupTestLauncher(t, Config{CgroupParent: parent, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})

	got, err := l.SweepCgroups()
	if err != nil {
		t.Fatalf("SweepCgroups: %v", err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(got.Removed)), slices.Sorted(slices.Values(made))) {
		t.Errorf("Removed = %q, want %q", got.Removed, made)
	}
	if got.Killed != 1 {
		t.Errorf("Killed = %d, want 1 (the sleep)", got.Killed)
	}
	if err := cgroupWait(t, sleep, 10*time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the sleep left running in a stale cgroup ended with %v, want killed", err)
	}
	for _, dir := range made {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the sweep (stat: %v)", dir, err)
		}
		if n := strings.Count(logs.String(), `"dir":"`+dir+`"`); n != 1 {
			t.Errorf("%d log lines name %s, want 1", n, dir)
		}
	}
	for _, dir := range append(unrelated, filepath.Dir(made[0])) {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("the sweep removed %s, which is not its own: %v", dir, err)
		}
	}
	if again, err := l.SweepCgroups(); err != nil || len(again.Removed) != 0 {
		t.Errorf("second sweep = %+v, %v; want nothing left to remove", again, err)
	}
}

func TestSweepRefusesWhileAnotherInstanceRuns(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	parent := sandboxtest.CgroupParent(t)
	running := cgroupTestLauncher(t, Config{CgroupParent: parent})
	r := startHeld(t, running, Policy{Command: sh("echo held; read x")})
	restarted := cgroupTestLauncher(t, Config{CgroupParent: parent})

	if got, err := restarted.SweepCgroups(); !errors.Is(err, ErrCgroupsInUse) || len(got.Removed) != 0 {
		t.Errorf("sweep beside a running instance = %+v, %v; want ErrCgroupsInUse and nothing removed", got, err)
	}
	if exit, ok := waitDone(r, 500*time.Millisecond); ok {
		t.Fatalf("the running instance's execution ended during a refused sweep: %s", exit)
	}
	r.Stdin().Write([]byte("\n"))
	if exit := r.Wait(); !exit.Success() {
		t.Errorf("the running instance's execution: %s", exit)
	}
	running.Close()
	// The closed lock can live on for a moment in a child another test of
	// this process is forking: a copy of every descriptor until it execs.
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err = restarted.SweepCgroups(); !errors.Is(err, ErrCgroupsInUse) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("sweep once the other instance closed: %v", err)
	}
}

func TestSweepOnlyBeforeTheFirstStart(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	l := cgroupTestLauncher(t, Config{})
	if r := runOn(t, l, Policy{Command: []string{"true"}}); !r.exit.Success() {
		t.Fatalf("run: %v", r)
	}
	if _, err := l.SweepCgroups(); !errors.Is(err, ErrSweepAfterStart) {
		t.Errorf("sweep after a start = %v, want ErrSweepAfterStart", err)
	}
}

// waitDone reports p's exit if it ends within d.
func waitDone(p *Process, d time.Duration) (Exit, bool) {
	select {
	case <-p.Done():
		return p.Wait(), true
	case <-time.After(d):
		return Exit{}, false
	}
}

// crashHelperEnv makes TestCrashHelperInstance act as a server that is
// then killed; its value is the cgroup parent, and crashWorkspaceEnv's
// the workspace, which the killed process could not remove itself.
const (
	crashHelperEnv    = "TERMGATE_TEST_CRASH_PARENT"
	crashWorkspaceEnv = "TERMGATE_TEST_CRASH_WORKSPACE"
)

// TestCrashHelperInstance is not a test of its own: run by
// TestSweepAfterKill9 in a child process, it starts an execution with a
// tenant and one without, says so, and waits to be killed.
func TestCrashHelperInstance(t *testing.T) {
	parent := os.Getenv(crashHelperEnv)
	if parent == "" {
		t.Skip("helper of TestSweepAfterKill9")
	}
	l, err := NewLauncher(Config{CgroupParent: parent, TenantLimits: Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", ""} {
		if _, err := l.Start(t.Context(), Policy{Command: []string{"sleep", "300"}, Workspace: os.Getenv(crashWorkspaceEnv), Tenant: tenant, Limits: Limits{Pids: 16}}, Stdio{}); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("started\n")
	time.Sleep(time.Minute) // killed long before
}

func TestSweepAfterKill9(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	needLauncher(t)
	parent := sandboxtest.CgroupParent(t)
	var out sandboxtest.SyncBuffer
	server := exec.Command(os.Args[0], "-test.run=^TestCrashHelperInstance$", "-test.count=1")
	server.Env = append(os.Environ(), crashHelperEnv+"="+parent, crashWorkspaceEnv+"="+sandboxtest.Dir(t))
	server.Stdout, server.Stderr = &out, &out
	if err := server.Start(); err != nil {
		t.Fatalf("start the instance to crash: %v", err)
	}
	t.Cleanup(func() { _ = server.Process.Kill() })
	waitFor(t, &out, "started")
	var left []string
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		dirs, err := sandboxtest.CgroupTree(filepath.Join(hier, parent))
		if err != nil {
			t.Fatal(err)
		}
		if len(dirs) > 0 {
			left = append(left, dirs[1:]...) // the parent itself stays
		}
	}
	if err := server.Process.Kill(); err != nil {
		t.Fatalf("kill -9 the instance: %v", err)
	}
	server.Wait()

	l := cgroupTestLauncher(t, Config{CgroupParent: parent})
	got, err := l.SweepCgroups()
	if err != nil {
		t.Fatalf("SweepCgroups after kill -9: %v", err)
	}
	// Two executions, one in the tenant's directory, in every hierarchy
	// they used: at least the cgroup2 tree and pids.
	if len(left) < 6 || !slices.Equal(slices.Sorted(slices.Values(got.Removed)), slices.Sorted(slices.Values(left))) {
		t.Errorf("Removed = %q, want what the killed instance left: %q", got.Removed, left)
	}
	t.Logf("after kill -9: removed %d directories, killed %d processes", len(got.Removed), got.Killed)
}
