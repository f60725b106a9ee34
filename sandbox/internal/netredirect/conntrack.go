//go:build linux

package netredirect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ctnetlink's message types and attributes
// (linux/netfilter/nfnetlink_conntrack.h), which x/sys does not name.
const (
	ctMsgGet = 1 // IPCTNL_MSG_CT_GET

	ctaTupleOrig  = 1 // CTA_TUPLE_ORIG
	ctaTupleReply = 2 // CTA_TUPLE_REPLY

	ctaTupleIP    = 1 // CTA_TUPLE_IP
	ctaTupleProto = 2 // CTA_TUPLE_PROTO

	ctaIPv4Src = 1 // CTA_IP_V4_SRC
	ctaIPv4Dst = 2 // CTA_IP_V4_DST
	ctaIPv6Src = 3 // CTA_IP_V6_SRC
	ctaIPv6Dst = 4 // CTA_IP_V6_DST

	ctaProtoNum     = 1 // CTA_PROTO_NUM
	ctaProtoSrcPort = 2 // CTA_PROTO_SRC_PORT
	ctaProtoDstPort = 3 // CTA_PROTO_DST_PORT
)

// ErrNoEntry reports a datagram conntrack keeps no entry of: none came
// from that socket, or its entry expired.
var ErrNoEntry = errors.New("netredirect: conntrack has no redirect of this datagram")

// OriginalDst asks conntrack, on the NETLINK_NETFILTER socket fd of the
// namespace, where a UDP datagram that a redirect sent to local (the
// listener's address) from remote (the program's socket) was going.
// Conntrack keeps the redirect as long as the flow is active (30 s
// after its last datagram, 120 s once answered): asked within that, the
// answer is the one the redirect made. A datagram sent to the listener's
// own address was not redirected: its answer is local.
func OriginalDst(fd int, local, remote netip.AddrPort) (netip.AddrPort, error) {
	if local.Addr().Is4() != remote.Addr().Is4() {
		return netip.AddrPort{}, fmt.Errorf("netredirect: conntrack: %s and %s are of two families", local, remote)
	}
	family, src, dst := byte(unix.AF_INET), uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if local.Addr().Is6() {
		family, src, dst = unix.AF_INET6, ctaIPv6Src, ctaIPv6Dst
	}
	m := message{typ: unix.NFNL_SUBSYS_CTNETLINK<<8 | ctMsgGet, flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK, b: nfgen(family, 0)}
	// The reply tuple: what the redirected datagram's answer would carry,
	// from the listener to the program.
	m.b = nest(m.b, ctaTupleReply, func(b []byte) []byte {
		b = nest(b, ctaTupleIP, func(b []byte) []byte {
			b = appendAttr(b, src, local.Addr().AsSlice())
			return appendAttr(b, dst, remote.Addr().AsSlice())
		})
		return nest(b, ctaTupleProto, func(b []byte) []byte {
			b = appendAttr(b, ctaProtoNum, []byte{unix.IPPROTO_UDP})
			b = appendAttr(b, ctaProtoSrcPort, be16(local.Port()))
			return appendAttr(b, ctaProtoDstPort, be16(remote.Port()))
		})
	})
	reply, err := query(fd, m)
	switch {
	case errors.Is(err, unix.ENOENT):
		return netip.AddrPort{}, ErrNoEntry
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("netredirect: conntrack: %w", err)
	}
	orig := attrs(attrs(reply)[ctaTupleOrig])
	addr, ok := netip.AddrFromSlice(attrs(orig[ctaTupleIP])[dst])
	port := attrs(orig[ctaTupleProto])[ctaProtoDstPort]
	if !ok || len(port) != 2 {
		return netip.AddrPort{}, errors.New("netredirect: conntrack: an answer without an original destination")
	}
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(port)), nil
}

// attrs indexes the netlink attributes in b by type (the nested and
// byte-order flags cleared); a truncated one ends the list.
func attrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofRtAttr {
		size := int(binary.NativeEndian.Uint16(b))
		if size < unix.SizeofRtAttr || size > len(b) {
			break
		}
		out[binary.NativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER)] = b[unix.SizeofRtAttr:size]
		b = b[min((size+3)&^3, len(b)):]
	}
	return out
}
