//go:build linux

package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy/internal/proxy"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// testCgroups is the shared launcher's cgroup parent.
var testCgroups = sandboxtest.SharedCgroupParent("netpolicy")

// testLauncher starts the sandboxes of the end-to-end tests.
var testLauncher = sandboxtest.Shared[*sandbox.Launcher]{
	What: "sandbox (install bubblewrap to run this test)",
	New: func() (*sandbox.Launcher, error) {
		return sandbox.NewLauncher(sandbox.Config{KillGrace: time.Second, CgroupParent: testCgroups})
	},
	Close: func(l *sandbox.Launcher) {
		l.Close()
		sandboxtest.RemoveCgroupParent(testCgroups)
	},
}

func releaseLauncher() { testLauncher.Release() }

// policyDialer is the transparent listener's Dialer: a netpolicy Dialer
// for one policy, its refusals told as the proxy's.
type policyDialer struct {
	d   *Dialer
	pol *Policy
}

func (p policyDialer) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	c, _, err := p.d.Dial(ctx, p.pol, "tcp", host, port)
	var refused *RefusedError
	if errors.As(err, &refused) {
		return nil, &proxy.Refused{Reason: refused.Decision.Reason}
	}
	return c, err
}

// startLineEcho serves TCP on addr: it answers what it reads, to the
// end, prefixed with "echo:".
func startLineEcho(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				b, _ := io.ReadAll(c)
				c.Write(append([]byte("echo:"), b...))
			})
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
}

// redirectScript is a program that ignores proxy variables: glibc's
// resolver (through /etc/resolv.conf), plain connects, a DNS query over
// TCP, DNS and UDP to outside addresses. After a line on stdin it
// connects again to the address it was given.
const redirectScript = `
import socket, struct, sys, errno
def talk(host, port):
    try:
        s = socket.create_connection((host, port), timeout=20)
        s.sendall(b"ping"); s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            b = s.recv(100)
            if not b: break
            data += b
        print("OK", host, data.decode(), flush=True)
    except socket.gaierror as e: print("NOADDR", host, e.errno == socket.EAI_NONAME, flush=True)
    except ConnectionResetError: print("RESET", host, flush=True)
    except OSError as e: print("ERR", host, errno.errorcode.get(e.errno), flush=True)
def dns(name, proto, server):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    if proto == "tcp":
        s = socket.create_connection((server, 53), timeout=20)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
        r = s.recv(n, socket.MSG_WAITALL)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(20)
        s.sendto(q, (server, 53)); r = s.recv(512)
    rcode, an = r[3] & 15, struct.unpack(">H", r[6:8])[0]
    print("DNS", proto, server, rcode, an, socket.inet_ntoa(r[-4:]) if an else "-", flush=True)
addr = socket.gethostbyname("allowed.test")
print("ADDR", addr, flush=True)
talk("allowed.test", 8080)
talk("refused.test", 8080)
talk("203.0.113.5", 8080)
talk("2001:db8::5", 8080) if sys.argv[1:] == ["v6"] else print("NOV6", flush=True)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("203.0.113.5", 9999))
try: u.send(b"x"); print("UDP sent", flush=True)
except OSError as e: print("UDP", errno.errorcode.get(e.errno), flush=True)
dns("allowed.test", "tcp", "127.0.0.1")
dns("allowed.test", "udp", "192.0.2.53")
dns("refused.test", "tcp", "192.0.2.53")
sys.stdin.readline()
talk(addr, 8080)
`

