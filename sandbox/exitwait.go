//go:build linux

package sandbox

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// exits waits for the exits of the launcher's own children (execChild):
// one goroutine parked in the runtime poller on an epoll descriptor that
// holds a pidfd per child, instead of a goroutine per child. It runs only
// while it waits for some child, and a new one starts with the next.
var exits = &exitWaiter{waiting: map[int32]func(){}}

// exitWaiter is the set of pidfds waited for on one epoll descriptor.
type exitWaiter struct {
	mu      sync.Mutex
	ep      *os.File         // the epoll descriptor; nil while nothing is waited for
	epfd    int              // ep's descriptor (ep.Fd would make it blocking)
	waiting map[int32]func() // what to call when the pidfd's process exited, by pidfd
}

// watch calls exited on a goroutine of its own once pid has exited (it
// may have already). False, with nothing started, when pid has no pidfd
// (a kernel before 5.3) or the epoll descriptor cannot be made: the
// caller waits for it as it can.
func (w *exitWaiter) watch(pid int, exited func()) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep == nil {
		ep, epfd, err := newEpoll()
		if err != nil {
			unix.Close(fd)
			return false
		}
		w.ep, w.epfd = ep, epfd
		go w.run(ep) // ends once nothing is waited for (take)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		if len(w.waiting) == 0 {
			w.ep.Close() // its goroutine, waiting for nothing, returns
			w.ep = nil
		}
		return false
	}
	w.waiting[int32(fd)] = exited
	return true
}

// newEpoll makes an epoll descriptor that the runtime's poller watches:
// it is readable while any pidfd in it is.
func newEpoll() (*os.File, int, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, 0, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), "exits"), fd, nil
}

// run waits on ep until take says nothing more is waited for.
func (w *exitWaiter) run(ep *os.File) {
	defer ep.Close()
	raw, err := ep.SyscallConn()
	if err != nil {
		w.failAll(ep)
		return
	}
	events := make([]unix.EpollEvent, 16)
	for {
		var ready []int32
		var werr error
		err := raw.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), events, 0)
			if err != nil && err != syscall.EINTR {
				werr = err
				return true
			}
			for _, ev := range events[:max(n, 0)] {
				ready = append(ready, ev.Fd)
			}
			return n > 0 // none yet: wait in the poller
		})
		if err != nil || werr != nil {
			w.failAll(ep)
			return
		}
		if !w.take(ready) {
			return
		}
	}
}

// take removes the ready pidfds and calls what waited for each. False
// once nothing else is waited for: the epoll descriptor is then no longer
// w's.
func (w *exitWaiter) take(ready []int32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fd := range ready {
		exited, ok := w.waiting[fd]
		if !ok {
			continue
		}
		delete(w.waiting, fd)
		// Out of the epoll first: a close alone leaves it there while a
		// child forked meanwhile holds a copy until its exec.
		unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
		unix.Close(int(fd))
		go exited() // it reaps the child, and a Wait must never hold the lock
	}
	return w.endIfIdleLocked()
}

// endIfIdleLocked lets go of the epoll descriptor when nothing is waited
// for; false then. The goroutine on it returns and closes it.
func (w *exitWaiter) endIfIdleLocked() bool {
	if len(w.waiting) > 0 {
		return true
	}
	w.ep = nil
	return false
}

// failAll is the poller failing ep, which should not happen: every child
// waited for is reported as exited, and its reaping Wait blocks until it
// has.
func (w *exitWaiter) failAll(ep *os.File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep != ep {
		return // not w's any more: it waits for nothing on ep
	}
	w.ep = nil
	for fd, exited := range w.waiting {
		delete(w.waiting, fd)
		unix.Close(int(fd))
		go exited()
	}
}
