//go:build linux

package keeper

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/mountns"
)

// forker is the one goroutine that forks every child. It locks itself to
// its OS thread and never returns: Pdeathsig (and bwrap's
// --die-with-parent) fire when the thread that forked a child exits, so
// that thread must live as long as the keeper process.
var forker struct {
	once sync.Once
	reqs chan forkRequest
	// The thread's forks from lean mount namespaces (mountns): nil, with
	// why, where it cannot make them.
	lean    *mountns.Thread
	leanErr error
}

type forkRequest struct {
	m     *message
	files []int // the child's descriptors 0..n-1
	reply chan forkResult
}

type forkResult struct {
	pid     int
	pidfd   *os.File
	placed  bool     // forked into m.Into
	lean    bool     // forked from a lean mount namespace
	entered []string // the cgroup v1 directories of m.Enter it was born in
	err     error
}

// fork starts the child described by m on the forking thread.
func fork(m *message, files []int) forkResult {
	startForker()
	r := forkRequest{m: m, files: files, reply: make(chan forkResult, 1)}
	forker.reqs <- r
	return <-r.reply
}

// startForker starts the forking thread once and returns when it is
// ready to fork from lean mount namespaces, or known unable to.
func startForker() {
	forker.once.Do(func() {
		forker.reqs = make(chan forkRequest)
		ready := make(chan struct{})
		go forkLoop(forker.reqs, ready)
		<-ready
	})
}

func forkLoop(reqs <-chan forkRequest, ready chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: see forker
	forker.lean, forker.leanErr = mountns.NewThread()
	close(ready)
	var mover v1thread.Mover
	if homes, err := v1thread.Load(); err == nil {
		mover = homes
	}
	t := v1thread.NewThread(mover)
	for r := range reqs {
		r.reply <- forkOn(t, r.m, r.files)
	}
}

// forkOn starts the child of m on t's thread, born in those of m.Enter
// it could enter (see v1thread.Thread.Fork).
func forkOn(t *v1thread.Thread, m *message, files []int) forkResult {
	var res forkResult
	entered, err := t.Fork(m.Enter, func() (func(), error) {
		res = forkPlaced(m, files)
		pid, pidfd := res.pid, res.pidfd
		return func() { kill(pid, pidfd) }, res.err
	})
	if err != nil {
		return forkResult{err: err}
	}
	res.entered = entered
	return res
}

// forkPlaced forks m's child into m.Into when it can, else where the
// thread is; from a lean mount namespace when m lists what it resolves.
func forkPlaced(m *message, files []int) forkResult {
	res := forkResult{}
	into := -1
	if m.Into != "" {
		// Opened here, from the host's mount namespace: the lean one has
		// no /sys.
		if fd, err := unix.Open(m.Into, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			into = fd
		}
	}
	res.lean, res.err = fromNamespace(m.Resolves, func() error {
		var err error
		if into >= 0 {
			res.pid, res.pidfd, err = forkExec(m, files, into)
			res.placed = err == nil
		}
		if !res.placed {
			// Also a kernel without clone3's CLONE_INTO_CGROUP: the
			// child starts outside, and the gateway moves it.
			res.pid, res.pidfd, err = forkExec(m, files, -1)
		}
		return err
	})
	return res
}

// fromNamespace runs fork from a lean mount namespace that keeps what
// resolves needs, when it lists anything and the thread can, else from
// the keeper's; it says which.
func fromNamespace(resolves []string, fork func() error) (bool, error) {
	if forker.lean == nil || len(resolves) == 0 {
		return false, fork()
	}
	return forker.lean.Fork(resolves, fork) // its errors are the fork's, or mountns's
}

// kill ends a child nobody will hear of and reaps it.
func kill(pid int, pidfd *os.File) {
	unix.Kill(pid, unix.SIGKILL) // a zombie until reaped: the pid is still its own
	reap(pid, pidfd)
}

// forkExec starts the program in a session of its own, killed when the
// keeper dies, with exactly the given environment, descriptors (in
// blocking mode) and credentials, forked into the cgroup2 directory
// cgroupFD when it is not -1. It returns a non-blocking pidfd for the
// runtime poller.
func forkExec(m *message, files []int, cgroupFD int) (int, *os.File, error) {
	fds := make([]uintptr, len(files))
	for i, fd := range files {
		// A program expects blocking stdio (exec.Cmd gives it that too);
		// os.Pipe and os.OpenFile hand out non-blocking descriptors.
		if err := unix.SetNonblock(fd, false); err != nil {
			return 0, nil, fmt.Errorf("keeper: descriptor %d: %w", i, err)
		}
		fds[i] = uintptr(fd)
	}
	argv := m.Args
	if len(argv) == 0 {
		argv = []string{m.Path}
	}
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   m.Dir,
		Env:   m.Env, // nil is an empty environment at this level
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: m.Cred.syscall(),
			PidFD:      &pidfd,
		},
	}
	if cgroupFD >= 0 {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cgroupFD
	}
	pid, err := syscall.ForkExec(m.Path, argv, attr)
	if err != nil {
		return 0, nil, fmt.Errorf("keeper: start %s: %w", m.Path, err)
	}
	f, err := pollablePidfd(pid, pidfd)
	if err != nil {
		// Without a pidfd nobody could reap it: do not leave it running.
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		return 0, nil, err
	}
	return pid, f, nil
}

// pollablePidfd wraps the pidfd clone returned (or opens one where clone
// gave none) in non-blocking mode, so that waiting parks no thread.
func pollablePidfd(pid, fd int) (*os.File, error) {
	if fd < 0 {
		var err error
		if fd, err = unix.PidfdOpen(pid, 0); err != nil {
			return nil, fmt.Errorf("keeper: pidfd of %d: %w", pid, err)
		}
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
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
