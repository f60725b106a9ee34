package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// mappedConn is a relay socket on 127.0.0.1 whose datagrams were all
// "going to" dst: what a redirect and conntrack give in a sandbox.
type mappedConn struct {
	*net.UDPConn
	dst netip.AddrPort
}

func (m mappedConn) OriginalDst(netip.AddrPort) (netip.AddrPort, error) { return m.dst, nil }

// udpDialer is testDialer's UDP: it connects to 127.0.0.5 only, refuses
// blockedHost, and counts what it was asked.
type udpDialer struct {
	*testDialer
	asked atomic.Int64
}

func (d *udpDialer) DialUDP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	d.asked.Add(1)
	if host == blockedHost {
		return nil, &Refused{Reason: blockedWhy}
	}
	if host == "named.test" {
		host = "127.0.0.5"
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "udp4", net.JoinHostPort(host, strconv.Itoa(int(port))))
}

// udpEcho answers every datagram on 127.0.0.5 with "echo:" and it.
func udpEcho(t testing.TB) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 5)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, maxDatagram)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			pc.WriteToUDPAddrPort(append([]byte("echo:"), b[:n]...), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// serveUDP serves a relay of datagrams "going to" dst with d, and
// returns its address and the Records it made.
func serveUDP(t testing.TB, d Dialer, dst netip.AddrPort, names func(netip.Addr) (string, bool), idle time.Duration) (netip.AddrPort, func() []Record) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []Record
	s := &Server{Dialer: d, Names: names, UDPIdleTimeout: idle, Done: func(r Record) {
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}}
	served := make(chan error, 1)
	go func() { served <- s.ServeUDP(mappedConn{pc, dst}) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("ServeUDP: %v, want ErrClosed", err)
		}
	})
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), func() []Record {
		mu.Lock()
		defer mu.Unlock()
		return append([]Record(nil), recs...)
	}
}

// exchange sends each of msgs from c to relay and returns the answers
// read within wait of each ("" for none).
func exchangeUDP(t testing.TB, c *net.UDPConn, relay netip.AddrPort, wait time.Duration, msgs ...string) []string {
	t.Helper()
	var got []string
	b := make([]byte, 1024)
	for _, m := range msgs {
		if _, err := c.WriteToUDPAddrPort([]byte(m), relay); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(wait))
		n, _, err := c.ReadFromUDPAddrPort(b)
		if err != nil {
			got = append(got, "")
			continue
		}
		got = append(got, string(b[:n]))
	}
	return got
}

