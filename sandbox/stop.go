//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Signal delivers sig to the command's process group inside the sandbox,
// never to bwrap, so the command's own handlers run. Before the command
// has started there is nobody to signal, and it fails; except SIGKILL,
// which then ends the whole sandbox.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return ErrNotRunning
	default:
	}
	pid, err := p.workload()
	if errors.Is(err, errNotStarted) && sig == unix.SIGKILL {
		p.Kill()
		return nil
	}
	if err != nil {
		return err
	}
	target := -pid
	if pgid, err := unix.Getpgid(pid); err != nil || pgid != pid {
		// The command has not made its own group yet: signal it alone.
		target = pid
	}
	if err := unix.Kill(target, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("sandbox: signal: %w", err)
	}
	return nil
}

// Stop ends the process gracefully: SIGTERM to the command's group, then,
// after the launcher's grace period, SIGKILL to everything. It returns at
// once; Wait tells when the process is gone. Only the first call counts.
func (p *Process) Stop(why Stop) {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopped = why
		p.mu.Unlock()
		go p.terminate(p.l.cfg.KillGrace)
	})
}

// terminate sends SIGTERM and kills after grace. A stop that comes while
// bwrap is still setting up waits, within the grace, for the command to
// start: dropping the SIGTERM would make every early stop a kill, and
// sending it to the init would end the run as a setup failure.
func (p *Process) terminate(grace time.Duration) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for errors.Is(p.Signal(unix.SIGTERM), errNotStarted) {
		select {
		case <-p.exited:
			return
		case <-deadline.C:
			p.Kill()
			return
		case <-poll.C:
		}
	}
	select {
	case <-p.exited:
	case <-deadline.C:
		p.Kill()
	}
}

// endSandbox ends what is left of the sandbox once its command has exited.
// bwrap's pid 1 would end it by exiting too, but a pid 1 that cannot run
// (stopped, traced) would keep the execution open forever.
//
// The exit event may also be the first thread's, ended by an exec from
// another thread: it ends the sandbox only once the process is gone.
//
// A pid 1 killed before it reported the command's end makes bwrap report
// the kill, which is all the keeper would have of the end until the final
// exit is kept: the command's status goes to the keeper first, for a
// launcher that takes the process over after this one died.
func (p *Process) endSandbox() {
	pid := p.track.WorkloadHostPid()
	for deadline := time.Now().Add(endSandboxWait); !processGone(pid); time.Sleep(5 * time.Millisecond) {
		if !p.track.WorkloadEnded() || time.Now().After(deadline) {
			return // it lives on, under the same pid or as other threads
		}
	}
	if p.ended() {
		return
	}
	if ws, ok := p.track.WorkloadExit(); ok && p.track.ExecCount() > initExecs {
		p.l.keepCommandExit(p, ws)
	}
	if p.ended() {
		return
	}
	if pid, ok := p.sandboxInit(); ok {
		unix.Kill(pid, unix.SIGKILL)
	}
	if p.cg != nil {
		p.cg.Kill()
	}
}

// ended reports whether bwrap has been reaped.
func (p *Process) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// endSandboxWait bounds how long endSandbox waits for an exited command's
// process to be gone; one whose first thread exited while others run
// keeps its sandbox, as before.
const endSandboxWait = time.Second

// processGone reports whether pid has no running thread. It asks the
// kernel through a pidfd, whose readiness means the same thing, taken under
// the kernel's own lock: reading /proc/PID/stat and then /proc/PID/task
// races an exec from another thread, which can show a zombie first thread
// and then, once the exec'ing thread has taken over the pid, one task.
func processGone(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	for range 3 {
		if !errors.Is(err, unix.EINTR) {
			break
		}
		n, err = unix.Poll(fds, 0)
	}
	return err == nil && n > 0
}

// Kill ends the whole execution at once: the sandbox's pid 1 (whose death
// takes every process of its namespace), everything in the cgroup, and bwrap.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.mu.Lock()
	p.killedUs = true
	p.mu.Unlock()
	p.killInit()
	if p.cg != nil {
		p.cg.Kill()
	}
	p.child.kill()
}

// killInit kills the sandbox's pid 1. When it is not known yet, bwrap may
// be cloning it at this very moment, and a newborn pid 1 whose parent
// dies before it asks for --die-with-parent's signal outlives it, holding
// the output open (seen in a container without cgroups: the execution
// never finished). So bwrap is stopped first: its clone has then either
// happened, and the child is found, or never will. A cgroup, where there
// is one, kills the newborn anyway.
//
// bwrap is stopped through its pidfd, so never under a reused pid; once
// stopped it can neither exit nor reap, so its pid and its children's
// stay theirs while they are looked up by number.
func (p *Process) killInit() {
	if pid, ok := p.sandboxInit(); ok {
		unix.Kill(pid, unix.SIGKILL)
		return
	}
	outer := p.child.pid()
	if p.cg != nil || outer <= 0 || !p.child.signal(unix.SIGSTOP) {
		return
	}
	for range 200 { // bounded: 200 ms at most
		if st := procState(outer); st == 'T' || st == 'Z' || st == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if pid, ok := firstChild(outer); ok {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// procState is the state letter of /proc/PID/stat, 0 when it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
