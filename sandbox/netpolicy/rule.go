package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// protos is a set of transport protocols a rule applies to.
type protos uint8

const (
	protoTCP protos = 1 << iota
	protoUDP
)

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi uint16 }

var (
	// webPorts are an allow rule's ports when it names none.
	webPorts = []portRange{{80, 80}, {443, 443}}
	// allPorts are a deny rule's ports when it names none.
	allPorts = []portRange{{1, 65535}}
)

// hostKind says what a rule's host part is.
type hostKind uint8

const (
	hostAny    hostKind = iota // "*": any name, any address
	hostName                   // one name
	hostSuffix                 // "*.suffix": any name below suffix
	hostPrefix                 // an address or a CIDR
)

// rule is one parsed allow or deny rule. It is never changed once parsed.
type rule struct {
	text   string // as written in the file
	line   int    // its line, 0 when unknown
	protos protos
	kind   hostKind
	name   string       // hostName: the name; hostSuffix: the suffix
	prefix netip.Prefix // hostPrefix: the network, IPv4 unmapped
	ports  []portRange
}

// parseRule parses one rule of an allow list, or of a deny list when deny
// is set: the two differ only in their defaults (an allow rule without a
// protocol is for TCP and without a port for 80 and 443; a deny rule
// without them is for both protocols and every port).
func parseRule(text string, deny bool) (rule, error) {
	r := rule{text: text, protos: protoTCP, ports: webPorts}
	if deny {
		r.protos, r.ports = protoTCP|protoUDP, allPorts
	}
	if err := checkRuleText(text); err != nil {
		return r, err
	}
	s := strings.ToLower(text)
	if rest, ok := strings.CutPrefix(s, "udp:"); ok {
		r.protos, s = protoUDP, rest
	} else if rest, ok := strings.CutPrefix(s, "tcp:"); ok {
		r.protos, s = protoTCP, rest
	}
	host, port, bracketed, err := splitRule(s)
	if err != nil {
		return r, err
	}
	if port != "" {
		pr, err := parsePorts(port)
		if err != nil {
			return r, err
		}
		r.ports = []portRange{pr}
	} else if r.protos == protoUDP && !deny {
		return r, errors.New("a udp rule names its port (udp:host:port)")
	}
	if err := r.parseHost(host, bracketed); err != nil {
		return r, err
	}
	return r, nil
}

// checkRuleText refuses what no rule holds: nothing, white space, and
// characters outside ASCII.
func checkRuleText(text string) error {
	if text == "" {
		return errors.New("empty rule")
	}
	for _, c := range text {
		switch {
		case c > 0x7e:
			return errors.New("non-ASCII character: international names are written in their ASCII (xn--) form")
		case c <= ' ':
			return errors.New("white space or a control character in a rule")
		}
	}
	return nil
}

// splitRule splits s, a rule without its protocol, into its host and its
// port ("" when it has none). An IPv6 address or CIDR followed by a port
// stands in brackets; one without brackets has no port.
func splitRule(s string) (host, port string, bracketed bool, err error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", false, errors.New("'[' without ']'")
		}
		if after == "" {
			return host, "", true, nil
		}
		port, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", "", false, fmt.Errorf("%q after ']': want :port", after)
		}
		return host, port, true, checkPortText(port)
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, nil
	case 1:
		host, port, _ := strings.Cut(s, ":")
		return host, port, false, checkPortText(port)
	}
	return s, "", false, nil // IPv6 without brackets: no port
}

// checkPortText refuses an empty port, for a rule ending in ':'.
func checkPortText(port string) error {
	if port == "" {
		return errors.New("empty port after ':'")
	}
	return nil
}

// parsePorts parses "port" or "lo-hi".
func parsePorts(s string) (portRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	l, err := parsePort(lo)
	if err != nil {
		return portRange{}, err
	}
	if !isRange {
		return portRange{l, l}, nil
	}
	h, err := parsePort(hi)
	if err != nil {
		return portRange{}, err
	}
	if h < l {
		return portRange{}, fmt.Errorf("port range %s ends before it starts", s)
	}
	return portRange{l, h}, nil
}

// parsePort parses a port, 1 to 65535, written in decimal without a sign
// or leading zeros.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// parseHost parses a rule's host part into r.
func (r *rule) parseHost(host string, bracketed bool) error {
	switch {
	case host == "*" && !bracketed:
		r.kind = hostAny
		return nil
	case bracketed || looksLikeAddr(host):
		p, err := parsePrefix(host, bracketed)
		r.kind, r.prefix = hostPrefix, p
		return err
	}
	suffix, wild := strings.CutPrefix(host, "*.")
	name, err := checkHostName(suffix)
	if err != nil {
		return err
	}
	r.kind, r.name = hostName, name
	if wild {
		r.kind = hostSuffix
	}
	return nil
}

