//go:build linux

package keeper

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

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
	mu   sync.Mutex // one request at a time: its descriptors and its message travel apart
	reqs chan forkRequest
	// The thread's forks from lean mount namespaces (mountns): nil, with
	// why, where it cannot make them.
	lean    *mountns.Thread
	leanErr error
	// pass sends a request's descriptors into the thread's own
	// descriptor table (see ownTable); -1, with why, where the thread
	// shares the process's.
	pass    int
	passErr error
}

type forkRequest struct {
	m     *message
	files []int // the child's descriptors 0..n-1, in the process's table
	reply chan forkResult
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
	forker.mu.Lock()
	defer forker.mu.Unlock()
	if forker.pass >= 0 {
		if err := passFiles(forker.pass, files); err != nil {
			return forkResult{err: err}
		}
	}
	r := forkRequest{m: m, files: files, reply: make(chan forkResult, 1)}
	forker.reqs <- r
	res := <-r.reply
	if res.err != nil {
		return res
	}
	if res.pidfd, res.err = openPidfd(res.pid); res.err != nil {
		// Without a pidfd nobody could reap it: do not leave it running.
		killAndReap(res.pid)
	}
	return res
}

// startForker starts the forking thread once and returns when it is
// ready to fork from lean mount namespaces, or known unable to.
func startForker() {
	forker.once.Do(func() {
		forker.reqs = make(chan forkRequest)
		ready := make(chan int)
		go lockedOffMain(func() { forkLoop(forker.reqs, ready) })
		if own := <-ready; own >= 0 {
			unix.Close(own) // the thread's end, in the process's table
		}
	})
}

// lockedOffMain runs f on a goroutine locked for good to an OS thread
// other than the process's main one: /proc/<pid>/fd shows the main
// thread's descriptor table, which must stay the process's.
func lockedOffMain(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	// Held by this goroutine, the main thread cannot take the other one.
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: see forker
		close(locked)
		f()
	}()
	<-locked
	runtime.UnlockOSThread()
}

// leanIdle is how long the forking thread holds its lean mount
// namespaces without a fork: on a host whose mounts are private, one
// keeps busy a filesystem the host has unmounted since.
const leanIdle = time.Second

// forkLoop is the forking thread, locked to it for good (see forker).
// ready gets the end of the passing socket that belongs to the thread's
// table alone, or -1.
func forkLoop(reqs <-chan forkRequest, ready chan<- int) {
	recv, send, err := ownTable()
	forker.pass, forker.passErr = send, err
	// Its descriptors stay in the thread's table.
	forker.lean, forker.leanErr = mountns.NewThread()
	ready <- recv
	var mover v1thread.Mover
	if homes, err := v1thread.Load(); err == nil {
		mover = homes
	}
	t := v1thread.NewThread(mover)
	idle := time.NewTimer(leanIdle)
	for {
		var r forkRequest
		ok := true
		select {
		case r, ok = <-reqs:
		case <-idle.C:
			if forker.lean != nil {
				forker.lean.Release()
			}
			r, ok = <-reqs
		}
		if !ok {
			return
		}
		idle.Reset(leanIdle)
		files := r.files
		if recv >= 0 {
			if files, err = takeFiles(recv, len(r.files)); err != nil {
				r.reply <- forkResult{err: err}
				continue
			}
		}
		res := forkOn(t, r.m, files)
		if recv >= 0 {
			closeFds(files)
		}
		r.reply <- res
	}
}

// forkOn starts the child of m on t's thread, born in those of m.Enter
// it could enter (see v1thread.Thread.Fork).
func forkOn(t *v1thread.Thread, m *message, files []int) forkResult {
	var res forkResult
	entered, err := t.Fork(m.Enter, func() (func(), error) {
		res = forkPlaced(m, files)
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
			res.pid, err = forkExec(m, files, into)
			res.placed = err == nil
		}
		if !res.placed {
			// Also a kernel without clone3's CLONE_INTO_CGROUP: the
			// child starts outside, and the gateway moves it.
			res.pid, err = forkExec(m, files, -1)
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
