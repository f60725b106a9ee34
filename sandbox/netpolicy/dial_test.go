package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/net/dns/dnsmessage"
)

// greeters are TCP servers on 127.0.0.2 to .5, all on one port, each
// writing its own address to a connection and closing it.
type greeters struct {
	port uint16
	wg   sync.WaitGroup
}

func startGreeters(t *testing.T) *greeters {
	t.Helper()
	for range 20 {
		lns, err := listenAll("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
		if err != nil {
			continue // the port was taken on one address: try another
		}
		g := &greeters{port: uint16(lns[0].Addr().(*net.TCPAddr).Port)}
		for _, ln := range lns {
			g.wg.Add(1)
			go g.serve(ln)
		}
		t.Cleanup(func() {
			for _, ln := range lns {
				ln.Close()
			}
			g.wg.Wait()
		})
		return g
	}
	t.Fatal("no port free on 127.0.0.2 to .5")
	return nil
}

// listenAll listens on each of ips, on the port the first one gets.
func listenAll(ips ...string) ([]net.Listener, error) {
	var lns []net.Listener
	port := "0"
	for _, ip := range ips {
		ln, err := net.Listen("tcp4", net.JoinHostPort(ip, port))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		lns = append(lns, ln)
	}
	return lns, nil
}

func (g *greeters) serve(ln net.Listener) {
	defer g.wg.Done()
	me := ln.Addr().(*net.TCPAddr).IP.String()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, me)
		c.Close()
	}
}

// startEcho serves UDP on 127.0.0.5, echoing each datagram.
func startEcho(t *testing.T) uint16 {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// greeting reads what the server c reached wrote: its address.
func greeting(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the greeting: %v", err)
	}
	return string(b)
}

type dialEnv struct {
	dns    *sandboxtest.DNS
	g      *greeters
	udp    uint16
	policy *Policy
	dialer *Dialer
}

func startDialEnv(t *testing.T) *dialEnv {
	t.Helper()
	e := &dialEnv{g: startGreeters(t), udp: startEcho(t)}
	e.dns = sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{
		"open.test.":       sandboxtest.Fixed("127.0.0.2"),
		"loop.test.":       sandboxtest.Fixed("127.0.0.3"),
		"mixed.test.":      sandboxtest.Fixed("127.0.0.1", "127.0.0.2"),
		"order.test.":      sandboxtest.Fixed("127.0.0.6", "127.0.0.4"),
		"refused.test.":    sandboxtest.Fixed("127.0.0.1", "127.0.0.3"),
		"notallowed.test.": sandboxtest.Fixed("127.0.0.2"),
		"meta.test.":       sandboxtest.Fixed("169.254.169.254"),
		"v6.test.":         sandboxtest.Fixed("::1"),
		"udp.test.":        sandboxtest.Fixed("127.0.0.5"),
		"rebind.test.": func(n int) []netip.Addr {
			if n == 1 {
				return sandboxtest.ParseAddrs([]string{"127.0.0.2"})
			}
			return sandboxtest.ParseAddrs([]string{"127.0.0.1"})
		},
	})
	p, u := e.g.port, e.udp
	e.policy = mustParse(t, "tests", fmt.Sprintf(`
allow = [
  "open.test:%[1]d", "loop.test:%[1]d", "mixed.test:%[1]d", "order.test:%[1]d", "refused.test:%[1]d",
  "meta.test:%[1]d", "v6.test:%[1]d", "nxdomain.test:%[1]d", "rebind.test:%[1]d",
  "127.0.0.2:%[1]d", "127.0.0.4:%[1]d", "127.0.0.6:%[1]d", "[::1]:%[1]d",
  "udp:udp.test:%[2]d", "udp:127.0.0.5:%[2]d",
]
deny = ["127.0.0.4:1"]
`, p, u))
	e.dialer = &Dialer{Resolver: NewResolver(e.dns.Addr())}
	return e
}

