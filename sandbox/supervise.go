package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// setupIO creates the pipes or the PTY. It returns the child's ends, which
// the caller closes once bwrap has started.
func (p *Process) setupIO(stdio Stdio) ([3]*os.File, error) {
	if p.policy.TTY != nil {
		return p.setupPTY(stdio)
	}
	return p.setupPipes(stdio)
}

func (p *Process) setupPipes(stdio Stdio) ([3]*os.File, error) {
	var child [3]*os.File
	var parent [3]*os.File
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(child[:i])
			closeAll(parent[:i])
			return child, fmt.Errorf("sandbox: create pipe: %w", err)
		}
		if i == 0 {
			child[i], parent[i] = r, w
		} else {
			child[i], parent[i] = w, r
		}
	}
	p.stdin = parent[0]
	p.copy(parent[1], stdio.Stdout, true)
	p.copy(parent[2], stdio.Stderr, true)
	return child, nil
}

// setupPTY opens a terminal whose master is read through Go's poller:
// creack/pty leaves it blocking, which pins a thread per idle terminal and
// ignores deadlines.
func (p *Process) setupPTY(stdio Stdio) ([3]*os.File, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return [3]*os.File{}, fmt.Errorf("sandbox: open pty: %w", err)
	}
	m, err := pollable(master)
	if err != nil {
		tty.Close()
		return [3]*os.File{}, err
	}
	p.master, p.stdin = m, m
	if err := p.Resize(*p.policy.TTY); err != nil {
		tty.Close()
		m.Close()
		return [3]*os.File{}, err
	}
	p.copy(m, stdio.Stdout, true)
	return [3]*os.File{tty, tty, tty}, nil
}

