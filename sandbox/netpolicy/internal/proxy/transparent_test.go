//go:build linux

package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/internal/netredirect"
	"golang.org/x/sys/unix"
)

// redirectedNS is a network namespace with a sandbox's routes and
// rules, whose sockets a goroutine locked to a thread inside it makes;
// the thread never returns to the test's namespace and ends with it.
// Everything else (bind, connect, accept, the copies) runs anywhere.
type redirectedNS struct {
	run chan func()
}

// transparentPort is the redirect's port in the test namespaces.
const transparentPort = 3129

func newRedirectedNS(t testing.TB) *redirectedNS {
	t.Helper()
	ns := &redirectedNS{run: make(chan func())}
	ready := make(chan error, 1)
	go func() { // owned by ns, ends at the test's cleanup
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ready <- enterRedirected()
		for f := range ns.run {
			f()
		}
	}()
	t.Cleanup(func() { close(ns.run) })
	switch err := <-ready; {
	case errors.Is(err, unix.EPERM):
		t.Skip("a network namespace needs CAP_SYS_ADMIN")
	case err != nil:
		t.Fatal(err)
	}
	return ns
}

// enterRedirected moves the thread into a new network namespace, brings
// lo up, and installs the routes and the rules.
func enterRedirected() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, _ := unix.NewIfreq("lo")
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return err
	}
	for _, step := range []struct {
		proto   int
		install func(int) error
	}{
		{unix.NETLINK_ROUTE, netredirect.Routes},
		{unix.NETLINK_NETFILTER, func(fd int) error { return netredirect.Rules(fd, netredirect.Ports{TCP: transparentPort}) }},
	} {
		nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, step.proto)
		if err != nil {
			return err
		}
		err = step.install(nl)
		unix.Close(nl)
		if err != nil && !errors.Is(err, netredirect.ErrNoIPv6) {
			return err
		}
	}
	return nil
}

// do runs f on the namespace's thread.
func (ns *redirectedNS) do(f func()) {
	done := make(chan struct{})
	ns.run <- func() { f(); close(done) }
	<-done
}

