package netpolicy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Limits of a FakeDNS.
const (
	// FakeTTL is the time to live of every answer: short, since the
	// policy may change, though a change is enforced at connect anyway.
	FakeTTL = 60 * time.Second
	// maxFakeNames bounds FakeDNS.MaxNames: far fewer than the
	// prefix's addresses, so an address lost by one name rests long
	// before another gets it.
	maxFakeNames = 1 << 16
	// dnsMaxConns bounds the TCP connections served at once; a further
	// one is closed as accepted.
	dnsMaxConns = 64
	// dnsIdleTimeout bounds a TCP connection's wait for its next query.
	dnsIdleTimeout = 10 * time.Second
	// dnsMaxMessage bounds a query read: a question is small.
	dnsMaxMessage = 4096
)

// ErrDNSClosed is what Serve and ServePacket return after Close.
var ErrDNSClosed = errors.New("netpolicy: DNS server closed")

// FakeDNS is the DNS server of one execution's sandbox, on its loopback
// (sandbox.Redirect): it tells a program an address for every name the
// policy allows on some port, and no address for any other, and it never
// asks a real DNS server. An allowed name gets an A record for a
// synthetic address of FakePrefix that stands for that name alone, for
// the execution's life or until MaxNames other names were asked since
// it was; a connection to that address reaches termgate's transparent
// listener, which asks the policy for the name (Name), so the policy is
// enforced by name even for a program that connects by address, and the
// name is resolved, and its addresses checked, by termgate at connect
// time (Dialer). The name itself need not exist: a name that does not
// resolve fails then, as a reset connection.
//
// Answers, for a query of class IN with one question:
//
//   - a name the policy refuses: NXDOMAIN, with no SOA, so nothing caches
//     the refusal and a changed policy is seen at the next query; a
//     program reports "no such host" at once rather than retrying, as it
//     would after REFUSED or SERVFAIL;
//   - an allowed name, type A: the synthetic address, TTL FakeTTL;
//   - an allowed name, any other type (AAAA, MX, TXT, HTTPS...): an empty
//     NOERROR: the name exists and has no such record, so a program
//     falls back to its A at once. IPv6 gets no synthetic address: one
//     address per name is all a program needs.
//
// Another opcode is answered NOTIMP, another class REFUSED, and a
// message that is not one question FORMERR. Every decision on a name is
// told to Done.
//
// Set the fields before the first Serve; its methods are safe for
// concurrent use.
type FakeDNS struct {
	// Policy returns the policy in force, asked at every query: a
	// change applies to the next one. A nil Policy, or a nil *Policy,
	// refuses every name.
	Policy func() *Policy
	// Done, if set, is told every decision on a name, allowed or not,
	// on the serving goroutine: it should not block.
	Done func(Decision)
	// MaxNames bounds the names holding an address at once
	// (DefaultMaxNames if 0, at most 65536).
	MaxNames int

	initOnce sync.Once
	pool     *fakePool

	mu        sync.Mutex
	closed    bool
	listeners map[io.Closer]struct{}
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

func (s *FakeDNS) init() {
	s.initOnce.Do(func() {
		max := s.MaxNames
		if max <= 0 {
			max = DefaultMaxNames
		}
		s.pool = newFakePool(FakePrefix, min(max, maxFakeNames))
		s.listeners = map[io.Closer]struct{}{}
		s.conns = map[net.Conn]struct{}{}
	})
}

// Name returns the name the synthetic address a stands for: fake is
// whether a lies in FakePrefix, and name is "" when it stands for no
// name (any longer). It is the transparent listener's lookup.
func (s *FakeDNS) Name(a netip.Addr) (name string, fake bool) {
	s.init()
	return s.pool.name(a)
}

// ServePacket answers the queries that come on pc, a UDP socket, until
// Close; it returns ErrDNSClosed then, or pc's error. pc is closed when
// it returns.
func (s *FakeDNS) ServePacket(pc net.PacketConn) error {
	if !s.add(pc) {
		pc.Close()
		return ErrDNSClosed
	}
	defer s.remove(pc)
	buf := make([]byte, dnsMaxMessage)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if s.isClosed() {
				return ErrDNSClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if out := s.answer(buf[:n]); out != nil {
			pc.WriteTo(out, from)
		}
	}
}

// Serve answers DNS over TCP on l until Close, each connection on a
// goroutine of its own (at most 64 at once, each closed after 10 s
// without a query); it returns ErrDNSClosed after Close, or l's error.
// l is closed when it returns.
func (s *FakeDNS) Serve(l net.Listener) error {
	if !s.add(l) {
		l.Close()
		return ErrDNSClosed
	}
	defer s.remove(l)
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrDNSClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(c) {
			c.Close()
			continue
		}
		go s.serveConn(c) // owned by s: Close closes c and waits
	}
}