// looksLikeAddr tells an address or CIDR from a name: a name has no ':'
// or '/', and its last label is not a number.
func looksLikeAddr(host string) bool {
	if strings.ContainsAny(host, ":/") {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// parsePrefix parses an address or a CIDR, brackets removed; an address
// is the prefix that holds it alone. A CIDR has no bits set past its
// length, and an IPv4-mapped IPv6 one is written back as IPv4.
func parsePrefix(s string, bracketed bool) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("CIDR %q: %v", s, unwrapParse(err))
		}
		if m := p.Masked(); m != p {
			return p, fmt.Errorf("CIDR %s has bits set past /%d: did you mean %s?", s, p.Bits(), m)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("address %q: %v", s, unwrapParse(err))
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("address %s: a zone (%%%s) has no place in a rule", s, a.Zone())
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if bracketed && !p.Addr().Is6() {
		return p, fmt.Errorf("brackets around %s: they are for IPv6", s)
	}
	return unmapPrefix(p), nil
}

// unwrapParse is netip's parse error without the input it repeats.
func unwrapParse(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// unmapPrefix writes an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) as
// the IPv4 prefix it is (10.0.0.0/8), since addresses are unmapped before
// they are matched.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// checkHostName checks and normalises a host name: a trailing dot goes,
// letters become lower case, and it holds dot-separated labels of 1 to 63
// letters, digits, '-' and '_' (no label starts or ends with '-'), at
// most MaxNameLen bytes, whose last label is not a number (a name such as
// 127.1 or 0x7f000001 is an address to some resolvers).
func checkHostName(s string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if name == "" {
		return "", errors.New("empty host name")
	}
	if len(name) > MaxNameLen {
		return "", fmt.Errorf("host name of %d bytes: at most %d", len(name), MaxNameLen)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", fmt.Errorf("host name %q: %w", truncate(s), err)
		}
	}
	if last := labels[len(labels)-1]; isNumeric(last) {
		return "", fmt.Errorf("host name %q ends in a number, which resolvers may read as an address: write the address", truncate(s))
	}
	return name, nil
}

// checkLabel checks one label of a host name, in lower case.
func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label of %d bytes: at most 63", len(l))
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	case strings.Contains(l, "*"):
		return errors.New("a wildcard stands only at the start, as in *.example.org")
	}
	for _, c := range []byte(l) {
		if c >= 0x80 {
			return errors.New("non-ASCII character: international names are written in their ASCII (xn--) form")
		}
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return fmt.Errorf("character %q", c)
		}
	}
	return nil
}

// isNumeric reports whether a label is a decimal or 0x-hex number.
func isNumeric(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// canonical is the rule written in one way only, for digests: its
// protocol and ports are left out when they are the list's defaults.
func (r *rule) canonical(deny bool) string {
	var b strings.Builder
	defProtos, defPorts := protoTCP, webPorts
	if deny {
		defProtos, defPorts = protoTCP|protoUDP, allPorts
	}
	// A host named udp or tcp followed by a port would read as a protocol.
	named := r.kind == hostName && (r.name == "udp" || r.name == "tcp")
	if r.protos != defProtos || named && r.protos != protoTCP|protoUDP {
		if r.protos == protoUDP {
			b.WriteString("udp:")
		} else {
			b.WriteString("tcp:")
		}
	}
	ports := ""
	if !equalPorts(r.ports, defPorts) {
		ports = r.ports[0].String()
	}
	b.WriteString(r.hostString(ports != ""))
	if ports != "" {
		b.WriteString(":" + ports)
	}
	return b.String()
}

// hostString is the rule's host part; an IPv6 one in brackets when a
// port follows.
func (r *rule) hostString(portFollows bool) string {
	switch r.kind {
	case hostAny:
		return "*"
	case hostSuffix:
		return "*." + r.name
	case hostName:
		return r.name
	}
	s := r.prefix.String()
	if r.prefix.IsSingleIP() {
		s = r.prefix.Addr().String()
	}
	if r.prefix.Addr().Is6() && portFollows {
		s = "[" + s + "]"
	}
	return s
}

func (pr portRange) String() string {
	if pr.lo == pr.hi {
		return strconv.Itoa(int(pr.lo))
	}
	return fmt.Sprintf("%d-%d", pr.lo, pr.hi)
}

func equalPorts(a, b []portRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matchPort reports whether the rule covers port over protocol p.
func (r *rule) matchPort(p protos, port uint16) bool {
	if r.protos&p == 0 {
		return false
	}
	for _, pr := range r.ports {
		if pr.lo <= port && port <= pr.hi {
			return true
		}
	}
	return false
}

// matchName reports whether the rule's host part covers name, a checked
// host name.
func (r *rule) matchName(name string) bool {
	switch r.kind {
	case hostAny:
		return true
	case hostName:
		return name == r.name
	case hostSuffix:
		return len(name) > len(r.name) && strings.HasSuffix(name, r.name) && name[len(name)-len(r.name)-1] == '.'
	}
	return false
}

// matchAddr reports whether the rule's host part covers a, an unmapped
// address.
func (r *rule) matchAddr(a netip.Addr) bool {
	switch r.kind {
	case hostAny:
		return true
	case hostPrefix:
		return r.prefix.Contains(a)
	}
	return false
}
