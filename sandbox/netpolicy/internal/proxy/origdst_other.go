//go:build !linux

package proxy

import (
	"errors"
	"net"
	"net/netip"
)

// originalDst needs Linux's conntrack: elsewhere nothing is redirected.
func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("proxy: transparent connections need Linux")
}
