//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// needNetNS skips (fails under CI) where termgate cannot enter a
// sandbox's network namespace.
func needNetNS(t testing.TB) {
	t.Helper()
	if !canEnterNetNS() {
		sandboxtest.Unavailable(t, "entering a network namespace needs CAP_SYS_ADMIN")
	}
}

// acceptRead accepts one connection on l and reads it to its end.
func acceptRead(t *testing.T, l net.Listener) string {
	t.Helper()
	l.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// takeSockets returns p's sockets, failing t unless there are want.
func takeSockets(t *testing.T, p *Process, want int) []OpenSocket {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	socks, err := p.Sockets(ctx)
	if err != nil || len(socks) != want {
		t.Fatalf("sockets: %v, %d of %d", err, len(socks), want)
	}
	t.Cleanup(func() { closeAll(socks) })
	return socks
}

// TestListenSocketsExistBeforeTheCommand: the command connects to a
// listener and sends to a packet socket of Policy.Listen once, with no
// retry, and the host reads both; the same through the keeper.
func TestListenSocketsExistBeforeTheCommand(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	script := `echo hello-tcp > /dev/tcp/127.0.0.1/3128 && echo hello-udp > /dev/udp/127.0.0.1/5353 && echo sent`
	for _, keeper := range []bool{false, true} {
		t.Run(fmt.Sprintf("keeper=%v", keeper), func(t *testing.T) {
			t.Parallel()
			l := needLauncher(t)
			if keeper {
				l = keeperLauncher(t, keeperDir(t))
			}
			p := Policy{Key: "listen", Command: []string{"/bin/bash", "-c", script}, Workspace: sandboxtest.Dir(t),
				Listen: []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}, {Network: "udp4", Addr: "127.0.0.1:5353"}}}
			var out, errb sandboxtest.SyncBuffer
			proc, err := l.Start(t.Context(), p, Stdio{Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			socks := takeSockets(t, proc, 2)
			if socks[0].Listener == nil || socks[1].PacketConn == nil || socks[0].Socket != p.Listen[0] || socks[1].Socket != p.Listen[1] {
				t.Fatalf("sockets out of the policy's order: %+v", socks)
			}
			if got := acceptRead(t, socks[0].Listener); got != "hello-tcp\n" {
				t.Errorf("listener read %q", got)
			}
			buf := make([]byte, 64)
			socks[1].PacketConn.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, _, err := socks[1].PacketConn.ReadFrom(buf)
			if err != nil || string(buf[:n]) != "hello-udp\n" {
				t.Errorf("packet socket read %q, %v", buf[:n], err)
			}
			exit, ok := waitReleased(proc, 30*time.Second)
			if !ok || !exit.Success() || out.String() != "sent\n" {
				t.Errorf("exit %s (done %v), stdout %q, stderr %q", exit, ok, out.String(), errb.String())
			}
			if _, err := proc.Sockets(t.Context()); !errors.Is(err, ErrSocketsGone) {
				t.Errorf("sockets handed over twice: %v", err)
			}
		})
	}
}

// pythonServer listens on 127.0.0.1:8080 inside, says so, and answers
// one connection with what it read, prefixed.
const pythonServer = `
import socket
s = socket.socket()
s.bind(("127.0.0.1", 8080))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(30)
c.sendall(b"echo:" + c.recv(100))
c.close()
`

// serveInside starts pol with the server script in a sandbox of the
// test launcher, waits until it says "listening", and returns the
// sandbox's network namespace; the sandbox ends with the test.
func serveInside(t *testing.T, script string, pol Policy) *NetNS {
	t.Helper()
	needNetNS(t)
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		sandboxtest.Unavailable(t, "no %s for a server in the sandbox", python)
	}
	pol.Command, pol.Workspace = []string{python, "-c", script}, sandboxtest.Dir(t)
	var out sandboxtest.SyncBuffer
	proc, err := needLauncher(t).Start(t.Context(), pol, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Kill(); proc.Wait() })
	waitFor(t, &out, "listening")
	ns, err := proc.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestDialReachesAServerInside: a Dial from the host through NetNS