func programSocket(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUDPFlowRelayedThenIdles: a program socket's datagrams reach the
// destination and its answers come back; the flow is asked of the
// Dialer once, as the name a synthetic address stands for, and its
// Record, once idle, counts both ways.
func TestUDPFlowRelayedThenIdles(t *testing.T) {
	t.Parallel()
	echo := udpEcho(t)
	d := &udpDialer{testDialer: &testDialer{}}
	fake := netip.MustParseAddr("198.18.0.7")
	relay, recs := serveUDP(t, d, netip.AddrPortFrom(fake, echo.Port()), func(a netip.Addr) (string, bool) {
		return "named.test", a == fake
	}, 300*time.Millisecond)
	c := programSocket(t)
	got := exchangeUDP(t, c, relay, safety, "one", "two", "three")
	if got[0] != "echo:one" || got[1] != "echo:two" || got[2] != "echo:three" {
		t.Fatalf("answers %q", got)
	}
	if !sandboxtest.Eventually(t, safety, func() bool { return len(recs()) == 1 }) {
		t.Fatalf("records %+v, want one once the flow idled", recs())
	}
	r := recs()[0]
	if r.Protocol != UDP || r.Host != "named.test" || r.Port != echo.Port() || r.Up != 11 || r.Down != 26 || r.Dropped != 0 || r.Target == nil {
		t.Errorf("record %+v", r)
	}
	if n := d.asked.Load(); n != 1 {
		t.Errorf("the Dialer was asked %d times, want 1", n)
	}
	// After the idle end, the same socket starts a new flow.
	if got := exchangeUDP(t, c, relay, safety, "four"); got[0] != "echo:four" || d.asked.Load() != 2 {
		t.Errorf("after the idle end: %q, asked %d", got, d.asked.Load())
	}
}

// TestUDPRefusedFlowDropsWithoutAskingAgain: a refused flow's datagrams
// are dropped, its Record says why, and its socket's next datagrams are
// not asked again while it is marked; a Dialer that relays no UDP
// refuses every flow.
func TestUDPRefusedFlowDropsWithoutAskingAgain(t *testing.T) {
	t.Parallel()
	d := &udpDialer{testDialer: &testDialer{}}
	blocked := netip.MustParseAddr("198.18.0.9")
	relay, recs := serveUDP(t, d, netip.AddrPortFrom(blocked, 9), func(a netip.Addr) (string, bool) { return blockedHost, a == blocked }, time.Hour)
	c := programSocket(t)
	if got := exchangeUDP(t, c, relay, 200*time.Millisecond, "a", "b", "c"); got[0]+got[1]+got[2] != "" {
		t.Errorf("a refused flow answered %q", got)
	}
	if n := d.asked.Load(); n != 1 {
		t.Errorf("asked %d times, want 1", n)
	}
	if r := recs(); len(r) != 1 || r[0].Refused != blockedWhy || r[0].Host != blockedHost {
		t.Errorf("records %+v", r)
	}

	echo := udpEcho(t)
	relay2, recs2 := serveUDP(t, &testDialer{}, echo, nil, time.Hour)
	if got := exchangeUDP(t, c, relay2, 200*time.Millisecond, "x"); got[0] != "" {
		t.Errorf("a Dialer without UDP: answered %q", got)
	}
	if !sandboxtest.Eventually(t, safety, func() bool { return len(recs2()) == 1 }) || recs2()[0].Refused == "" {
		t.Errorf("a Dialer without UDP: records %+v", recs2())
	}
}

// TestUDPFlowsAreBounded: beyond MaxUDPFlows, a new socket's datagram
// is dropped and its Record says ErrBusy with its size; a refused
// flow's marker makes room.
func TestUDPFlowsAreBounded(t *testing.T) {
	t.Parallel()
	echo := udpEcho(t)
	d := &udpDialer{testDialer: &testDialer{}}
	relay, recs := serveUDP(t, d, echo, nil, time.Hour)
	for i := range MaxUDPFlows {
		if got := exchangeUDP(t, programSocket(t), relay, safety, "hi"); got[0] != "echo:hi" {
			t.Fatalf("flow %d: %q", i, got)
		}
	}
	if got := exchangeUDP(t, programSocket(t), relay, 200*time.Millisecond, "over"); got[0] != "" {
		t.Errorf("a flow beyond the bound answered %q", got)
	}
	if !sandboxtest.Eventually(t, safety, func() bool { return len(recs()) == 1 }) {
		t.Fatalf("records %+v", recs())
	}
	if r := recs()[0]; !errors.Is(r.Err, ErrBusy) || r.Dropped != 4 {
		t.Errorf("record %+v, want ErrBusy with 4 bytes dropped", r)
	}
}

// BenchmarkUDPIdleFlow reports the memory (heap and stacks) the Server
// holds per idle UDP flow: 100 program sockets, each with one round trip
// through the relay to an echo server.
func BenchmarkUDPIdleFlow(b *testing.B) {
	const n = 100
	echo := udpEcho(b)
	for b.Loop() {
		relay, _ := serveUDP(b, &udpDialer{testDialer: &testDialer{}}, echo, nil, time.Hour)
		socks := make([]*net.UDPConn, n)
		for i := range socks {
			socks[i] = programSocket(b)
		}
		before := inUse()
		for _, c := range socks {
			if got := exchangeUDP(b, c, relay, safety, "hi"); got[0] != "echo:hi" {
				b.Fatalf("answer %q", got)
			}
		}
		after := inUse()
		b.ReportMetric(float64(int64(after)-int64(before))/n, "B/flow")
	}
}
