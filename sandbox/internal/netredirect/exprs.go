//go:build linux

package netredirect

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// expr is one nftables expression of a rule: its name and the writer of
// its attributes. Every expression works on register 1.
type expr struct {
	name string
	data func([]byte) []byte
}

// chainRule is a rule and the chain it is appended to.
type chainRule struct {
	chain string
	exprs []expr
}

// rules are Rules' rules, IPv4's then IPv6's, in the order they apply.
func rules(p Ports) []chainRule {
	var out []chainRule
	for _, outside := range [][]expr{outside4(), outside6()} {
		if p.DNS != 0 {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				out = append(out, chainRule{NATChain, concat(outside, l4(proto), dport(53), redirectTo(p.DNS))})
			}
		}
		out = append(out, chainRule{NATChain, concat(outside, l4(unix.IPPROTO_TCP), redirectTo(p.TCP))})
		if p.UDP != 0 {
			out = append(out, chainRule{NATChain, concat(outside, l4(unix.IPPROTO_UDP), redirectTo(p.UDP))})
		}
		out = append(out,
			chainRule{FilterChain, concat(outside, l4(unix.IPPROTO_TCP), []expr{reject(unix.NFT_REJECT_TCP_RST, 0)})},
			chainRule{FilterChain, concat(outside, []expr{reject(unix.NFT_REJECT_ICMPX_UNREACH, unix.NFT_REJECT_ICMPX_PORT_UNREACH)})},
		)
	}
	return out
}

func concat(parts ...[]expr) []expr {
	var out []expr
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// outside4 matches IPv4 to a destination outside 127.0.0.0/8: its first
// byte is not 127.
func outside4() []expr {
	return []expr{
		meta(unix.NFT_META_NFPROTO), cmp(unix.NFT_CMP_EQ, []byte{unix.NFPROTO_IPV4}),
		payload(unix.NFT_PAYLOAD_NETWORK_HEADER, 16, 1), cmp(unix.NFT_CMP_NEQ, []byte{127}),
	}
}

// outside6 matches IPv6 to a destination other than ::1.
func outside6() []expr {
	return []expr{
		meta(unix.NFT_META_NFPROTO), cmp(unix.NFT_CMP_EQ, []byte{unix.NFPROTO_IPV6}),
		payload(unix.NFT_PAYLOAD_NETWORK_HEADER, 24, 16), cmp(unix.NFT_CMP_NEQ, netip.IPv6Loopback().AsSlice()),
	}
}

// l4 matches the transport protocol.
func l4(proto byte) []expr {
	return []expr{meta(unix.NFT_META_L4PROTO), cmp(unix.NFT_CMP_EQ, []byte{proto})}
}

// dport matches the destination port of TCP or UDP.
func dport(port uint16) []expr {
	return []expr{payload(unix.NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), cmp(unix.NFT_CMP_EQ, be16(port))}
}

// redirectTo sends the packet to port on the namespace's loopback
// (127.0.0.1 or ::1, as the packet's family).
func redirectTo(port uint16) []expr {
	return []expr{
		{"immediate", func(b []byte) []byte {
			b = appendAttr(b, unix.NFTA_IMMEDIATE_DREG, be32(unix.NFT_REG_1))
			return nest(b, unix.NFTA_IMMEDIATE_DATA, func(b []byte) []byte { return appendAttr(b, unix.NFTA_DATA_VALUE, be16(port)) })
		}},
		{"redir", func(b []byte) []byte {
			b = appendAttr(b, unix.NFTA_REDIR_REG_PROTO_MIN, be32(unix.NFT_REG_1))
			return appendAttr(b, unix.NFTA_REDIR_FLAGS, be32(unix.NF_NAT_RANGE_PROTO_SPECIFIED))
		}},
	}
}

func meta(key uint32) expr {
	return expr{"meta", func(b []byte) []byte {
		b = appendAttr(b, unix.NFTA_META_DREG, be32(unix.NFT_REG_1))
		return appendAttr(b, unix.NFTA_META_KEY, be32(key))
	}}
}

func cmp(op uint32, data []byte) expr {
	return expr{"cmp", func(b []byte) []byte {
		b = appendAttr(b, unix.NFTA_CMP_SREG, be32(unix.NFT_REG_1))
		b = appendAttr(b, unix.NFTA_CMP_OP, be32(op))
		return nest(b, unix.NFTA_CMP_DATA, func(b []byte) []byte { return appendAttr(b, unix.NFTA_DATA_VALUE, data) })
	}}
}

func payload(base, offset, length uint32) expr {
	return expr{"payload", func(b []byte) []byte {
		b = appendAttr(b, unix.NFTA_PAYLOAD_DREG, be32(unix.NFT_REG_1))
		b = appendAttr(b, unix.NFTA_PAYLOAD_BASE, be32(base))
		b = appendAttr(b, unix.NFTA_PAYLOAD_OFFSET, be32(offset))
		return appendAttr(b, unix.NFTA_PAYLOAD_LEN, be32(length))
	}}
}

func reject(kind uint32, code byte) expr {
	return expr{"reject", func(b []byte) []byte {
		b = appendAttr(b, unix.NFTA_REJECT_TYPE, be32(kind))
		return appendAttr(b, unix.NFTA_REJECT_ICMP_CODE, []byte{code})
	}}
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
