//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/termgate/termgate/sandbox/internal/netredirect"
	"golang.org/x/sys/unix"
)

// ErrNotRedirected is RedirectedConn.OriginalDst's answer for a datagram
// that no redirect sent: conntrack holds none from that address (or no
// longer), or the program sent it to the relay's own address.
var ErrNotRedirected = netredirect.ErrNoEntry

// RedirectedConn is the packet socket of a Socket with Redirected: the
// UDP relay's, which a Redirect with UDP sends every UDP datagram to an
// outside address (other than DNS). OriginalDst tells where each was
// going; an answer written to its sender reaches the program as from
// there (conntrack undoes the redirect). Its methods are safe for
// concurrent use.
type RedirectedConn struct {
	*net.UDPConn
	local netip.AddrPort

	mu sync.Mutex
	nf int // the namespace's NETLINK_NETFILTER socket; -1 once closed
}

// OriginalDst returns where the datagram that came from from was going,
// as the redirect's conntrack entry holds it. The entry lasts while the
// program's socket sends or is answered (30 s after the last datagram
// at the kernel's defaults, 120 s once answered): asked within that of
// a datagram read, the answer is that datagram's. ErrNotRedirected
// reports a datagram no redirect sent.
func (c *RedirectedConn) OriginalDst(from netip.AddrPort) (netip.AddrPort, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nf < 0 {
		return netip.AddrPort{}, net.ErrClosed
	}
	dst, err := netredirect.OriginalDst(c.nf, c.local, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	if err != nil {
		return netip.AddrPort{}, err
	}
	if dst == c.local {
		return netip.AddrPort{}, fmt.Errorf("%w: it was sent to the relay's own address", ErrNotRedirected)
	}
	return dst, nil
}

// Close closes the socket and its conntrack socket.
func (c *RedirectedConn) Close() error {
	c.mu.Lock()
	if c.nf >= 0 {
		unix.Close(c.nf)
		c.nf = -1
	}
	c.mu.Unlock()
	return c.UDPConn.Close()
}

// listenRedirected opens the relay's socket and a conntrack socket in ns.
func (ns *NetNS) listenRedirected(network, addr string) (*RedirectedConn, error) {
	pc, err := ns.ListenPacket(network, addr)
	if err != nil {
		return nil, err
	}
	nf, err := ns.socketOf(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, nil)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("sandbox: the UDP relay's conntrack socket in the sandbox: %w", err)
	}
	return &RedirectedConn{UDPConn: pc.(*net.UDPConn), local: netip.MustParseAddrPort(addr), nf: nf}, nil
}
