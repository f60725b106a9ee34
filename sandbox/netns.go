//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/termgate/termgate/sandbox/internal/fsid"
	"golang.org/x/sys/unix"
)

// ErrHostNetwork refuses a socket in the network of a sandbox that
// shares the host's (NetworkHost): it would be the host's.
var ErrHostNetwork = errors.New("sandbox: the sandbox shares the host's network")

// ErrNetNSStuck reports a thread that entered a sandbox's network
// namespace to open a socket and could not return to the host's. The
// thread is never given back to the runtime: it ends with its goroutine,
// so nothing else of termgate runs in the sandbox's network.
var ErrNetNSStuck = errors.New("sandbox: a thread could not return to the host's network namespace")

// NetNS is an execution's network namespace seen from the host, held by
// an nsfs descriptor: the namespace lives while it is open, even after
// the sandbox ended. The sockets it opens are in the sandbox's network
// (its loopback) and are used from the host like any other: a socket
// keeps the namespace it was made in, so only socket(2) runs inside, on
// an OS thread of its own that enters the namespace and returns to the
// host's; bind, listen, connect and every read and write run on any
// thread. Addresses are IP literals with a port: nothing is resolved.
// Entering a network namespace needs CAP_SYS_ADMIN (ErrUnavailable
// without it). Its methods are safe for concurrent use.
type NetNS struct {
	f *os.File // the nsfs descriptor
	// user is the sandbox's host identity, which Dial's sockets are
	// made as when termgate switches sandboxes to it; nil: termgate's.
	user *owner
	// setns is unix.Setns; a test makes the return fail.
	setns func(fd, nstype int) error
}

// NetNS opens the sandbox's network namespace (the one prepared before
// its bwrap, for a sandbox with Policy.Listen or Policy.Redirect, even
// before bwrap built the sandbox), for sockets opened after the command
// started: a listener the server opens again after a
// restart, a connection to a server the command runs. The caller closes
// it. It refuses a sandbox that shares the host's network
// (ErrHostNetwork) and one that ended (ErrNotRunning). An adopted
// process gives one too: the listeners of Policy.Listen died with the
// launcher that opened them, so their addresses are free for the new
// one's, unless the command took one meanwhile (the sandbox's network is
// its own).
func (p *Process) NetNS() (*NetNS, error) {
	if p.policy.Network == NetworkHost {
		return nil, ErrHostNetwork
	}
	if p.ended() {
		return nil, ErrNotRunning
	}
	ns := p.preparedNetNS()
	if ns == nil {
		pid1, ok := p.sandboxInit()
		if !ok {
			return nil, fmt.Errorf("%w: network namespace: the sandbox has no pid 1", ErrNotRunning)
		}
		var err error
		if ns, err = p.openNetNS(pid1); err != nil {
			return nil, err
		}
	}
	if id, err := p.l.identityFor(p.policy); err == nil && id.switchTo {
		ns.user = &owner{id.uid, id.gid}
	}
	return ns, nil
}

// preparedNetNS is a copy of the prepared network's namespace the
// sandbox joined, if it did and has not ended.
func (p *Process) preparedNetNS() *NetNS {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.netns == nil {
		return nil
	}
	fd, err := unix.FcntlInt(p.netns.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil // the namespace of its pid 1 then
	}
	return &NetNS{f: os.NewFile(uintptr(fd), "netns")}
}

