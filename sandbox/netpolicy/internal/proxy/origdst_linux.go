package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST, at SOL_IPV6.
const ip6tSoOriginalDst = 80

// originalDst returns where a redirected connection was going, as
// conntrack kept it: SO_ORIGINAL_DST, or IP6T_SO_ORIGINAL_DST on an
// IPv6 connection.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("proxy: a transparent connection must be TCP")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	v6 := tc.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	var b [unix.SizeofSockaddrInet6]byte
	level, opt := unix.SOL_IP, unix.SO_ORIGINAL_DST
	if v6 {
		level, opt = unix.SOL_IPV6, ip6tSoOriginalDst
	}
	var errno unix.Errno
	err = raw.Control(func(fd uintptr) {
		n := uint32(len(b))
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&n)), 0)
	})
	if err == nil && errno != 0 {
		err = errno
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("proxy: the connection's original destination: %w", err)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	if !v6 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), nil
}
