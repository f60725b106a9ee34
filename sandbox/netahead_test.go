//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// TestPreparedNetwork: a sandbox with sockets runs in a network made
// before its bwrap, which belongs to the host's user namespace (the
// sandbox's has no say over it), is the namespace of the sandbox's
// processes and NetNS's, and has lo up (the command reaches its own
// listener); the launcher then has the next
// one of that kind made ahead, which the next start takes.
func TestPreparedNetwork(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	l := needLauncher(t)
	p := Policy{Command: []string{"/bin/bash", "-c", "echo hello > /dev/tcp/127.0.0.1/4100; read x"}, Workspace: sandboxtest.Dir(t),
		Listen: []Socket{{Network: "tcp4", Addr: "127.0.0.1:4100"}}}
	proc, err := l.Start(t.Context(), p, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Kill()
	socks := takeSockets(t, proc, 1)
	defer closeAll(socks)
	ns, err := proc.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	owner, err := unix.IoctlRetInt(int(ns.f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(owner)
	var ownerSt, hostUser, nsSt unix.Stat_t
	unix.Fstat(owner, &ownerSt)
	unix.Stat("/proc/self/ns/user", &hostUser)
	unix.Fstat(int(ns.f.Fd()), &nsSt)
	if ownerSt.Ino != hostUser.Ino {
		t.Errorf("the sandbox's network belongs to user namespace %d, want the host's %d", ownerSt.Ino, hostUser.Ino)
	}
	var pid1 int
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { var ok bool; pid1, ok = proc.sandboxInit(); return ok }) {
		t.Fatal("no pid 1")
	}
	var initSt unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid1)+"/ns/net", &initSt); err != nil || initSt.Ino != nsSt.Ino {
		t.Errorf("the sandbox's pid 1 is in network namespace %d (%v), want %d", initSt.Ino, err, nsSt.Ino)
	}
	socks[0].Listener.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	if c, err := socks[0].Listener.Accept(); err != nil {
		t.Errorf("the sandbox did not reach its own listener on lo: %v", err)
	} else {
		c.Close()
	}
	kind := netKind(p.Normalize())
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { l.nets.mu.Lock(); defer l.nets.mu.Unlock(); return l.nets.ready[kind] != nil }) {
		t.Fatal("no network made ahead after a start")
	}
	l.nets.mu.Lock()
	ahead := l.nets.ready[kind]
	l.nets.mu.Unlock()
	var aheadSt unix.Stat_t
	unix.Fstat(int(ahead.ns.f.Fd()), &aheadSt)
	proc.Stdin().Write([]byte("\n"))
	next, err := l.Start(t.Context(), p, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Wait()
	defer next.Kill()
	closeAll(takeSockets(t, next, 1))
	nextNS, err := next.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer nextNS.Close()
	var nextSt unix.Stat_t
	unix.Fstat(int(nextNS.f.Fd()), &nextSt)
	if nextSt.Ino != aheadSt.Ino {
		t.Errorf("the next start's network %d, want the one made ahead %d", nextSt.Ino, aheadSt.Ino)
	}
}

// TestNetAheadKeepsFewKinds: networks are made ahead for at most
// maxNetKinds kinds, the least recently asked let go; close lets the
// rest go.
func TestNetAheadKeepsFewKinds(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	var a netAhead
	kinds := make([]Policy, maxNetKinds+1)
	for i := range kinds {
		kinds[i] = Policy{Network: NetworkNone, Listen: []Socket{{Network: "tcp4", Addr: fmt.Sprintf("127.0.0.1:%d", 4300+i)}}}
		pn, err := a.take(kinds[i])
		if err != nil {
			t.Fatal(err)
		}
		pn.close()
	}
	ready := func() (n int, first bool) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.ready), a.ready[netKind(kinds[0])] != nil
	}
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { n, _ := ready(); return n == maxNetKinds }) {
		n, _ := ready()
		t.Fatalf("%d networks made ahead, want %d", n, maxNetKinds)
	}
	if _, first := ready(); first {
		t.Error("the least recently asked kind was kept")
	}
	a.close()
	if n, _ := ready(); n != 0 {
		t.Errorf("%d networks kept after close", n)
	}
}