// openNetNS opens the network namespace of pid1, the sandbox's pid 1,
// checking that it is: bwrap's child while a pidfd held it, and bwrap
// not yet reaped. A pid is not reused while a pidfd's process exists, so
// the namespace opened in between is that process's.
func (p *Process) openNetNS(pid1 int) (*NetNS, error) {
	pidfd, err := unix.PidfdOpen(pid1, 0)
	switch {
	case err == nil:
		defer unix.Close(pidfd)
	case errors.Is(err, unix.ENOSYS): // before Linux 5.3: the parent and bwrap's end are checked alone
		pidfd = -1
	default:
		return nil, fmt.Errorf("%w: network namespace: the sandbox's pid 1: %w", ErrNotRunning, err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid1)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: open the sandbox's network namespace: %w", err)
	}
	alive := pidfd < 0 || unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil
	if parentOf(pid1) != p.child.pid() || !alive || p.ended() {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: network namespace: pid %d is no longer the sandbox's", ErrNotRunning, pid1)
	}
	if err := notHost(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &NetNS{f: os.NewFile(uintptr(fd), "netns")}, nil
}

// notHost fails closed for the host's own network namespace.
func notHost(fd int) error {
	var host, st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &host); err != nil {
		return fmt.Errorf("sandbox: the host's network namespace: %w", err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("sandbox: network namespace: %w", err)
	}
	if st.Dev == host.Dev && st.Ino == host.Ino {
		return ErrHostNetwork
	}
	return nil
}

// Close releases the namespace. The sockets it opened stay open.
func (ns *NetNS) Close() error { return ns.f.Close() }

// Listen opens a TCP listener in the namespace: network is tcp, tcp4 or
// tcp6, addr an IP address and port ("127.0.0.1:3128"; port 0 picks one).
func (ns *NetNS) Listen(network, addr string) (net.Listener, error) {
	e, err := parseEndpoint(network, addr)
	if err == nil && e.udp {
		err = fmt.Errorf("network %q: want tcp, tcp4 or tcp6", network)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen: %w", err)
	}
	var l net.Listener
	fd, err := ns.bound(e)
	if err == nil {
		if err = unix.Listen(fd, listenBacklog); err == nil {
			l, err = fromFD(fd, net.FileListener)
		} else {
			unix.Close(fd)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen on %s %s in the sandbox: %w", network, addr, err)
	}
	return l, nil
}

// listenBacklog is the listeners' backlog: the kernel holds it to the
// namespace's net.core.somaxconn (4096 by default).
const listenBacklog = 4096

// ListenPacket opens a UDP socket in the namespace: network is udp, udp4
// or udp6, addr an IP address and port.
func (ns *NetNS) ListenPacket(network, addr string) (net.PacketConn, error) {
	e, err := parseEndpoint(network, addr)
	if err == nil && !e.udp {
		err = fmt.Errorf("network %q: want udp, udp4 or udp6", network)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen: %w", err)
	}
	var c net.PacketConn
	fd, err := ns.bound(e)
	if err == nil {
		c, err = fromFD(fd, net.FilePacketConn)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen on %s %s in the sandbox: %w", network, addr, err)
	}
	return c, nil
}

// bound returns a socket of the namespace bound to e.
func (ns *NetNS) bound(e endpoint) (int, error) {
	fd, err := ns.socket(e)
	if err != nil {
		return -1, err
	}
	if !e.udp {
		// A server that restarts listens again at once: connections of
		// the old listener may wait in TIME_WAIT.
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if err == nil && e.ap.Addr().Is6() {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	if err == nil {
		err = unix.Bind(fd, e.sockaddr())
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// fromFD hands the socket fd to wrap, one of the net package's File
// functions, which takes a duplicate, then closes fd.
func fromFD[T any](fd int, wrap func(*os.File) (T, error)) (T, error) {
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close()
	return wrap(f)
}

// Dial connects to addr from inside the namespace, as a program of the
// sandbox would: network is tcp, tcp4, tcp6, udp, udp4 or udp6, addr an
// IP address and port. ctx bounds the connect only. The socket is the
// sandbox's user's (a namespace of Process.NetNS, termgate as root):
// its /proc/net line names the sandbox's own uid, not the overflow uid,
// so a server that admits only its own user's peers (dlv's
// --only-same-user, on by default) admits it.
func (ns *NetNS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e, err := parseEndpoint(network, addr)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial: %w", err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sandbox: dial %s %s in the sandbox: %w", network, addr, context.Cause(ctx))
	}
	var c net.Conn
	fd, err := ns.socketOf(e.domain(), e.sotype()|unix.SOCK_NONBLOCK, 0, ns.user)
	if err == nil {
		f := os.NewFile(uintptr(fd), "socket") // non-blocking: waits in the poller
		if err = connect(ctx, f, e.sockaddr()); err == nil {
			c, err = net.FileConn(f)
		}
		f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %s %s in the sandbox: %w", network, addr, err)
	}
	return c, nil
}

// connect connects f's socket to sa, waiting in the poller while the
// connect is under way, until ctx ends.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sa) }); err != nil {
		return err
	}
	if !errors.Is(cerr, unix.EINPROGRESS) && !errors.Is(cerr, unix.EINTR) {
		return cerr // nil: connected at once, as UDP always is
	}
	if d, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	err = raw.Write(func(fd uintptr) bool {
		cerr = connected(int(fd))
		return !errors.Is(cerr, unix.EINPROGRESS)
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return context.Cause(ctx)
	case err != nil:
		return err
	}
	return cerr
}

// connected reports how a non-blocking connect went: nil once
// connected, EINPROGRESS while it is under way.
func connected(fd int) error {
	n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	switch errno := unix.Errno(n); errno {
	case 0, unix.EISCONN:
	case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
		return unix.EINPROGRESS
	default:
		return errno
	}
	_, err = unix.Getpeername(fd)
	if errors.Is(err, unix.ENOTCONN) {
		return unix.EINPROGRESS
	}
	return err
}

// socket makes a non-blocking socket for e in the namespace.
func (ns *NetNS) socket(e endpoint) (int, error) {
	return ns.socketOf(e.domain(), e.sotype()|unix.SOCK_NONBLOCK, 0, nil)
}

// owner is a host identity sockets are made as.
type owner struct{ uid, gid uint32 }

// socketOf makes a socket(domain, typ, proto) in the namespace, close on
// exec, owned by user (nil: termgate), on a goroutine locked to its
// OS thread: the thread enters the namespace, makes the socket and
// returns to the namespace it came from. A thread that cannot return
// stays locked, and ends with its goroutine.
func (ns *NetNS) socketOf(domain, typ, proto int, user *owner) (int, error) {
	type result struct {
		fd  int
		err error
	}
	var r result
	onLockedThread(func() error {
		r.fd, r.err = ns.socketHere(domain, typ, proto, user)
		return r.err
	})
	return r.fd, r.err
}

// onLockedThread runs f on a goroutine locked to its OS thread, which
// goes back to the runtime after, unless f failed with ErrNetNSStuck:
// then it ends with the goroutine.
func onLockedThread(f func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if !errors.Is(f(), ErrNetNSStuck) {
			runtime.UnlockOSThread()
		}
	}()
	<-done
}

// socketHere is socketOf on the locked thread.
func (ns *NetNS) socketHere(domain, typ, proto int, user *owner) (int, error) {
	fd := -1
	socket := func() error {
		var err error
		fd, err = unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		return nil
	}
	err := ns.here(func() error {
		if user == nil {
			return socket()
		}
		err := fsid.As(user.uid, user.gid, socket)
		if errors.Is(err, fsid.ErrStuck) {
			return fmt.Errorf("%w: %w", ErrNetNSStuck, err)
		}
		return err
	})
	if errors.Is(err, ErrNetNSStuck) && fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// here runs f with the locked calling thread in the namespace, then
// returns it to the namespace it came from; ErrNetNSStuck when it could
// not.
func (ns *NetNS) here(f func() error) error {
	setns := ns.setns
	if setns == nil {
		setns = unix.Setns
	}
	host, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: open the host's network namespace: %w", err)
	}
	defer unix.Close(host)
	raw, err := ns.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("sandbox: network namespace: %w", err)
	}
	var enter error
	if err := raw.Control(func(fd uintptr) { enter = setns(int(fd), unix.CLONE_NEWNET) }); err != nil {
		return fmt.Errorf("sandbox: network namespace: %w", err)
	}
	switch {
	case errors.Is(enter, unix.EPERM):
		return fmt.Errorf("%w: enter the sandbox's network namespace (CAP_SYS_ADMIN needed): %w", ErrUnavailable, enter)
	case enter != nil:
		return fmt.Errorf("sandbox: enter the sandbox's network namespace: %w", enter)
	}
	err = f()
	if back := setns(host, unix.CLONE_NEWNET); back != nil {
		return fmt.Errorf("%w: %w", ErrNetNSStuck, back)
	}
	return err
}

// canEnterNetNS reports whether termgate may enter a sandbox's network
// namespace: setns(2) needs CAP_SYS_ADMIN in termgate's own user
// namespace too (in the sandbox's, its child, it has every capability).
func canEnterNetNS() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0
}