// reaches a server the command listens on in the sandbox's loopback.
func TestDialReachesAServerInside(t *testing.T) {
	t.Parallel()
	ns := serveInside(t, pythonServer, Policy{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if c, err := ns.Dial(ctx, "tcp", "127.0.0.1:8081"); err == nil || !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("dial a port nobody listens on: %v", err)
		if c != nil {
			c.Close()
		}
	}
	c, err := ns.Dial(ctx, "tcp4", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte("ping"))
	if b, err := io.ReadAll(c); err != nil || string(b) != "echo:ping" {
		t.Errorf("the server inside answered %q, %v", b, err)
	}
}

// peerUIDServer accepts one connection on 127.0.0.1:8082 and answers
// the uid its /proc/net/tcp line gives the peer's socket, and its own.
const peerUIDServer = `
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8082))
s.listen(1)
print("listening", flush=True)
c, (_, port) = s.accept()
peer = "0100007F:%04X" % port
uid = [l.split()[7] for l in open("/proc/net/tcp").read().splitlines()[1:] if l.split()[1] == peer]
c.sendall(("peer=%s own=%d" % (",".join(uid), os.getuid())).encode())
c.close()
`

// TestDialIsTheSandboxsUser: a socket Dial makes in a sandbox is its
// user's as the sandbox sees it (for a sandbox of the shared identity
// and of a tenant's own), so a server that admits its own user's peers
// alone (dlv --only-same-user) admits it.
func TestDialIsTheSandboxsUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("as another user than root, sockets are termgate's user's, which is the sandbox's")
	}
	for _, uid := range []uint32{0, testTenantUIDs.First + 7} {
		t.Run(fmt.Sprint(uid), func(t *testing.T) {
			ns := serveInside(t, peerUIDServer, Policy{Proc: ProcPrivate, UID: uid, GID: uid})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			c, err := ns.Dial(ctx, "tcp4", "127.0.0.1:8082")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			b, err := io.ReadAll(c)
			var peer, own int
			if _, serr := fmt.Sscanf(string(b), "peer=%d own=%d", &peer, &own); err != nil || serr != nil || peer != own {
				t.Errorf("the server inside sees %q (%v): want the peer's uid its own", b, err)
			}
		})
	}
}

// TestSandboxSocketsAreIsolated: a listener of one sandbox, on the port
// of a listener of the host's, is reached by neither the host nor another
// sandbox; its own command reaches it.
func TestSandboxSocketsAreIsolated(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	l := needLauncher(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	port := strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{
		Command: []string{"/bin/bash", "-c", "read x; echo inside > /dev/tcp/127.0.0.1/" + port}, Workspace: sandboxtest.Dir(t),
		Listen: []Socket{{Network: "tcp", Addr: "127.0.0.1:" + port}},
	}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	socks := takeSockets(t, proc, 1)

	other := runPolicy(t, Policy{Command: []string{"/bin/bash", "-c", "echo other > /dev/tcp/127.0.0.1/" + port + " && echo REACHED; echo done"}})
	if strings.Contains(other.stdout, "REACHED") || !strings.Contains(other.stdout, "done") {
		t.Errorf("another sandbox: %v", other)
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("host\n"))
	c.Close()
	if got := acceptRead(t, host); got != "host\n" {
		t.Errorf("the host's listener read %q", got)
	}
	proc.Stdin().Write([]byte("go\n"))
	if got := acceptRead(t, socks[0].Listener); got != "inside\n" {
		t.Errorf("the sandbox's listener first read %q, want its own command's", got)
	}
	if exit, ok := waitDone(proc, 30*time.Second); !ok || !exit.Success() {
		t.Errorf("exit %s (done %v), output %q", exit, ok, out.String())
	}
}

// TestHostNetworkGetsNoSockets: a policy sharing the host's network may
// not ask for sockets, and its process gives no NetNS, not even past the
// policy's check.
func TestHostNetworkGetsNoSockets(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	l := needLauncher(t)
	p := Policy{Command: []string{"sleep", "30"}, Workspace: sandboxtest.Dir(t), Network: NetworkHost}
	p.Listen = []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}}
	if _, err := l.Start(t.Context(), p, Stdio{}); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "need network none") {
		t.Errorf("start with sockets and the host's network: %v", err)
	}
	p.Listen = nil
	proc, err := l.Start(t.Context(), p, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Kill()
	if _, err := proc.NetNS(); !errors.Is(err, ErrHostNetwork) {
		t.Errorf("NetNS of a host-network sandbox: %v", err)
	}
	var pid1 int
	sandboxtest.Eventually(t, 10*time.Second, func() bool {
		var ok bool
		pid1, ok = proc.sandboxInit()
		return ok
	})
	if ns, err := proc.openNetNS(pid1); !errors.Is(err, ErrHostNetwork) {
		t.Errorf("the host's namespace opened as a sandbox's: %v", err)
		if ns != nil {
			ns.Close()
		}
	}
}

