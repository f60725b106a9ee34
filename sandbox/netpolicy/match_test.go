package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func mustParse(t testing.TB, name, data string) *Policy {
	t.Helper()
	p, err := Parse(name, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testOwn stands for the host's own addresses in the matcher's tests.
var testOwn = []netip.Addr{
	netip.MustParseAddr("203.0.113.9"),
	netip.MustParseAddr("10.1.2.5"),
	netip.MustParseAddr("2001:db8::9"),
}

const agents = `
allow = [
  "api.example.com:443",
  "*.example.org",
  "*.example.org:8000-9000",
  "registry.example.net",
  "db.example.net:5432",
  "10.1.2.0/24:5432",
  "udp:dns.example.net:53",
  "93.184.215.0/24:443",
  "[2606:4700::/32]:443",
  "127.0.0.2:8080",
  "fd00:1::/64",
  "blocked.example.com",
]
deny = [
  "ads.example.org",
  "93.184.215.66",
  "tcp:blocked.example.com",
]
`

func TestCheckName(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "agents", agents)
	for _, tc := range []struct {
		network, host string
		port          uint16
		allowed       bool
		rule          string
		reason        string // in the reason
	}{
		{"tcp", "api.example.com", 443, true, "api.example.com:443", `api.example.com:443 is allowed by rule "api.example.com:443" of policy "agents"`},
		{"tcp4", "API.Example.Com.", 443, true, "api.example.com:443", "api.example.com:443 is allowed"},
		{"tcp", "api.example.com", 80, false, "", `api.example.com:80 is not allowed by policy "agents"`},
		{"udp", "api.example.com", 443, false, "", "udp api.example.com:443 is not allowed"},
		{"tcp", "www.example.org", 80, true, "*.example.org", ""},
		{"tcp", "a.b.example.org", 8080, true, "*.example.org:8000-9000", ""},
		{"tcp", "example.org", 443, false, "", "not allowed"},
		{"tcp", "badexample.org", 443, false, "", "not allowed"},
		{"tcp", "ads.example.org", 443, false, "ads.example.org", `ads.example.org:443 is denied by rule "ads.example.org" of policy "agents"`},
		{"tcp", "ads.example.org", 8443, false, "ads.example.org", "denied"},
		{"udp", "ads.example.org", 53, false, "ads.example.org", "denied"},
		{"tcp", "sub.ads.example.org", 443, true, "*.example.org", ""},
		{"tcp", "blocked.example.com", 443, false, "tcp:blocked.example.com", "denied"},
		{"udp", "dns.example.net", 53, true, "udp:dns.example.net:53", "udp dns.example.net:53 is allowed"},
		{"tcp", "dns.example.net", 53, false, "", "not allowed"},
		{"udp", "dns.example.net", 54, false, "", "not allowed"},
		{"tcp", "10.1.2.3", 5432, false, "", "an address, not a host name"},
		{"tcp", "[fd00:1::1]", 443, false, "", "an address, not a host name"},
		{"tcp", "127.1", 80, false, "", "ends in a number"},
		{"tcp", "bücher.example", 443, false, "", "character"},
		{"tcp", strings.Repeat("a.", 127) + "org", 443, false, "", "at most 253"},
		{"sctp", "api.example.com", 443, false, "", `network "sctp" is neither tcp nor udp`},
		{"ip", "api.example.com", 443, false, "", "neither tcp nor udp"},
		{"tcp", "api.example.com", 0, false, "", "port 0"},
	} {
		d := p.CheckName(tc.network, tc.host, tc.port)
		if d.Allowed != tc.allowed || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.reason) || d.Policy != "agents" {
			t.Errorf("CheckName(%q, %q, %d) = %+v; want allowed %v by %q, reason with %q", tc.network, tc.host, tc.port, d, tc.allowed, tc.rule, tc.reason)
		}
		if d.Allowed && d.Line == 0 {
			t.Errorf("CheckName(%q, %q, %d): no line for rule %q", tc.network, tc.host, tc.port, d.Rule)
		}
	}
	var none *Policy
	if d := none.CheckName("tcp", "api.example.com", 443); d.Allowed || !strings.Contains(d.Reason, "no network policy") {
		t.Errorf("nil policy: %+v", d)
	}
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "agents", agents)
	for _, tc := range []struct {
		network, host, addr string
		port                uint16
		allowed             bool
		rule, opened, rng   string
	}{
		// Addresses alone.
		{"tcp", "", "93.184.215.14", 443, true, "93.184.215.0/24:443", "", ""},
		{"tcp", "", "93.184.215.66", 443, false, "93.184.215.66", "", ""},
		{"tcp", "", "93.184.215.14", 80, false, "", "", ""},
		{"tcp", "", "8.8.8.8", 443, false, "", "", ""},
		{"tcp", "", "2606:4700::1111", 443, true, "[2606:4700::/32]:443", "", ""},
		{"tcp", "", "::ffff:93.184.215.14", 443, true, "93.184.215.0/24:443", "", ""},
		{"tcp", "", "10.1.2.3", 5432, true, "10.1.2.0/24:5432", "10.1.2.0/24:5432", "private"},
		{"tcp", "", "::ffff:10.1.2.3", 5432, true, "10.1.2.0/24:5432", "10.1.2.0/24:5432", "private"},
		{"tcp", "", "10.1.2.3", 443, false, "", "", "private"},
		{"udp", "", "10.1.2.3", 5432, false, "", "", "private"},
		{"tcp", "", "10.1.3.3", 5432, false, "", "", "private"},
		{"tcp", "", "10.1.2.5", 5432, false, "", "", "host"},
		{"tcp", "", "127.0.0.2", 8080, true, "127.0.0.2:8080", "127.0.0.2:8080", "loopback"},
		{"tcp", "", "127.0.0.2", 8081, false, "", "", "loopback"},
		{"tcp", "", "127.0.0.3", 8080, false, "", "", "loopback"},
		{"tcp", "", "169.254.169.254", 80, false, "", "", "link-local"},
		{"tcp", "", "fd00:1::5", 443, true, "fd00:1::/64", "fd00:1::/64", "unique-local"},
		{"tcp", "", "fd00:2::5", 443, false, "", "", "unique-local"},
		// Names, with what they resolved to.
		{"tcp", "api.example.com", "93.184.215.14", 443, true, "api.example.com:443", "", ""},
		{"tcp", "api.example.com", "8.8.8.8", 443, true, "api.example.com:443", "", ""},
		{"tcp", "api.example.com", "93.184.215.66", 443, false, "93.184.215.66", "", ""},
		{"tcp", "api.example.com", "169.254.169.254", 443, false, "", "", "link-local"},
		{"tcp", "api.example.com", "127.0.0.1", 443, false, "", "", "loopback"},
		{"tcp", "api.example.com", "::ffff:127.0.0.1", 443, false, "", "", "loopback"},
		{"tcp", "api.example.com", "203.0.113.9", 443, false, "", "", "host"},
		{"tcp", "db.example.net", "10.1.2.7", 5432, true, "db.example.net:5432", "10.1.2.0/24:5432", "private"},
		{"tcp", "db.example.net", "10.1.9.7", 5432, false, "", "", "private"},
		{"tcp", "db.example.net", "10.1.2.5", 5432, false, "", "", "host"},
		{"tcp", "other.example.net", "10.1.2.7", 5432, false, "", "", ""},
		{"tcp", "ads.example.org", "93.184.215.14", 443, false, "ads.example.org", "", ""},
		{"tcp", "www.example.org", "fd00:1::5", 80, true, "*.example.org", "fd00:1::/64", "unique-local"},
		{"tcp", "www.example.org", "fd00:1::5", 8080, false, "", "", "unique-local"},
		{"tcp", "api.example.com", "fe80::1%eth0", 443, false, "", "", ""},
	} {
		d := p.CheckAddr(tc.network, tc.host, netip.MustParseAddr(tc.addr), tc.port, testOwn)
		if d.Allowed != tc.allowed || d.Rule != tc.rule || d.Opened != tc.opened || d.Range != tc.rng {
			t.Errorf("CheckAddr(%q, %q, %s, %d) = %+v; want allowed %v by %q, opened by %q, range %q", tc.network, tc.host, tc.addr, tc.port, d, tc.allowed, tc.rule, tc.opened, tc.rng)
		}
		if !d.Allowed && d.Reason == "" {
			t.Errorf("CheckAddr(%q, %q, %s, %d): no reason", tc.network, tc.host, tc.addr, tc.port)
		}
	}
	if d := p.CheckAddr("tcp", "", netip.Addr{}, 443, nil); d.Allowed {
		t.Errorf("the zero address: %+v", d)
	}
	d := p.CheckAddr("tcp", "api.example.com", netip.MustParseAddr("169.254.169.254"), 443, nil)
	if want := `api.example.com:443 resolved to 169.254.169.254, a link-local address (169.254.0.0/16, cloud metadata services), which policy "agents" does not open`; d.Reason != want {
		t.Errorf("reason %q, want %q", d.Reason, want)
	}
}

