//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// preloadSource is a library a client could build in its workspace: its
// constructor records every program it is loaded into, and it turns every
// way of setting an rlimit into a no-op, as an attacker's would.
const preloadSource = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
extern char *program_invocation_short_name;
__attribute__((constructor)) static void mark(void) {
	int fd = open("/workspace/loaded", O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd >= 0) { dprintf(fd, "%s\n", program_invocation_short_name); close(fd); }
}
unsigned int la_version(unsigned int v) { return v; }
int setrlimit(int r, const void *l) { return 0; }
int setrlimit64(int r, const void *l) { return 0; }
int prlimit(pid_t p, int r, const void *n, void *o) { return 0; }
int prlimit64(pid_t p, int r, const void *n, void *o) { return 0; }
`

// buildPreload compiles preloadSource into the workspace ws.
func buildPreload(t *testing.T, ws string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		sandboxtest.Unavailable(t, "needs gcc to build the preload library")
	}
	src := filepath.Join(ws, "evil.c")
	if err := os.WriteFile(src, []byte(preloadSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", filepath.Join(ws, "evil.so"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	os.Chmod(filepath.Join(ws, "evil.so"), 0o755)
}

// TestClientEnvironmentReachesOnlyTheCommand: the loader variables a client
// sets must not reach any program of termgate's between bwrap and the
// command, and cannot lift a ceiling.
func TestClientEnvironmentReachesOnlyTheCommand(t *testing.T) {
	t.Parallel()
	ws := sandboxtest.Dir(t)
	buildPreload(t, ws)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	for _, v := range []string{"LD_PRELOAD", "LD_AUDIT"} {
		t.Run(v, func(t *testing.T) {
			os.Remove(filepath.Join(ws, "loaded"))
			r := runPolicy(t, Policy{
				Command:   sh(`echo "fsize=$(ulimit -f) nofile=$(ulimit -n) cpu=$(ulimit -t)"; echo "env=$` + v + `"`),
				Workspace: ws, Cwd: "/workspace/sub", TTY: &WindowSize{Rows: 24, Cols: 80},
				Env:    map[string]string{v: "/workspace/evil.so", "LD_LIBRARY_PATH": "/workspace", "GCONV_PATH": "/workspace"},
				Limits: Limits{FileSize: 1 << 20, OpenFiles: 100, CPUSeconds: 30, AddressSpace: 1 << 30},
			})
			out := strings.ReplaceAll(r.stdout, "\r", "")
			if !strings.Contains(out, "fsize=2048 nofile=100 cpu=30\n") || !strings.Contains(out, "env=/workspace/evil.so\n") {
				t.Errorf("ceilings or environment not as set: %v", r)
			}
			loaded, _ := os.ReadFile(filepath.Join(ws, "loaded"))
			if string(loaded) != "sh\n" {
				t.Errorf("the client's %s was loaded into %q, want only the command (sh)", v, loaded)
			}
		})
	}
}

// TestDevIsBounded: /dev/shm is capped like /tmp, and nothing else under
// /dev takes writes.
func TestDevIsBounded(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{
		TmpSize: 1 << 20,
		Command: sh(`dd if=/dev/zero of=/dev/shm/fill bs=64k count=64 2>/dev/null; echo "shm=$(stat -c %s /dev/shm/fill)"
