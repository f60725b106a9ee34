//go:build linux

package keeper

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/forker"
)

// leanIdle is how long the forking thread holds its lean mount
// namespaces without a fork: on a host whose mounts are private, one
// keeps busy a filesystem the host has unmounted since.
const leanIdle = time.Second

// forking is the one thread that forks every child, kept for good:
// Pdeathsig (and bwrap's --die-with-parent) fire when the thread that
// forked a child exits, so that thread must live as long as the keeper
// process (package forker).
var forking struct {
	once sync.Once
	mu   sync.Mutex // one request at a time: its descriptors and its job travel apart
	f    *forker.Forker
	// The ends of the socket that passes each request's descriptors
	// into the thread's own descriptor table (see ownTable): recv a
	// number in that table alone (the process's copy is closed), pass
	// one in the process's; -1 for both, with why, where the thread
	// shares the process's table.
	recv, pass int
	passErr    error
	leanErr    error // why the thread cannot fork from lean mount namespaces
}

type forkResult struct {
	pid     int
	pidfd   *os.File // opened by fork, in the process's table
	placed  bool     // forked into m.Into
	lean    bool     // forked from a lean mount namespace
	entered []string // the cgroup v1 directories of m.Enter it was born in
	err     error
}

// fork starts the child described by m on the forking thread.
func fork(m *message, files []int) forkResult {
	startForker()
	forking.mu.Lock()
	defer forking.mu.Unlock()
	if forking.pass >= 0 {
		if err := passFiles(forking.pass, files); err != nil {
			return forkResult{err: err}
		}
	}
	var res forkResult
	forking.f.Do(func(t *forker.Thread) { res = forkTaken(t, m, files) })
	if res.err != nil {
		return res
	}
	if res.pidfd, res.err = openPidfd(res.pid); res.err != nil {
		// Without a pidfd nobody could reap it: do not leave it running.
		killAndReap(res.pid)
	}
	return res
}

// forkTaken forks m's child from files, or, where the thread has a
// descriptor table of its own, from the copies passed into it.
func forkTaken(t *forker.Thread, m *message, files []int) forkResult {
	if forking.recv < 0 {
		return forkOn(t, m, files)
	}
	own, err := takeFiles(forking.recv, len(files))
	if err != nil {
		return forkResult{err: err}
	}
	defer closeFds(own)
	return forkOn(t, m, own)
}

// startForker starts the forking thread once, giving it a descriptor
// table of its own, and returns when it is ready to fork.
func startForker() {
	forking.once.Do(func() {
		forking.f = forker.New(forker.Config{Lean: true, Idle: leanIdle, Setup: func() {
			forking.recv, forking.pass, forking.passErr = ownTable()
		}})
		forking.f.Do(func(t *forker.Thread) { forking.leanErr = t.LeanErr() })
		if forking.recv >= 0 {
			unix.Close(forking.recv) // the thread's end, in the process's table
		}
	})
}

// forkOn starts the child of m on t, born in those of m.Enter it could
// enter (see forker.Thread.Fork).
func forkOn(t *forker.Thread, m *message, files []int) forkResult {
	var res forkResult
	entered, err := t.Fork(m.Enter, func() (func(), error) {
		res = forkPlaced(t, m, files)
		pid := res.pid
		return func() { killAndReap(pid) }, res.err
	})
	if err != nil {
		return forkResult{err: err}
	}
	res.entered = entered
	return res
}

// forkPlaced forks m's child into m.Into when it can, else where the
// thread is; from a lean mount namespace when m lists what it resolves;
// in the network namespace that follows the child's files when m has one.
func forkPlaced(t *forker.Thread, m *message, files []int) forkResult {
	res := forkResult{}
	netns := -1
	if m.NetNS {
		netns, files = files[len(files)-1], files[:len(files)-1]
	}
	into := -1
	if m.Into != "" {
		// Opened here, from the host's mount namespace: the lean one has
		// no /sys.
		if fd, err := unix.Open(m.Into, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			into = fd
		}
	}
	res.lean, res.err = t.Lean(m.Resolves, func() error {
		return t.InNetNS(netns, func() error { return forkPlacedHere(m, files, into, &res) })
	})
	return res
}

// forkPlacedHere is forkPlaced's fork, where the thread is now.
func forkPlacedHere(m *message, files []int, into int, res *forkResult) error {
	var err error
	if into >= 0 {
		res.pid, err = forkExec(m, files, into)
		res.placed = err == nil
	}
	if !res.placed {
		// Also a kernel without clone3's CLONE_INTO_CGROUP: the child
		// starts outside, and the gateway moves it.
		res.pid, err = forkExec(m, files, -1)
	}
	return err
}

// killAndReap ends a child nobody will hear of and reaps it: a zombie
// until then, its pid cannot have been reused.
func killAndReap(pid int) {
	unix.Kill(pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// forkExec starts the program in a session of its own, killed when the
// keeper dies, with exactly the given environment, descriptors (in
// blocking mode) and credentials, forked into the cgroup2 directory
// cgroupFD when it is not -1. Its pidfd is fork's to open, in the
// process's table: the child stays a zombie until reaped, so its pid
// names it until then.
func forkExec(m *message, files []int, cgroupFD int) (int, error) {
	fds := make([]uintptr, len(files))
	for i, fd := range files {
		// A program expects blocking stdio (exec.Cmd gives it that too);
		// os.Pipe and os.OpenFile hand out non-blocking descriptors.
		if err := unix.SetNonblock(fd, false); err != nil {
			return 0, fmt.Errorf("keeper: descriptor %d: %w", i, err)
		}
		fds[i] = uintptr(fd)
	}
	argv := m.Args
	if len(argv) == 0 {
		argv = []string{m.Path}
	}
	attr := &syscall.ProcAttr{
		Dir:   m.Dir,
		Env:   m.Env, // nil is an empty environment at this level
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: m.Cred.syscall(),
		},
	}
	if cgroupFD >= 0 {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cgroupFD
	}
	pid, err := syscall.ForkExec(m.Path, argv, attr)
	if err != nil {
		return 0, fmt.Errorf("keeper: start %s: %w", m.Path, err)
	}
	return pid, nil
}

// openPidfd opens the pidfd of pid, a child not yet reaped, in
// non-blocking mode, so that waiting parks no thread.
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("keeper: pidfd of %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd-%d", pid)), nil
}

// reap waits through the poller until the child exited, then collects
// its status with wait4: the child stays a zombie until then, so its pid
// cannot have been reused.
func reap(pid int, pidfd *os.File) unix.WaitStatus {
	defer pidfd.Close()
	var ws unix.WaitStatus
	raw, err := pidfd.SyscallConn()
	if err == nil {
		err = raw.Read(func(uintptr) bool {
			for {
				got, werr := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
				if !errors.Is(werr, unix.EINTR) {
					return got != 0 // reaped, or an error that waiting would not cure
				}
			}
		})
	}
	if err != nil { // no poller: block instead
		for {
			if _, werr := unix.Wait4(pid, &ws, 0, nil); !errors.Is(werr, unix.EINTR) {
				break
			}
		}
	}
	return ws
}

func (c *credential) syscall() *syscall.Credential {
	if c == nil {
		return nil
	}
	return &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups, NoSetGroups: c.NoSetGroups}
}
