//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/termgate/termgate/sandbox/internal/netredirect"
	"golang.org/x/sys/unix"
)

// DNSPort is the only port Redirect.DNS may name: /etc/resolv.conf
// cannot name another.
const DNSPort = 53

// Redirect makes a sandbox's network, its own and loopback only, send
// every connection to an address outside loopback to termgate's
// listeners on that loopback, so that a program that ignores proxy
// variables (its own resolver, a plain connect) meets the same policy as
// one that honours them. In the sandbox's network namespace, made before
// its bwrap (see the package doc), termgate installs:
//
//   - default routes through lo from 127.0.0.1 and ::1 (IPv6's is
//     skipped where the namespace has no IPv6: nothing can be sent there
//     then);
//   - an nftables table "termgate" (family inet) on the output hook:
//     TCP to an outside address goes to TCP on 127.0.0.1 (IPv4) or ::1
//     (IPv6), where the listener reads the original destination
//     (SO_ORIGINAL_DST); UDP and TCP to port 53 of an outside address go
//     to the DNS stub on port DNS (with DNS set); other UDP to an
//     outside address goes to the UDP relay on port UDP (with UDP set),
//     which reads its original destination from conntrack
//     (RedirectedConn); any other TCP packet outside is reset, and
//     everything else (UDP without a relay, ICMP) dropped with an ICMP
//     port unreachable, so a send fails at once with EPERM.
//
// And with DNS set, /etc/resolv.conf names 127.0.0.1. The listeners are
// the caller's to open (Policy.Listen, NetNS): a redirect to a port
// where nobody listens is refused, so a server that is gone leaves the
// sandbox with no way out rather than an open one. The command holds no
// capability in its namespace and cannot change the routes or the rules;
// and were the rules missing, nothing would leave either: the namespace
// has no link but lo and forwards nothing. A piece that cannot be
// installed (no nf_tables in the kernel) fails the start before bwrap
// is forked, and the error says which (ErrUnenforceable).
type Redirect struct {
	// TCP is the transparent listener's port on 127.0.0.1 and ::1.
	TCP uint16 `json:"tcp"`
	// DNS is the DNS stub's port on 127.0.0.1 and ::1, for UDP and TCP:
	// DNSPort, or 0 for none (then DNS outside is refused as other UDP
	// is, and TCP to port 53 goes to TCP).
	DNS uint16 `json:"dns,omitempty"`
	// UDP is the UDP relay's port on 127.0.0.1 and ::1, for UDP to any
	// other port outside: its socket (a Socket with Redirected) reads
	// where each datagram was going, and its answers reach the program
	// as from there. 0 for none: such UDP is refused.
	UDP uint16 `json:"udp,omitempty"`
}

// validateRedirect accepts a redirect with a network of the sandbox's
// own, a TCP port, and DNS on DNSPort or none.
func (p Policy) validateRedirect() error {
	r := p.Redirect
	switch {
	case r == nil:
		return nil
	case p.Network != NetworkNone:
		return fmt.Errorf("redirect needs network %s, a network of the sandbox's own: with network %s it would be the host's", NetworkNone, p.Network)
	case r.TCP == 0:
		return errors.New("redirect: the TCP port is 0")
	case r.DNS != 0 && r.DNS != DNSPort:
		return fmt.Errorf("redirect: DNS port %d: want %d (resolv.conf names no port) or 0", r.DNS, DNSPort)
	case r.DNS == r.TCP:
		return fmt.Errorf("redirect: TCP and DNS on the same port %d", r.TCP)
	case r.UDP != 0 && r.UDP == r.DNS:
		return fmt.Errorf("redirect: the UDP relay and DNS on the same port %d", r.UDP)
	}
	return nil
}

// Redirect installs r's routes and rules in the namespace, replacing
// those of an earlier call: for a process adopted after a restart, the
// rules are still there (the namespace keeps them), and calling it again
// makes sure they are r's. It fails with ErrUnenforceable, naming the
// missing piece, where the kernel lacks one.
func (ns *NetNS) Redirect(r Redirect) error {
	if r.TCP == 0 {
		return errors.New("sandbox: redirect: the TCP port is 0")
	}
	route, err := ns.socketOf(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, nil)
	if err != nil {
		return fmt.Errorf("sandbox: redirect: a routing socket in the sandbox: %w", err)
	}
	err = netredirect.Routes(route)
	unix.Close(route)
	if err != nil && !errors.Is(err, netredirect.ErrNoIPv6) {
		return fmt.Errorf("sandbox: redirect: %w", err)
	}
	nf, err := ns.socketOf(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, nil)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return fmt.Errorf("%w: redirect: nfnetlink is not available in this kernel (CONFIG_NETFILTER_NETLINK): %w", ErrUnenforceable, err)
	}
	if err != nil {
		return fmt.Errorf("sandbox: redirect: a netfilter socket in the sandbox: %w", err)
	}
	defer unix.Close(nf)
	err = netredirect.Rules(nf, netredirect.Ports{TCP: r.TCP, DNS: r.DNS, UDP: r.UDP})
	if errors.Is(err, netredirect.ErrMissing) {
		return fmt.Errorf("%w: redirect: %w", ErrUnenforceable, err)
	}
	if err != nil {
		return fmt.Errorf("sandbox: redirect: %w", err)
	}
	return nil
}