touch /dev/file 2>/dev/null && echo dev=writable || echo dev=readonly
mkdir /dev/dir 2>/dev/null && echo devdir=writable || echo devdir=readonly
echo data >/dev/null && echo null=ok`),
	})
	for _, want := range []string{"shm=1048576\n", "dev=readonly\n", "devdir=readonly\n", "null=ok\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q: %v", want, r)
		}
	}
}

// TestProcHidesTheHost: a private procfs shows neither the host's kernel
// command line nor other host state that tells about the machine.
func TestProcHidesTheHost(t *testing.T) {
	t.Parallel()
	host, err := os.ReadFile("/proc/cmdline")
	if err != nil || len(strings.TrimSpace(string(host))) == 0 {
		t.Skip("the host has no kernel command line to hide")
	}
	r := runPolicy(t, Policy{Proc: ProcPrivate, Command: sh(`echo "cmdline=$(cat /proc/cmdline)"; for f in kcore keys timer_list sched_debug kallsyms modules; do test -s /proc/$f && echo "shown=$f"; done; true`)})
	if !strings.Contains(r.stdout, "cmdline=\n") || strings.Contains(r.stdout, "shown=") {
		t.Errorf("host state visible: %v", r)
	}
}

// TestStoppedInitEndsWithTheCommand: once the command has exited, the
// sandbox ends even when its pid 1 cannot run to reap it.
func TestStoppedInitEndsWithTheCommand(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	if l.events == nil {
		t.Skip("needs process events to tell the command's exit")
	}
	ws := sandboxtest.Dir(t)
	proc, err := l.Start(t.Context(), Policy{Command: sh("read line; exit 3"), Workspace: ws}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { _, err := proc.workload(); return err == nil }) {
		proc.Kill()
		t.Fatal("the command never started")
	}
	init, ok := proc.sandboxInit()
	if !ok {
		t.Fatal("no sandbox init")
	}
	if err := unix.Kill(init, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proc.Stdin().Write([]byte("go\n"))
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		proc.Kill()
		<-proc.Done()
		t.Fatal("the sandbox outlived its command by 10 s with a stopped pid 1")
	}
	if e := proc.Wait(); e.Code != 3 || !e.Exact {
		t.Errorf("want the command's exit 3, got %s", e)
	}
}

// TestTerminalsAreBoundedPerSandbox: terminals are a host-wide pool; a
// sandbox gets only the number its policy allows, none by default.
func TestTerminalsAreBoundedPerSandbox(t *testing.T) {
	t.Parallel()
	open := `import os, pty
n = 0
try:
    for _ in range(10):
        pty.openpty()
        n += 1
except OSError:
    pass
print("opened", n)`
	for _, c := range []struct {
		ptys int
		want string
	}{{0, "opened 0\n"}, {3, "opened 3\n"}} {
		r := runPolicy(t, Policy{Command: []string{"/usr/bin/python3", "-c", open}, PTYs: c.ptys})
		if r.stdout != c.want || !r.exit.Success() {
			t.Errorf("ptys %d: want %q: %v", c.ptys, c.want, r)
		}
	}
}

// TestSandboxInitIsOutOfReach: the command cannot reach into its sandbox's
// pid 1 through a private /proc (stopping or rewriting it would keep the
// sandbox open or forge its status), while its own processes stay open to
// debuggers.
func TestSandboxInitIsOutOfReach(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	if !l.layout.landlock {
		t.Skip("needs Landlock")
	}
	script := `import errno, os, subprocess
def tryopen(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
child = subprocess.Popen(["sleep", "30"])
print("init_mem", tryopen("/proc/1/mem"))
print("child_mem", tryopen("/proc/%d/mem" % child.pid))
child.kill()`
	r := runPolicy(t, Policy{Proc: ProcPrivate, Command: []string{"/usr/bin/python3", "-c", script}})
	if r.stdout != "init_mem EACCES\nchild_mem ok\n" {
		t.Errorf("want pid 1 out of reach, the command's own child within: %v", r)
	}
}

// TestStaleInitCopiesAreRemoved: the copy of the init a killed instance
// left is removed by the next launcher; a live instance's is kept.
func TestStaleInitCopiesAreRemoved(t *testing.T) {
	t.Parallel()
	needLauncher(t)
	stale, err := os.MkdirTemp("", "termgate-init-")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stale, "init"), []byte("left by a crash"), 0o555)
	live, err := os.MkdirTemp("", "termgate-init-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	lock, err := lockInitDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	l, err := NewLauncher(Config{CgroupParent: sandboxtest.CgroupParent(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale copy %s is still there: %v", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live instance's copy was removed: %v", err)
	}
}

// TestCommandExecFromAThread: a command that execs from a thread other
// than its first goes on as the new program; the kernel's end of the
// first thread on the way is not the command's exit.
func TestCommandExecFromAThread(t *testing.T) {
	t.Parallel()
	script := `import os, threading, time
threading.Thread(target=lambda: os.execv("/bin/sh", ["sh", "-c", "sleep 0.3; echo survived; exit 7"])).start()
time.sleep(30)`
	r := runPolicy(t, Policy{Command: []string{"/usr/bin/python3", "-c", script}})
	if r.stdout != "survived\n" || r.exit.Code != 7 {
		t.Errorf("want the exec'd program's output and exit 7: %v", r)
	}
}
