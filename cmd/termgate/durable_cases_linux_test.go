package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The restart cases of issue 14 end to end: real serve processes on a
// state directory, real keepers and bwrap, clients in process (the Go
// client) and as child processes (termgate run and attach).

// cliProc is a client command of termgate (run, attach) run as a child
// process of the test binary against a durable node.
type cliProc struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser // nil: the command reads /dev/null
	stdout, stderr *sandboxtest.SyncBuffer
	done           chan struct{}
	code           int // once done
}

// cli runs `termgate args[0] --url U --token T args[1:]...` as a child
// process; withStdin gives it a pipe for input (cliProc.stdin).
func (n *durableNode) cli(t *testing.T, withStdin bool, args ...string) *cliProc {
	t.Helper()
	g := gatewayUnderTest{url: "http://" + n.addr, secretFile: n.secretFile}
	full := append([]string{args[0], "--url", g.url, "--token", g.token(t, "acme", allScopes)}, args[1:]...)
	enc, _ := json.Marshal(full)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &cliProc{stdout: &sandboxtest.SyncBuffer{}, stderr: &sandboxtest.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(self, "-test.run=^"+t.Name()+"$")
	p.cmd.Env = append(os.Environ(), serveInChildEnv+"="+string(enc))
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if withStdin {
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the command's exit status, failing the test when it
// does not end within timeout.
func (p *cliProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("termgate %s did not end: stdout %d bytes, stderr %q", p.cmd.Env[len(p.cmd.Env)-1], p.stdout.Len(), p.stderr.String())
		return -1
	}
}

// children lists the pids whose parent is one of pids: the keeper's
// bwrap processes.
func children(pids []int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procState(pid); ppid > 0 {
			for _, p := range pids {
				if ppid == p {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// procState returns pid's parent and state letter; 0 when it is gone.
func procState(pid int) (int, string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	_, rest, ok := bytes.Cut(b, []byte(") ")) // after the command's name
	f := strings.Fields(string(rest))
	if !ok || len(f) < 2 {
		return 0, ""
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid, f[0]
}

// What leftovers looks for.
const (
	leftExecutions = 1 << iota // processes of the given pids, execution cgroups
	leftNode                   // tenant cgroups, workspace mounts and loop devices, rings, input logs, sockets
	leftAll        = leftExecutions | leftNode
)

// leftovers lists what the node left on the host. leftExecutions: the
// processes of pids still alive (a zombie has ended: this machine's init
// reaps late), cgroup directories of executions below the test's cgroup
// parent. leftNode: the tenants' cgroup directories there, mounts of and
// loop devices backed by files in the test's directory, and rings, input
// logs and sockets in the state directory.
func (n *durableNode) leftovers(pids []int, what int) []string {
	var left []string
	for _, pid := range pids {
		if ppid, st := procState(pid); what&leftExecutions != 0 && ppid != 0 && st != "Z" {
			left = append(left, fmt.Sprintf("process %d (state %s)", pid, st))
		}
	}
	for _, hier := range sandboxtest.CgroupHierarchies(n.t) {
		root := filepath.Join(hier, n.cgParent)
		dirs, _ := sandboxtest.CgroupTree(root)
		for _, d := range dirs {
			rel, _ := filepath.Rel(root, d)
			switch depth := strings.Count(rel, "/"); {
			case rel == ".":
			case depth == 0 && what&leftNode != 0, depth > 0 && what&leftExecutions != 0:
				left = append(left, "cgroup "+d)
			}
		}
	}
	if what&leftNode == 0 {
		return left
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if strings.Contains(line, n.dir) {
				left = append(left, "mount "+line)
			}
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range loops {
		if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), n.dir) {
			left = append(left, fmt.Sprintf("loop device %s on %s", filepath.Base(filepath.Dir(filepath.Dir(f))), strings.TrimSpace(string(b))))
		}
	}
	filepath.WalkDir(n.state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (d.Name() == "ring" || d.Name() == "input" || d.Type()&fs.ModeSocket != 0) {
			left = append(left, "file "+path)
		}
		return nil
	})
	return left
}

// stateFiles lists the files in the state directory, for the log.
func (n *durableNode) stateFiles() []string {
	var files []string
	filepath.WalkDir(n.state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(n.state, path)
			files = append(files, rel)
		}
		return nil
	})
	return files
}

// start begins r on c and follows it.
func start(t *testing.T, ctx context.Context, c *client.Client, r wire.Request) *follower {
	t.Helper()
	e, err := c.Start(ctx, r)
	if err != nil {
		t.Fatalf("start %s: %v", r.ID, err)
	}
	return follow(ctx, e)
}

// until waits for cond, failing with what when it does not come.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !sandboxtest.Eventually(t, time.Minute, cond) {
		t.Fatalf("never: %s", what)
	}
}

// ended waits for f's exit event.
func (f *follower) ended(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-f.done:
	case <-ctx.Done():
		t.Fatalf("%s did not end: %d bytes so far", f.e.ID(), len(f.output()))
	}
}

