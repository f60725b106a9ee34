//go:build linux

package netredirect

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST, at SOL_IPV6.
const ip6tSoOriginalDst = 80

// ConnOriginalDst returns where a TCP connection that the redirect sent
// to its listener was going, as conntrack kept it: SO_ORIGINAL_DST, or
// IP6T_SO_ORIGINAL_DST on an IPv6 connection. A connection made to the
// listener's own address gives that address.
func ConnOriginalDst(c syscall.Conn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var gerr error
	if err := raw.Control(func(fd uintptr) { ap, gerr = connOriginalDst(int(fd)) }); err != nil {
		return netip.AddrPort{}, err
	}
	return ap, gerr
}

// connOriginalDst is ConnOriginalDst of the socket fd.
func connOriginalDst(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netredirect: the original destination: %w", err)
	}
	var b [unix.SizeofSockaddrInet6]byte
	level, opt := unix.SOL_IP, unix.SO_ORIGINAL_DST
	if _, v6 := sa.(*unix.SockaddrInet6); v6 {
		level, opt = unix.SOL_IPV6, ip6tSoOriginalDst
	}
	n := uint32(len(b))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&n)), 0); errno != 0 {
		return netip.AddrPort{}, fmt.Errorf("netredirect: the original destination: %w", errno)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	if level == unix.SOL_IP {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), nil
}