// refusedSamples are addresses of every always-refused range, with the
// range's class; testOwn holds the "host" ones.
var refusedSamples = []struct{ addr, class string }{
	{"0.0.0.0", "unspecified"},
	{"0.1.2.3", "this-network"},
	{"10.0.0.1", "private"},
	{"10.255.255.255", "private"},
	{"100.64.0.1", "shared"},
	{"100.100.100.200", "shared"},
	{"127.0.0.1", "loopback"},
	{"127.255.255.254", "loopback"},
	{"169.254.169.254", "link-local"},
	{"172.16.0.1", "private"},
	{"172.31.255.255", "private"},
	{"192.0.0.192", "ietf"},
	{"192.168.1.1", "private"},
	{"198.18.0.1", "benchmarking"},
	{"198.19.255.255", "benchmarking"},
	{"224.0.0.1", "multicast"},
	{"239.255.255.250", "multicast"},
	{"240.0.0.1", "reserved"},
	{"255.255.255.255", "broadcast"},
	{"::", "unspecified"},
	{"::1", "loopback"},
	{"::7f00:1", "ipv4-compatible"},
	{"::ffff:0:a00:1", "ipv4-translated"},
	{"64:ff9b:1::1", "nat64-local"},
	{"100::1", "discard"},
	{"2001::1", "teredo"},
	{"fc00::1", "unique-local"},
	{"fd00:ec2::254", "unique-local"},
	{"fe80::1", "link-local"},
	{"febf::1", "link-local"},
	{"fec0::1", "site-local"},
	{"ff02::1", "multicast"},
	{"203.0.113.9", "host"},
	{"10.1.2.5", "host"},
	{"2001:db8::9", "host"},
}

