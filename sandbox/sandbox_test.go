//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// TestMain closes the shared launcher, then checks that no goroutine of
// the package outlived the tests.
func TestMain(m *testing.M) {
	if runKeeperRole() || runCrashRole() || runEndedRole() || runNoUsernsRole() {
		return
	}
	idleAfter = testIdleAfter // every pause in a test's output parks its copier
	sandboxtest.Main(m, sandboxtest.After(testLauncher.Release), sandboxtest.Ignore(sandboxtest.Forker))
}

// testLauncher is the launcher the tests share.
var testLauncher = sandboxtest.Shared[*Launcher]{
	What: "sandbox (install bubblewrap to run this test)",
	New: func() (*Launcher, error) {
		// A grace long enough for a TERM handler to run on a loaded machine.
		return NewLauncher(Config{KillGrace: 2 * time.Second, TenantUIDs: testTenantUIDs, CgroupParent: testCgroups})
	},
	Close: func(l *Launcher) {
		l.Close()
		sandboxtest.RemoveCgroupParent(testCgroups)
	},
}

// testCgroups is the shared launcher's cgroup parent, not a real
// server's default.
var testCgroups = sandboxtest.SharedCgroupParent("sandbox")

// needLauncher returns the shared launcher, skipping when this host cannot
// sandbox, except under CI, where a missing sandbox is a failure.
func needLauncher(t testing.TB) *Launcher {
	t.Helper()
	return testLauncher.Get(t)
}

// result is the output and exit of one sandboxed run.
type result struct {
	stdout, stderr string
	exit           Exit
}

func (r result) String() string {
	return fmt.Sprintf("exit %s, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
}

// runPolicy starts p (with a fresh workspace when none is set), waits with
// a bound, and returns what happened.
func runPolicy(t *testing.T, p Policy) result {
	t.Helper()
	l := needLauncher(t)
	if p.Workspace == "" {
		p.Workspace = sandboxtest.Dir(t)
	}
	var out, errb sandboxtest.SyncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	proc, err := l.Start(ctx, p, Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("start %q: %v", p.Command, err)
	}
	exit := proc.Wait()
	return result{out.String(), errb.String(), exit}
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRunReportsCodeSignalAndSetupFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		command []string
		check   func(Exit) bool
	}{
		{"exit code", sh("exit 3"), func(e Exit) bool { return e.Code == 3 && e.Signal == 0 }},
		{"code above 128 is a code", sh("exit 130"), func(e Exit) bool { return e.Code == 130 && e.Signal == 0 && e.Exact }},
		{"signal death", sh("kill -TERM $$"), func(e Exit) bool { return e.Signal == unix.SIGTERM && e.Code == -1 }},
		{"missing command is a setup failure", []string{"no-such-command"}, func(e Exit) bool {
			return strings.Contains(e.SetupError, "command not found") && e.NotFound && e.Status() == 127
		}},
		{"a directory is no command", []string{"/usr"}, func(e Exit) bool {
			return strings.Contains(e.SetupError, "exec /usr") && !e.NotFound && e.Status() == 126
		}},
		{"bin sh works", []string{"/bin/sh", "-c", "true"}, func(e Exit) bool { return e.Success() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runPolicy(t, Policy{Command: c.command})
			if !c.check(r.exit) {
				t.Errorf("unexpected result: %v", r)
			}
		})
	}
}