// adoptedRunning is the count of live executions the last serve took over.
func (n *durableNode) adoptedRunning() int {
	m := regexp.MustCompile(`"msg":"executions taken over".*?"running":(\d+)`).FindStringSubmatch(n.logs.String())
	if m == nil {
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// stopperScript writes a thousand lines every 50ms, numbered on from 1,
// until /workspace/stop exists, then exits 13.
const stopperScript = `i=0; until [ -e /workspace/stop ]; do seq $((i*1000+1)) $((i*1000+1000)); i=$((i+1)); sleep 0.05; done; exit 13`

// seqPrefix reports whether out is `seq 1 n` for some n that is a
// multiple of 1000, at least 1000.
func seqPrefix(out string) bool {
	n := strings.Count(out, "\n")
	return n >= 1000 && n%1000 == 0 && out == seqLines(n, false)
}

// TestUpgradeRestartIsOnlyAReconnect: serve gets SIGTERM and a copy of
// its binary at another path (as an upgrade installs one) is started on
// the same state directory. A terminal waiting for input, a pipe writer
// and a `termgate run` reading its stdin go on; the Go client sees a
// reconnect after 1012 and nothing else, run prints nothing of it; every
// byte comes once, input included, and every exit code is the command's.
func TestUpgradeRestartIsOnlyAReconnect(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t)
	n.start()
	var clientLog sandboxtest.SyncBuffer
	c := n.loggedClient(t, &clientLog)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	shell := start(t, ctx, c, wire.Request{ID: "shell", Command: "/bin/sh", Args: []string{"-c", echoScript}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	writer := start(t, ctx, c, wire.Request{ID: "writer", Command: "/bin/sh", Args: []string{"-c", stopperScript}})
	run := n.cli(t, true, "run", "--reconnect", "1m", "--", "/bin/sh", "-c", `read a; echo got:$a; read b; echo got:$b; exit 5`)
	until(t, "the shell is ready", func() bool { return strings.Contains(shell.output(), "ready") })
	if _, err := shell.e.WriteContext(ctx, []byte("before\n")); err != nil {
		t.Fatal(err)
	}
	io.WriteString(run.stdin, "one\n")
	until(t, "the executions answer before the restart", func() bool {
		return strings.Contains(shell.output(), "got:before") && run.stdout.String() == "got:one\n" && len(writer.output()) > 0
	})
	keepers := n.keepers()
	n.kill(syscall.SIGTERM)
	if !strings.Contains(n.logs.String(), `"msg":"restarting: executions live on`) {
		t.Fatalf("serve did not restart on SIGTERM: %s", n.logs.String())
	}
	upgrade := filepath.Join(n.dir, "termgate-upgraded")
	copyFile(t, n.exe, upgrade)
	n.exe = upgrade
	n.start()
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", n.cur.Process.Pid)); exe != upgrade {
		t.Fatalf("the new serve runs %s, want %s", exe, upgrade)
	}
	if got := n.adoptedRunning(); got != 3 {
		t.Errorf("the upgraded serve took over %d running executions, want 3: %s", got, n.logs.String())
	}
	if after := n.keepers(); len(after) != 1 || len(keepers) != 1 || after[0] != keepers[0] {
		t.Errorf("keepers %v before the restart, %v after: want the same one", keepers, after)
	}
	if _, err := shell.e.WriteContext(ctx, []byte("after\nquit\n")); err != nil {
		t.Fatal(err)
	}
	io.WriteString(run.stdin, "two\n")
	run.stdin.Close()
	stop := start(t, ctx, c, wire.Request{ID: "stop", Command: "/bin/sh", Args: []string{"-c", "touch /workspace/stop"}})
	for _, f := range []*follower{shell, writer, stop} {
		f.ended(t, ctx)
	}
	want := map[*follower]int{shell: 7, writer: 13, stop: 0}
	for f, code := range want {
		if f.err != nil || f.exit == nil || f.exit.Code != code || f.exit.Reason != "exited" {
			t.Errorf("%s: exit %+v, err %v; want code %d and no gap", f.e.ID(), f.exit, f.err, code)
		}
	}
	if got, want := shell.output(), "ready\r\ngot:before\r\ngot:after\r\ngot:quit\r\n"; got != want {
		t.Errorf("the shell's output %q, want %q", got, want)
	}
	if out := writer.output(); !seqPrefix(out) {
		t.Errorf("the writer's output is not seq 1 N: %d bytes, %d lines, first difference at %d",
			len(out), strings.Count(out, "\n"), firstDiff(out, seqLines(strings.Count(out, "\n"), false)))
	}
	if code := run.wait(t, time.Minute); code != 5 || run.stdout.String() != "got:one\ngot:two\n" || run.stderr.String() != "" {
		t.Errorf("run: exit %d, stdout %q, stderr %q; want 5, both lines once, nothing on stderr", code, run.stdout.String(), run.stderr.String())
	}
	if log := clientLog.String(); !strings.Contains(log, "the gateway is restarting; reconnecting") {
		t.Errorf("the Go client did not see 1012:\n%s", log)
	}
}

// copyFile copies the executable at from to a new file to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// trapScript writes /workspace/term-$0 when SIGTERM comes, a moment
// later (a handler that takes its time, as a cancel's grace allows),
// then exits 3.
const trapScript = `trap 'sleep 0.3; echo term > /workspace/term-$0; exit 3' TERM; echo ready; while :; do sleep 0.1; done`

// TestNoGatewayReturns: serve is killed -9 and nothing starts on its
// state directory. After the orphan grace the keeper stops the
// executions as a cancel would (their TERM traps run), and nothing of
// them is left: no process, cgroup, mount, loop device, ring, input log
// or socket; the keeper exits. A serve started later answers gone for
// them, and `termgate attach` exits 255 saying so.
func TestNoGatewayReturns(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t, "--orphan-grace", "3s")
	n.start()
	c := n.client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ids := []string{"tty", "pipes"}
	var fs []*follower
	for _, id := range ids {
		r := wire.Request{ID: id, Command: "/bin/sh", Args: []string{"-c", trapScript, id}}
		if id == "tty" {
			r.PTY = &wire.Size{Rows: 24, Cols: 80}
		}
		fs = append(fs, start(t, ctx, c, r))
	}
	until(t, "both are ready", func() bool {
		return strings.Contains(fs[0].output(), "ready") && strings.Contains(fs[1].output(), "ready")
	})
	keepers := n.keepers()
	bwraps := children(keepers)
	if len(keepers) != 1 || len(bwraps) != 2 {
		t.Fatalf("keepers %v with children %v: want one with two", keepers, bwraps)
	}
	c.Close()
	n.kill(syscall.SIGKILL)
	until(t, "the keeper exits after the grace", func() bool {
		_, st := procState(keepers[0])
		return st == "" || st == "Z"
	})
	if left := n.leftovers(append(bwraps, keepers...), leftAll); len(left) > 0 {
		kl, _ := os.ReadFile(filepath.Join(n.state, "keeper.log"))
		t.Errorf("left after the orphan grace:\n%s\nthe keeper's log:\n%s", strings.Join(left, "\n"), kl)
	}
	t.Logf("the state directory after the grace: %v", n.stateFiles())
	kept, _ := os.ReadFile(filepath.Join(n.state, "keeper.log"))
	n.start()
	for _, id := range ids {
		// The traps wrote into the tenant's workspace: a new execution reads it.
		c := n.client(t)
		f := start(t, ctx, c, wire.Request{ID: "read-" + id, Command: "/bin/sh", Args: []string{"-c", "cat /workspace/term-" + id}})
		f.ended(t, ctx)
		if f.output() != "term\n" {
			t.Errorf("%s: its TERM trap did not run (cat says %q): not stopped as a cancel would be\nkeeper log:\n%s", id, f.output(), kept)
		}
		if _, err := c.Attach(ctx, id, 0, true); !errors.Is(err, client.ErrGone) {
			t.Errorf("attach %s after the grace: %v, want %v; the server says %s", id, err, client.ErrGone, n.info(t, id))
		}
		a := n.cli(t, false, "attach", "--id", id)
		code := a.wait(t, time.Minute)
		if msg := "termgate: the server restarted and no longer has execution " + id + "\n"; code != exitGateway || a.stderr.String() != msg {
			t.Errorf("termgate attach --id %s: exit %d, stderr %q; want %d and %q", id, code, a.stderr.String(), exitGateway, msg)
		}
	}
}

// TestKeeperCrash: the keeper is killed -9. Every execution ends, and
// attached clients learn it was lost; `termgate run` exits 255 saying
// so, never with a status of the command's; nothing of the executions
// is left; serve serves on, and its next start starts a new keeper.
func TestKeeperCrash(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t)
	n.start()
	c := n.client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	shell := start(t, ctx, c, wire.Request{ID: "shell", Command: "/bin/sh", Args: []string{"-c", echoScript}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	run := n.cli(t, false, "run", "--id", "job", "--", "/bin/sh", "-c", "echo up; while :; do sleep 0.1; done")
	until(t, "both run", func() bool {
		return strings.Contains(shell.output(), "ready") && run.stdout.String() == "up\n"
	})
	keepers := n.keepers()
	bwraps := children(keepers)
	if len(keepers) != 1 || len(bwraps) != 2 {
		t.Fatalf("keepers %v with children %v: want one with two", keepers, bwraps)
	}
	syscall.Kill(keepers[0], syscall.SIGKILL)
	shell.ended(t, ctx)
	if shell.exit == nil || shell.exit.Reason != "lost" {
		t.Errorf("the shell's end: exit %+v, err %v; want reason lost", shell.exit, shell.err)
	}
	t.Logf("the server says: %s", n.info(t, "shell"))
	code := run.wait(t, time.Minute)
	if stderr := run.stderr.String(); code != exitGateway || !strings.Contains(stderr, "lost") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("run: exit %d, stderr %q; want %d and one line saying the execution was lost", code, stderr, exitGateway)
	}
	// serve runs on: its workspace mount, the lost executions' rings
	// (their results are retained) and its tenant cgroup are in use.
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return len(n.leftovers(bwraps, leftExecutions)) == 0 }) {
		t.Errorf("left after the keeper's crash:\n%s", strings.Join(n.leftovers(bwraps, leftExecutions), "\n"))
	}
	f := start(t, ctx, c, wire.Request{ID: "after", Command: "/bin/sh", Args: []string{"-c", "echo fine; exit 4"}})
	f.ended(t, ctx)
	if f.exit == nil || f.exit.Code != 4 || f.output() != "fine\n" {
		t.Errorf("a start after the keeper's crash: exit %+v, err %v, output %q; want 4 and fine; the server says %s", f.exit, f.err, f.output(), n.info(t, "after"))
	}
	if now := n.keepers(); len(now) != 1 || now[0] == keepers[0] {
		t.Errorf("keepers after the crash: %v; want a new one", now)
	}
}

