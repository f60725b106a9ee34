//go:build linux

package netredirect

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Table is the name of the nftables table Rules installs, of family inet
// (IPv4 and IPv6 together).
const Table = "termgate"

// The chains of Table, both on the output hook, where every packet a
// program of the namespace sends passes.
const (
	// NATChain redirects, before any filter sees the packet.
	NATChain = "redirect"
	// FilterChain refuses what NATChain did not redirect.
	FilterChain = "refuse"
)

// Ports are the loopback ports Rules redirects to.
type Ports struct {
	// TCP is the transparent listener's port, on 127.0.0.1 for IPv4
	// and ::1 for IPv6: every TCP connection to an address outside
	// loopback goes there.
	TCP uint16
	// DNS is the DNS stub's port on loopback, for UDP and TCP to port
	// 53 of an address outside loopback; 0 redirects no DNS, so DNS is
	// refused as other UDP is, and TCP port 53 goes to TCP.
	DNS uint16
	// UDP is the UDP relay's port on loopback, for UDP to any other port
	// of an address outside loopback; the relay reads each datagram's
	// original destination from conntrack (OriginalDst). 0 relays none:
	// such UDP is refused.
	UDP uint16
}

// Rules installs Table on the NETLINK_NETFILTER socket fd, replacing a
// table of that name, in one transaction: either every rule is in place
// or the namespace is as it was. For a destination outside loopback
// (127.0.0.0/8, ::1), in this order:
//
//   - UDP and TCP to port 53 go to DNS (with DNS set);
//   - TCP goes to TCP, and UDP to UDP (with UDP set);
//   - any other TCP packet is answered with a reset, and everything
//     else (UDP, ICMP, raw IP) is dropped with an ICMP port unreachable,
//     so a program's send fails at once with EPERM (IPv6's connected
//     UDP sockets then also read ECONNREFUSED) rather than waiting.
//
// A redirect keeps the original destination in conntrack, where the
// listener reads it (SO_ORIGINAL_DST for TCP, OriginalDst for UDP).
func Rules(fd int, p Ports) error {
	if p.TCP == 0 {
		return errors.New("netredirect: no TCP port to redirect to")
	}
	if p.UDP != 0 && p.UDP == p.DNS {
		return fmt.Errorf("netredirect: UDP relay and DNS on the same port %d", p.UDP)
	}
	i, err := exchange(fd, batch(p))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOENT), errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EPROTONOSUPPORT):
		return fmt.Errorf("%w: %s: %w", ErrMissing, missing(i), err)
	}
	return fmt.Errorf("netredirect: install the nftables table %s (message %d of the transaction): %w", Table, i, err)
}

// ErrMissing reports a kernel without a piece Rules needs; the error
// names the piece.
var ErrMissing = errors.New("netredirect: the kernel lacks a piece of nftables")

// missing names what the kernel lacks when it refused the message of
// batch at index i as unknown.
func missing(i int) string {
	switch {
	case i <= 0:
		return "nf_tables is not available in this kernel (CONFIG_NF_TABLES)"
	case i <= 3:
		return "nf_tables has no inet family in this kernel (CONFIG_NF_TABLES_INET)"
	case i <= 5:
		return "nf_tables has no nat chains in this kernel (CONFIG_NFT_NAT)"
	}
	return "an nf_tables expression is not available in this kernel (CONFIG_NFT_REDIR, CONFIG_NFT_REJECT, CONFIG_NFT_REJECT_INET)"
}

// batch is the transaction Rules sends: the table made (if absent),
// deleted and made again, so that it holds exactly these chains and
// rules, then the chains and the rules.
func batch(p Ports) []message {
	const create = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE
	msgs := []message{
		{typ: unix.NFNL_MSG_BATCH_BEGIN, flags: unix.NLM_F_REQUEST, b: nfgen(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)},
		table(unix.NFT_MSG_NEWTABLE, create),
		table(unix.NFT_MSG_DELTABLE, unix.NLM_F_REQUEST|unix.NLM_F_ACK),
		table(unix.NFT_MSG_NEWTABLE, create|unix.NLM_F_EXCL),
		chain(NATChain, "nat", -100),
		chain(FilterChain, "filter", 0),
	}
	for _, r := range rules(p) {
		msgs = append(msgs, rule(r.chain, r.exprs))
	}
	return append(msgs, message{typ: unix.NFNL_MSG_BATCH_END, flags: unix.NLM_F_REQUEST, b: nfgen(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)})
}

// nfgen is struct nfgenmsg: family, version 0, a big-endian resource id.
func nfgen(family byte, res uint16) []byte {
	return binary.BigEndian.AppendUint16([]byte{family, unix.NFNETLINK_V0}, res)
}

func nftType(msg int) uint16 { return uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | msg) }

func table(msg int, flags uint16) message {
	m := message{typ: nftType(msg), flags: flags, b: nfgen(unix.NFPROTO_INET, 0)}
	m.attr(unix.NFTA_TABLE_NAME, str(Table))
	return m
}

// chain is a base chain on the output hook with policy accept: what no
// rule matches (loopback) passes.
func chain(name, kind string, priority int32) message {
	m := message{typ: nftType(unix.NFT_MSG_NEWCHAIN), flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE, b: nfgen(unix.NFPROTO_INET, 0)}
	m.attr(unix.NFTA_CHAIN_TABLE, str(Table))
	m.attr(unix.NFTA_CHAIN_NAME, str(name))
	m.b = nest(m.b, unix.NFTA_CHAIN_HOOK, func(b []byte) []byte {
		b = appendAttr(b, unix.NFTA_HOOK_HOOKNUM, be32(unix.NF_INET_LOCAL_OUT))
		return appendAttr(b, unix.NFTA_HOOK_PRIORITY, be32(uint32(priority)))
	})
	m.attr(unix.NFTA_CHAIN_POLICY, be32(nfAccept))
	m.attr(unix.NFTA_CHAIN_TYPE, str(kind))
	return m
}

// nfAccept is NF_ACCEPT, a chain's policy.
const nfAccept = 1

func rule(chain string, exprs []expr) message {
	m := message{typ: nftType(unix.NFT_MSG_NEWRULE), flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_APPEND, b: nfgen(unix.NFPROTO_INET, 0)}
	m.attr(unix.NFTA_RULE_TABLE, str(Table))
	m.attr(unix.NFTA_RULE_CHAIN, str(chain))
	m.b = nest(m.b, unix.NFTA_RULE_EXPRESSIONS, func(b []byte) []byte {
		for _, e := range exprs {
			b = nest(b, unix.NFTA_LIST_ELEM, func(b []byte) []byte {
				b = appendAttr(b, unix.NFTA_EXPR_NAME, str(e.name))
				return nest(b, unix.NFTA_EXPR_DATA, e.data)
			})
		}
		return b
	})
	return m
}
