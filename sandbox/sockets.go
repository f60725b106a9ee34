//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSocketsGone is Process.Sockets' answer once the sockets were handed
// over, closed with the ended process, or, for an adopted process, died
// with the launcher that opened them (NetNS opens them again).
var ErrSocketsGone = errors.New("sandbox: the sandbox's sockets were handed over already, or are closed")

// MaxListen is the most sockets a policy may have opened in its sandbox
// (Policy.Listen).
const MaxListen = 16

// Socket is a socket opened in the sandbox's network before its command
// runs (Policy.Listen).
type Socket struct {
	// Network is tcp, tcp4 or tcp6 for a listener, udp, udp4 or udp6
	// for a packet socket.
	Network string `json:"network"`
	// Addr is a loopback IP address and a port other than 0, such as
	// "127.0.0.1:3128": the command finds the socket there.
	Addr string `json:"addr"`
	// Redirected makes a udp socket the UDP relay of a Redirect (on the
	// port of its UDP): its PacketConn is a *RedirectedConn.
	Redirected bool `json:"redirected,omitempty"`
}

// OpenSocket is one of Policy.Listen, open in the sandbox's network:
// Listener for tcp, PacketConn for udp (a *RedirectedConn for a
// Redirected one); the other is nil.
type OpenSocket struct {
	Socket
	Listener   net.Listener
	PacketConn net.PacketConn
}

// Close closes the listener or the packet socket.
func (s OpenSocket) Close() error {
	if s.Listener != nil {
		return s.Listener.Close()
	}
	return s.PacketConn.Close()
}

// endpoint is a network and an address the sandbox's sockets accept:
// an IP literal and a port, of the network's family.
type endpoint struct {
	udp bool
	ap  netip.AddrPort
}

// parseEndpoint checks network (tcp or udp, with 4 or 6) and addr (an
// IP address without a zone, and a port; no v4-mapped IPv6 address).
func parseEndpoint(network, addr string) (endpoint, error) {
	var e endpoint
	var family string
	switch network {
	case "tcp", "tcp4", "tcp6":
		family = strings.TrimPrefix(network, "tcp")
	case "udp", "udp4", "udp6":
		e.udp, family = true, strings.TrimPrefix(network, "udp")
	default:
		return e, fmt.Errorf("network %q: want tcp, tcp4, tcp6, udp, udp4 or udp6", network)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return e, fmt.Errorf("address %q: want an IP address and a port, such as 127.0.0.1:3128", addr)
	}
	ip := ap.Addr()
	switch {
	case ip.Zone() != "":
		return e, fmt.Errorf("address %q: an IPv6 zone is not allowed", addr)
	case ip.Is4In6():
		return e, fmt.Errorf("address %q: write an IPv4 address as such (%s)", addr, ip.Unmap())
	case family == "4" && !ip.Is4(), family == "6" && !ip.Is6():
		return e, fmt.Errorf("address %q is not of network %s", addr, network)
	}
	e.ap = ap
	return e, nil
}

func (e endpoint) domain() int {
	if e.ap.Addr().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func (e endpoint) sotype() int {
	if e.udp {
		return unix.SOCK_DGRAM
	}
	return unix.SOCK_STREAM
}

func (e endpoint) sockaddr() unix.Sockaddr {
	if e.ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(e.ap.Port()), Addr: e.ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(e.ap.Port()), Addr: e.ap.Addr().As16()}
}

// key names e's place in the namespace: a port per transport and address.
func (e endpoint) key() string {
	if e.udp {
		return "udp " + e.ap.String()
	}
	return "tcp " + e.ap.String()
}