// TestMissingCommandBehindTheInit: with a PTY, a cwd or rlimits, the init
// does more before the command; a command that cannot run is still a
// setup failure, not the init's exit code.
func TestMissingCommandBehindTheInit(t *testing.T) {
	t.Parallel()
	ws := sandboxtest.Dir(t)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	cases := []struct {
		name   string
		policy Policy
	}{
		{"pty", Policy{TTY: &WindowSize{Rows: 24, Cols: 80}}},
		{"cwd", Policy{Cwd: "/workspace/sub"}},
		{"rlimits", Policy{Limits: Limits{OpenFiles: 64}}},
		{"terminals", Policy{PTYs: 2}},
		{"all", Policy{TTY: &WindowSize{Rows: 24, Cols: 80}, Cwd: "/workspace/sub", Limits: Limits{OpenFiles: 64}, PTYs: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.policy.Command, c.policy.Workspace = []string{"no-such-command"}, ws
			r := runPolicy(t, c.policy)
			if r.exit.SetupError != "no-such-command: command not found" || !r.exit.NotFound || !r.exit.Exact || r.exit.Status() != 127 {
				t.Errorf("want a missing command: %v", r)
			}
		})
	}

	r := runPolicy(t, Policy{Command: []string{"/workspace"}, Workspace: ws})
	if !strings.Contains(r.exit.SetupError, "exec /workspace: permission denied") || r.exit.NotFound || r.exit.Status() != 126 {
		t.Errorf("a directory as the command: %v", r)
	}
	r = runPolicy(t, Policy{Command: sh("exit 5"), Workspace: ws, Cwd: "/nowhere"})
	if !strings.Contains(r.exit.SetupError, "cannot change directory to /nowhere") || r.exit.Status() != 126 {
		t.Errorf("a missing working directory: %v", r)
	}
	r = runPolicy(t, Policy{Command: sh("exit 5"), Workspace: ws, TTY: &WindowSize{Rows: 24, Cols: 80}, Cwd: "/workspace/sub", Limits: Limits{OpenFiles: 64}, PTYs: 2})
	if r.exit.Code != 5 || !r.exit.Exact {
		t.Errorf("command behind the init: %v", r)
	}
}

