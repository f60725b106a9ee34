package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// requestAddr is the client address of r as logs show it. Without
// trusted proxies, or when the TCP peer is not one of them, it is the
// peer's (r.RemoteAddr): a client's own X-Forwarded-For is ignored, or it
// could name any address it likes. When the peer is a trusted proxy, it
// is the right-most address of X-Forwarded-For that is not itself a
// trusted proxy: each trusted hop appended the address it saw, and what
// lies left of the first untrusted one was written by the client. The
// walk stops at an entry that is no address; the last address verified
// stands (the peer if none). Every hop trusted: the left-most.
func requestAddr(r *http.Request, trusted []netip.Prefix) string {
	if len(trusted) == 0 {
		return r.RemoteAddr
	}
	peer, ok := parseHop(r.RemoteAddr)
	if !ok || !isTrusted(peer, trusted) {
		return r.RemoteAddr
	}
	addr, verified := r.RemoteAddr, false
	values := r.Header.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- {
		hops := strings.Split(values[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop := strings.TrimSpace(hops[j])
			if hop == "" && !verified {
				continue // an empty header says nothing
			}
			a, ok := parseHop(hop)
			if !ok {
				return addr
			}
			addr, verified = a.String(), true
			if !isTrusted(a, trusted) {
				return addr
			}
		}
	}
	return addr
}

// parseHop reads one address of X-Forwarded-For, or a RemoteAddr: an IP
// address, with or without a port; an IPv4-mapped IPv6 address as IPv4.
func parseHop(s string) (netip.Addr, bool) {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// isTrusted reports whether a is in one of the prefixes.
func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a.WithZone("")) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies reads Config.TrustedProxies from CIDR prefixes or
// single addresses ("10.0.0.0/8", "127.0.0.1"). A prefix of all
// addresses (/0) is refused: every client could then choose the address
// logs show.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("gateway: trusted proxy %q: want an address or a CIDR prefix like 10.0.0.0/8", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("gateway: trusted proxy %q: trusts every address, so any client could choose the address logs show", s)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// remoteAddr is r's client address by the server's trusted proxies.
//
// A verified hop's request (cluster_route.go) is the client's that the
// front node saw: the hop's addr.
func (s *Server) remoteAddr(r *http.Request) string {
	if h, ok := hopFrom(r.Context()); ok && h.Addr != "" {
		return h.Addr
	}
	return requestAddr(r, s.cfg.TrustedProxies)
}
