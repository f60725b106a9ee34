package sandboxtest

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a DNS server for tests on 127.0.0.53 (any free port) that
// answers A and AAAA questions over UDP from its zone and counts the
// questions per name and type. A name's answer may depend on how many
// times it was asked (rebinding); a name not in the zone is NXDOMAIN.
type DNS struct {
	pc   net.PacketConn
	zone map[string]func(n int) []netip.Addr // rooted, lower-case name; n counts from 1
	done chan struct{}

	mu    sync.Mutex
	asked map[string]int // "name type"
}

// StartDNS serves zone, keyed by rooted lower-case names ("api.test."),
// until the test ends.
func StartDNS(t testing.TB, zone map[string]func(n int) []netip.Addr) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.53:0")
	if err != nil {
		t.Fatalf("test DNS server: %v", err)
	}
	d := &DNS{pc: pc, zone: zone, done: make(chan struct{}), asked: map[string]int{}}
	go d.serve()
	t.Cleanup(func() {
		pc.Close()
		<-d.done
	})
	return d
}

// Fixed answers addrs every time.
func Fixed(addrs ...string) func(int) []netip.Addr {
	return func(int) []netip.Addr { return ParseAddrs(addrs) }
}

// ParseAddrs parses IP addresses, panicking on a bad one.
func ParseAddrs(addrs []string) []netip.Addr {
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// Addr is the server's address, IP:PORT.
func (d *DNS) Addr() string { return d.pc.LocalAddr().String() }

// Count is how many times name was asked for type typ (A or AAAA).
func (d *DNS) Count(name string, typ dnsmessage.Type) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[name+" "+typ.String()]
}

func (d *DNS) serve() {
	defer close(d.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if resp, err := d.answer(buf[:n]); err == nil {
			d.pc.WriteTo(resp, from)
		}
	}
}

func (d *DNS) answer(msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(q.Name.String())
	d.mu.Lock()
	d.asked[name+" "+q.Type.String()]++
	n := d.asked[name+" "+q.Type.String()]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	answers, ok := d.zone[name]
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if ok {
		for _, a := range answers(n) {
			if err := addAnswer(&b, q, a); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// addAnswer adds a as an answer to q when its type asks for a's family.
func addAnswer(b *dnsmessage.Builder, q dnsmessage.Question, a netip.Addr) error {
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	switch {
	case q.Type == dnsmessage.TypeA && a.Is4():
		rh.Type = dnsmessage.TypeA
		return b.AResource(rh, dnsmessage.AResource{A: a.As4()})
	case q.Type == dnsmessage.TypeAAAA && a.Is6():
		rh.Type = dnsmessage.TypeAAAA
		return b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
	case q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA:
		return errors.New("test DNS: unexpected question type " + q.Type.String())
	}
	return nil
}