// TestOutputCompleteAfterFastExit is the reference's defect: results were
// final before the pipes drained. Every run must deliver all its output.
func TestOutputCompleteAfterFastExit(t *testing.T) {
	t.Parallel()
	want := seqOutput(20000)
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runPolicy(t, Policy{Command: sh("seq 1 20000; seq 1 3 >&2")})
			if r.stdout != want || r.stderr != "1\n2\n3\n" || !r.exit.Success() {
				errs <- fmt.Sprintf("run %d: %d stdout bytes (want %d), stderr %q, %s", i, len(r.stdout), len(want), r.stderr, r.exit)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestEscapesFail(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, script, forbidden string }{
		{"write system", "touch /usr/x /etc/x /x /bin/x 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"change /etc", `for f in /etc/passwd /etc/hosts /etc/services /etc/nsswitch.conf; do test -e $f || continue
			(echo x >> $f || chmod 666 $f || rm -f $f) 2>/dev/null && echo ESCAPED; done`, "ESCAPED"},
		{"write through tmp", "touch /tmp/../usr/x 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"read shadow", "cat /etc/shadow 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"host home and keys", "ls /root /home /var /srv /mnt /media /sys /etc/ssh /etc/ssl/private 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"hardlink across mounts", "ln /etc/passwd /workspace/p 2>/dev/null && echo ESCAPED; ln /usr/bin/env /workspace/e 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"nested user namespace", "unshare -U true 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"nested mount namespace", "unshare -m true 2>/dev/null && echo ESCAPED", "ESCAPED"},
		{"dns", "test -e /etc/resolv.conf && echo ESCAPED; getent hosts example.com && echo ESCAPED", "ESCAPED"},
		{"mount", "mount -t tmpfs none /workspace 2>/dev/null && echo ESCAPED", "ESCAPED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runPolicy(t, Policy{Command: sh(c.script + "; echo done"), Proc: ProcPrivate})
			if strings.Contains(r.stdout, c.forbidden) || !strings.Contains(r.stdout, "done") {
				t.Errorf("escape attempt: %v", r)
			}
		})
	}
}

func TestWorkspaceIsTheOnlyWritablePlace(t *testing.T) {
	t.Parallel()
	ws := sandboxtest.Dir(t)
	r := runPolicy(t, Policy{Command: sh("echo data > /workspace/f && echo ok"), Workspace: ws})
	got, err := os.ReadFile(filepath.Join(ws, "f"))
	if err != nil || string(got) != "data\n" || r.stdout != "ok\n" {
		t.Fatalf("workspace write: %v, file %q, err %v", r, got, err)
	}
	if os.Geteuid() == 0 {
		var st unix.Stat_t
		unix.Stat(filepath.Join(ws, "f"), &st)
		if st.Uid != DefaultUID {
			t.Errorf("file owned by host uid %d, want the sandbox identity %d", st.Uid, DefaultUID)
		}
	}
}

func TestIdentityAndConfinement(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("id -u; hostname; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status"), Proc: ProcPrivate})
	for _, want := range []string{"1000\n", "sandbox\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in %v", want, r)
		}
	}
}

func TestEnvironmentIsRebuilt(t *testing.T) {
	t.Parallel()
	ws := sandboxtest.Dir(t)
	// The gateway's own environment holds secrets; none may show inside,
	// and bwrap itself, on the host, gets no variable at all: a client's
	// LD_PRELOAD must reach only the sandboxed command.
	l := needLauncher(t)
	var out, errs sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{
		Command: sh("tr '\\0' '\\n' < /proc/1/environ; echo ---; tr '\\0' ' ' < /proc/1/cmdline; echo; echo ---; env | sort; read x"),
		Env:     map[string]string{"ONLY": "this", "LD_PRELOAD": ws + "/evil.so"}, Workspace: ws, Proc: ProcPrivate,
	}, Stdio{Stdout: &out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "ONLY=")
	if env := proc.Policy().Env; env != nil {
		t.Errorf("a running process keeps the environment the init took: %v", env) // memory held for nothing
	}
	hostEnv, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", proc.Pid()))
	if err != nil || len(hostEnv) != 0 {
		t.Errorf("bwrap runs on the host with environment %q (%v)", hostEnv, err)
	}
	proc.Stdin().Close()
	proc.Wait()
	parts := strings.Split(out.String(), "---\n")
	if len(parts) != 3 {
		t.Fatalf("output %q", out.String())
	}
	if parts[0] != "" {
		t.Errorf("/proc/1/environ = %q", parts[0])
	}
	if strings.Contains(parts[1], ws) || strings.Contains(parts[1], "/tmp/") {
		t.Errorf("host paths in /proc/1/cmdline: %q", parts[1])
	}
	want := map[string]string{"LD_PRELOAD": ws + "/evil.so", "ONLY": "this", "PATH": DefaultPath}
	for _, line := range strings.Split(strings.TrimSpace(parts[2]), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "PWD", "SHLVL", "_", "OLDPWD": // set by the shell itself
		default:
			if want[k] != v {
				t.Errorf("unexpected variable in the sandbox: %q", line)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("variables missing in the sandbox: %v", want)
	}
}

func TestInheritedDescriptorsDoNotPass(t *testing.T) {
	t.Parallel()
	// unix.Dup returns a descriptor without close-on-exec, as one inherited
	// from a service manager would be.
	fd, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	r := runPolicy(t, Policy{Command: sh(`i=3; while [ $i -lt 256 ]; do [ -e /proc/self/fd/$i ] && echo "open $i"; i=$((i+1)); done; echo checked`), Proc: ProcPrivate})
	if r.stdout != "checked\n" {
		t.Errorf("descriptors beyond 0, 1, 2 inside (termgate holds %d): %v", fd, r)
	}
}

func TestCwdEscapesStayInside(t *testing.T) {
	t.Parallel()
	marker := "termgate-host-marker-" + fmt.Sprint(time.Now().UnixNano())
	hostDir := sandboxtest.Dir(t)
	os.WriteFile(filepath.Join(hostDir, marker), nil, 0o644)
	l := needLauncher(t)

	// One step: a cwd through bwrap's own /proc descriptors.
	r := runPolicy(t, Policy{Command: sh("pwd; ls -a .. ../.. /tmp"), Proc: ProcPrivate, Cwd: "/proc/self/fd/3"})
	if r.exit.Success() || strings.Contains(r.stdout, marker) || strings.Contains(r.stdout, "workspace\n") && strings.Contains(r.stdout, "root\n") {
		t.Errorf("cwd /proc/self/fd/3: %v", r)
	}

	// Two steps: one run plants a link, the next asks for it as cwd.
	ws := sandboxtest.Dir(t)
	runPolicy(t, Policy{Command: sh("ln -s /proc/self/fd/3 /workspace/proj; ln -s / /workspace/root"), Workspace: ws, Proc: ProcPrivate})
	for _, cwd := range []string{"/workspace/proj", "/workspace/root"} {
		p := Policy{Command: sh("ls -a /; ls -a .."), Workspace: ws, Proc: ProcPrivate, Cwd: cwd}
		proc, err := l.Start(t.Context(), p, Stdio{})
		if err == nil {
			exit := proc.Wait()
			t.Errorf("cwd %s through a planted link started: %s", cwd, exit)
		} else if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("cwd %s: want ErrInvalidPolicy, got %v", cwd, err)
		}
	}
}

func TestBindSourceSymlinkRefused(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	dir := sandboxtest.Dir(t)
	link := filepath.Join(dir, "cache")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	_, err := l.Start(t.Context(), Policy{Command: sh("ls /cache"), Workspace: sandboxtest.Dir(t),
		Binds: []Bind{{Source: link, Dest: "/cache", Writable: true}}}, Stdio{})
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("bind of a symlink: want ErrInvalidPolicy naming the link, got %v", err)
	}
}

// TestBindSourceInSandboxWritableDirRefused: a source below a directory
// the sandbox identity owns (a workspace, say) could be swapped for a link
// between termgate's check and bwrap's mount, so it is refused.
func TestBindSourceInSandboxWritableDirRefused(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	l := needLauncher(t)
	ws := sandboxtest.Dir(t)
	owned := filepath.Join(ws, "owned")
	os.MkdirAll(filepath.Join(owned, "src"), 0o755)
	if err := os.Chown(owned, DefaultUID, DefaultGID); err != nil {
		t.Fatal(err)
	}
	_, err := l.Start(t.Context(), Policy{Command: []string{"true"}, Workspace: sandboxtest.Dir(t),
		Binds: []Bind{{Source: filepath.Join(owned, "src"), Dest: "/data"}}}, Stdio{})
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "no sandbox can write") {
		t.Fatalf("bind below a sandbox-owned directory: want ErrInvalidPolicy, got %v", err)
	}
}

func TestNestedReadOnlyBindStaysReadOnly(t *testing.T) {
	t.Parallel()
	ro := sandboxtest.Dir(t)
	os.WriteFile(filepath.Join(ro, "keep"), []byte("x"), 0o644)
	os.Chmod(ro, 0o777) // writable on the host for anyone: only the mount may protect it
	r := runPolicy(t, Policy{
		Command: sh("touch /workspace/ok && echo ws-ok; touch /workspace/ro/new 2>/dev/null && echo ESCAPED; rm /workspace/ro/keep 2>/dev/null && echo ESCAPED; echo done"),
		Binds:   []Bind{{Source: ro, Dest: "/workspace/ro"}},
	})
	if r.stdout != "ws-ok\ndone\n" {
		t.Errorf("nested read-only bind: %v", r)
	}
}

func TestNetworkNoneCannotReachHostLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	r := runPolicy(t, Policy{Command: []string{"/bin/bash", "-c", fmt.Sprintf("echo x > /dev/tcp/127.0.0.1/%d && echo ESCAPED; echo done", port)}})
	if strings.Contains(r.stdout, "ESCAPED") || !strings.Contains(r.stdout, "done") {
		t.Errorf("network none: %v", r)
	}
	select {
	case <-accepted:
		t.Error("the host listener accepted a connection from the sandbox")
	default:
	}
}

func TestHostNetworkHasResolver(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		t.Skip("host has no /etc/resolv.conf")
	}
	r := runPolicy(t, Policy{Command: sh("test -s /etc/resolv.conf && echo ok"), Network: NetworkHost})
	if r.stdout != "ok\n" {
		t.Errorf("host network: %v", r)
	}
}

func TestProcModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		policy Policy
		want   string
	}{
		{"none", Policy{Command: sh("ls /proc 2>/dev/null | wc -l")}, map[bool]string{false: "0\n", true: "1\n"}[raceBuild]},
		{"self-exe", Policy{Command: sh("readlink /proc/self/exe; ls /proc"), Proc: ProcSelfExe, SelfExe: "/usr/bin/env"}, "/usr/bin/env\nself\n"},
		{"private", Policy{Command: sh("cat /proc/1/cmdline | tr '\\0' ' '"), Proc: ProcPrivate}, "bwrap --args 4 -- /run/termgate/init /bin/sh -c cat /proc/1/cmdline | tr '\\0' ' ' "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if r := runPolicy(t, c.policy); r.stdout != c.want {
				t.Errorf("got %v, want stdout %q", r, c.want)
			}
		})
	}
}

func TestTmpIsSizeCapped(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("head -c 8M /dev/zero > /tmp/fill; echo rc=$?; wc -c < /tmp/fill"), TmpSize: 1 << 20})
	if !strings.HasPrefix(r.stdout, "rc=1\n") || !strings.HasSuffix(r.stdout, "1048576\n") {
		t.Errorf("filling a 1M /tmp: %v", r)
	}
}

func TestCwdAppliedInside(t *testing.T) {
	t.Parallel()
	ws := sandboxtest.Dir(t)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	r := runPolicy(t, Policy{Command: []string{"pwd"}, Workspace: ws, Cwd: "/workspace/sub"})
	if r.stdout != "/workspace/sub\n" {
		t.Errorf("cwd: %v", r)
	}
	l := needLauncher(t)
	if _, err := l.Start(t.Context(), Policy{Command: []string{"pwd"}, Workspace: ws, Cwd: "/workspace/missing"}, Stdio{}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("missing cwd: want ErrInvalidPolicy, got %v", err)
	}
}

func TestCeilings(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	cases := []struct {
		name   string
		policy Policy
		want   Limit
	}{
		{"fork bomb", Policy{Command: sh("i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait"), Limits: Limits{Pids: 32}}, LimitPids},
		{"memory bomb", Policy{Command: sh("head -c 400M /dev/zero | tail"), Limits: Limits{Memory: 48 << 20}}, LimitMemory},
		{"cpu seconds", Policy{Command: sh("while :; do :; done"), Limits: Limits{CPUSeconds: 1}}, LimitCPU},
		{"file size", Policy{Command: []string{"/bin/dd", "if=/dev/zero", "of=/workspace/big", "bs=64k", "count=100"}, Limits: Limits{FileSize: 1 << 20}}, LimitFileSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.policy.Timeout = 20 * time.Second
			r := runPolicy(t, c.policy)
			if r.exit.Limit != c.want || r.exit.Success() || r.exit.Stopped != StopNone {
				t.Errorf("want the %s ceiling to end it, got %v", c.want, r)
			}
		})
	}
}

func TestOpenFilesCeiling(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("ulimit -n; ulimit -Hn; ulimit -n 4096 2>/dev/null && echo RAISED"), Limits: Limits{OpenFiles: 64}})
	if r.stdout != "64\n64\n" {
		t.Errorf("open files ceiling: %v", r)
	}
}

// TestSignalsReachOnlyTheCommand watches, from the first moment, whom a
// signal would reach: nobody while bwrap sets up and its helpers run, then
// the command, with process events and without (through /proc).
func TestSignalsReachOnlyTheCommand(t *testing.T) {
	t.Parallel()
	events := needLauncher(t)
	blind, err := NewLauncher(Config{KillGrace: 2 * time.Second, CgroupParent: sandboxtest.CgroupParent(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blind.Close() })
	if blind.events != nil {
		blind.events.Close()
		blind.events = nil
	}
	ws := sandboxtest.Dir(t)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	for name, l := range map[string]*Launcher{"process events": events, "proc": blind} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			marker := fmt.Sprintf("%d.%d", 700+time.Now().Nanosecond()%90, os.Getpid())
			// The init execs before the command, after a cwd and rlimits.
			proc, err := l.Start(t.Context(), Policy{Command: []string{"sleep", marker}, Workspace: ws, Cwd: "/workspace/sub", Limits: Limits{OpenFiles: 64}}, Stdio{})
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Wait()
			defer proc.Kill()
			var pid int
			if !sandboxtest.Eventually(t, 20*time.Second, func() bool { pid, err = proc.workload(); return err == nil }) {
				t.Fatalf("the command never became signalable: %v", err)
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if got := string(cmdline); got != "sleep\x00"+marker+"\x00" {
				t.Fatalf("a signal would reach %q, not the command", got)
			}
		})
	}
}

func TestStopIsGracefulThenForced(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	t.Run("TERM reaches the command's handler", func(t *testing.T) {
		t.Parallel()
		var out sandboxtest.SyncBuffer
		proc, err := l.Start(t.Context(), Policy{Command: sh(`trap 'echo got-TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, &out, "ready")
		proc.Stop(StopCancel)
		exit := proc.Wait()
		if exit.Code != 7 || exit.Stopped != StopCancel || !strings.Contains(out.String(), "got-TERM") {
			t.Errorf("graceful stop: %s, output %q", exit, out.String())
		}
	})
	t.Run("KILL follows the grace period", func(t *testing.T) {
		t.Parallel()
		var out sandboxtest.SyncBuffer
		marker := fmt.Sprintf("%d.%d", 900+time.Now().Nanosecond()%90, os.Getpid())
		proc, err := l.Start(t.Context(), Policy{Command: sh(`trap "" TERM; (setsid sleep ` + marker + ` &); echo ready; sleep 1000`), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, &out, "ready")
		start := time.Now()
		proc.Stop(StopCancel)
		exit := proc.Wait()
		// The slack covers bwrap's reaping and the cgroup's removal on a
		// loaded machine; without the kill the sleep would last 1000 s.
		if exit.Signal != unix.SIGKILL || time.Since(start) > l.cfg.KillGrace+3*time.Second {
			t.Errorf("forced stop: %s after %v", exit, time.Since(start))
		}
		if pids := sandboxtest.ProcessesWithArg(marker); len(pids) > 0 {
			t.Errorf("daemon survived its execution: pids %v", pids)
		}
	})
	t.Run("stop before the command exists", func(t *testing.T) {
		t.Parallel()
		// The ceiling puts prlimit before the command: a SIGTERM to the
		// helper would end the run as a setup failure.
		proc, err := l.Start(t.Context(), Policy{Command: []string{"sleep", "100"}, Workspace: sandboxtest.Dir(t), Limits: Limits{OpenFiles: 64}}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		proc.Stop(StopCancel) // bwrap is still setting up: the SIGTERM waits for the command
		if exit := proc.Wait(); exit.Signal != unix.SIGTERM || exit.Stopped != StopCancel || !exit.Exact {
			t.Errorf("early stop: %s", exit)
		}
	})
	t.Run("KILL before the command exists", func(t *testing.T) {
		t.Parallel()
		proc, err := l.Start(t.Context(), Policy{Command: []string{"sleep", "100"}, Workspace: sandboxtest.Dir(t)}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Signal(unix.SIGKILL); err != nil { // nothing to spare: the sandbox ends
			t.Fatal(err)
		}
		if exit := proc.Wait(); exit.Success() || exit.Duration > 10*time.Second {
			t.Errorf("early KILL: %s after %v", exit, exit.Duration)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		r := runPolicy(t, Policy{Command: []string{"sleep", "100"}, Timeout: 200 * time.Millisecond})
		if r.exit.Stopped != StopTimeout || r.exit.Signal != unix.SIGTERM {
			t.Errorf("timeout: %v", r)
		}
	})
	t.Run("context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		proc, err := l.Start(ctx, Policy{Command: []string{"sleep", "100"}, Workspace: sandboxtest.Dir(t)}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if exit := proc.Wait(); exit.Stopped != StopCancel {
			t.Errorf("cancelled context: %s", exit)
		}
	})
}

func TestDaemonDoesNotOutliveExecution(t *testing.T) {
	t.Parallel()
	daemon := fmt.Sprintf("%d.%d", 800+time.Now().Nanosecond()%90, os.Getpid())
	stopped := fmt.Sprintf("%d.%d", 700+time.Now().Nanosecond()%90, os.Getpid())
	// A double-forked daemon in its own session, and a stopped child.
	r := runPolicy(t, Policy{Command: sh("(setsid sleep " + daemon + " > /dev/null 2>&1 &); sleep " + stopped + " & kill -STOP $!; echo bye")})
	if r.stdout != "bye\n" || !r.exit.Success() {
		t.Errorf("run: %v", r)
	}
	for _, marker := range []string{daemon, stopped} {
		if pids := sandboxtest.ProcessesWithArg(marker); len(pids) > 0 {
			t.Errorf("process %q outlived its execution: pids %v", marker, pids)
		}
	}
}

func waitFor(t *testing.T, out *sandboxtest.SyncBuffer, s string) {
	t.Helper()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), s) }) {
		t.Fatalf("no %q in output %q", s, out.String())
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	r, err := l.Probe(t.Context())
	if err != nil || !r.OK {
		t.Fatalf("probe: %v, report %+v", err, r)
	}
}

func TestStdinReachesCommandAndCloses(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{Command: []string{"wc", "-c"}, Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	proc.Stdin().Write([]byte("hello"))
	proc.Stdin().Close()
	if exit := proc.Wait(); !exit.Success() || strings.TrimSpace(out.String()) != "5" {
		t.Errorf("stdin: %s, output %q", exit, out.String())
	}
}