// TestAlwaysRefused: every always-refused range is refused, as an address
// and as what a name resolved to, to a policy that allows every name and
// every address; so are its IPv4-mapped, NAT64 and 6to4 forms.
func TestAlwaysRefused(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "open", `allow = ["*:443", "udp:*:443"]`)
	check := func(addr netip.Addr, class string) {
		t.Helper()
		for _, network := range []string{"tcp", "udp"} {
			for _, host := range []string{"", "any.example.com"} {
				d := p.CheckAddr(network, host, addr, 443, testOwn)
				if d.Allowed || d.Range != class || d.Reason == "" {
					t.Errorf("CheckAddr(%q, %q, %s) = %+v, want refused as %s", network, host, addr, d, class)
				}
			}
		}
	}
	for _, s := range refusedSamples {
		a := netip.MustParseAddr(s.addr)
		check(a, s.class)
		if !a.Is4() {
			continue
		}
		check(netip.AddrFrom16(a.As16()), s.class)
		b4 := a.As4()
		nat64 := netip.MustParseAddr("64:ff9b::").As16()
		copy(nat64[12:], b4[:])
		check(netip.AddrFrom16(nat64), s.class)
		six := netip.MustParseAddr("2002::").As16()
		copy(six[2:], b4[:])
		check(netip.AddrFrom16(six), s.class)
	}
	for _, public := range []string{"93.184.215.14", "1.1.1.1", "2606:4700::1111", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1", "::ffff:93.184.215.14", "192.0.2.1", "2001:db8::1"} {
		a := netip.MustParseAddr(public)
		if d := p.CheckAddr("tcp", "", a, 443, testOwn); !d.Allowed || d.Range != "" {
			t.Errorf("CheckAddr(%s) = %+v, want allowed", a, d)
		}
		if d := p.CheckAddr("tcp", "", a, 80, testOwn); d.Allowed {
			t.Errorf("CheckAddr(%s:80) = %+v, want refused: the rule is for 443", a, d)
		}
	}
}

