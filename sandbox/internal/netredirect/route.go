//go:build linux

package netredirect

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// loopbackIndex is lo's interface index, the same in every network
// namespace (LOOPBACK_IFINDEX): the kernel makes lo first.
const loopbackIndex = 1

// ErrNoIPv6 reports a namespace without IPv6 (the kernel has none, or lo
// has no ::1): no IPv6 route can be made, and none is needed, since a
// program there cannot send IPv6 anywhere.
var ErrNoIPv6 = errors.New("netredirect: no IPv6 in this namespace")

// Routes installs the default routes through lo on the NETLINK_ROUTE
// socket fd: "default dev lo src 127.0.0.1" and "default dev lo src
// ::1". The source matters: without it a connect to a remote address
// picks 0.0.0.0 and never completes. A route that is there already is
// replaced. ErrNoIPv6 (wrapped) reports that IPv4's route is in place
// and IPv6 has none to take.
func Routes(fd int) error {
	if err := route(fd, netip.MustParseAddr("127.0.0.1")); err != nil {
		return fmt.Errorf("netredirect: the default route through lo (IPv4): %w", err)
	}
	err := route(fd, netip.IPv6Loopback())
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EADDRNOTAVAIL):
		return fmt.Errorf("%w: %w", ErrNoIPv6, err)
	case err != nil:
		return fmt.Errorf("netredirect: the default route through lo (IPv6): %w", err)
	}
	return nil
}

// route adds the default route of src's family through lo, from src.
func route(fd int, src netip.Addr) error {
	family, scope := byte(unix.AF_INET), byte(unix.RT_SCOPE_LINK)
	if src.Is6() {
		// IPv6 routes have no link scope; iproute2 makes them universal.
		family, scope = unix.AF_INET6, unix.RT_SCOPE_UNIVERSE
	}
	m := message{
		typ:   unix.RTM_NEWROUTE,
		flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_REPLACE,
		// struct rtmsg: family, dst_len, src_len, tos, table, protocol,
		// scope, type, then 4 bytes of flags.
		b: []byte{family, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_STATIC, scope, unix.RTN_UNICAST, 0, 0, 0, 0},
	}
	m.attr(unix.RTA_OIF, ne32(loopbackIndex))
	m.attr(unix.RTA_PREFSRC, src.AsSlice())
	_, err := exchange(fd, []message{m})
	return err
}
