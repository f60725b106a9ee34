// Package netpolicy decides which network connections a sandbox may make,
// and makes them: the egress allow-list that termgate enforces outside the
// sandbox, whatever the program inside does.
//
// # Policy files
//
// A policy is a TOML file with two optional arrays of strings and nothing
// else (an unknown key or table is an error):
//
//	allow = ["api.example.com:443", "*.example.org:443", "registry.example.net", "10.1.2.0/24:5432"]
//	deny  = ["ads.example.org"]
//
// A rule is [PROTO:]HOST[:PORTS]:
//
//   - HOST is a host name ("api.example.com"; case does not matter and a
//     trailing dot is dropped), "*." and a name for any name below it (not
//     the name itself), "*" for any name and any address, an IPv4 or IPv6
//     address, or a CIDR. An IPv6 address or CIDR followed by a port stands
//     in brackets ("[fd00::1]:443", "[fd00::/64]:443"); without brackets it
//     has no port. Names are ASCII: an international name is written in its
//     xn-- form. A name whose last label is a number (127.1, 0x7f000001) is
//     refused, since some resolvers read it as an address. A CIDR has no
//     bits set past its length.
//   - PORTS is a port or a range, "5432" or "8000-8100". An allow rule
//     without one is for ports 80 and 443; a deny rule without one is for
//     every port.
//   - PROTO is "tcp" or "udp". An allow rule without one is for TCP only,
//     and a udp allow rule names its port ("udp:dns.example.net:53"); a deny
//     rule without one is for both.
//
// A file holds at most MaxFileBytes and MaxRules rules; a name at most
// MaxNameLen bytes. Parse and Load refuse a file that breaks any of this
// with a *ParseError naming the file and the line at fault. A policy's
// name matches [a-z0-9][a-z0-9-]{0,62} and is neither "none" nor "host"
// (ValidName). A Set holds the server's named policies and reloads them:
// a file that fails keeps its policy's previous rules.
//
// # Decisions
//
// A Policy decides for a connection: CheckName for a name before it is
// resolved, CheckAddr for an address, alone or as the name resolved to.
// A deny rule beats an allow rule. A Decision says whether the
// connection is allowed, which rule decided, and why, in a sentence for
// the person at the terminal. A nil *Policy refuses everything.
//
// Some addresses are refused to every policy, for a name and as an
// address alike:
//
//   - loopback (127.0.0.0/8, ::1) and the host's own addresses
//     (HostAddrs, or what the caller gives);
//   - link-local, where cloud metadata services live (169.254.0.0/16,
//     fe80::/10);
//   - private and shared (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
//     100.64.0.0/10) and unique-local (fc00::/7);
//   - multicast (224.0.0.0/4, ff00::/8), unspecified (0.0.0.0, ::) and
//     broadcast (255.255.255.255);
//   - and, because they reach the host, a local network or a translator
//     to one: 0.0.0.0/8, 192.0.0.0/24 (IETF protocol assignments, where
//     some clouds put metadata services), 198.18.0.0/15 (benchmarking,
//     used inside some networks), 240.0.0.0/4 (reserved), the
//     IPv4-compatible (::/96) and IPv4-translated (::ffff:0:0:0/96) forms,
//     local-use NAT64 (64:ff9b:1::/48), discard-only (100::/64), Teredo
//     (2001::/32), site-local (fec0::/10), and the NAT64 (64:ff9b::/96)
//     and 6to4 (2002::/16) forms of any refused IPv4 address.
//
// An address is unmapped before it is checked, so the IPv4-mapped IPv6
// form of an address is the address. An allow rule for an address or a
// CIDR that lies wholly inside one of these ranges, covering the port,
// opens that part for its policy ("10.1.2.0/24:5432", a test's
// "127.0.0.2:8080"): the address is then allowed as itself, and as what
// an allowed name resolved to. A wider rule does not open the ranges it
// contains ("0.0.0.0/0" allows public addresses only), only a rule for
// exactly one of the host's own addresses opens it (10.1.2.0/24 does not
// open the host's 10.1.2.5), and the unspecified and broadcast addresses
// are never opened.
//
// # Dialing
//
// A Dialer makes the connections a policy allows and no other: it checks
// a name, resolves it once with its own resolver (NewResolver asks a
// given DNS server), checks every address the answer holds, and connects
// only to an address that passed, trying them in order within its
// timeout (DefaultTimeout). It never resolves again after checking, so
// an answer that changes (DNS rebinding) cannot turn an allowed name into
// a refused address. A refusal is a *RefusedError carrying its Decision.
//
// # DNS inside a sandbox
//
// A sandbox whose network is redirected (sandbox.Redirect) asks FakeDNS,
// on its own 127.0.0.1:53, for every name. FakeDNS gives a name the
// policy allows on some port (Policy.CheckResolve) a synthetic address
// of FakePrefix (198.18.0.0/15, always refused as a real address) that
// stands for that name alone, and NXDOMAIN to any other; it asks no real
// DNS server. The transparent listener maps the address back to the
// name (FakeDNS.Name), and the Dialer checks and resolves that name at
// connect time as above. At most MaxNames names hold an address at once
// (DefaultMaxNames); past it the name asked least recently loses its
// address, and a connection to that address is refused until the
// program asks again.
//
// A Dialer refuses UDP unless an allow rule says udp. The redirect sends
// a sandbox's UDP other than DNS to a relay (Listeners.UDP), which asks
// the Guard once per flow (a program socket's datagrams to one
// destination; Guard.DialUDP) and drops a refused flow's datagrams; the
// proxy relays no UDP. Connections and flows are checked when they are
// made: a policy that changes later does not reach those already open.
//
// # Serving an execution
//
// An Egress holds the server's Set, Dialer and limits. Serve gives an
// execution a Guard, which serves the listeners opened in its network
// (Listeners: the proxy, the transparent listeners, the DNS server, the
// UDP relays) under
// the execution's policy as it is when each connection is asked for
// (SetPolicy changes it for the next ones). The Guard bounds connections
// per execution and, with the Egress, per tenant; tells refusals to the
// person at the terminal at a bounded pace (Execution.Notify); reports
// every connection and its end (Egress.Observe, for the audit trail); and
// counts them per execution (Guard.Status) and per policy (Egress.Stats).
package netpolicy
