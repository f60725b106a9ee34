package netpolicy

import (
	"strings"
	"testing"
)

// validRules are rules that parse, with their canonical form.
var validRules = []struct {
	text  string
	deny  bool
	canon string
}{
	{"api.example.com:443", false, "api.example.com:443"},
	{"API.Example.COM.:443", false, "api.example.com:443"},
	{"registry.example.net", false, "registry.example.net"},
	{"registry.example.net.", false, "registry.example.net"},
	{"*.example.org:443", false, "*.example.org:443"},
	{"*.Example.org.", false, "*.example.org"},
	{"*:443", false, "*:443"},
	{"*", false, "*"},
	{"a_b.example.com", false, "a_b.example.com"},
	{"xn--bcher-kva.example", false, "xn--bcher-kva.example"},
	{"localhost", false, "localhost"},
	{"example.com:8000-8100", false, "example.com:8000-8100"},
	{"example.com:1-65535", false, "example.com:1-65535"},
	{"example.com:80-80", false, "example.com:80"},
	{"10.1.2.0/24:5432", false, "10.1.2.0/24:5432"},
	{"10.1.2.3", false, "10.1.2.3"},
	{"10.1.2.3/32:80", false, "10.1.2.3:80"},
	{"127.0.0.2:8080", false, "127.0.0.2:8080"},
	{"0.0.0.0/0:443", false, "0.0.0.0/0:443"},
	{"[fd00::1]:443", false, "[fd00::1]:443"},
	{"[fd00::/64]:443", false, "[fd00::/64]:443"},
	{"[FD00::/64]:443", false, "[fd00::/64]:443"},
	{"fd00::1", false, "fd00::1"},
	{"fd00::/64", false, "fd00::/64"},
	{"[fd00::1]", false, "fd00::1"},
	{"::ffff:10.0.0.0/104", false, "10.0.0.0/8"},
	{"[::ffff:1.2.3.4]:80", false, "1.2.3.4:80"},
	{"udp:dns.example.net:53", false, "udp:dns.example.net:53"},
	{"UDP:dns.example.net:53", false, "udp:dns.example.net:53"},
	{"udp:[fd00::53]:53", false, "udp:[fd00::53]:53"},
	{"tcp:example.com", false, "example.com"},
	{"tcp:udp:443", false, "tcp:udp:443"},
	{"udp:tcp:53", false, "udp:tcp:53"},
	{"udp", true, "udp"},
	{"ads.example.org", true, "ads.example.org"},
	{"tcp:ads.example.org", true, "tcp:ads.example.org"},
	{"udp:ads.example.org", true, "udp:ads.example.org"},
	{"ads.example.org:443", true, "ads.example.org:443"},
	{"93.184.215.0/24", true, "93.184.215.0/24"},
	{strings.Repeat("a.", 126) + "a", false, strings.Repeat("a.", 126) + "a"},
	{strings.Repeat("a", 63) + ".example", false, strings.Repeat("a", 63) + ".example"},
}

func TestParseRule(t *testing.T) {
	t.Parallel()
	for _, tc := range validRules {
		r, err := parseRule(tc.text, tc.deny)
		if err != nil {
			t.Errorf("parseRule(%q, deny=%v): %v", tc.text, tc.deny, err)
			continue
		}
		if got := r.canonical(tc.deny); got != tc.canon {
			t.Errorf("parseRule(%q, deny=%v).canonical() = %q, want %q", tc.text, tc.deny, got, tc.canon)
		}
		if r.text != tc.text {
			t.Errorf("parseRule(%q).text = %q", tc.text, r.text)
		}
	}
}

func TestParseRuleRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want string // in the error
	}{
		{"", "empty rule"},
		{" example.com", "white space"},
		{"example.com ", "white space"},
		{"exa mple.com", "white space"},
		{"example.com\t", "white space"},
		{"bücher.example", "non-ASCII"},
		{"example.com:", "empty port"},
		{"example.com:0", `port "0"`},
		{"example.com:65536", `port "65536"`},
		{"example.com:0443", `port "0443"`},
		{"example.com:+443", `port "+443"`},
		{"example.com:http", `port "http"`},
		{"example.com:80-", `port ""`},
		{"example.com:-80", `port ""`},
		{"example.com:90-80", "ends before it starts"},
		{"example.com:1-2-3", `port "2-3"`},
		{"example.com:443:80", "address"},
		{"sctp:example.com", "port"},
		{"*.", "empty host name"},
		{"*example.com", "wildcard"},
		{"a.*.example.com", "wildcard"},
		{"**.example.com", "wildcard"},
		{"*.*.example.com", "wildcard"},
		{"-a.example.com", "starts or ends with '-'"},
		{"a-.example.com", "starts or ends with '-'"},
		{"a..example.com", "empty label"},
		{"example.com..", "empty label"},
		{".example.com", "empty label"},
		{".", "empty host name"},
		{"a!b.example.com", "character"},
		{strings.Repeat("a", 64) + ".example", "label of 64 bytes"},
		{strings.Repeat("a.", 126) + "ab", "at most 253"},
		{"127.1", "ends in a number"},
		{"0x7f000001", "ends in a number"},
		{"1.2.3.4.5", "ends in a number"},
		{"example.123", "ends in a number"},
		{"10.1.2.3/24", "did you mean 10.1.2.0/24"},
		{"10.1.2.0/33", "CIDR"},
		{"example.com/24", "CIDR"},
		{"10.1.2.300", "address"},
		{"[10.1.2.3]:80", "brackets"},
		{"[fd00::1", "without ']'"},
		{"[fd00::1]443", "after ']'"},
		{"[fd00::1]:", "empty port"},
		{"[fd00::1]:99999", "port"},
		{"[example.com]:443", "address"},
		{"[*]", "address"},
		{"fe80::1%eth0", "zone"},
		{"[fd00::/64%eth0]:443", "CIDR"},
		{"udp:example.com", "udp rule names its port"},
		{"udp:*", "udp rule names its port"},
	} {
		_, err := parseRule(tc.text, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRule(%q) = %v, want an error with %q", tc.text, err, tc.want)
		}
	}
}

// FuzzParseRule: a rule that parses has a canonical form that parses to
// the same rule; nothing panics.
func FuzzParseRule(f *testing.F) {
	for _, tc := range validRules {
		f.Add(tc.text, tc.deny)
	}
	for _, s := range []string{"[::]:0", "*.:1", "udp:[::1]", "1.2.3.4/0", "[::ffff:0.0.0.0/96]:1-2", "x:65535-65535"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, deny bool) {
		r, err := parseRule(text, deny)
		if err != nil {
			return
		}
		canon := r.canonical(deny)
		r2, err := parseRule(canon, deny)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", canon, text, err)
		}
		if got := r2.canonical(deny); got != canon {
			t.Fatalf("canonical %q of %q parses to canonical %q", canon, text, got)
		}
		if r2.kind != r.kind || r2.name != r.name || r2.prefix != r.prefix || r2.protos != r.protos || !equalPorts(r2.ports, r.ports) {
			t.Fatalf("%q and its canonical %q parse to different rules: %+v, %+v", text, canon, r, r2)
		}
	})
}
