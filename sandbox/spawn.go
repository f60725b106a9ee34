//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/termgate/termgate/sandbox/fdio"
	"golang.org/x/sys/unix"
)

// spawnRequest is one bwrap to fork.
type spawnRequest struct {
	key   string
	path  string
	args  []string // argv, Args[0] included; the environment is always empty
	cred  *syscall.Credential
	files []*os.File // the child's descriptors 0..len-1; the caller closes its own
	// cgroup is a cgroup2 directory to fork bwrap straight into, so that
	// it needs no move there (see cgroup.Group.AddExcept); "" for none. A
	// spawner that cannot says so: spawned.cgroup is then "".
	cgroup string
	// enter are the execution's cgroup v1 directories, for the forking
	// thread to enter alone before the fork so that bwrap is born in
	// them (see v1thread); a spawner reports those it was.
	enter []string
	// resolves are the host paths bwrap resolves by name: a spawner
	// that can forks it from a lean mount namespace keeping only the
	// mounts they need (see Launcher.resolves).
	resolves []string
	// netns, when set, is the network namespace bwrap is forked in (a
	// preparedNet's); a spawner that cannot fails.
	netns *os.File
	// What only the keeper uses: the parent ends it keeps for a later
	// launcher, the cgroup directories and state it removes with an
	// orphan, and the launcher's notes on the process.
	held    []*os.File
	cgroups []string
	remove  []string
	meta    []byte
}

// spawner forks bwrap: as the launcher's own child (execSpawner) or as the
// keeper's (keeperSpawner), which outlives the launcher.
type spawner interface {
	spawn(ctx context.Context, req spawnRequest) (spawned, error)
}

// spawned is a forked bwrap, the subset of a child the process uses.
type spawned interface {
	pid() int
	// wait blocks until bwrap was reaped and returns its status; lost
	// says the keeper died, and bwrap with it, before it said how.
	wait() (ws unix.WaitStatus, lost bool, err error)
	// onExit calls done with what wait would return, once bwrap was
	// reaped. A keeper's child starts that goroutine only when the
	// keeper reports the exit, so an idle execution keeps no goroutine
	// waiting for its end; the launcher's own child waits on one.
	onExit(done func(ws unix.WaitStatus, lost bool, err error))
	// kill sends SIGKILL to bwrap, never to a reused pid.
	kill()
	// signal sends sig to bwrap, never to a reused pid, and reports
	// whether bwrap was there to take it.
	signal(sig unix.Signal) bool
	// born lists the spawnRequest's cgroup and enter directories bwrap
	// was born in: they need no move (see cgroup.Group.AddExcept).
	born() []string
}

// execSpawner forks bwrap with exec.Cmd: it dies with the launcher's
// forking thread (Pdeathsig), which is one of the runtime's, or the
// forker's (see launcherForker), and never exits.
type execSpawner struct{}

func (execSpawner) spawn(_ context.Context, req spawnRequest) (spawned, error) {
	// Descriptors termgate inherited without close-on-exec (from a service
	// manager, a shell) would otherwise pass through bwrap into the sandbox.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("%w: mark descriptors close-on-exec: %w", ErrUnavailable, err)
	}
	if len(req.enter) == 0 && len(req.resolves) == 0 && req.netns == nil {
		return startPlaced(req, fromHost)
	}
	return spawnOn(launcherForker, req)
}

// forkFrom runs fork from a mount namespace of its choosing: a lean one
// (mountns) keeping what resolves needs, or the calling thread's.
type forkFrom func(resolves []string, fork func() error) error

// fromHost forks from the calling thread's mount namespace.
func fromHost(_ []string, fork func() error) error { return fork() }

// startPlaced starts req's bwrap forked into req.cgroup when it can,
// else where the calling thread is, from the mount namespace from picks.
func startPlaced(req spawnRequest, from forkFrom) (execChild, error) {
	cgroup := -1
	if req.cgroup != "" {
		// Opened before from picks: the lean namespace has no /sys.
		if fd, err := unix.Open(req.cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			cgroup = fd
		}
	}
	var child execChild
	err := from(req.resolves, func() error {
		if cgroup >= 0 {
			cmd := execCommand(req)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroup
			if cmd.Start() == nil {
				child = execChild{proc: cmd.Process, placed: []string{req.cgroup}}
				return nil
			}
			// A kernel without clone3's CLONE_INTO_CGROUP: bwrap is
			// moved in while blocked, as without a cgroup2 directory.
		}
		cmd := execCommand(req)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("%w: start bwrap: %w", ErrUnavailable, err)
		}
		child = execChild{proc: cmd.Process}
		return nil
	})
	return child, err
}

// execCommand builds the exec.Cmd of req: descriptors 0-2 as stdio, the
// rest as extra files, in a session of its own, killed with its parent.
func execCommand(req spawnRequest) *exec.Cmd {
	fd := func(i int) *os.File {
		if i < len(req.files) {
			return req.files[i]
		}
		return nil
	}
	cmd := &exec.Cmd{
		Path:   req.path,
		Args:   req.args,
		Env:    []string{}, // not nil: nil would pass termgate's own
		Dir:    "/",
		Stdin:  fd(0),
		Stdout: fd(1),
		Stderr: fd(2),
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: req.cred,
		},
	}
	if len(req.files) > 3 {
		cmd.ExtraFiles = req.files[3:]
	}
	return cmd
}

// execChild is bwrap as the launcher's child. It keeps the process
// alone, not its exec.Cmd: the command's arguments and descriptors (closed
// once started) would stay in memory for the execution's life.
type execChild struct {
	proc   *os.Process
	placed []string // the cgroup directories it was born in
}

func (c execChild) born() []string { return c.placed }

func (c execChild) pid() int { return c.proc.Pid }

func (c execChild) kill() { c.proc.Kill() }

// signal goes through os.Process, which holds a pidfd where the kernel
// has them and refuses a process it already reaped.
func (c execChild) signal(sig unix.Signal) bool { return c.proc.Signal(sig) == nil }

// wait parks until bwrap has exited, in fdio's waiter, so that no OS thread
// waits in wait4 meanwhile, then reaps it; without a pidfd, the reaping
// Wait blocks as usual.
func (c execChild) wait() (unix.WaitStatus, bool, error) {
	exited := make(chan struct{})
	if fdio.WhenExited(c.proc.Pid, func() { close(exited) }) {
		<-exited
	}
	return c.reap()
}

// reap waits for bwrap, which has exited or is about to.
func (c execChild) reap() (unix.WaitStatus, bool, error) {
	state, err := c.proc.Wait()
	if err != nil {
		return 0, false, err
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	return unix.WaitStatus(ws), false, nil
}

// onExit has the launcher's child waited for with every other
// (fdio.WhenExited), so that an idle execution keeps no goroutine of its
// own; without a pidfd, one goroutine waits for it.
func (c execChild) onExit(done func(unix.WaitStatus, bool, error)) {
	if fdio.WhenExited(c.proc.Pid, func() { done(c.reap()) }) {
		return
	}
	go func() { done(c.wait()) }()
}
