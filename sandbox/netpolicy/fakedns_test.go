package netpolicy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// startFakeDNS serves a FakeDNS for pol on UDP and TCP on 127.0.0.1 (any
// free ports) until the test ends; decisions collects what Done got.
func startFakeDNS(t *testing.T, pol *Policy, maxNames int) (s *FakeDNS, udp, tcp string, decisions func() []Decision) {
	t.Helper()
	var mu sync.Mutex
	var got []Decision
	s = &FakeDNS{Policy: func() *Policy { return pol }, MaxNames: maxNames, Done: func(d Decision) {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- s.ServePacket(pc) }()
	go func() { errs <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrDNSClosed) {
				t.Errorf("serve returned %v, want ErrDNSClosed", err)
			}
		}
	})
	return s, pc.LocalAddr().String(), l.Addr().String(), func() []Decision {
		mu.Lock()
		defer mu.Unlock()
		return append([]Decision(nil), got...)
	}
}

// query builds a query for name and typ with opcode op, and count
// copies of the question.
func query(t *testing.T, name string, typ dnsmessage.Type, class dnsmessage.Class, op dnsmessage.OpCode, count int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234, OpCode: op, RecursionDesired: true})
	b.StartQuestions()
	for range count {
		if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: class}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exchange sends msg over network (udp or tcp) to addr and parses the
// response: its header and A answers.
func exchange(t *testing.T, network, addr string, msg []byte) (dnsmessage.Header, []netip.Addr) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	var n int
	if network == "tcp" {
		c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
		if _, err = io.ReadFull(c, buf[:2]); err == nil {
			n = int(binary.BigEndian.Uint16(buf))
			_, err = io.ReadFull(c, buf[:n])
		}
	} else {
		c.Write(msg)
		n, err = c.Read(buf)
	}
	if err != nil {
		t.Fatalf("%s answer: %v", network, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(r.A))
		}
	}
	return m.Header, addrs
}

// TestFakeDNSAnswers: an allowed name (on any port) gets one synthetic
// address that names it, the same every time, over UDP and TCP; a
// refused name gets NXDOMAIN; other types of an allowed name an empty
// NOERROR; another opcode NOTIMP, another class REFUSED, two questions
// FORMERR; Done hears every decision on a name.
func TestFakeDNSAnswers(t *testing.T) {
	t.Parallel()
	pol := mustParse(t, "agents", `allow = ["api.example.com:443", "ssh.example.net:22", "*.example.org"]
deny = ["ads.example.org"]`)
	s, udp, tcp, decisions := startFakeDNS(t, pol, 0)
	in := dnsmessage.ClassINET
	first := map[string]netip.Addr{}
	for _, network := range []string{"udp", "tcp"} {
		addr := map[string]string{"udp": udp, "tcp": tcp}[network]
		for _, name := range []string{"api.example.com.", "ssh.example.net.", "www.EXAMPLE.org."} {
			h, got := exchange(t, network, addr, query(t, name, dnsmessage.TypeA, in, 0, 1))
			if h.RCode != dnsmessage.RCodeSuccess || h.ID != 0x1234 || !h.Response || len(got) != 1 || !FakePrefix.Contains(got[0]) {
				t.Fatalf("%s A %s: %v %v", network, name, h, got)
			}
			if prev, ok := first[name]; ok && prev != got[0] {
				t.Errorf("%s: %v, then %v", name, prev, got[0])
			}
			first[name] = got[0]
			if n, fake := s.Name(got[0]); !fake || n+"." != lower(name) {
				t.Errorf("Name(%v) = %q, %v, want %s", got[0], n, fake, name)
			}
		}
		for _, name := range []string{"ads.example.org.", "other.example.com.", "example.org."} {
			if h, got := exchange(t, network, addr, query(t, name, dnsmessage.TypeA, in, 0, 1)); h.RCode != dnsmessage.RCodeNameError || len(got) != 0 {
				t.Errorf("%s A %s: %v %v, want NXDOMAIN", network, name, h, got)
			}
		}
		cases := []struct {
			msg  []byte
			want dnsmessage.RCode
		}{
			{query(t, "api.example.com.", dnsmessage.TypeAAAA, in, 0, 1), dnsmessage.RCodeSuccess},
			{query(t, "api.example.com.", dnsmessage.TypeMX, in, 0, 1), dnsmessage.RCodeSuccess},
			{query(t, "api.example.com.", dnsmessage.TypeA, in, 2, 1), dnsmessage.RCodeNotImplemented},
			{query(t, "api.example.com.", dnsmessage.TypeA, dnsmessage.ClassCHAOS, 0, 1), dnsmessage.RCodeRefused},
			{query(t, "api.example.com.", dnsmessage.TypeA, in, 0, 2), dnsmessage.RCodeFormatError},
		}
		for i, c := range cases {
			if h, got := exchange(t, network, addr, c.msg); h.RCode != c.want || len(got) != 0 {
				t.Errorf("%s case %d: %v %v, want %v", network, i, h, got, c.want)
			}
		}
	}
	if _, fake := s.Name(netip.MustParseAddr("198.19.255.254")); !fake {
		t.Errorf("an address of the pool that names nothing is not fake")
	}
	if n, fake := s.Name(netip.MustParseAddr("192.0.2.1")); fake || n != "" {
		t.Errorf("a real address: %q, %v", n, fake)
	}
	var refused int
	for _, d := range decisions() {
		if !d.Allowed {
			refused++
			if d.Policy != "agents" || d.Reason == "" {
				t.Errorf("decision %+v", d)
			}
		}
	}
	if refused != 6 {
		t.Errorf("%d refusals told, want 6: %+v", refused, decisions())
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// TestFakeDNSResolver: Go's own resolver, pointed at the stub, gets the
// synthetic address of an allowed name and "no such host" for another.
func TestFakeDNSResolver(t *testing.T) {
	t.Parallel()
	_, udp, _, _ := startFakeDNS(t, mustParse(t, "agents", `allow = ["api.example.com"]`), 0)
	r := NewResolver(udp)
	addrs, err := r.LookupNetIP(t.Context(), "ip4", "api.example.com")
	if err != nil || len(addrs) != 1 || !FakePrefix.Contains(addrs[0]) {
		t.Errorf("allowed: %v, %v", addrs, err)
	}
	var dnsErr *net.DNSError
	if _, err := r.LookupNetIP(t.Context(), "ip4", "other.example.com"); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("refused: %v", err)
	}
}

// TestFakePoolBounded: past its bound the name asked least recently
// loses its address, which then names nothing; an address is handed out
// again only after the whole prefix was, skipping .0 and .255.
func TestFakePoolBounded(t *testing.T) {
	t.Parallel()
	p := newFakePool(netip.MustParsePrefix("198.18.0.0/29"), 2)
	a, b := p.addr("a.test"), p.addr("b.test")
	if a.String() != "198.18.0.1" || b.String() != "198.18.0.2" {
		t.Fatalf("first addresses %v %v", a, b)
	}
	p.addr("a.test") // a is now the more recent
	c := p.addr("c.test")
	if n, fake := p.name(b); n != "" || !fake {
		t.Errorf("b's address after its eviction: %q, %v", n, fake)
	}
	if n, _ := p.name(a); n != "a.test" || c.String() != "198.18.0.3" {
		t.Errorf("a: %q; c: %v", n, c)
	}
	var seen []string
	for _, name := range []string{"d", "e", "f", "g", "h"} {
		seen = append(seen, p.addr(name).String())
	}
	want := []string{"198.18.0.4", "198.18.0.5", "198.18.0.6", "198.18.0.7", "198.18.0.1"}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("addresses %v, want %v", seen, want)
		}
	}
}

