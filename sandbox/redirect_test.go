//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/internal/netredirect"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// redirectScript connects outside twice, around a line of stdin, and
// sends UDP outside; the command's attempts to undo the redirect fail,
// since it holds no capability in its network.
const redirectScript = `echo first > /dev/tcp/192.0.2.1/443 && echo sent-first
(echo u > /dev/udp/192.0.2.1/9) 2>&1 | grep -q 'Operation not permitted' && echo udp-refused
ip route del default 2>/dev/null && echo ROUTE-DELETED
nft flush ruleset 2>/dev/null && echo RULES-FLUSHED
cat /etc/resolv.conf
read x
echo second > /dev/tcp/198.51.100.7/80 && echo sent-second`

// acceptFrom accepts one connection on l and returns its original
// destination and what it read to its end.
func acceptFrom(t *testing.T, l net.Listener) (string, string) {
	t.Helper()
	l.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer c.Close()
	dst, err := netredirect.ConnOriginalDst(c.(*net.TCPConn))
	if err != nil {
		t.Errorf("original destination: %v", err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, _ := io.ReadAll(c)
	return dst.String(), string(b)
}

// TestRedirectSendsOutsideToTheListener: with Policy.Redirect, a plain
// connect to an outside address reaches the sandbox's listener, which
// reads where it was going; UDP outside fails at once; the command can
// change neither the routes nor the rules; resolv.conf names the stub;
// another sandbox without a listener gets nothing out. The same through
// the keeper.
func TestRedirectSendsOutsideToTheListener(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	for _, keeper := range []bool{false, true} {
		t.Run(fmt.Sprintf("keeper=%v", keeper), func(t *testing.T) {
			t.Parallel()
			l := needLauncher(t)
			if keeper {
				l = keeperLauncher(t, keeperDir(t))
			}
			p := Policy{Key: "redirect", Command: []string{"/bin/bash", "-c", redirectScript}, Workspace: sandboxtest.Dir(t),
				Listen: []Socket{{Network: "tcp4", Addr: "127.0.0.1:3129"}}, Redirect: &Redirect{TCP: 3129, DNS: DNSPort}}
			var out, errb sandboxtest.SyncBuffer
			proc, err := l.Start(t.Context(), p, Stdio{Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			socks := takeSockets(t, proc, 1)
			if dst, got := acceptFrom(t, socks[0].Listener); dst != "192.0.2.1:443" || got != "first\n" {
				t.Errorf("first connection: to %s, read %q", dst, got)
			}
			waitFor(t, &out, "nameserver")
			other := runPolicy(t, Policy{Redirect: &Redirect{TCP: 3129}, Command: []string{"/bin/bash", "-c",
				"echo x > /dev/tcp/192.0.2.1/443 && echo LEFT; echo done"}})
			if strings.Contains(other.stdout, "LEFT") || !strings.Contains(other.stderr, "Connection refused") {
				t.Errorf("a sandbox whose listener is absent: %v", other)
			}
			proc.Stdin().Write([]byte("go\n"))
			if dst, got := acceptFrom(t, socks[0].Listener); dst != "198.51.100.7:80" || got != "second\n" {
				t.Errorf("second connection: to %s, read %q", dst, got)
			}
			exit, ok := waitReleased(proc, 30*time.Second)
			want := "sent-first\nudp-refused\nnameserver 127.0.0.1\noptions attempts:1\nsent-second\n"
			if !ok || !exit.Success() || out.String() != want {
				t.Errorf("exit %s (done %v), stdout %q, want %q; stderr %q", exit, ok, out.String(), want, errb.String())
			}
		})
	}
}

// TestNoRedirectNoWayOut: without Policy.Redirect the sandbox's network
// has no route outside at all.
func TestNoRedirectNoWayOut(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: []string{"/bin/bash", "-c", "echo x > /dev/tcp/192.0.2.1/443 && echo LEFT; echo done"}})
	if strings.Contains(r.stdout, "LEFT") || !strings.Contains(r.stderr, "Network is unreachable") {
		t.Errorf("%v", r)
	}
}

// TestCheckRedirect: this host can redirect a sandbox's network.
func TestCheckRedirect(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := needLauncher(t).CheckRedirect(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRedirectValidation: a redirect needs a network of the sandbox's
// own, a TCP port, and DNS on port 53 or none.
func TestRedirectValidation(t *testing.T) {
	t.Parallel()
	base := Policy{Command: []string{"true"}, Workspace: "/srv/ws"}
	cases := []struct {
		name string
		mod  func(*Policy)
		want string
	}{
		{"host network", func(p *Policy) { p.Network = NetworkHost; p.Redirect = &Redirect{TCP: 3129} }, "needs network none"},
		{"no TCP port", func(p *Policy) { p.Redirect = &Redirect{DNS: 53} }, "TCP port is 0"},
		{"DNS elsewhere", func(p *Policy) { p.Redirect = &Redirect{TCP: 3129, DNS: 5353} }, "DNS port 5353"},
		{"UDP relay on DNS's port", func(p *Policy) { p.Redirect = &Redirect{TCP: 3129, DNS: 53, UDP: 53} }, "UDP relay and DNS on the same port 53"},
		{"a redirected TCP socket", func(p *Policy) {
			p.Redirect = &Redirect{TCP: 3129, UDP: 3129}
			p.Listen = []Socket{{Network: "tcp4", Addr: "127.0.0.1:3129", Redirected: true}}
		}, "not the UDP relay"},
		{"a redirected socket on another port", func(p *Policy) {
			p.Redirect = &Redirect{TCP: 3129, UDP: 3129}
			p.Listen = []Socket{{Network: "udp4", Addr: "127.0.0.1:3130", Redirected: true}}
		}, "not the UDP relay"},
		{"a redirected socket without a redirect", func(p *Policy) {
			p.Listen = []Socket{{Network: "udp4", Addr: "127.0.0.1:3130", Redirected: true}}
		}, "not the UDP relay"},
		{"valid", func(p *Policy) { p.Redirect = &Redirect{TCP: 3129, DNS: 53} }, ""},
		{"valid with a relay", func(p *Policy) {
			p.Redirect = &Redirect{TCP: 3129, DNS: 53, UDP: 3129}
			p.Listen = []Socket{{Network: "udp6", Addr: "[::1]:3129", Redirected: true}}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := base
			c.mod(&p)
			err := p.Normalize().Validate()
			if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%v, want %q", err, c.want)
			}
		})
	}
}

// TestRedirectAdoptedProcess: the redirect stays in the namespace of a
// process whose launcher went away; the launcher that adopts it installs
// it again (replacing, not doubling) and listens again, and the
// command's next outside connection reaches the new listener.
func TestRedirectAdoptedProcess(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	dir := keeperDir(t)
	l := keeperLauncher(t, dir)
	script := "echo first > /dev/tcp/192.0.2.1/443; read x; echo second > /dev/tcp/192.0.2.2/443 && echo reached"
	proc, err := l.Start(t.Context(), Policy{Key: "redirect-adopted", Command: []string{"/bin/bash", "-c", script}, Workspace: sandboxtest.Dir(t),
		Listen: []Socket{{Network: "tcp4", Addr: "127.0.0.1:3129"}}, Redirect: &Redirect{TCP: 3129}}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	socks := takeSockets(t, proc, 1)
	if dst, got := acceptFrom(t, socks[0].Listener); dst != "192.0.2.1:443" || got != "first\n" {
		t.Errorf("first connection: to %s, read %q", dst, got)
	}
	socks[0].Close()
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	proc.Wait()
	l.Close()

	l2 := keeperLauncher(t, dir)
	var out sandboxtest.SyncBuffer
	procs, err := l2.Adopt(t.Context(), func(string) (Stdio, bool) { return Stdio{Stdout: &out}, true })
	if err != nil || len(procs) != 1 {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	ns, err := procs[0].NetNS()
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Redirect(Redirect{TCP: 3129})
	var again net.Listener
	if err == nil {
		again, err = ns.Listen("tcp4", "127.0.0.1:3129")
	}
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	procs[0].Stdin().Write([]byte("go\n"))
	if dst, got := acceptFrom(t, again); dst != "192.0.2.2:443" || got != "second\n" {
		t.Errorf("second connection: to %s, read %q", dst, got)
	}
	if exit, ok := waitReleased(procs[0], 30*time.Second); !ok || exit.Code != 0 || out.String() != "reached\n" {
		t.Errorf("exit %s (done %v), output %q", exit, ok, out.String())
	}
}

// BenchmarkStartRedirect compares a start with a redirected network (its
// routes and rules, and the IPv4 sockets a session opens for them) against
// one with loopback only, in turns, by the median ratio of their times
// to the first output byte.
func BenchmarkStartRedirect(b *testing.B) {
	needNetNS(b)
	l := needLauncher(b)
	none := benchPolicy
	none.Workspace = sandboxtest.Dir(b)
	redirected := none
	redirected.Listen = []Socket{{Network: "tcp4", Addr: "127.0.0.1:3129"}, {Network: "udp4", Addr: "127.0.0.1:53"}, {Network: "tcp4", Addr: "127.0.0.1:53"},
		{Network: "udp4", Addr: "127.0.0.1:3129", Redirected: true}}
	redirected.Redirect = &Redirect{TCP: 3129, DNS: DNSPort, UDP: 3129}
	var plain, with, ratios []float64
	for i := 0; b.Loop(); i++ {
		var p, w float64
		if i%2 == 0 {
			p, w = startFirstByte(b, l, none), startFirstByte(b, l, redirected)
		} else {
			w, p = startFirstByte(b, l, redirected), startFirstByte(b, l, none)
		}
		plain, with, ratios = append(plain, p), append(with, w), append(ratios, w/p)
	}
	b.ReportMetric(median(plain), "ms-first-byte-none")
	b.ReportMetric(median(with), "ms-first-byte-redirect")
	b.ReportMetric(100*(median(ratios)-1), "%-overhead")
}