// validateListen accepts at most MaxListen sockets, each on a loopback
// address and a fixed port, none twice, in a network of the sandbox's
// own.
func (p Policy) validateListen() error {
	if len(p.Listen) == 0 {
		return nil
	}
	if p.Network != NetworkNone {
		return fmt.Errorf("listening sockets need network %s, a network of the sandbox's own: with network %s they would be the host's", NetworkNone, p.Network)
	}
	if len(p.Listen) > MaxListen {
		return fmt.Errorf("%d listening sockets, at most %d allowed", len(p.Listen), MaxListen)
	}
	seen := make(map[string]bool, len(p.Listen))
	for _, s := range p.Listen {
		e, err := parseEndpoint(s.Network, s.Addr)
		switch {
		case err != nil:
			return fmt.Errorf("listen: %w", err)
		case !e.ap.Addr().IsLoopback():
			return fmt.Errorf("listen: address %q is not a loopback address (127.0.0.0/8 or ::1)", s.Addr)
		case e.ap.Port() == 0:
			return fmt.Errorf("listen: address %q needs a port other than 0: the command finds the socket by its address", s.Addr)
		case seen[e.key()]:
			return fmt.Errorf("listen: %s %s is given twice", s.Network, s.Addr)
		case s.Redirected && (!e.udp || p.Redirect == nil || p.Redirect.UDP != e.ap.Port()):
			return fmt.Errorf("listen: %s %s is redirected, but it is not the UDP relay of the policy's redirect", s.Network, s.Addr)
		}
		seen[e.key()] = true
	}
	return nil
}

// Sockets hands over the sockets of Policy.Listen, in its order, open in
// the sandbox's network since before bwrap was forked. It waits until
// the sandbox is ready for its command where the init holds (for its
// terminals), then hands them over once: the caller closes them. Later calls, and calls
// after the process ended without taking them, return ErrSocketsGone; so
// do an adopted process's, whose sockets died with the launcher that
// opened them (NetNS opens new ones). Without Policy.Listen, nil.
func (p *Process) Sockets(ctx context.Context) ([]OpenSocket, error) {
	if len(p.policy.Listen) == 0 {
		return nil, nil
	}
	select {
	case <-p.ctl.released:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.socketsErr != nil {
		return nil, p.socketsErr
	}
	s := p.sockets
	p.sockets, p.socketsErr = nil, ErrSocketsGone
	return s, nil
}

// errNoSockets is Sockets' answer when the sandbox failed before its
// sockets were opened.
var errNoSockets = errors.New("sandbox: the sandbox failed before its sockets were opened")

// ownNetwork says whether p's sandbox gets a network prepared before its
// bwrap (a preparedNet): one of its own with sockets or a redirect.
func ownNetwork(p Policy) bool {
	return p.Network == NetworkNone && (p.Redirect != nil || len(p.Listen) > 0)
}

// handNetwork keeps the sandbox's prepared network: its sockets for
// Sockets, the namespace for NetNS.
func (p *Process) handNetwork(pn *preparedNet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.socketsDropped { // the process ended meanwhile
		pn.close()
		return
	}
	p.sockets, p.socketsErr, p.netns = pn.sockets, nil, pn.ns
}

// Open opens every socket of socks in the namespace, or none: a
// policy's Listen, for a process adopted after the launcher that opened
// them ended (their addresses are free again) as at the start.
func (ns *NetNS) Open(socks []Socket) ([]OpenSocket, error) {
	var err error
	open := make([]OpenSocket, 0, len(socks))
	for _, s := range socks {
		o := OpenSocket{Socket: s}
		switch {
		case s.Redirected:
			var rc *RedirectedConn
			if rc, err = ns.listenRedirected(s.Network, s.Addr); err == nil {
				o.PacketConn = rc
			}
		case strings.HasPrefix(s.Network, "udp"):
			o.PacketConn, err = ns.ListenPacket(s.Network, s.Addr)
		default:
			o.Listener, err = ns.Listen(s.Network, s.Addr)
		}
		if err != nil {
			closeAll(open)
			return nil, err
		}
		open = append(open, o)
	}
	return open, nil
}

// dropSockets closes the sockets nobody took: the process ended, or the
// launcher let go of it. Why they were never opened stays Sockets' answer.
func (p *Process) dropSockets() {
	p.mu.Lock()
	open := p.sockets
	p.sockets, p.socketsDropped = nil, true
	if p.netns != nil {
		p.netns.Close()
		p.netns = nil
	}
	if p.socketsErr == nil {
		p.socketsErr = ErrSocketsGone
	}
	p.mu.Unlock()
	closeAll(open)
}
