//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// The role of a test binary run again as a launcher that ends a sandbox
// whose command exited, and is killed -9 before it kept the final exit.
const (
	envEndedDir     = "TERMGATE_TEST_ENDED_DIR"
	envEndedCgroups = "TERMGATE_TEST_ENDED_CGROUPS"
	envEndedWS      = "TERMGATE_TEST_ENDED_WORKSPACE"
)

// stuckWriter takes the first write and never returns: the process's
// exit cannot become final, so its launcher never keeps it with the
// keeper.
type stuckWriter struct{ first chan struct{} }

func (w stuckWriter) Write([]byte) (int, error) {
	close(w.first)
	select {}
}

// runEndedRole starts a command that exits 21 while the sandbox's pid 1
// is stopped, so that the launcher ends the sandbox itself (endSandbox)
// and bwrap reports the kill; its output writer keeps the exit from
// becoming final. It writes bwrap's pid to dir/bwrap.pid, or dir/blind
// without process events (then nothing ends the sandbox but the command),
// and waits to be killed.
func runEndedRole() bool {
	dir := os.Getenv(envEndedDir)
	if dir == "" {
		return false
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "ended role:", err); os.Exit(1) }
	l, err := NewLauncher(Config{CgroupParent: os.Getenv(envEndedCgroups), StateDir: dir, StartKeeper: startTestKeeper(dir)})
	if err != nil {
		fail(err)
	}
	if l.events == nil {
		os.WriteFile(filepath.Join(dir, "blind"), nil, 0o600)
		select {}
	}
	out := stuckWriter{first: make(chan struct{})}
	p, err := l.Start(context.Background(), Policy{Key: "ended", Workspace: os.Getenv(envEndedWS), Command: sh("echo up; read x; exit 21")}, Stdio{Stdout: out})
	if err != nil {
		fail(err)
	}
	select {
	case <-out.first:
	case <-time.After(30 * time.Second):
		fail(errors.New("no output"))
	}
	init, ok := p.sandboxInit()
	if !ok {
		fail(errors.New("no sandbox init"))
	}
	if err := unix.Kill(init, unix.SIGSTOP); err != nil {
		fail(err)
	}
	if _, err := p.Stdin().Write([]byte("\n")); err != nil {
		fail(err)
	}
	os.WriteFile(filepath.Join(dir, "bwrap.pid"), []byte(strconv.Itoa(p.Pid())), 0o600)
	select {} // until killed
}

// TestKeeperKeepsCommandStatusOfEndedSandbox: a launcher ends a sandbox
// whose command exited 21 (its pid 1 could not run), so that bwrap
// reports SIGKILL, and is killed -9 before the exit was final. The next
// launcher adopts the ended process and reports the command's exit code,
// not bwrap's kill.
func TestKeeperKeepsCommandStatusOfEndedSandbox(t *testing.T) {
	t.Parallel()
	needLauncher(t)
	dir := keeperDir(t)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envEndedDir+"="+dir, envEndedCgroups+"="+testCgroups, envEndedWS+"="+sandboxtest.Dir(t))
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	var bwrap int
	var blind bool
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "blind"))
		blind = err == nil
		b, _ := os.ReadFile(filepath.Join(dir, "bwrap.pid"))
		bwrap, _ = strconv.Atoi(string(b))
		return blind || bwrap > 0
	}) {
		t.Fatal("the launcher did not start the command")
	}
	if blind {
		t.Skip("no process events: the launcher never ends a sandbox itself")
	}
	// Reaped by the keeper: the sandbox was ended, and bwrap's status is
	// all the keeper has of it but the notes.
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return errors.Is(unix.Kill(bwrap, 0), unix.ESRCH) }) {
		t.Fatal("the sandbox was not ended")
	}
	child.Process.Kill()
	child.Wait()
	l := keeperLauncher(t, dir)
	procs, err := l.Adopt(t.Context(), func(string) (Stdio, bool) { return Stdio{}, true })
	if err != nil || len(procs) != 1 {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	exit, ok := waitReleased(procs[0], 30*time.Second)
	if !ok || exit.Code != 21 || exit.Signal != 0 {
		t.Errorf("adopted exit %s (done %v), want code 21", exit, ok)
	}
}