// checkRedirectPort is the port of CheckRedirect's listener and UDP
// relay, in a sandbox of its own.
const checkRedirectPort = 3129

// checkRedirectTarget is the outside address CheckRedirect connects to:
// TEST-NET-1, which no network routes, so that nothing could answer
// but termgate's listener.
const checkRedirectTarget = "192.0.2.1:443"

// CheckRedirect tells whether this host can enforce Policy.Redirect: it
// starts a throwaway sandbox with a redirect, connects from inside its
// network to an outside address, and checks that the connection reaches
// the sandbox's listener with its original destination, and that a UDP
// datagram outside reaches the relay, which conntrack tells where it
// was going, with the DNS stub's port bound. Its error names what is
// missing.
func (l *Launcher) CheckRedirect(ctx context.Context) error {
	if !canEnterNetNS() {
		return fmt.Errorf("%w: redirect: entering a sandbox's network namespace needs CAP_SYS_ADMIN", ErrUnavailable)
	}
	dir, err := os.MkdirTemp("", "termgate-check-redirect-")
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: %w", err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(checkRedirectPort)
	proc, err := l.Start(ctx, Policy{
		Command: []string{"/bin/sh", "-c", "read x"}, Workspace: dir, Key: "check-redirect-" + randomName(),
		// The DNS stub's port too: a privileged port, which a container's
		// root binds only with CAP_NET_BIND_SERVICE.
		Listen: []Socket{{Network: "tcp4", Addr: addr}, {Network: "udp4", Addr: addr, Redirected: true},
			{Network: "udp4", Addr: "127.0.0.1:" + strconv.Itoa(DNSPort)}},
		Redirect: &Redirect{TCP: checkRedirectPort, UDP: checkRedirectPort, DNS: DNSPort},
	}, Stdio{})
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: %w", err)
	}
	defer func() {
		proc.Kill()
		proc.Wait()
		proc.Release()
	}()
	socks, err := proc.Sockets(ctx)
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: %w", err)
	}
	defer closeAll(socks)
	ns, err := proc.NetNS()
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: %w", err)
	}
	defer ns.Close()
	if err := checkRedirected(ctx, ns, socks[0].Listener); err != nil {
		return err
	}
	return checkRelayed(ctx, ns, socks[1].PacketConn.(*RedirectedConn))
}

// checkRedirected connects from ns to checkRedirectTarget and expects
// the connection on l with that original destination.
func checkRedirected(ctx context.Context, ns *NetNS, l net.Listener) error {
	c, err := ns.Dial(ctx, "tcp4", checkRedirectTarget)
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: a TCP connection outside did not reach the listener: %w", err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		l.(*net.TCPListener).SetDeadline(d)
	}
	a, err := l.Accept()
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: accept: %w", err)
	}
	defer a.Close()
	dst, err := netredirect.ConnOriginalDst(a.(*net.TCPConn))
	if err != nil || dst.String() != checkRedirectTarget {
		return fmt.Errorf("sandbox: check redirect: the listener read the original destination %v (%v), want %s", dst, err, checkRedirectTarget)
	}
	return nil
}

// checkRelayed sends a datagram from ns to checkRedirectTarget and
// expects it at relay, with that original destination.
func checkRelayed(ctx context.Context, ns *NetNS, relay *RedirectedConn) error {
	u, err := ns.Dial(ctx, "udp4", checkRedirectTarget)
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: UDP: %w", err)
	}
	defer u.Close()
	if _, err := u.Write([]byte("x")); err != nil {
		return fmt.Errorf("sandbox: check redirect: a UDP datagram outside: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		relay.SetReadDeadline(d)
	}
	_, from, err := relay.ReadFromUDPAddrPort(make([]byte, 16))
	if err != nil {
		return fmt.Errorf("sandbox: check redirect: a UDP datagram outside did not reach the relay: %w", err)
	}
	dst, err := relay.OriginalDst(from)
	if err != nil || dst.String() != checkRedirectTarget {
		return fmt.Errorf("sandbox: check redirect: conntrack gave the UDP relay the original destination %v (%v), want %s", dst, err, checkRedirectTarget)
	}
	return nil
}
