//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

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
		if i == 0 && p.l.keeper != nil {
			r, w, err = stdinSocket()
		}
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

// stdinSocket returns the two ends of a stream socket that stands in for
// the stdin pipe when the keeper holds a copy of the writing end: a pipe
// reaches end of file only once every copy is closed, a socket's
// shutdown ends it for all of them.
func stdinSocket() (r, w *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: stdin socket: %w", err)
	}
	unix.Shutdown(fds[0], unix.SHUT_WR) // the command's end only reads
	unix.Shutdown(fds[1], unix.SHUT_RD)
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("sandbox: stdin socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "stdin-writer"), nil
}

// Stdin returns where input goes: the stdin pipe, or the PTY. With pipes,
// closing it delivers end of file to the command.
func (p *Process) Stdin() io.WriteCloser {
	if p.master != nil {
		return ptyInput{p.master}
	}
	if p.l.keeper != nil {
		return socketInput{p.stdin}
	}
	return p.stdin
}

// socketInput is the stdin socket: Close shuts it down for every copy,
// the keeper's included, so the command reads end of file.
type socketInput struct{ f *os.File }

func (w socketInput) Write(b []byte) (int, error) { return w.f.Write(b) }

// SyscallConn returns the socket's descriptor, non-blocking, so that a
// writer can try a write without waiting.
func (w socketInput) SyscallConn() (syscall.RawConn, error) { return w.f.SyscallConn() }

func (w socketInput) Close() error {
	raw, err := w.f.SyscallConn()
	if err == nil {
		raw.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
	return w.f.Close()
}

// ptyInput writes to the PTY; Close does nothing because the master also
// carries the output.
type ptyInput struct{ f *os.File }

func (w ptyInput) Write(b []byte) (int, error) { return w.f.Write(b) }

// SyscallConn returns the master's descriptor, non-blocking, so that a
// writer can try a write without waiting.
func (w ptyInput) SyscallConn() (syscall.RawConn, error) { return w.f.SyscallConn() }

func (w ptyInput) Close() error { return nil }

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
