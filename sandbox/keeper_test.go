//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// Roles of the test binary run again by the tests: the keeper itself, and
// the detached starter that runs it, so no test waits for it.
const (
	envKeeperDir   = "TERMGATE_TEST_KEEPER_DIR"
	envKeeperStart = "TERMGATE_TEST_KEEPER_START"
)

// runKeeperRole runs the role the environment asks for, if any, and
// reports whether it did: TestMain then exits.
func runKeeperRole() bool {
	dir := os.Getenv(envKeeperDir)
	switch {
	case dir == "":
		return false
	case os.Getenv(envKeeperStart) != "":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envKeeperStart+"=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "start keeper:", err)
			os.Exit(1)
		}
		os.Exit(0) // the keeper is reparented: nobody waits for it
	}
	err := ServeKeeper(context.Background(), Config{StateDir: dir, OrphanGrace: time.Minute, KillGrace: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// startTestKeeper is a Config.StartKeeper: the test binary, twice
// re-executed, serving dir.
func startTestKeeper(dir string) func() error {
	return func() error {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envKeeperDir+"="+dir, envKeeperStart+"=1")
		return cmd.Run()
	}
}

// keeperDir returns a state directory for a keeper: short, since a
// socket path is bounded, and mode 0700.
func keeperDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tgk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// keeperLauncher returns a launcher on a keeper of its own, under the
// tests' cgroup parent; at the end it closes the launcher and waits for
// the keeper to end (it lingers a few seconds without children).
func keeperLauncher(t testing.TB, dir string) *Launcher {
	t.Helper()
	needLauncher(t)
	l, err := NewLauncher(Config{KillGrace: 2 * time.Second, CgroupParent: testCgroups, StateDir: dir, StartKeeper: startTestKeeper(dir)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitReleased is waitDone, then Release: the keeper keeps an ended
// process until then, and would outlive the test.
func waitReleased(p *Process, d time.Duration) (Exit, bool) {
	exit, ok := waitDone(p, d)
	if ok {
		p.Release()
	}
	return exit, ok
}

// keeperPid is the pid of l's keeper.
func keeperPid(l *Launcher) int { return l.keeper.client.Pid() }

func TestKeeperRunsProcesses(t *testing.T) {
	t.Parallel()
	l := keeperLauncher(t, keeperDir(t))
	var out, errb sandboxtest.SyncBuffer
	_, err := l.Start(t.Context(), Policy{Command: sh("echo hi"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err == nil || !strings.Contains(err.Error(), "key is required") {
		t.Errorf("start without a key: %v", err)
	}
	proc, err := l.Start(t.Context(), Policy{Key: "k1", Command: sh("cat; echo to-err >&2; exit 3"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if parentOf(proc.Pid()) != keeperPid(l) {
		t.Errorf("bwrap's parent is %d, not the keeper %d", parentOf(proc.Pid()), keeperPid(l))
	}
	proc.Stdin().Write([]byte("typed\n"))
	proc.Stdin().Close() // the keeper holds a copy: end of file must still reach cat
	exit, ok := waitReleased(proc, 30*time.Second)
	if !ok || exit.Code != 3 || out.String() != "typed\n" || errb.String() != "to-err\n" {
		t.Errorf("exit %s (done %v), stdout %q, stderr %q", exit, ok, out.String(), errb.String())
	}
}

func TestKeeperDetachThenAdopt(t *testing.T) {
	t.Parallel()
	dir := keeperDir(t)
	l := keeperLauncher(t, dir)
	var first lendingWriter
	ws := sandboxtest.Dir(t)
	proc, err := l.Start(t.Context(), Policy{Key: "counter", Command: sh("i=0; while [ $i -lt 3000 ]; do echo $i; i=$((i+1)); [ $i = 500 ] && read x; done; exit 7"), Workspace: ws},
		Stdio{Stdout: &first})
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(first.String(), "\n499\n") })
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	if exit := proc.Wait(); !exit.Detached {
		t.Errorf("detached process ended with %s", exit)
	}
	l.Close()
	l2 := keeperLauncher(t, dir)
	var second lendingWriter
	procs, err := l2.Adopt(t.Context(), func(key string) (Stdio, bool) { return Stdio{Stdout: &second}, key == "counter" })
	if err != nil || len(procs) != 1 || procs[0].Key() != "counter" || !procs[0].Adopted() {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	procs[0].Stdin().Write([]byte("go on\n"))
	exit, ok := waitReleased(procs[0], 30*time.Second)
	if !ok || exit.Code != 7 || exit.Exact {
		t.Errorf("adopted exit %s (done %v, exact %v)", exit, ok, exit.Exact)
	}
	if got := first.String() + second.String(); got != seqFrom0(3000) {
		t.Errorf("output has a hole or a repeat: %d bytes, want %d; first difference at %d", len(got), len(seqFrom0(3000)), firstDiff(got, seqFrom0(3000)))
	}
}

// seqFrom0 is what the counter prints: 0 to n-1, a line each.
func seqFrom0(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestKeeperLost(t *testing.T) {
	t.Parallel()
	l := keeperLauncher(t, keeperDir(t))
	var out sandboxtest.SyncBuffer
	// A marker no other process on the machine has: "sleep 600" was in
	// other packages' test commands, and never in this one's (its argv is
	// "sleep", "600").
	marker := fmt.Sprintf("%d.%d", 600+time.Now().Nanosecond()%90, os.Getpid())
	proc, err := l.Start(t.Context(), Policy{Key: "doomed", Command: sh("echo up; exec sleep " + marker), Workspace: sandboxtest.Dir(t), Limits: Limits{Pids: 64}}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "up")
	dirs := proc.cg.Dirs()
	unix.Kill(keeperPid(l), unix.SIGKILL)
	exit, ok := waitReleased(proc, 30*time.Second)
	if !ok || !exit.Lost || exit.Status() != 255 || !strings.Contains(exit.String(), "execution lost") {
		t.Errorf("exit after the keeper's death: %s (done %v)", exit, ok)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
	if len(sandboxtest.ProcessesWithArg(marker)) == 0 {
		return
	}
	// The kernel ends the sandbox's processes as bwrap dies with the
	// keeper, which may take a moment after the loss is reported.
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return len(sandboxtest.ProcessesWithArg(marker)) == 0 }) {
		t.Errorf("the command outlived its keeper: %v", sandboxtest.ProcessesWithArg(marker))
	}
}

func TestKeeperExitWhileDetached(t *testing.T) {
	t.Parallel()
	dir := keeperDir(t)
	l := keeperLauncher(t, dir)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{Key: "short", Command: sh("echo up; sleep 1; echo bye; exit 4"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "up")
	l.Close() // detaches
	pid := proc.Pid()
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return processGone(pid) }) {
		t.Fatal("bwrap still runs after 30 s")
	}
	l2 := keeperLauncher(t, dir)
	var after sandboxtest.SyncBuffer
	procs, err := l2.Adopt(t.Context(), func(string) (Stdio, bool) { return Stdio{Stdout: &after}, true })
	if err != nil || len(procs) != 1 {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	exit, ok := waitReleased(procs[0], 30*time.Second)
	if !ok || exit.Code != 4 || after.String() != "bye\n" {
		t.Errorf("exit %s (done %v), output after the adoption %q", exit, ok, after.String())
	}
}

// TestKeeperSweepSparesAdopted: with a StateDir the sweep waits for
// Adopt, then removes what was left but never an adopted process's
// cgroup or its tenant's.
func TestKeeperSweepSparesAdopted(t *testing.T) {
	t.Parallel()
	dir, parent := keeperDir(t), sandboxtest.CgroupParent(t)
	cfg := Config{CgroupParent: parent, StateDir: dir, StartKeeper: startTestKeeper(dir)}
	l := cgroupTestLauncher(t, cfg)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{Key: "kept", Tenant: "t1", Command: sh("echo up; read x; exit 6"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "up")
	dirs := proc.cg.Dirs()
	l.Close()
	stale := filepath.Join(filepath.Dir(filepath.Dir(dirs[0])), "xstale")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	l2 := cgroupTestLauncher(t, cfg)
	if _, err := l2.SweepCgroups(); !errors.Is(err, ErrSweepBeforeAdopt) {
		t.Errorf("sweep before adopt: %v", err)
	}
	procs, err := l2.Adopt(t.Context(), func(string) (Stdio, bool) { return Stdio{}, true })
	if err != nil || len(procs) != 1 {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	res, err := l2.SweepCgroups()
	if err != nil || !slices.Contains(res.Removed, stale) {
		t.Errorf("sweep: %v, removed %v", err, res.Removed)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the sweep removed the adopted cgroup %s: %v", d, err)
		}
	}
	procs[0].Stdin().Write([]byte("\n"))
	if exit, ok := waitReleased(procs[0], 30*time.Second); !ok || exit.Code != 6 {
		t.Errorf("adopted exit %s (done %v)", exit, ok)
	}
	for _, d := range append(dirs, filepath.Dir(dirs[0])) {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left behind", d)
		}
	}
}

// TestKeeperSpawnKeepsFilesNonBlocking: what the launcher reads and writes
// through the poller (the PTY master, the stdin socket, the output pipes,
// the init's control socket) is still non-blocking after the keeper got
// its copies.
func TestKeeperSpawnKeepsFilesNonBlocking(t *testing.T) {
	t.Parallel()
	l := keeperLauncher(t, keeperDir(t))
	for _, tty := range []*WindowSize{nil, {Rows: 24, Cols: 80}} {
		key := fmt.Sprintf("nb-tty-%v", tty != nil)
		proc, err := l.Start(t.Context(), Policy{Key: key, Command: sh("read x"), Workspace: sandboxtest.Dir(t), TTY: tty}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		files := append([]*os.File{proc.stdin, proc.ctl.f}, proc.outputs...)
		for _, f := range files {
			raw, err := f.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var flags int
			raw.Control(func(fd uintptr) { flags, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
			if flags&unix.O_NONBLOCK == 0 {
				t.Errorf("%s: %s is blocking after the spawn", key, f.Name())
			}
		}
		proc.Stdin().Write([]byte("\n"))
		if exit, ok := waitReleased(proc, 30*time.Second); !ok || exit.Code != 0 {
			t.Errorf("%s: exit %s (done %v)", key, exit, ok)
		}
	}
}

// TestKeeperKeepsExitUntilReleased: an exit stays with the keeper until
// Release, so a launcher that dies before its caller recorded the exit
// leaves it to the next, which reports it again, as it was; once
// released, it is gone.
func TestKeeperKeepsExitUntilReleased(t *testing.T) {
	t.Parallel()
	dir := keeperDir(t)
	l := keeperLauncher(t, dir)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{Key: "ended", Command: sh("echo bye; exit 5"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	first, ok := waitDone(proc, 30*time.Second)
	if !ok || first.Code != 5 || out.String() != "bye\n" {
		t.Fatalf("exit %s (done %v), output %q", first, ok, out.String())
	}
	l.Close() // as a crash would, before anyone called Release
	adopt := func() []*Process {
		t.Helper()
		l := keeperLauncher(t, dir)
		var again sandboxtest.SyncBuffer
		procs, err := l.Adopt(t.Context(), func(string) (Stdio, bool) { return Stdio{Stdout: &again}, true })
		if err != nil {
			t.Fatalf("adopt: %v", err)
		}
		if again.String() != "" {
			t.Errorf("output read twice: %q", again.String())
		}
		return procs
	}
	procs := adopt()
	if len(procs) != 1 || procs[0].Key() != "ended" {
		t.Fatalf("adopted %d processes, want the unreleased one", len(procs))
	}
	second, ok := waitDone(procs[0], 30*time.Second)
	if !ok || second.Code != first.Code || second.Exact != first.Exact || !second.Started.Equal(first.Started) || second.Duration != first.Duration {
		t.Errorf("adopted again: %+v (done %v), want %+v", second, ok, first)
	}
	if err := procs[0].Release(); err != nil {
		t.Fatal(err)
	}
	if err := procs[0].Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	procs[0].l.Close()
	if procs := adopt(); len(procs) != 0 {
		t.Errorf("a released exit was adopted again: %d processes", len(procs))
	}
}

// TestKeeperIdleProcessesKeepOneGoroutine: an idle process on a keeper
// keeps its output copier and no goroutine waiting for its end: the
// keeper's report of the exit starts the one that finishes it. Before,
// each kept a second, blocked in its wait. Not parallel: it counts the
// whole process's goroutines.
func TestKeeperIdleProcessesKeepOneGoroutine(t *testing.T) {
	l := keeperLauncher(t, keeperDir(t))
	start := func(key string) *Process {
		p, err := l.Start(t.Context(), Policy{Key: key, Command: sh("read x"), Workspace: sandboxtest.Dir(t),
			TTY: &WindowSize{Rows: 24, Cols: 80}}, Stdio{Stdout: &sandboxtest.SyncBuffer{}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	procs := []*Process{start("warm-up")}
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 10
	for i := range n {
		procs = append(procs, start(fmt.Sprint("idle-", i)))
	}
	per := func() float64 { return float64(runtime.NumGoroutine()-before) / n }
	sandboxtest.Eventually(t, 3*time.Second, func() bool { return per() <= 1 })
	if got := per(); got > 1 {
		t.Errorf("%.2f goroutines per idle process on a keeper, want 1 (the output copier)", got)
	}
	for _, p := range procs {
		p.Stdin().Write([]byte("\n"))
		if exit, ok := waitReleased(p, 30*time.Second); !ok || exit.Code != 0 {
			t.Errorf("%s: exit %s (done %v)", p.Key(), exit, ok)
		}
	}
}