// TestRunAcrossKillNineAndRestart: serve is killed -9 while `termgate
// run` follows a writer; a new serve takes it over, and run prints every
// line once and exits with the command's code.
func TestRunAcrossKillNineAndRestart(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t)
	n.start()
	script := `i=0; while [ $i -lt 40 ]; do seq $((i*1000+1)) $((i*1000+1000)); i=$((i+1)); sleep 0.05; done; exit 6`
	run := n.cli(t, false, "run", "--", "/bin/sh", "-c", script)
	until(t, "output before the kill", func() bool { return run.stdout.Len() > 0 })
	n.kill(syscall.SIGKILL)
	time.Sleep(300 * time.Millisecond)
	n.start()
	code := run.wait(t, time.Minute)
	if out := run.stdout.String(); code != 6 || out != seqLines(40000, false) || run.stderr.String() != "" {
		t.Errorf("run: exit %d, stdout %d bytes (want %d), first difference at %d, stderr %q; want 6, seq 1 40000, nothing on stderr",
			code, len(out), len(seqLines(40000, false)), firstDiff(out, seqLines(40000, false)), run.stderr.String())
	}
}

// TestRunAcrossKillNineWithoutRestart: serve is killed -9 and does not
// come back: run exits 255 once --reconnect is spent, and says the
// execution may still be running and how to attach.
func TestRunAcrossKillNineWithoutRestart(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t)
	n.start()
	run := n.cli(t, false, "run", "--id", "lonely", "--reconnect", "2s", "--", "/bin/sh", "-c", "echo up; while :; do sleep 0.1; done")
	until(t, "output before the kill", func() bool { return run.stdout.String() == "up\n" })
	n.kill(syscall.SIGKILL)
	code := run.wait(t, time.Minute)
	msg := regexp.MustCompile(`^termgate: gateway at http://127\.0\.0\.1:\d+ unreachable for 2s; the execution may still be running: termgate attach --id lonely\n$`)
	if !msg.MatchString(run.stderr.String()) || code != exitGateway {
		t.Errorf("run: exit %d, stderr %q; want %d and %v", code, run.stderr.String(), exitGateway, msg)
	}
}