// TestCheckResolve: a name resolves when some port of an allow rule for
// it, TCP or UDP, is not denied.
func TestCheckResolve(t *testing.T) {
	t.Parallel()
	pol := mustParse(t, "agents", `allow = ["ssh.example.net:22", "web.example.com", "udp:dns.example.com:53", "udp:ntp.example.com:123"]
deny = ["web.example.com:80", "web.example.com:443", "ntp.example.com:123"]`)
	cases := map[string]bool{"ssh.example.net": true, "web.example.com": false, "dns.example.com": true, "ntp.example.com": false, "nothing.test": false, "10.0.0.1": false}
	for name, want := range cases {
		if d := pol.CheckResolve(name); d.Allowed != want || d.Reason == "" {
			t.Errorf("%s: %+v, want allowed %v", name, d, want)
		}
	}
	if d := (*Policy)(nil).CheckResolve("a.test"); d.Allowed {
		t.Errorf("nil policy: %+v", d)
	}
}

// FuzzFakeDNSAnswer: any bytes get no answer or one that parses, with
// the query's ID, and never an address for a refused name.
func FuzzFakeDNSAnswer(f *testing.F) {
	pol, err := Parse("agents", []byte(`allow = ["api.example.com"]`))
	if err != nil {
		f.Fatal(err)
	}
	s := &FakeDNS{Policy: func() *Policy { return pol }, MaxNames: 8}
	s.init()
	for _, name := range []string{"api.example.com.", "other.example.com."} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		msg, _ := b.Finish()
		f.Add(msg)
	}
	f.Add([]byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, msg []byte) {
		out := s.answer(msg)
		if out == nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("unparsable answer: %v", err)
		}
		if id := binary.BigEndian.Uint16(msg); m.ID != id || !m.Response {
			t.Fatalf("answer %+v to ID %d", m.Header, id)
		}
		for _, a := range m.Answers {
			if lower(a.Header.Name.String()) != "api.example.com." {
				t.Fatalf("an address for %s", a.Header.Name)
			}
		}
	})
}
