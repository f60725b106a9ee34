package netpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// A Decision is the outcome of checking one connection against a policy:
// whether it may be made, which rule decided, and why, in words for the
// person at the terminal.
type Decision struct {
	Allowed bool
	Policy  string     // the policy's name; "" for a nil policy
	Network string     // "tcp" or "udp"
	Host    string     // the host name checked, normalised; "" for an address alone
	Addr    netip.Addr // the address checked, unmapped; invalid for a name alone
	Port    uint16
	Rule    string // the rule that decided, as written; "" when none did
	Line    int    // Rule's line in the policy file; 0 when none decided
	Opened  string // the allow rule that opened Addr's always-refused range, if one did
	Range   string // the class of Addr's always-refused range (loopback, private, link-local, ...); "" if none
	Reason  string // one sentence, safe to show
}

// String is the decision's reason.
func (d Decision) String() string { return d.Reason }

// target is what the connection goes to, as the reason names it:
// "api.example.com:443", "udp 192.0.2.1:53", "[2001:db8::1]:443".
func (d Decision) target() string {
	host := d.Host
	if host == "" && d.Addr.IsValid() {
		host = d.Addr.String()
	}
	s := net.JoinHostPort(host, strconv.Itoa(int(d.Port)))
	if d.Network == "udp" {
		s = "udp " + s
	}
	return s
}

func (d Decision) refuse(format string, args ...any) Decision {
	d.Allowed, d.Rule, d.Line, d.Opened = false, "", 0, ""
	d.Reason = fmt.Sprintf(format, args...)
	return d
}

func (d Decision) denyBy(r *rule) Decision {
	d = d.refuse("%s is denied by rule %q of policy %q", d.subject(), r.text, d.Policy)
	d.Rule, d.Line = r.text, r.line
	return d
}

func (d Decision) allowBy(r *rule) Decision {
	d.Allowed, d.Rule, d.Line = true, r.text, r.line
	d.Reason = fmt.Sprintf("%s is allowed by rule %q of policy %q", d.target(), r.text, d.Policy)
	return d
}

func (d Decision) notAllowed() Decision {
	return d.refuse("%s is not allowed by policy %q", d.subject(), d.Policy)
}

// subject is the target, with the address a name resolved to.
func (d Decision) subject() string {
	if d.Host != "" && d.Addr.IsValid() {
		return d.target() + " (" + d.Addr.String() + ")"
	}
	return d.target()
}

// protoOf is the protocol of a network as net.Dial names it.
func protoOf(network string) (protos, string, bool) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return protoTCP, "tcp", true
	case "udp", "udp4", "udp6":
		return protoUDP, "udp", true
	}
	return 0, network, false
}

// start checks what every check needs: a policy, a network and a port.
func (p *Policy) start(network string, port uint16) (Decision, protos, bool) {
	proto, name, ok := protoOf(network)
	d := Decision{Network: name, Port: port}
	switch {
	case p == nil:
		return d.refuse("no network policy: every connection is refused"), 0, false
	case !ok:
		d.Policy = p.name
		return d.refuse("network %q is neither tcp nor udp", truncate(network)), 0, false
	case port == 0:
		d.Policy = p.name
		return d.refuse("port 0 is not a port to connect to"), 0, false
	}
	d.Policy = p.name
	return d, proto, true
}

// CheckName decides whether a connection to host, a host name not yet
// resolved, on port over network ("tcp", "udp" or their 4 and 6 forms) is
// allowed by its name: the first check, made before resolving. A deny
// rule beats an allow rule. An allowed name still has each address it
// resolves to checked (CheckAddr). An IP address is refused here: its
// check is CheckAddr's.
func (p *Policy) CheckName(network, host string, port uint16) Decision {
	d, proto, ok := p.start(network, port)
	if !ok {
		return d
	}
	return p.checkName(d, proto, host)
}

func (p *Policy) checkName(d Decision, proto protos, host string) Decision {
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return d.refuse("%s is an address, not a host name", truncate(host))
	}
	name, err := checkHostName(host)
	if err != nil {
		return d.refuse("%s", err)
	}
	d.Host = name
	if r := find(p.deny, func(r *rule) bool { return r.matchPort(proto, d.Port) && r.matchName(name) }); r != nil {
		return d.denyBy(r)
	}
	if r := find(p.allow, func(r *rule) bool { return r.matchPort(proto, d.Port) && r.matchName(name) }); r != nil {
		return d.allowBy(r)
	}
	return d.notAllowed()
}

// CheckAddr decides whether a connection to addr on port over network is
// allowed: addr is an address given as such when host is "", or one that
// host resolved to. own is the host's own addresses (HostAddrs), refused
// like loopback.
//
// With a host, the name must be allowed (as CheckName decides) and addr
// must be neither denied nor always refused, unless an allow rule for an
// address or CIDR lying wholly inside addr's always-refused range, and
// covering the port, opens it. Without a host, addr itself must be
// allowed by such a rule, or, outside the always-refused ranges, by any
// allow rule for an address, a CIDR or "*". A deny rule beats an allow
// rule.
func (p *Policy) CheckAddr(network, host string, addr netip.Addr, port uint16, own []netip.Addr) Decision {
	d, proto, ok := p.start(network, port)
	if !ok {
		return d
	}
	a := addr.Unmap()
	d.Addr = a
	switch {
	case !a.IsValid():
		return d.refuse("no address to check")
	case a.Zone() != "":
		return d.refuse("%s has a zone: a policy does not reach addresses with zones", a)
	}
	if host != "" {
		if d = p.checkName(d, proto, host); !d.Allowed {
			return d
		}
	}
	if r := find(p.deny, func(r *rule) bool { return r.matchPort(proto, d.Port) && r.matchAddr(a) }); r != nil {
		return d.denyBy(r)
	}
	if ref, refused := refuse(a, own); refused {
		return p.checkRefused(d, proto, ref)
	}
	if host != "" {
		return d
	}
	if r := find(p.allow, func(r *rule) bool { return r.matchPort(proto, d.Port) && r.matchAddr(d.Addr) }); r != nil {
		return d.allowBy(r)
	}
	return d.notAllowed()
}

// checkRefused decides for an address in an always-refused range: only an
// allow rule for a prefix inside the range's narrowest part opens it.
func (p *Policy) checkRefused(d Decision, proto protos, ref refusal) Decision {
	d.Range = ref.class
	subject := d.target() + " is "
	if d.Host != "" {
		subject = d.target() + " resolved to " + d.Addr.String() + ", "
	}
	if ref.never {
		return d.refuse("%s%s, which no policy opens", subject, ref.what)
	}
	r := find(p.allow, func(r *rule) bool {
		return r.kind == hostPrefix && r.matchPort(proto, d.Port) && r.prefix.Contains(d.Addr) && within(r.prefix, ref.narrowest)
	})
	if r == nil {
		return d.refuse("%s%s, which policy %q does not open", subject, ref.what, d.Policy)
	}
	if d.Host == "" {
		d = d.allowBy(r)
	}
	d.Opened = r.text
	return d
}

// find is the first rule that match accepts, or nil.
func find(rs []rule, match func(*rule) bool) *rule {
	for i := range rs {
		if match(&rs[i]) {
			return &rs[i]
		}
	}
	return nil
}
