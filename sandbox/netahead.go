//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// maxNetKinds bounds the kinds of network (Policy.Listen and
// Policy.Redirect together) a launcher keeps one prepared of: a server
// has one or two (a session's policy network; a test's own).
const maxNetKinds = 4

// preparedNet is a sandbox's network made before its bwrap: a network
// namespace of the host's user namespace with lo up, Policy.Redirect's
// routes and table, and Policy.Listen's sockets open. bwrap is forked
// into it (and told not to make one), so the sandbox's user namespace
// holds no capability over it: not even a process that gained every
// capability the sandbox's user namespace has could change its routes
// or rules.
type preparedNet struct {
	ns      *NetNS
	sockets []OpenSocket
}

// close closes the sockets and lets the namespace go; one a sandbox
// joined lives as long as the sandbox.
func (pn *preparedNet) close() {
	closeAll(pn.sockets)
	pn.ns.Close()
}

// netAhead keeps one network of each kind a start asked for prepared
// ahead of the next start of that kind, made on a thread that runs only
// when a core is idle (SCHED_IDLE), so that the namespace, the nftables
// transaction and the sockets are off the start's path: a start waits
// only when none is ready, and makes its own then. Its methods are safe
// for concurrent use.
type netAhead struct {
	mu     sync.Mutex
	ready  map[string]*preparedNet // by kind
	making map[string]bool
	kinds  []string // those kept, the most recently asked last
	closed bool
	wg     sync.WaitGroup
}

// netKind names what a prepared network must have for p.
func netKind(p Policy) string {
	b, _ := json.Marshal(struct {
		Listen   []Socket
		Redirect *Redirect
	}{p.Listen, p.Redirect})
	return string(b)
}

// take returns a network prepared for p, the one made ahead or one made
// now, and starts making the next one of its kind.
func (a *netAhead) take(p Policy) (*preparedNet, error) {
	kind := netKind(p)
	a.mu.Lock()
	pn := a.ready[kind]
	delete(a.ready, kind)
	a.mu.Unlock()
	if pn == nil {
		var err error
		if pn, err = prepareNet(p); err != nil {
			return nil, err // and none is made ahead: it would fail too
		}
	}
	a.makeAhead(p, kind)
	return pn, nil
}

// makeAhead makes a network of kind for the next start, unless one is
// ready or being made; the least recently asked kind beyond
// maxNetKinds is let go.
func (a *netAhead) makeAhead(p Policy, kind string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.kinds = append(slices.DeleteFunc(a.kinds, func(k string) bool { return k == kind }), kind)
	if len(a.kinds) > maxNetKinds {
		old := a.kinds[0]
		a.kinds = a.kinds[1:]
		if pn := a.ready[old]; pn != nil {
			delete(a.ready, old)
			pn.close()
		}
	}
	if a.making[kind] || a.ready[kind] != nil {
		return
	}
	if a.making == nil {
		a.making, a.ready = map[string]bool{}, map[string]*preparedNet{}
	}
	a.making[kind] = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		pn, err := prepareNetWhenIdle(p)
		a.mu.Lock()
		delete(a.making, kind)
		keep := err == nil && !a.closed && slices.Contains(a.kinds, kind)
		if keep {
			a.ready[kind] = pn
		}
		a.mu.Unlock()
		if !keep && pn != nil {
			pn.close() // a failure here is the next start's to meet, and say
		}
	}()
}

// close lets the prepared networks go, once those being made are done.
func (a *netAhead) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	for kind, pn := range a.ready {
		delete(a.ready, kind)
		pn.close()
	}
}

// prepareNetWhenIdle is prepareNet on a thread of the lowest priority,
// which ends with it.
func prepareNetWhenIdle(p Policy) (*preparedNet, error) {
	type result struct {
		pn  *preparedNet
		err error
	}
	done := make(chan result, 1)
	go onThreadOfItsOwn(func() {
		unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
		pn, err := prepareNet(p)
		done <- result{pn, err}
	})
	r := <-done
	return r.pn, r.err
}

// prepareNet makes a network namespace for p's sandbox: lo up, the
// redirect installed, the sockets open.
func prepareNet(p Policy) (*preparedNet, error) {
	ns, err := newNetNS()
	if err != nil {
		return nil, fmt.Errorf("sandbox: prepare the sandbox's network: %w", err)
	}
	pn := &preparedNet{ns: ns}
	redirected := make(chan error, 1)
	go func() {
		if p.Redirect == nil {
			redirected <- nil
			return
		}
		redirected <- ns.Redirect(*p.Redirect)
	}()
	if len(p.Listen) > 0 {
		pn.sockets, err = ns.Open(p.Listen)
	}
	if err = errors.Join(<-redirected, err); err != nil {
		pn.close()
		return nil, fmt.Errorf("sandbox: prepare the sandbox's network: %w", err)
	}
	return pn, nil
}

// newNetNS makes a network namespace with lo up, from a thread that
// ends in it.
func newNetNS() (*NetNS, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go onThreadOfItsOwn(func() {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			if errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w: a network namespace (CAP_SYS_ADMIN needed): %w", ErrUnavailable, err)
			}
			done <- result{-1, err}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			if err = loopbackUp(); err != nil {
				unix.Close(fd)
			}
		}
		done <- result{fd, err}
	})
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return &NetNS{f: os.NewFile(uintptr(r.fd), "netns")}, nil
}

// onThreadOfItsOwn runs f on a goroutine locked to an OS thread that
// ends with it: never the process's main one, which the runtime keeps
// for good (and /proc/self names its namespaces).
func onThreadOfItsOwn(f func()) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the main thread is held: this is another
		f()
	}()
	<-done
	runtime.UnlockOSThread() // the main thread, unchanged
}

// loopbackUp sets lo up in the calling thread's network namespace, as
// bwrap does in one it makes.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}
