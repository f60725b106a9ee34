//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
	"golang.org/x/sys/unix"
)

// initControl is the launcher's end of the init's control socket: a
// seqpacket socket, so every message arrives whole, that tells the
// launcher the init's host pid on its ready message.
type initControl struct {
	f        *os.File
	released chan struct{} // closed when the init may exec, or will never

	mu       sync.Mutex
	err      string // why the command never ran, from the init or the launcher
	notFound bool   // the command does not exist
}

// newInitControl returns the launcher's end and the one bwrap inherits.
func newInitControl() (*initControl, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: init control socket: %w", err)
	}
	err = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	if err == nil {
		err = unix.SetNonblock(fds[0], true)
	}
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("sandbox: init control socket: %w", err)
	}
	c := &initControl{f: os.NewFile(uintptr(fds[0]), "init-control"), released: make(chan struct{})}
	return c, os.NewFile(uintptr(fds[1]), "init-control-child"), nil
}

// send writes the configuration, which waits in the socket until the init
// reads it.
func (c *initControl) send(cfg sandboxinit.Config) error {
	b, err := cfg.Encode()
	if err != nil {
		return err
	}
	_, err = c.f.Write(b)
	return err
}

// recv reads one message and the sender's host pid. It fails at end of
// file: once bwrap and the init are gone.
func (c *initControl) recv() (string, int, error) {
	raw, err := c.f.SyscallConn()
	if err != nil {
		return "", 0, err
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	var n, oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return "", 0, err
	}
	if n == 0 {
		return "", 0, errors.New("init control: end of file")
	}
	return string(buf[:n]), senderPid(oob[:oobn]), nil
}

// senderPid reads the credentials the kernel attached, translated into
// termgate's pid namespace; 0 when there are none.
func senderPid(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil {
			return int(cred.Pid)
		}
	}
	return 0
}

// record keeps the first reason the command never ran.
func (c *initControl) record(msg string, notFound bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == "" {
		c.err, c.notFound = msg, notFound
	}
}

// note interprets a message from the init.
func (c *initControl) note(msg string) {
	if m, ok := strings.CutPrefix(msg, sandboxinit.NotFoundPrefix); ok {
		c.record(m, true)
	} else if m, ok := strings.CutPrefix(msg, sandboxinit.ErrPrefix); ok {
		c.record(m, false)
	}
}

// finish reads what the init said before it exited or exec'd, once bwrap
// is gone, and closes the socket. It returns why the command never ran.
func (c *initControl) finish() (string, bool) {
	<-c.released
	c.f.SetReadDeadline(time.Now().Add(time.Second))
	for range 4 {
		msg, _, err := c.recv()
		if err != nil {
			break
		}
		c.note(msg)
	}
	c.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err, c.notFound
}

func (c *initControl) close() { c.f.Close() }

// release runs while the init holds: it bounds the sandbox's terminals,
// then lets the command start. A failure ends the sandbox, and the exit
// says why: the command must never run without its bound.
func (p *Process) release() {
	defer close(p.ctl.released)
	msg, pid, err := p.ctl.recv()
	if err != nil {
		return // bwrap failed; its exit says why
	}
	if msg != sandboxinit.Ready {
		p.ctl.note(msg)
		return
	}
	if p.l.layout.mode == modeSetuid {
		if err := boundTmpfs(pid, p.policy.TmpSize); err != nil {
			p.ctl.record(err.Error(), false)
			p.Kill()
			return
		}
	}
	if p.policy.PTYs > 0 {
		if err := boundTerminals(pid, p.policy.PTYs); err != nil {
			p.ctl.record(err.Error(), false)
			p.Kill()
			return
		}
	}
	if _, err := p.ctl.f.Write([]byte(sandboxinit.Go)); err != nil {
		p.ctl.record(fmt.Sprintf("start the command: %v", err), false)
		p.Kill()
	}
}

// TerminalPool returns how many terminals the kernel has for all devpts
// instances but the host's own: kernel.pty.max minus kernel.pty.reserve.
// Every sandbox's terminals come from this one pool.
func TerminalPool() (int, error) {
	read := func(name string) (int, error) {
		b, err := os.ReadFile("/proc/sys/kernel/pty/" + name)
		if err != nil {
			return 0, fmt.Errorf("sandbox: terminal pool: %w", err)
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	max, err := read("max")
	if err != nil {
		return 0, err
	}
	reserve, err := read("reserve")
	if err != nil {
		return 0, err
	}
	return max - reserve, nil
}

// tmpfsMagic is TMPFS_MAGIC.
const tmpfsMagic = 0x01021994

// boundTmpfs gives the sandbox's writable tmpfs mounts, which a setuid
// bwrap mounted without a size, their size (Policy.TmpSize), from
// outside through the init's root while only bwrap and the init have
// run: what --size gives them elsewhere. The read-only ones hold nothing
// and are left as they are.
func boundTmpfs(initPid int, size int64) error {
	if initPid <= 0 {
		return errors.New("bound tmpfs: the init's pid is unknown")
	}
	for _, dest := range []string{"/tmp", "/run", "/dev/shm"} {
		path := "/proc/" + strconv.Itoa(initPid) + "/root" + dest
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil || st.Type != tmpfsMagic {
			return fmt.Errorf("bound tmpfs: %s is no tmpfs (%v)", path, err)
		}
		fd, err := unix.Fspick(unix.AT_FDCWD, path, unix.FSPICK_CLOEXEC|unix.FSPICK_NO_AUTOMOUNT)
		if err != nil {
			return fmt.Errorf("%w: bound tmpfs %s: fspick: %w", ErrUnenforceable, dest, err)
		}
		err = unix.FsconfigSetString(fd, "size", strconv.FormatInt(size, 10))
		if err == nil {
			err = unix.FsconfigReconfigure(fd)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: bound tmpfs %s: %w", ErrUnenforceable, dest, err)
		}
	}
	return nil
}

// devptsMagic is DEVPTS_SUPER_MAGIC.
const devptsMagic = 0x1cd1

// boundTerminals limits the sandbox's own devpts instance, which bwrap
// mounted without a bound, to max terminals. It reconfigures the instance
// from outside, through the init's root, while only bwrap and the init
// have run in the sandbox. A remount resets every option, so bwrap's are
// given again.
func boundTerminals(initPid, max int) error {
	if initPid <= 0 {
		return errors.New("bound terminals: the init's pid is unknown")
	}
	path := "/proc/" + strconv.Itoa(initPid) + "/root/dev/pts"
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil || st.Type != devptsMagic {
		return fmt.Errorf("bound terminals: %s is no devpts instance (%v)", path, err)
	}
	fd, err := unix.Fspick(unix.AT_FDCWD, path, unix.FSPICK_CLOEXEC|unix.FSPICK_NO_AUTOMOUNT)
	if err != nil {
		return fmt.Errorf("%w: bound terminals: fspick: %w", ErrUnenforceable, err)
	}
	defer unix.Close(fd)
	for _, o := range [][2]string{{"ptmxmode", "0666"}, {"mode", "0620"}, {"max", strconv.Itoa(max)}} {
		if err := unix.FsconfigSetString(fd, o[0], o[1]); err != nil {
			return fmt.Errorf("%w: bound terminals: set %s: %w", ErrUnenforceable, o[0], err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return fmt.Errorf("%w: bound terminals: reconfigure devpts: %w", ErrUnenforceable, err)
	}
	return nil
}
