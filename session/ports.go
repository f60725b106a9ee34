package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/termgate/termgate/sandbox"
)

// Ports reaches the TCP ports that programs listen on in their
// sandboxes. A connection is made from the host inside the execution's
// network namespace, to its loopback (sandbox.NetNS): nothing extra runs
// in the sandbox, and its network stays what it was (none stays none).
// An execution that shares the host's network has no ports of its own
// (ErrHostPorts). Its methods are safe for concurrent use.
type Ports struct{ s *Supervisor }

// Ports returns the supervisor's Ports.
func (s *Supervisor) Ports() *Ports { return &Ports{s} }

// Errors of Ports, besides ErrNotFound, ErrGone and ErrNotRunning.
var (
	// ErrHostPorts refuses the ports of an execution that shares the
	// host's network: they would be the host's.
	ErrHostPorts = errors.New("session: the execution shares the host's network: its ports are the host's")
	// ErrPortRefused reports a port nothing listens on, on 127.0.0.1 or
	// ::1 of the execution's network.
	ErrPortRefused = errors.New("session: nothing listens on that port")
	// ErrInvalidPort refuses port 0.
	ErrInvalidPort = errors.New("session: port 0 is not a port to connect to")
)

// Dial connects to port on the execution's loopback: 127.0.0.1, then ::1
// where nothing listens on the first (a program that listens on
// "localhost" may have either). ctx bounds the connect only.
func (p *Ports) Dial(ctx context.Context, owner, id string, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, ErrInvalidPort
	}
	ns, err := p.netns(owner, id)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var c net.Conn
	for _, addr := range []string{"127.0.0.1", "::1"} {
		network := "tcp4"
		if addr == "::1" {
			network = "tcp6"
		}
		if c, err = ns.Dial(ctx, network, net.JoinHostPort(addr, strconv.Itoa(int(port)))); !nothingListens(err) {
			break
		}
	}
	switch {
	case nothingListens(err):
		return nil, fmt.Errorf("%w: %d", ErrPortRefused, port)
	case err != nil:
		return nil, fmt.Errorf("session: connect to port %d of %s: %w", port, id, err)
	}
	return c, nil
}

// nothingListens reports a connect that found no listener at its
// address (or no such address: a network without IPv6).
func nothingListens(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)
}

// Listening lists the TCP sockets that the execution's programs listen
// on (address and port, sorted; a wildcard address for one bound to
// every address), without termgate's own there (a network policy's
// proxy, transparent listener and DNS server). At most
// sandbox.MaxListeners.
func (p *Ports) Listening(owner, id string) ([]netip.AddrPort, error) {
	ns, err := p.netns(owner, id)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	all, err := ns.Listeners()
	if err != nil {
		return nil, fmt.Errorf("session: the ports of %s: %w", id, err)
	}
	e, err := p.s.lookup(owner, id)
	if err != nil {
		return nil, err
	}
	own := e.spec.Policy.Listen
	return slices.DeleteFunc(all, func(ap netip.AddrPort) bool {
		return slices.ContainsFunc(own, func(s sandbox.Socket) bool { return strings.HasPrefix(s.Network, "tcp") && s.Addr == ap.String() })
	}), nil
}

// netns opens the network namespace of a running execution.
func (p *Ports) netns(owner, id string) (*sandbox.NetNS, error) {
	e, err := p.s.lookup(owner, id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	proc, ended := e.proc, e.res != nil
	e.mu.Unlock()
	if ended || proc == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, id)
	}
	if e.spec.Policy.Network == sandbox.NetworkHost {
		return nil, ErrHostPorts
	}
	np, ok := proc.(netnsProcess)
	if !ok {
		return nil, fmt.Errorf("%w: this launcher's executions have no network of their own", ErrHostPorts)
	}
	ns, err := np.NetNS()
	switch {
	case errors.Is(err, sandbox.ErrNotRunning):
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, id)
	case errors.Is(err, sandbox.ErrHostNetwork):
		return nil, ErrHostPorts
	case err != nil:
		return nil, fmt.Errorf("session: the network of %s: %w", id, err)
	}
	return ns, nil
}