// TestRedirectedSandboxMeetsThePolicy: a program in a real sandbox that
// ignores proxy variables reaches an allowed name through the DNS stub's
// synthetic address and the transparent listener; a refused name gets
// no address, an address the policy does not allow is reset, UDP
// outside fails at once, DNS over TCP and DNS sent to any server reach
// the stub, IPv6 is redirected too; once termgate's listeners are gone, nothing leaves.
func TestRedirectedSandboxMeetsThePolicy(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		sandboxtest.Unavailable(t, "no %s for a program in the sandbox", python)
	}
	l := testLauncher.Get(t)
	startLineEcho(t, "127.0.0.2:8080")
	zone := sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{"allowed.test.": sandboxtest.Fixed("127.0.0.2"), "refused.test.": sandboxtest.Fixed("127.0.0.2")})
	pol := mustParse(t, "agents", `allow = ["allowed.test:8080", "127.0.0.2:8080"]`)

	var mu sync.Mutex
	var records []proxy.Record
	var refusedNames []Decision
	fdns := &FakeDNS{Policy: func() *Policy { return pol }, Done: func(d Decision) {
		if !d.Allowed {
			mu.Lock()
			refusedNames = append(refusedNames, d)
			mu.Unlock()
		}
	}}
	srv := &proxy.Server{
		Dialer: policyDialer{&Dialer{Resolver: NewResolver(zone.Addr()), OwnAddrs: func() ([]netip.Addr, error) { return nil, nil }}, pol},
		Names:  fdns.Name,
		Done:   func(r proxy.Record) { mu.Lock(); records = append(records, r); mu.Unlock() },
	}
	listen := []sandbox.Socket{{Network: "tcp4", Addr: "127.0.0.1:3129"}, {Network: "udp4", Addr: "127.0.0.1:53"}, {Network: "tcp4", Addr: "127.0.0.1:53"}}
	command, v6 := []string{python, "-c", redirectScript}, "NOV6"
	if _, err := os.Stat("/proc/net/if_inet6"); err == nil {
		listen = append(listen, sandbox.Socket{Network: "tcp6", Addr: "[::1]:3129"})
		command, v6 = append(command, "v6"), "RESET 2001:db8::5"
	}
	var out, errb sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), sandbox.Policy{
		Command: command, Workspace: sandboxtest.Dir(t), Listen: listen,
		// Set as a program's environment would be: it ignores them.
		Env:      map[string]string{"HTTP_PROXY": "http://127.0.0.1:1", "ALL_PROXY": "socks5://127.0.0.1:1"},
		Redirect: &sandbox.Redirect{TCP: 3129, DNS: sandbox.DNSPort},
	}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	socks, err := proc.Sockets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeTransparent(socks[0].Listener) })
	wg.Go(func() { fdns.ServePacket(socks[1].PacketConn) })
	wg.Go(func() { fdns.Serve(socks[2].Listener) })
	if len(socks) > 3 {
		wg.Go(func() { srv.ServeTransparent(socks[3].Listener) })
	}
	stop := sync.OnceFunc(func() { srv.Close(); fdns.Close(); wg.Wait() })
	defer stop()

	lines := readLines(t, &out, 9)
	addr := strings.TrimPrefix(lines[0], "ADDR ")
	if a, err := netip.ParseAddr(addr); err != nil || !FakePrefix.Contains(a) {
		t.Errorf("allowed.test resolved to %q in the sandbox, want a synthetic address", addr)
	}
	want := []string{
		"OK allowed.test echo:ping",
		"NOADDR refused.test True",
		"RESET 203.0.113.5",
		v6,
		"UDP EPERM",
		"DNS tcp 127.0.0.1 0 1 " + addr,
		"DNS udp 192.0.2.53 0 1 " + addr,
		"DNS tcp 192.0.2.53 3 0 -",
	}
	for i, w := range want {
		if lines[i+1] != w {
			t.Errorf("line %d: %q, want %q", i+1, lines[i+1], w)
		}
	}

	stop() // the server is gone: the rules stay, and nothing leaves
	proc.Stdin().Write([]byte("go\n"))
	if last := readLines(t, &out, 10)[9]; last != "ERR "+addr+" ECONNREFUSED" {
		t.Errorf("with the listeners gone: %q", last)
	}
	mu.Lock()
	defer mu.Unlock()
	// A reset connection's record may come after the next one's.
	byHost := map[string]proxy.Record{}
	for _, r := range records {
		byHost[r.Host] = r
	}
	if r := byHost["allowed.test"]; r.Up != 4 || r.Refused != "" {
		t.Errorf("allowed.test's record %+v, in %+v", r, records)
	}
	if r := byHost["203.0.113.5"]; !strings.Contains(r.Refused, "not allowed") {
		t.Errorf("203.0.113.5's record %+v, in %+v", r, records)
	}
	if len(refusedNames) < 2 || refusedNames[0].Host != "refused.test" {
		t.Errorf("refused names told: %+v", refusedNames)
	}
	if errb.String() != "" {
		t.Errorf("stderr %q", errb.String())
	}
}

// readLines waits until out holds at least n lines, and returns them.
func readLines(t *testing.T, out *sandboxtest.SyncBuffer, n int) []string {
	t.Helper()
	var lines []string
	ok := sandboxtest.Eventually(t, 60*time.Second, func() bool {
		lines = nil
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return len(lines) >= n
	})
	if !ok {
		t.Fatalf("%d lines of %d: %q", len(lines), n, lines)
	}
	return lines
}