// TestShutdownForGood: SIGINT stops serve for good: each attached client
// receives its execution's exit (cancelled) before the connection
// closes, run exits with the status of the cancelled command, the keeper
// exits, and nothing of the executions is left.
func TestShutdownForGood(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	n := newDurableNode(t)
	n.start()
	c := n.client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	shell := start(t, ctx, c, wire.Request{ID: "shell", Command: "/bin/sh", Args: []string{"-c", echoScript}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	pipes := start(t, ctx, c, wire.Request{ID: "pipes", Command: "/bin/sh", Args: []string{"-c", "echo ready; while :; do sleep 0.1; done"}})
	run := n.cli(t, false, "run", "--", "/bin/sh", "-c", "echo up; while :; do sleep 0.1; done")
	until(t, "all run", func() bool {
		return strings.Contains(shell.output(), "ready") && pipes.output() == "ready\n" && run.stdout.String() == "up\n"
	})
	keepers := n.keepers()
	bwraps := children(keepers)
	if len(keepers) != 1 || len(bwraps) != 3 {
		t.Fatalf("keepers %v with children %v: want one with three", keepers, bwraps)
	}
	n.kill(syscall.SIGINT)
	for _, f := range []*follower{shell, pipes} {
		f.ended(t, ctx)
		if f.exit == nil || f.exit.Reason != "cancelled" || f.err != nil {
			t.Errorf("%s: exit %+v, err %v; want its exit, cancelled, before the close", f.e.ID(), f.exit, f.err)
		}
	}
	code := run.wait(t, time.Minute)
	if code != 128+int(syscall.SIGTERM) || run.stderr.String() != "termgate: cancelled\n" {
		t.Errorf("run: exit %d, stderr %q; want %d and the cancel", code, run.stderr.String(), 128+int(syscall.SIGTERM))
	}
	until(t, "the keeper exits", func() bool {
		_, st := procState(keepers[0])
		return st == "" || st == "Z"
	})
	if left := n.leftovers(append(bwraps, keepers...), leftAll); len(left) > 0 {
		t.Errorf("left after the shutdown:\n%s", strings.Join(left, "\n"))
	}
	t.Logf("the state directory after the shutdown: %v", n.stateFiles())
}