// listen opens a TCP listener on addr in the namespace.
func (ns *redirectedNS) listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	var err error
	ns.do(func() { l, err = net.Listen("tcp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dial connects to addr from inside the namespace, as a program there
// would.
func (ns *redirectedNS) dial(addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	ns.do(func() { c, err = net.DialTimeout("tcp", addr, safety) })
	return c, err
}

// mapDialer allows the hosts it maps, connecting to their upstreams,
// and refuses the rest.
type mapDialer struct {
	to      map[string]string // host → upstream host:port
	mu      sync.Mutex
	asked   []string
	refused []string // told by Refuse: host:port reason
}

func (d *mapDialer) Refuse(_, host string, port uint16, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refused = append(d.refused, fmt.Sprintf("%s:%d %s", host, port, reason))
}

func (d *mapDialer) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, host)
	d.mu.Unlock()
	up, ok := d.to[host]
	if !ok {
		return nil, &Refused{Reason: "network: refused " + host + " by policy \"test\""}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", up)
}

func (d *mapDialer) askedFor() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// transparentFixture is a Server serving a redirected namespace's
// transparent listeners (127.0.0.1 and, where the namespace has IPv6,
// ::1), and an echo upstream on the host.
type transparentFixture struct {
	ns      *redirectedNS
	srv     *Server
	dialer  *mapDialer
	echo    string
	mu      sync.Mutex
	records []Record
}

func newTransparentFixture(t *testing.T, names map[netip.Addr]string) *transparentFixture {
	t.Helper()
	f := &transparentFixture{ns: newRedirectedNS(t), echo: startEcho(t, "127.0.0.4")}
	f.dialer = &mapDialer{to: map[string]string{"192.0.2.1": f.echo, "api.example.com": f.echo, "2001:db8::1": f.echo}}
	f.srv = &Server{Dialer: f.dialer, Done: func(r Record) { f.mu.Lock(); f.records = append(f.records, r); f.mu.Unlock() }}
	if names != nil {
		f.srv.Names = func(a netip.Addr) (string, bool) {
			name, ok := names[a]
			return name, ok || netip.MustParsePrefix("198.18.0.0/15").Contains(a)
		}
	}
	var wg sync.WaitGroup
	for _, addr := range []string{"127.0.0.1:3129", "[::1]:3129"} {
		l := f.ns.listen(t, addr)
		wg.Go(func() { f.srv.ServeTransparent(l) })
	}
	t.Cleanup(func() { f.srv.Close(); wg.Wait() })
	return f
}

func (f *transparentFixture) waitRecords(t *testing.T, n int) []Record {
	t.Helper()
	deadline := time.Now().Add(safety)
	for {
		f.mu.Lock()
		got := append([]Record(nil), f.records...)
		f.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) < n {
				t.Fatalf("%d records, want %d: %+v", len(got), n, got)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoThrough writes ping on c, ends its stream, and returns what came
// back to the end.
func echoThrough(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(safety))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestTransparentConnects: a program's plain connect to an outside
// address reaches the upstream the Dialer chose for that address, or for
// the name a synthetic address stands for, by IPv4 and IPv6; the Record
// names what was asked and counts the bytes.
func TestTransparentConnects(t *testing.T) {
	t.Parallel()
	f := newTransparentFixture(t, map[netip.Addr]string{netip.MustParseAddr("198.18.0.7"): "api.example.com"})
	cases := []struct{ dial, host string }{
		{"192.0.2.1:443", "192.0.2.1"},
		{"198.18.0.7:443", "api.example.com"},
		{"[2001:db8::1]:443", "2001:db8::1"},
	}
	for i, c := range cases {
		conn, err := f.ns.dial(c.dial)
		if err != nil && strings.HasPrefix(c.dial, "[") && errors.Is(err, unix.ENETUNREACH) {
			t.Logf("no IPv6 in the namespace: %v", err)
			continue
		}
		if err != nil {
			t.Fatalf("dial %s: %v", c.dial, err)
		}
		got, err := echoThrough(t, conn)
		conn.Close()
		if err != nil || got != "pingbye" {
			t.Errorf("through %s: %q, %v", c.dial, got, err)
		}
		r := f.waitRecords(t, i+1)[i]
		if r.Protocol != Transparent || r.Host != c.host || r.Port != 443 || r.Up != 4 || r.Down != 7 || r.Refused != "" || r.Err != nil {
			t.Errorf("record of %s: %+v", c.dial, r)
		}
	}
}

// TestTransparentRefusalResets: a connection the Dialer refuses, one to
// a synthetic address that names nothing any longer, and one made to
// the listener itself are reset, and recorded as such; the second and
// third are never asked of the Dialer. What the program sends (a Host
// naming an allowed name) changes nothing: the decision is by address.
func TestTransparentRefusalResets(t *testing.T) {
	t.Parallel()
	f := newTransparentFixture(t, map[netip.Addr]string{})
	cases := []struct {
		dial  string
		check func(Record) bool
	}{
		{"203.0.113.9:80", func(r Record) bool { return strings.Contains(r.Refused, "refused 203.0.113.9") }},
		{"198.18.0.9:443", func(r Record) bool { return strings.Contains(r.Refused, "look the name up again") }},
		{"127.0.0.1:3129", func(r Record) bool { return errors.Is(r.Err, errNotRedirected) }},
	}
	for i, c := range cases {
		if err := resetOf(f.ns, c.dial); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %v, want a reset", c.dial, err)
		}
		if r := f.waitRecords(t, i+1)[i]; r.Protocol != Transparent || !c.check(r) {
			t.Errorf("record of %s: %+v", c.dial, r)
		}
	}
	if got := f.dialer.askedFor(); len(got) != 1 || got[0] != "203.0.113.9" {
		t.Errorf("the Dialer was asked for %q", got)
	}
	f.dialer.mu.Lock()
	refused := f.dialer.refused
	f.dialer.mu.Unlock()
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "198.18.0.9:443 ") || !strings.Contains(refused[0], "look the name up again") {
		t.Errorf("the Dialer was told of refusals %q, want the stale synthetic address's", refused)
	}
}

// resetOf connects to addr from ns, sends a request naming an allowed
// host, and reads: it returns the first error, which a reset makes
// ECONNRESET whichever call comes after it (on loopback, the connect
// itself may).
func resetOf(ns *redirectedNS, addr string) error {
	conn, err := ns.dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(safety))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// TestTransparentNothingLeavesWithoutTheListener: with the listener
// gone, a connect outside is refused at once: the rules stay and the
// namespace has no other way out.
func TestTransparentNothingLeavesWithoutTheListener(t *testing.T) {
	t.Parallel()
	ns := newRedirectedNS(t)
	if c, err := ns.dial("192.0.2.1:443"); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("connect with no listener: %v", err)
		if c != nil {
			c.Close()
		}
	}
	var sendErr error
	ns.do(func() {
		var u net.Conn
		if u, sendErr = net.Dial("udp", "192.0.2.1:9"); sendErr == nil {
			_, sendErr = u.Write([]byte("x"))
			u.Close()
		}
	})
	if !errors.Is(sendErr, os.ErrPermission) && !errors.Is(sendErr, unix.EPERM) {
		t.Errorf("UDP outside: %v, want EPERM", sendErr)
	}
}
