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
	root, err := initRoot(initPid)
	if err != nil {
		return fmt.Errorf("bound tmpfs: %w", err)
	}
	defer root.Close()
	for _, dest := range []string{"tmp", "run", "dev/shm"} {
		if err := reconfigure(root, dest, tmpfsMagic, [][2]string{{"size", strconv.FormatInt(size, 10)}}); err != nil {
			return fmt.Errorf("bound tmpfs /%s: %w", dest, err)
		}
	}
	return nil
}

// initRoot opens the root of the sandbox whose init is pid, checked to
// be the init's still once open (a pidfd taken first has not fired), and
// not the launcher's own: a pid reused by another process must never
// have its mounts reconfigured.
func initRoot(pid int) (*os.File, error) {
	if pid <= 0 {
		return nil, errors.New("the init's pid is unknown")
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ENOSYS): // before 5.3: the namespace check below alone
		pidfd = -1
	case err != nil:
		return nil, fmt.Errorf("the init: %w", err)
	default:
		defer unix.Close(pidfd)
	}
	root, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("the init's root: %w", err)
	}
	var own, its unix.Stat_t
	switch {
	case pidfd >= 0 && pidfdFired(pidfd):
		root.Close()
		return nil, errors.New("the init ended")
	case unix.Stat("/proc/self/ns/mnt", &own) != nil || unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &its) != nil || own.Ino == its.Ino:
		root.Close()
		return nil, errors.New("the init's mount namespace is not the sandbox's")
	}
	return root, nil
}

// pidfdFired reports whether the process of pidfd has exited.
func pidfdFired(pidfd int) bool {
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 0)
	return err != nil || n > 0
}

// reconfigure sets options on the filesystem of type magic mounted at
// path below root, from outside.
func reconfigure(root *os.File, path string, magic int64, opts [][2]string) error {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS}
	dir, err := unix.Openat2(int(root.Fd()), path, &how)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(dir)
	var st unix.Statfs_t
	if err := unix.Fstatfs(dir, &st); err != nil || st.Type != magic {
		return fmt.Errorf("no filesystem of type %#x there (%v)", magic, err)
	}
	fd, err := unix.Fspick(dir, "", unix.FSPICK_CLOEXEC|unix.FSPICK_NO_AUTOMOUNT|unix.FSPICK_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("%w: fspick: %w", ErrUnenforceable, err)
	}
	defer unix.Close(fd)
	for _, o := range opts {
		if err := unix.FsconfigSetString(fd, o[0], o[1]); err != nil {
			return fmt.Errorf("%w: set %s: %w", ErrUnenforceable, o[0], err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return fmt.Errorf("%w: reconfigure: %w", ErrUnenforceable, err)
	}
	return nil
}

// devptsMagic is DEVPTS_SUPER_MAGIC.
const devptsMagic = 0x1cd1

// boundTerminals limits the sandbox's own devpts instance, which bwrap
// mounted without a bound, to max terminals. It reconfigures the instance
// from outside, through the init's root (initRoot), while only bwrap and
// the init have run in the sandbox. A remount resets every option, so
// bwrap's are given again.
func boundTerminals(initPid, max int) error {
	root, err := initRoot(initPid)
	if err != nil {
		return fmt.Errorf("bound terminals: %w", err)
	}
	defer root.Close()
	opts := [][2]string{{"ptmxmode", "0666"}, {"mode", "0620"}, {"max", strconv.Itoa(max)}}
	if err := reconfigure(root, "dev/pts", devptsMagic, opts); err != nil {
		return fmt.Errorf("bound terminals: %w", err)
	}
	return nil
}