// serveConn answers the length-prefixed queries of one TCP connection.
func (s *FakeDNS) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	buf := make([]byte, 2+dnsMaxMessage)
	for {
		c.SetDeadline(time.Now().Add(dnsIdleTimeout))
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(buf))
		if n > dnsMaxMessage {
			return
		}
		if _, err := io.ReadFull(c, buf[2:2+n]); err != nil {
			return
		}
		out := s.answer(buf[2 : 2+n])
		if out == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

// Close stops every Serve and ServePacket, closes the TCP connections,
// and waits for their goroutines. The names keep their addresses: Name
// still answers.
func (s *FakeDNS) Close() error {
	s.init()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		for l := range s.listeners {
			l.Close()
		}
		for c := range s.conns {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *FakeDNS) add(l io.Closer) bool {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *FakeDNS) remove(l io.Closer) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
	l.Close()
}

func (s *FakeDNS) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track counts a TCP connection in, unless the Server is closed or
// serves dnsMaxConns already.
func (s *FakeDNS) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.conns) >= dnsMaxConns {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *FakeDNS) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// answer returns the response to the query msg, or nil for a message
// that deserves none (a response, or bytes that are not DNS).
func (s *FakeDNS) answer(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	q, err := p.Question()
	if err != nil {
		resp.RCode = dnsmessage.RCodeFormatError
		return build(resp, nil, nil)
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		resp.RCode = dnsmessage.RCodeFormatError
		return build(resp, nil, nil)
	}
	switch {
	case h.OpCode != 0:
		resp.RCode = dnsmessage.RCodeNotImplemented
		return build(resp, &q, nil)
	case q.Class != dnsmessage.ClassINET:
		resp.RCode = dnsmessage.RCodeRefused
		return build(resp, &q, nil)
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	var pol *Policy
	if s.Policy != nil {
		pol = s.Policy()
	}
	d := pol.CheckResolve(name)
	if s.Done != nil {
		s.Done(d)
	}
	resp.Authoritative = true
	if !d.Allowed {
		resp.RCode = dnsmessage.RCodeNameError
		return build(resp, &q, nil)
	}
	if q.Type != dnsmessage.TypeA {
		return build(resp, &q, nil)
	}
	a := &dnsmessage.AResource{A: s.pool.addr(d.Host).As4()}
	return build(resp, &q, a)
}

// build writes a response: the question, if any, and an A answer, if
// any. It is nil if the message cannot be built, which cannot happen
// for a question that parsed.
func build(h dnsmessage.Header, q *dnsmessage.Question, a *dnsmessage.AResource) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		if b.StartQuestions() != nil || b.Question(*q) != nil {
			return nil
		}
	}
	if a != nil {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: uint32(FakeTTL / time.Second)}
		if b.StartAnswers() != nil || b.AResource(rh, *a) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// CheckResolve decides whether a sandbox's DNS may give host an address:
// whether some connection to it, over TCP or UDP on some port, could be
// allowed by name (CheckName), so that a name allowed on port 22 alone,
// or for UDP alone, resolves too. The Decision is that of the first port of the first allow rule
// for the name that no deny rule takes back; a refusal says the name is
// not allowed on any port, or is the refusal of the last port tried.
func (p *Policy) CheckResolve(host string) Decision {
	d := p.CheckName("tcp", host, 443)
	if p == nil || d.Allowed || d.Host == "" {
		return d // no policy, an invalid name, or allowed on 443
	}
	refused := d
	for i := range p.allow {
		r := &p.allow[i]
		if !r.matchName(d.Host) {
			continue
		}
		for _, network := range []string{"tcp", "udp"} {
			if proto, _, _ := protoOf(network); r.protos&proto == 0 {
				continue
			}
			for _, pr := range r.ports {
				d := p.CheckName(network, host, pr.lo)
				if d.Allowed {
					return d
				}
				refused = d
			}
		}
	}
	if refused.Rule == "" {
		refused.Port = 0
		refused.Reason = truncate(d.Host) + " is not allowed on any port by policy \"" + p.name + "\""
	}
	return refused
}