// TestDial: the Dialer connects to what the policy allows, through the
// test DNS server, and to nothing else.
func TestDial(t *testing.T) {
	t.Parallel()
	e := startDialEnv(t)
	port := e.g.port
	for _, tc := range []struct {
		network, host string
		reached       string // the greeter reached; "" for a refusal
		rng           string // the refused address's range
	}{
		{"tcp", "127.0.0.2", "127.0.0.2", ""},
		{"tcp4", "127.0.0.2", "127.0.0.2", ""},
		{"tcp", "127.0.0.3", "", "loopback"},
		{"tcp", "127.0.0.1", "", "host"},
		{"tcp", "::ffff:127.0.0.3", "", "loopback"},
		{"tcp", "open.test", "127.0.0.2", ""},
		{"tcp", "OPEN.Test.", "127.0.0.2", ""},
		{"tcp4", "open.test", "127.0.0.2", ""},
		{"tcp", "loop.test", "", "loopback"},
		{"tcp", "mixed.test", "127.0.0.2", ""},
		{"tcp", "order.test", "127.0.0.4", ""},
		{"tcp", "refused.test", "", "host"},
		{"tcp", "meta.test", "", "link-local"},
		{"tcp", "notallowed.test", "", ""},
		{"udp", "open.test", "", ""},
	} {
		c, d, err := e.dialer.Dial(t.Context(), e.policy, tc.network, tc.host, port)
		if tc.reached == "" {
			var re *RefusedError
			if !errors.As(err, &re) || re.Decision != d || d.Allowed || d.Range != tc.rng || c != nil {
				t.Errorf("Dial(%q, %q) = %v, %+v, %v; want refused in range %q", tc.network, tc.host, c, d, err, tc.rng)
			}
			continue
		}
		if err != nil {
			t.Errorf("Dial(%q, %q): %v (%+v)", tc.network, tc.host, err, d)
			continue
		}
		want := netip.AddrPortFrom(netip.MustParseAddr(tc.reached), port)
		if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != want || d.Addr != want.Addr() || !d.Allowed {
			t.Errorf("Dial(%q, %q) reached %v, decision %+v; want %v", tc.network, tc.host, got, d, want)
		}
		if got := greeting(t, c); got != tc.reached {
			t.Errorf("Dial(%q, %q): greeted by %q, want %q", tc.network, tc.host, got, tc.reached)
		}
	}
	if n := e.dns.Count("notallowed.test.", dnsmessage.TypeA); n != 0 {
		t.Errorf("a name the policy does not allow was resolved %d times", n)
	}
}

func TestDialRefusesWithoutConnecting(t *testing.T) {
	t.Parallel()
	e := startDialEnv(t)
	ctx := t.Context()
	var re *RefusedError
	if _, d, err := e.dialer.Dial(ctx, nil, "tcp", "127.0.0.2", e.g.port); !errors.As(err, &re) || !strings.Contains(d.Reason, "no network policy") {
		t.Errorf("nil policy: %+v, %v", d, err)
	}
	if _, _, err := e.dialer.Dial(ctx, e.policy, "tcp", "127.0.0.2", e.g.port+1); !errors.As(err, &re) {
		t.Errorf("a port the rule does not name: %v", err)
	}
	if _, _, err := e.dialer.Dial(ctx, e.policy, "tcp6", "127.0.0.2", e.g.port); err == nil || errors.As(err, &re) {
		t.Errorf("tcp6 to an IPv4 address: %v", err)
	}
	if _, _, err := e.dialer.Dial(ctx, e.policy, "tcp4", "v6.test", e.g.port); err == nil || errors.As(err, &re) {
		t.Errorf("tcp4 to a name with IPv6 addresses only: %v", err)
	}
	_, d, err := e.dialer.Dial(ctx, e.policy, "tcp", "nxdomain.test", e.g.port)
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || errors.As(err, &re) || !d.Allowed {
		t.Errorf("a name that does not exist: %+v, %v", d, err)
	}
	failing := &Dialer{Resolver: e.dialer.Resolver, OwnAddrs: func() ([]netip.Addr, error) { return nil, errors.New("no netlink") }}
	if c, _, err := failing.Dial(ctx, e.policy, "tcp", "127.0.0.2", e.g.port); err == nil || c != nil {
		t.Errorf("a Dial that cannot read the host's addresses connected: %v", err)
	}
	// A canceled context: nothing is tried.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if c, _, err := e.dialer.Dial(canceled, e.policy, "tcp", "open.test", e.g.port); err == nil || c != nil {
		t.Errorf("a canceled Dial connected: %v", err)
	}
}

