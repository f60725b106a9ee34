package netpolicy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// DefaultTimeout bounds a Dial, resolving and connecting, when
// Dialer.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// minAttempt is the least time one address gets when a Dial has several
// to try, unless less is left.
const minAttempt = 2 * time.Second

// A Dialer connects on behalf of a sandbox, to what a policy allows only.
// Its zero value is ready: the host's resolver, DefaultTimeout, and the
// host's addresses from HostAddrs. A Dialer is safe for use by any number
// of goroutines at once; do not change its fields while it is in use.
type Dialer struct {
	// Resolver resolves host names; nil means net.DefaultResolver.
	// NewResolver makes one that asks a given DNS server.
	Resolver *net.Resolver
	// Timeout bounds a whole Dial, resolving and connecting; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// OwnAddrs reports the host's own addresses, refused like loopback;
	// nil means HostAddrs. A Dial that cannot learn them fails.
	OwnAddrs func() ([]netip.Addr, error)
}

// A RefusedError is a connection a policy refused.
type RefusedError struct {
	Decision Decision
}

func (e *RefusedError) Error() string { return "netpolicy: refused: " + e.Decision.Reason }

// NewResolver returns a resolver that asks the DNS server at server
// ("127.0.0.53:53") over UDP, and over TCP for answers too long for UDP,
// whatever /etc/resolv.conf names. It still reads names in /etc/hosts
// first, as Go's resolver does; the Dialer checks what it returns all
// the same.
func NewResolver(server string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, server)
			if err != nil {
				return nil, err
			}
			// The resolver does not watch ctx while it waits for an
			// answer: a lookup whose callers all left would wait on to
			// its timeout (5 s a try). Closing its socket ends it now.
			stop := context.AfterFunc(ctx, func() { c.Close() })
			switch c := c.(type) {
			case *net.UDPConn: // the resolver tells packets from streams by type
				return &stoppingUDPConn{c, stop}, nil
			case *net.TCPConn:
				return &stoppingTCPConn{c, stop}, nil
			}
			return c, nil
		},
	}
}

// stoppingUDPConn and stoppingTCPConn are a resolver's sockets, closed
// when its lookup is cancelled; Close lets the watch go.
type (
	stoppingUDPConn struct {
		*net.UDPConn
		stop func() bool
	}
	stoppingTCPConn struct {
		*net.TCPConn
		stop func() bool
	}
)

func (c *stoppingUDPConn) Close() error { c.stop(); return c.UDPConn.Close() }
func (c *stoppingTCPConn) Close() error { c.stop(); return c.TCPConn.Close() }

// Dial connects to host, a host name or an IP address, on port over
// network ("tcp", "udp", or their 4 and 6 forms), if policy p allows it.
//
// A name is checked (Policy.CheckName), then resolved once, as an
// absolute name (no search domains), and each address it resolves to is
// checked again (Policy.CheckAddr), so that no answer turns an allowed
// name into a refused address. Dial then connects to the addresses that
// passed, in the resolver's order, until one answers; it never resolves
// the name again, and connects to nothing it did not check. An address
// is checked as itself. A refusal is a *RefusedError, with the Decision
// also returned; the Decision returned with a connection is the one for
// the address it reached.
func (d *Dialer) Dial(ctx context.Context, p *Policy, network, host string, port uint16) (net.Conn, Decision, error) {
	if ctx.Err() != nil {
		// Nothing is tried: a lookup, once started, would run on for up
		// to the resolver's timeout after its caller left.
		return nil, Decision{}, fmt.Errorf("netpolicy: dial %s: %w", host, context.Cause(ctx))
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(d.Timeout, DefaultTimeout))
	defer cancel()
	own, err := d.ownAddrs()
	if err != nil {
		return nil, Decision{}, err
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		dec := p.CheckAddr(network, "", a, port, own)
		if !dec.Allowed {
			return nil, dec, &RefusedError{dec}
		}
		if !familyHolds(network, dec.Addr) {
			return nil, dec, fmt.Errorf("netpolicy: %s is not an address of network %s", dec.Addr, network)
		}
		return d.connect(ctx, network, []Decision{dec})
	}
	dec := p.CheckName(network, host, port)
	if !dec.Allowed {
		return nil, dec, &RefusedError{dec}
	}
	pass, refused, err := d.resolve(ctx, p, network, dec, own)
	switch {
	case err != nil:
		return nil, dec, err
	case len(pass) == 0:
		return nil, refused, &RefusedError{refused}
	}
	return d.connect(ctx, network, pass)
}

// resolve resolves an allowed name once and checks each address: pass
// is the decisions of those allowed, in order; refused is the first
// refusal, for when none is.
func (d *Dialer) resolve(ctx context.Context, p *Policy, network string, dec Decision, own []netip.Addr) (pass []Decision, refused Decision, err error) {
	r := cmp.Or(d.Resolver, net.DefaultResolver)
	addrs, err := r.LookupNetIP(ctx, lookupNetwork(network), dec.Host+".")
	if err != nil {
		return nil, dec, fmt.Errorf("netpolicy: resolve %s: %w", dec.Host, err)
	}
	seen := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		if seen[a] || !familyHolds(network, a) {
			continue
		}
		seen[a] = true
		ad := p.CheckAddr(network, dec.Host, a, dec.Port, own)
		if ad.Allowed {
			pass = append(pass, ad)
		} else if !refused.Addr.IsValid() {
			refused = ad
		}
	}
	if len(pass) == 0 && !refused.Addr.IsValid() {
		return nil, dec, fmt.Errorf("netpolicy: resolve %s: no address for network %s", dec.Host, network)
	}
	return pass, refused, nil
}

// connect connects to the first of the checked addresses that answers,
// giving each an equal share of the time left (at least minAttempt).
func (d *Dialer) connect(ctx context.Context, network string, pass []Decision) (net.Conn, Decision, error) {
	var errs []error
	for i, dec := range pass {
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		share := max(left/time.Duration(len(pass)-i), min(left, minAttempt))
		actx, cancel := context.WithTimeout(ctx, share)
		var nd net.Dialer
		c, err := nd.DialContext(actx, familyNetwork(network, dec.Addr), netip.AddrPortFrom(dec.Addr, dec.Port).String())
		cancel()
		if err == nil {
			return c, dec, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	last := pass[len(pass)-1]
	return nil, last, fmt.Errorf("netpolicy: connect to %s: %w", last.target(), errors.Join(errs...))
}

func (d *Dialer) ownAddrs() ([]netip.Addr, error) {
	if d.OwnAddrs != nil {
		return d.OwnAddrs()
	}
	return HostAddrs()
}

// lookupNetwork is the network to resolve a name in for network.
func lookupNetwork(network string) string {
	switch {
	case strings.HasSuffix(network, "4"):
		return "ip4"
	case strings.HasSuffix(network, "6"):
		return "ip6"
	}
	return "ip"
}

// familyHolds reports whether a belongs to network's address family.
func familyHolds(network string, a netip.Addr) bool {
	switch {
	case strings.HasSuffix(network, "4"):
		return a.Is4()
	case strings.HasSuffix(network, "6"):
		return a.Is6()
	}
	return true
}

// familyNetwork is network narrowed to a's family: "tcp4" for an IPv4
// address over "tcp".
func familyNetwork(network string, a netip.Addr) string {
	base := strings.TrimRight(network, "46")
	if a.Is4() {
		return base + "4"
	}
	return base + "6"
}
