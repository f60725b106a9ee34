//go:build linux

package netredirect

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inNewNetNS runs f on a thread of its own in a new network namespace
// with lo up. The thread never returns to the test's namespace: it ends
// with its goroutine.
func inNewNetNS(t *testing.T, f func(tid int)) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		ifr, _ := unix.NewIfreq("lo")
		ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			done <- err
			return
		}
		f(unix.Gettid())
		done <- nil
	}()
	if err := <-done; errors.Is(err, unix.EPERM) {
		t.Skip("a network namespace needs CAP_SYS_ADMIN")
	} else if err != nil {
		t.Fatal(err)
	}
}

func netlinkSocket(t *testing.T, proto int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatalf("netlink socket %d: %v", proto, err)
	}
	return fd
}

// install puts the routes and the rules in the current thread's namespace.
func install(t *testing.T, p Ports) {
	t.Helper()
	route := netlinkSocket(t, unix.NETLINK_ROUTE)
	defer unix.Close(route)
	if err := Routes(route); err != nil && !errors.Is(err, ErrNoIPv6) {
		t.Fatal(err)
	}
	nf := netlinkSocket(t, unix.NETLINK_NETFILTER)
	defer unix.Close(nf)
	if err := Rules(nf, p); err != nil {
		t.Fatal(err)
	}
}

// TestRedirectInANamespace: with the routes and the rules, a TCP
// connect to an outside address reaches the loopback listener, which
// reads the original destination; UDP outside fails at once; applying
// again replaces the table rather than doubling it.
func TestRedirectInANamespace(t *testing.T) {
	t.Parallel()
	inNewNetNS(t, func(tid int) {
		install(t, Ports{TCP: 3129, DNS: 53})
		install(t, Ports{TCP: 3129, DNS: 53})
		l := listen(t, "127.0.0.1:3129")
		defer unix.Close(l)
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(c)
		if err := unix.Connect(c, &unix.SockaddrInet4{Addr: [4]byte{192, 0, 2, 1}, Port: 443}); err != nil {
			t.Fatalf("connect to an outside address: %v", err)
		}
		a, _, err := unix.Accept(l)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(a)
		if dst, err := connOriginalDst(a); err != nil || dst.String() != "192.0.2.1:443" {
			t.Errorf("original destination %v, %v", dst, err)
		}
		u, _ := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		defer unix.Close(u)
		err = unix.Sendto(u, []byte("x"), 0, &unix.SockaddrInet4{Addr: [4]byte{192, 0, 2, 1}, Port: 9})
		if !errors.Is(err, unix.EPERM) {
			t.Errorf("UDP to an outside address: %v, want EPERM", err)
		}
		if nft, err := exec.LookPath("nft"); err == nil {
			out, err := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(os.Getpid())+"/task/"+strconv.Itoa(tid)+"/ns/net", nft, "list", "ruleset").CombinedOutput()
			if err != nil {
				t.Fatalf("nft list ruleset: %v: %s", err, out)
			}
			if n := strings.Count(string(out), "table inet termgate"); n != 1 || strings.Count(string(out), "redirect to :3129") != 2 {
				t.Errorf("the ruleset after two installs:\n%s", out)
			}
			t.Logf("%s", out)
		}
	})
}

// TestNoRoutesNothingLeaves: without the routes, a connect outside
// fails at once: the namespace has no way out at all.
func TestNoRoutesNothingLeaves(t *testing.T) {
	t.Parallel()
	inNewNetNS(t, func(int) {
		c, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		defer unix.Close(c)
		err := unix.Connect(c, &unix.SockaddrInet4{Addr: [4]byte{192, 0, 2, 1}, Port: 443})
		if !errors.Is(err, unix.ENETUNREACH) {
			t.Errorf("connect without a route: %v, want ENETUNREACH", err)
		}
	})
}

func listen(t *testing.T, addr string) int {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())})
	}
	if err == nil {
		err = unix.Listen(fd, 8)
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestUDPRelayedWithItsDestination: with a UDP port, UDP to an outside
// address reaches the relay's socket, conntrack names where each
// datagram was going, and the relay's answer reaches the program as
// from that address; a datagram sent to the relay itself names the
// relay.
func TestUDPRelayedWithItsDestination(t *testing.T) {
	t.Parallel()
	inNewNetNS(t, func(int) {
		install(t, Ports{TCP: 3129, DNS: 53, UDP: 3130})
		nf := netlinkSocket(t, unix.NETLINK_NETFILTER)
		defer unix.Close(nf)
		for _, tc := range []struct {
			relay, dst string
			family     int
		}{
			{"127.0.0.1:3130", "192.0.2.1:9999", unix.AF_INET},
			{"[::1]:3130", "[2001:db8::1]:9999", unix.AF_INET6},
		} {
			relay := udpSocket(t, tc.family, tc.relay)
			if relay < 0 {
				t.Logf("no %s: skipped", tc.relay)
				continue
			}
			defer unix.Close(relay)
			prog := udpSocket(t, tc.family, "")
			defer unix.Close(prog)
			dst := netip.MustParseAddrPort(tc.dst)
			if err := unix.Sendto(prog, []byte("ping"), 0, sockaddr(dst)); err != nil {
				t.Fatalf("send to %s: %v", dst, err)
			}
			b := make([]byte, 16)
			unix.SetsockoptTimeval(relay, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
			n, from, err := unix.Recvfrom(relay, b, 0)
			if err != nil || string(b[:n]) != "ping" {
				t.Fatalf("the relay read %q, %v", b[:n], err)
			}
			got, err := OriginalDst(nf, netip.MustParseAddrPort(tc.relay), addrPort(from))
			if err != nil || got != dst {
				t.Errorf("original destination of %s's datagram: %v, %v; want %s", addrPort(from), got, err, dst)
			}
			if err := unix.Sendto(relay, []byte("pong"), 0, from); err != nil {
				t.Fatal(err)
			}
			unix.SetsockoptTimeval(prog, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
			n, back, err := unix.Recvfrom(prog, b, 0)
			if err != nil || string(b[:n]) != "pong" || addrPort(back) != dst {
				t.Errorf("the program read %q from %v, %v; want pong from %s", b[:n], addrPort(back), err, dst)
			}
			// Sent to the relay's own address: not redirected.
			if err := unix.Sendto(prog, []byte("self"), 0, sockaddr(netip.MustParseAddrPort(tc.relay))); err != nil {
				t.Fatal(err)
			}
			if _, from, err = unix.Recvfrom(relay, b, 0); err != nil {
				t.Fatal(err)
			}
			if got, err := OriginalDst(nf, netip.MustParseAddrPort(tc.relay), addrPort(from)); err != nil || got.String() != tc.relay {
				t.Errorf("a datagram to the relay itself: %v, %v; want %s", got, err, tc.relay)
			}
			if got, err := OriginalDst(nf, netip.MustParseAddrPort(tc.relay), netip.AddrPortFrom(addrPort(from).Addr(), 9)); !errors.Is(err, ErrNoEntry) {
				t.Errorf("a datagram never sent: %v, %v; want ErrNoEntry", got, err)
			}
		}
	})
}

// udpSocket is a UDP socket of family bound to addr ("" for any port of
// loopback), or -1 where the namespace has no such address.
func udpSocket(t *testing.T, family int, addr string) int {
	t.Helper()
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	if addr != "" {
		err = unix.Bind(fd, sockaddr(netip.MustParseAddrPort(addr)))
	}
	if err != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

func addrPort(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	return netip.AddrPort{}
}