// pollable re-opens f's descriptor in non-blocking mode so that reads and
// writes go through the runtime poller.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pty: %w", err)
	}
	var fd int
	var derr error
	raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 3) })
	if derr != nil {
		return nil, fmt.Errorf("sandbox: dup pty: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: pty non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// copy drains r into w until end of file, on a goroutine owned by the
// process; Wait waits for it. A PTY master reports EIO once every slave
// is closed: that is its end of file.
func (p *Process) copy(r *os.File, w io.Writer, capture bool) {
	if w == nil {
		w = io.Discard
	}
	if capture {
		w = io.MultiWriter(p.head, w)
	}
	p.copies.Add(1)
	go func() {
		defer p.copies.Done()
		defer r.Close()
		copyOutput(r, w)
	}()
}

// copyOutput drains r into w until end of file or error. Its buffer
// starts small, so an idle execution costs little, and doubles up to
// maxReadBuf while reads fill it.
func copyOutput(r *os.File, w io.Writer) {
	raw, rawErr := r.SyscallConn()
	buf := make([]byte, minReadBuf)
	for {
		n, err := r.Read(buf)
		if rawErr == nil && err == nil && n >= burstMin {
			n = readBurst(raw, buf, n)
		}
		if n > 0 {
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
		if n == len(buf) && len(buf) < maxReadBuf {
			buf = make([]byte, 2*len(buf))
		}
	}
}

// Output read buffer bounds.
const (
	minReadBuf = 4 << 10
	maxReadBuf = 32 << 10
)

// burstMin is the read size from which the copier looks for more data
// already waiting: a keystroke's echo goes out at once, a flood of output
// goes out in large events instead of the terminal's 4 KiB reads.
const burstMin = 1024

// readBurst appends to buf[:n] whatever can be read without waiting. A
// failed or empty read is left for the next blocking read to report.
func readBurst(raw syscall.RawConn, buf []byte, n int) int {
	for n < len(buf) {
		var m int
		var err error
		raw.Read(func(fd uintptr) bool {
			m, err = unix.Read(int(fd), buf[n:])
			return true // never wait
		})
		if err != nil || m <= 0 {
			return n
		}
		n += m
		if m < burstMin {
			return n // drained: wait in the poller rather than spin on small reads
		}
	}
	return n
}

// headCapture keeps the first bytes of output, where bwrap prints its
// setup error.
type headCapture struct {
	mu  sync.Mutex
	buf []byte
}

const headSize = 2048

func (h *headCapture) Write(b []byte) (int, error) {
	h.mu.Lock()
	if room := headSize - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	h.mu.Unlock()
	return len(b), nil
}

// setupPrefixes start the error lines of bwrap and of the init, which
// writes to its output only when its control socket failed.
var setupPrefixes = []string{"bwrap: ", "termgate-init: "}

// setupMessage returns the error line of bwrap or of the init, if the
// output holds one.
func (h *headCapture) setupMessage() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, line := range bytes.Split(h.buf, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		for _, prefix := range setupPrefixes {
			if bytes.HasPrefix(line, []byte(prefix)) {
				return string(line)
			}
		}
	}
	return ""
}

// abandon releases both ends of the stdio after a failed start and waits
// for the copiers, which then see end of file.
func (p *Process) abandon(child [3]*os.File) {
	closeAll(child[:])
	p.ctl.close()
	if p.stdin != nil && p.master == nil {
		p.stdin.Close()
	}
	p.copies.Wait()
	if p.master != nil {
		p.master.Close()
	}
}

// supervise owns cmd.Wait. It stops the process when ctx ends or the
// timeout passes, and finalises the exit once bwrap is reaped and every
// output stream has ended.
func (p *Process) supervise(ctx context.Context) {
	stopWatching := p.watch(ctx)
	defer stopWatching()
	p.awaitExit()
	var ws syscall.WaitStatus
	if state, err := p.cmd.Process.Wait(); err == nil {
		ws, _ = state.Sys().(syscall.WaitStatus)
	} else {
		p.l.log.Error("wait for bwrap", "pid", p.Pid(), "err", err)
	}
	close(p.exited)
	facts := p.collect(unix.WaitStatus(ws))
	if p.stdin != nil && p.master == nil {
		p.stdin.Close()
	}
	p.copies.Wait()
	if p.master != nil {
		// The master doubles as stdin: close it only after the copier ended.
		p.master.Close()
	}
	facts.setupMsg = p.head.setupMessage()
	facts.initErr, facts.notFound = p.ctl.finish()
	p.exit = classify(facts)
	p.exit.Started = p.started
	p.exit.Duration = time.Since(p.started)
	close(p.done)
}

// collect gathers what happened, then makes sure nothing of the execution
// survives: the cgroup is killed and removed.
func (p *Process) collect(outer unix.WaitStatus) exitFacts {
	f := exitFacts{outer: outer, cpuLimit: p.policy.Limits.CPUSeconds > 0}
	if p.track != nil {
		select {
		case <-p.track.Done():
		case <-time.After(2 * time.Second):
		}
		if p.track.Complete() {
			var ok bool
			f.workload, ok = p.track.WorkloadExit()
			f.execed = p.track.ExecCount() > initExecs
			f.exact = ok || !p.track.Execed()
		}
		p.l.events.Untrack(p.track)
	}
	if p.cg != nil {
		ev := p.cg.events()
		f.oomKills, f.pidsHits = ev.OOMKills, ev.PidsMaxHits
		if err := p.cg.remove(); err != nil {
			p.l.log.Error("remove the execution's cgroup", "pid", p.Pid(), "err", err)
		}
	}
	p.mu.Lock()
	f.killedUs, f.stoppedAs = p.killedUs, p.stopped
	p.mu.Unlock()
	return f
}

// watch stops the process when ctx ends or the policy's timeout passes.
// It uses callbacks, not a goroutine: an idle execution costs no stack.
// The returned function cancels both.
func (p *Process) watch(ctx context.Context) func() {
	stopCtx := context.AfterFunc(ctx, func() { p.Stop(StopCancel) })
	if p.policy.Timeout <= 0 {
		return func() { stopCtx() }
	}
	t := time.AfterFunc(p.policy.Timeout-time.Since(p.started), func() { p.Stop(StopTimeout) })
	return func() { stopCtx(); t.Stop() }
}

// awaitExit parks until bwrap has exited, through the runtime poller on a
// pidfd, so that an idle execution holds no OS thread in wait4. Where
// pidfds are unavailable, the Wait that follows blocks as usual.
func (p *Process) awaitExit() {
	fd, err := unix.PidfdOpen(p.cmd.Process.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	raw.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || info.Signo != 0 // Linux zeroes info when nothing exited
	})
}

// Wait blocks until the process tree is gone and all output was delivered.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// Done is closed when Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stdin returns where input goes: the stdin pipe, or the PTY. With pipes,
// closing it delivers end of file to the command.
func (p *Process) Stdin() io.WriteCloser {
	if p.master != nil {
		return ptyInput{p.master}
	}
	return p.stdin
}

// ptyInput writes to the PTY; Close does nothing because the master also
// carries the output.
type ptyInput struct{ f *os.File }

func (w ptyInput) Write(b []byte) (int, error) { return w.f.Write(b) }
func (w ptyInput) Close() error                { return nil }

// Pid returns bwrap's host pid, for logs.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Resize sets the terminal size; it fails with pipes.
func (p *Process) Resize(ws WindowSize) error {
	if p.master == nil {
		return errors.New("sandbox: resize needs a terminal")
	}
	if ws.Rows == 0 || ws.Cols == 0 {
		return errors.New("sandbox: terminal size must be at least 1x1")
	}
	raw, err := p.master.SyscallConn()
	if err != nil {
		return ErrNotRunning
	}
	var ierr error
	err = raw.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	})
	if err != nil {
		return ErrNotRunning
	}
	if ierr != nil {
		return fmt.Errorf("sandbox: resize: %w", ierr)
	}
	return nil
}

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
func (p *Process) endSandbox() {
	pid := p.track.WorkloadHostPid()
	for deadline := time.Now().Add(endSandboxWait); !processGone(pid); time.Sleep(5 * time.Millisecond) {
		if !p.track.WorkloadEnded() || time.Now().After(deadline) {
			return // it lives on, under the same pid or as other threads
		}
	}
	select {
	case <-p.exited:
		return
	default:
	}
	if pid, ok := p.sandboxInit(); ok {
		unix.Kill(pid, unix.SIGKILL)
	}
	if p.cg != nil {
		p.cg.kill()
	}
}

// endSandboxWait bounds how long endSandbox waits for an exited command's
// process to be gone; one whose first thread exited while others run
// keeps its sandbox, as before.
const endSandboxWait = time.Second

// processGone reports whether pid has no running thread: it is gone, or a
// zombie whose only task is the first thread.
func processGone(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X') {
		return false
	}
	tasks, err := os.ReadDir(dir + "/task")
	return err != nil || len(tasks) <= 1
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
	if pid, ok := p.sandboxInit(); ok {
		unix.Kill(pid, unix.SIGKILL)
	}
	if p.cg != nil {
		p.cg.kill()
	}
	p.cmd.Process.Kill()
}