// TestOpening: an allow rule for an address or CIDR inside an
// always-refused range opens that part, and no more.
func TestOpening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule, addr string
		open       bool
	}{
		{"127.0.0.2:443", "127.0.0.2", true},
		{"127.0.0.2:443", "127.0.0.3", false},
		{"127.0.0.0/8:443", "127.9.9.9", true},
		{"10.0.0.0/8:443", "10.9.9.9", true},
		{"10.0.0.0/8:443", "10.1.2.5", false}, // the host's own
		{"10.1.2.5:443", "10.1.2.5", true},
		{"10.1.2.0/24:443", "10.1.2.5", false},
		{"0.0.0.0/0:443", "10.9.9.9", false},
		{"0.0.0.0/0:443", "127.0.0.1", false},
		{"0.0.0.0/0:443", "169.254.169.254", false},
		{"0.0.0.0/0:443", "93.184.215.14", true},
		{"[::/0]:443", "fd00::1", false},
		{"[::/0]:443", "::1", false},
		{"[::/0]:443", "2606:4700::1111", true},
		{"169.254.0.0/15:443", "169.254.169.254", false},
		{"169.254.169.254:443", "169.254.169.254", true},
		{"169.254.169.254:443", "::ffff:169.254.169.254", true},
		{"::ffff:10.0.0.0/104", "10.0.0.1", true},
		{"0.0.0.0:443", "0.0.0.0", false},
		{"255.255.255.255:443", "255.255.255.255", false},
		{"[::]:443", "::", false},
		{"[64:ff9b::a00:0/104]:443", "64:ff9b::a00:1", true},
		{"10.0.0.0/8:443", "64:ff9b::a00:1", false},
		{"[2002:a00::/24]:443", "2002:a00:1::1", true},
		{"[fd00::/8]:443", "fd00:ec2::254", true},
		{"[fc00::/6]:443", "fd00:ec2::254", false},
		{"*:443", "10.9.9.9", false},
	} {
		p := mustParse(t, "p", `allow = ["`+tc.rule+`", "name.example:443"]`)
		a := netip.MustParseAddr(tc.addr)
		d := p.CheckAddr("tcp", "", a, 443, testOwn)
		if d.Allowed != tc.open {
			t.Errorf("rule %q, address %s: %+v, want allowed %v", tc.rule, tc.addr, d, tc.open)
		}
		if d.Allowed && d.Opened != tc.rule && d.Range != "" {
			t.Errorf("rule %q, address %s: opened by %q", tc.rule, tc.addr, d.Opened)
		}
		if d := p.CheckAddr("tcp", "name.example", a, 443, testOwn); d.Allowed != tc.open {
			t.Errorf("rule %q, name resolved to %s: %+v, want allowed %v", tc.rule, tc.addr, d, tc.open)
		}
		if d := p.CheckAddr("tcp", "other.example", a, 443, testOwn); d.Allowed {
			t.Errorf("rule %q, a name not allowed resolved to %s: %+v", tc.rule, tc.addr, d)
		}
	}
}