// TestDialRebinding: a name whose answer turns from an allowed address to
// a refused one is refused when it does, and the connection made before
// went to the address checked; each Dial asks once.
func TestDialRebinding(t *testing.T) {
	t.Parallel()
	e := startDialEnv(t)
	c, d, err := e.dialer.Dial(t.Context(), e.policy, "tcp", "rebind.test", e.g.port)
	if err != nil {
		t.Fatalf("first Dial: %v", err)
	}
	if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != netip.AddrPortFrom(d.Addr, e.g.port) || d.Addr != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("first Dial reached %v, checked %v", got, d.Addr)
	}
	if got := greeting(t, c); got != "127.0.0.2" {
		t.Errorf("first Dial greeted by %q", got)
	}
	if n := e.dns.Count("rebind.test.", dnsmessage.TypeA); n != 1 {
		t.Errorf("first Dial asked %d times", n)
	}
	c, d, err = e.dialer.Dial(t.Context(), e.policy, "tcp", "rebind.test", e.g.port)
	var re *RefusedError
	if !errors.As(err, &re) || c != nil || d.Addr != netip.MustParseAddr("127.0.0.1") || (d.Range != "loopback" && d.Range != "host") {
		t.Errorf("second Dial = %v, %+v, %v; want refused at 127.0.0.1", c, d, err)
	}
	if !strings.Contains(d.Reason, "rebind.test:") || !strings.Contains(d.Reason, "resolved to 127.0.0.1") {
		t.Errorf("reason %q", d.Reason)
	}
	if n := e.dns.Count("rebind.test.", dnsmessage.TypeA); n != 2 {
		t.Errorf("two Dials asked %d times", n)
	}
}

func TestDialUDP(t *testing.T) {
	t.Parallel()
	e := startDialEnv(t)
	for _, host := range []string{"udp.test", "127.0.0.5"} {
		c, d, err := e.dialer.Dial(t.Context(), e.policy, "udp", host, e.udp)
		if err != nil {
			t.Fatalf("Dial(udp, %s): %v", host, err)
		}
		if d.Rule == "" || d.Network != "udp" || d.Addr != netip.MustParseAddr("127.0.0.5") {
			t.Errorf("Dial(udp, %s): %+v", host, d)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Errorf("echo: %q, %v", buf[:n], err)
		}
		c.Close()
	}
	var re *RefusedError
	if _, _, err := e.dialer.Dial(t.Context(), e.policy, "tcp", "udp.test", e.udp); !errors.As(err, &re) {
		t.Errorf("tcp to a udp rule: %v", err)
	}
}

// TestResolverLookupEndsWithItsCaller: a lookup whose caller left ends
// at once, not at the resolver's timeout, though its server never
// answers: the resolver's goroutines go.
func TestResolverLookupEndsWithItsCaller(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	asked := make(chan struct{}, 8)
	go func() { // a server that reads and never answers
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			asked <- struct{}{}
		}
	}()
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := NewResolver(pc.LocalAddr().String()).LookupNetIP(ctx, "ip4", "silent.test.")
		done <- err
	}()
	<-asked
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a lookup nobody answered succeeded")
	}
	if !sandboxtest.Eventually(t, time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		t.Errorf("%d goroutines a second after the caller left, %d before the lookup", runtime.NumGoroutine(), before)
	}
}
