package netpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// refusedRange is a range of addresses refused to every policy unless a
// rule opens it.
type refusedRange struct {
	prefix netip.Prefix
	class  string // short, for Decision.Range
	what   string // a noun phrase, for Decision.Reason
	never  bool   // no rule opens it
}

// alwaysRefused lists the ranges refused to every policy. Addresses are
// unmapped first, so the IPv4-mapped IPv6 form of each IPv4 range is
// refused as the range itself; NAT64 and 6to4 addresses are refused when
// the IPv4 address they embed is (embeddedV4).
var alwaysRefused = []refusedRange{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified", "the unspecified address, which reaches the host itself", true},
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network", "a this-network address (0.0.0.0/8)", false},
	{netip.MustParsePrefix("10.0.0.0/8"), "private", "a private address (10.0.0.0/8)", false},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared", "a shared address (100.64.0.0/10, carrier-grade NAT and some cloud metadata services)", false},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", "a loopback address", false},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local", "a link-local address (169.254.0.0/16, cloud metadata services)", false},
	{netip.MustParsePrefix("172.16.0.0/12"), "private", "a private address (172.16.0.0/12)", false},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf", "an IETF protocol address (192.0.0.0/24, some cloud metadata services)", false},
	{netip.MustParsePrefix("192.168.0.0/16"), "private", "a private address (192.168.0.0/16)", false},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking", "a benchmarking address (198.18.0.0/15, used inside some networks)", false},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", "a multicast address", false},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved", "a reserved address (240.0.0.0/4)", false},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast", "the broadcast address", true},
	{netip.MustParsePrefix("::/128"), "unspecified", "the unspecified address, which reaches the host itself", true},
	{netip.MustParsePrefix("::1/128"), "loopback", "the loopback address", false},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible", "an IPv4-compatible IPv6 address (::/96, deprecated)", false},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "ipv4-translated", "an IPv4-translated IPv6 address (::ffff:0:0:0/96)", false},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64-local", "a local-use NAT64 address (64:ff9b:1::/48)", false},
	{netip.MustParsePrefix("100::/64"), "discard", "a discard-only address (100::/64)", false},
	{netip.MustParsePrefix("2001::/32"), "teredo", "a Teredo address (2001::/32)", false},
	{netip.MustParsePrefix("fc00::/7"), "unique-local", "a unique-local address (fc00::/7)", false},
	{netip.MustParsePrefix("fe80::/10"), "link-local", "a link-local address (fe80::/10)", false},
	{netip.MustParsePrefix("fec0::/10"), "site-local", "a site-local address (fec0::/10, deprecated)", false},
	{netip.MustParsePrefix("ff00::/8"), "multicast", "a multicast address", false},
}

// Prefixes of IPv6 addresses that embed an IPv4 address: the well-known
// NAT64 prefix (the IPv4 address in the last 32 bits) and 6to4 (in bits
// 16 to 48).
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// refusal is where an address stands in the always-refused set: the
// range, and the narrowest prefix holding it that a rule must lie in to
// open it.
type refusal struct {
	refusedRange
	narrowest netip.Prefix
}

// refuse reports whether a, an unmapped address without a zone, is
// refused to every policy, own being the host's own addresses.
func refuse(a netip.Addr, own []netip.Addr) (refusal, bool) {
	var best refusal
	found := false
	for _, r := range alwaysRefused {
		if r.prefix.Contains(a) && (!found || r.prefix.Bits() > best.narrowest.Bits()) {
			best, found = refusal{r, r.prefix}, true
		}
	}
	if best.never {
		return best, true
	}
	for _, o := range own {
		if o.Unmap().WithZone("") == a {
			single := netip.PrefixFrom(a, a.BitLen())
			return refusal{refusedRange{single, "host", "one of the host's own addresses", false}, single}, true
		}
	}
	if found {
		return best, true
	}
	return embeddedV4(a, own)
}

// embeddedV4 refuses a NAT64 or 6to4 address whose IPv4 address is
// refused: through a translator it reaches that address.
func embeddedV4(a netip.Addr, own []netip.Addr) (refusal, bool) {
	var at int
	switch {
	case nat64Prefix.Contains(a):
		at = 12
	case sixToFour.Contains(a):
		at = 2
	default:
		return refusal{}, false
	}
	b := a.As16()
	v4 := netip.AddrFrom4([4]byte(b[at : at+4]))
	r, ok := refuse(v4, own)
	if !ok {
		return r, false
	}
	bits := at*8 + r.narrowest.Bits()
	r.what = fmt.Sprintf("an IPv6 form of %s (%s is %s)", v4, v4, r.what)
	r.narrowest = netip.PrefixFrom(a, bits).Masked()
	return r, true
}

// within reports whether prefix p lies wholly inside q.
func within(p, q netip.Prefix) bool {
	return p.Addr().BitLen() == q.Addr().BitLen() && p.Bits() >= q.Bits() && q.Contains(p.Addr())
}

// InterfaceAddrs returns the addresses of the host's network interfaces,
// unmapped and without zones: the host's own addresses, which are refused
// to every policy.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("netpolicy: read the host's addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, na.Unmap())
		}
	}
	return out, nil
}

// HostAddrsMaxAge is how long HostAddrs serves one reading of the
// interfaces.
const HostAddrsMaxAge = time.Second

var hostAddrs struct {
	sync.Mutex
	at    time.Time
	addrs []netip.Addr
}

// HostAddrs is InterfaceAddrs read at most once per HostAddrsMaxAge: an
// address the host gains is refused within that time. The slice is
// shared: do not change it.
func HostAddrs() ([]netip.Addr, error) {
	hostAddrs.Lock()
	defer hostAddrs.Unlock()
	if hostAddrs.addrs != nil && time.Since(hostAddrs.at) < HostAddrsMaxAge {
		return hostAddrs.addrs, nil
	}
	addrs, err := InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	hostAddrs.at, hostAddrs.addrs = time.Now(), addrs
	return addrs, nil
}
