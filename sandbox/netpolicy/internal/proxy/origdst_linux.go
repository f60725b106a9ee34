package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/termgate/termgate/sandbox/internal/netredirect"
)

// originalDst returns where a redirected connection was going, as
// conntrack kept it (netredirect.ConnOriginalDst).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("proxy: a transparent connection must be TCP")
	}
	dst, err := netredirect.ConnOriginalDst(tc)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("proxy: the connection's original destination: %w", err)
	}
	return dst, nil
}