// TestKeeperAdoptedProcessListensAgain: the sockets of Policy.Listen die
// with the launcher that took them; the launcher that adopts the process
// listens again at the same address through NetNS, and the command
// reaches it there.
func TestKeeperAdoptedProcessListensAgain(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	dir := keeperDir(t)
	l := keeperLauncher(t, dir)
	script := "echo first > /dev/tcp/127.0.0.1/3128; read x; echo second > /dev/tcp/127.0.0.1/3128 && echo reached"
	proc, err := l.Start(t.Context(), Policy{Key: "relisten", Command: []string{"/bin/bash", "-c", script}, Workspace: sandboxtest.Dir(t),
		Listen: []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}}}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	socks := takeSockets(t, proc, 1)
	if got := acceptRead(t, socks[0].Listener); got != "first\n" {
		t.Errorf("first listener read %q", got)
	}
	socks[0].Close() // as the server's death would
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
	adopted := procs[0]
	if _, err := adopted.Sockets(t.Context()); !errors.Is(err, ErrSocketsGone) {
		t.Errorf("an adopted process's sockets: %v", err)
	}
	ns, err := adopted.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ns.Listen("tcp", "127.0.0.1:3128")
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	adopted.Stdin().Write([]byte("go\n"))
	if got := acceptRead(t, again); got != "second\n" {
		t.Errorf("second listener read %q", got)
	}
	exit, ok := waitReleased(adopted, 30*time.Second)
	if !ok || exit.Code != 0 || out.String() != "reached\n" {
		t.Errorf("exit %s (done %v), output %q", exit, ok, out.String())
	}
	if _, err := adopted.NetNS(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("NetNS after the end: %v", err)
	}
}

// TestNetNSThreadThatCannotReturnDies: a thread that cannot return to
// the host's namespace fails the socket loudly and is never used again:
// it ends with its goroutine, and the next socket comes from another.
// The namespace entered here is the host's own, so that the stranded
// thread is harmless.
func TestNetNSThreadThatCannotReturnDies(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns := &NetNS{f: os.NewFile(uintptr(fd), "netns")}
	defer ns.Close()
	var calls, stuck atomic.Int32
	ns.setns = func(fd, nstype int) error {
		if calls.Add(1) == 2 { // the return
			stuck.Store(int32(unix.Gettid()))
			return unix.EINVAL
		}
		return unix.Setns(fd, nstype)
	}
	if l, err := ns.Listen("tcp", "127.0.0.1:0"); !errors.Is(err, ErrNetNSStuck) {
		t.Errorf("listen from a stuck thread: %v", err)
		if l != nil {
			l.Close()
		}
	}
	// The runtime wedges the process's first thread for good instead.
	task := fmt.Sprintf("/proc/self/task/%d", stuck.Load())
	if stuck.Load() != int32(os.Getpid()) && !sandboxtest.Eventually(t, 10*time.Second, func() bool { _, err := os.Stat(task); return err != nil }) {
		t.Errorf("the stuck thread %s still runs", task)
	}
	l, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen after a stuck thread: %v", err)
	}
	l.Close()
}

// TestSocketFailureFailsTheStart: a socket of Policy.Listen that cannot
// be opened (here the same address twice, which validation refuses and
// l.start does not check) fails the start before bwrap is forked, with
// the reason; the next start of the same kind fails alike.
func TestSocketFailureFailsTheStart(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	l := needLauncher(t)
	p := Policy{Command: []string{"/bin/sh", "-c", "echo RAN"}, Workspace: sandboxtest.Dir(t),
		Listen: []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}, {Network: "tcp", Addr: "127.0.0.1:3128"}}}
	for range 2 {
		proc, err := l.start(t.Context(), p.Normalize(), Stdio{})
		if !errors.Is(err, unix.EADDRINUSE) || proc != nil {
			t.Fatalf("start: %v, %v; want EADDRINUSE and no process", proc, err)
		}
	}
}

// TestProbeSockets: where sockets can be opened in a sandbox's network,
// the probe that serve runs before it offers a network policy passes.
func TestProbeSockets(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	if err := needLauncher(t).ProbeSockets(t.Context()); err != nil {
		t.Fatal(err)
	}
}
