//go:build linux

package fdio

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// idle is the process's Waiter: what the sandbox's idle executions wait
// for (their bwrap's exit, WhenExited, and once idle their output) and
// the gateway's parked sockets.
var idle = NewWaiter()

// WhenReadable calls ready on a goroutine of its own once fd is readable
// or hung up (it may be already), from the process's Waiter: the process
// keeps one goroutine for every idle descriptor it waits for, not one
// each. fd is waited for once. The caller keeps it open until ready was
// called or StopWaiting returned true. False, with nothing started, when
// fd cannot be waited for so: the caller waits for it as it can.
func WhenReadable(fd int, ready func()) bool { return idle.WhenReadable(fd, ready) }

// StopWaiting stops the process's Waiter waiting for fd; true when
// WhenReadable waited for it, whose ready is then never called.
func StopWaiting(fd int) bool { return idle.StopWaiting(fd) }

// WhenExited calls exited on a goroutine of its own once the child pid
// has exited (it may have already), from the process's Waiter.
func WhenExited(pid int, exited func()) bool { return idle.WhenExited(pid, exited) }

// Waiter calls a function once a descriptor is readable or hung up, for
// many descriptors, from one goroutine parked in the runtime poller on an
// epoll descriptor holding them all. It runs only while it waits for some
// descriptor, and a new one starts with the next. A descriptor is waited
// for once: it leaves the set when its function is called.
type Waiter struct {
	mu      sync.Mutex
	ep      *os.File         // the epoll descriptor; nil while nothing is waited for
	epfd    int              // ep's descriptor (ep.Fd would make it blocking)
	waiting map[int32]fdWait // by descriptor
	added   int32            // registrations made, to tell them apart (fdWait.n)
}

// NewWaiter returns a Waiter that waits for nothing yet, and holds no
// goroutine until it does.
func NewWaiter() *Waiter { return &Waiter{waiting: map[int32]fdWait{}} }

// fdWait is one descriptor waited for: what to call once it is ready,
// and which registration it is. An event read from the epoll before a
// descriptor was removed, closed, and its number given to another that
// was added, is not the new one's: its registration differs.
type fdWait struct {
	ready func()
	n     int32
}

// fdEvent is an event read from the epoll: the descriptor and the
// registration it was for.
type fdEvent struct{ fd, n int32 }

// WhenReadable calls ready on a goroutine of its own once fd is readable
// or hung up (it may be already). The caller keeps fd open until then,
// or until StopWaiting. False, with nothing started, when the epoll
// descriptor cannot be made or take fd.
func (w *Waiter) WhenReadable(fd int, ready func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep == nil {
		ep, epfd, err := newEpoll()
		if err != nil {
			return false
		}
		w.ep, w.epfd = ep, epfd
		go w.run(ep) // ends once nothing is waited for (take)
	}
	w.added++
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: w.added}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		if len(w.waiting) == 0 {
			w.ep.Close() // its goroutine, waiting for nothing, returns
			w.ep = nil
		}
		return false
	}
	w.waiting[int32(fd)] = fdWait{ready: ready, n: w.added}
	return true
}

// StopWaiting stops waiting for fd; true when it was waited for, whose
// ready is then never called.
func (w *Waiter) StopWaiting(fd int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.waiting[int32(fd)]; !ok {
		return false
	}
	w.dropLocked(int32(fd))
	if len(w.waiting) == 0 {
		w.ep.Close() // its goroutine, waiting for nothing, returns
		w.ep = nil
	}
	return true
}

// dropLocked takes fd out of the set. Out of the epoll explicitly: a
// close alone would leave it there while a child forked meanwhile holds a
// copy until its exec.
func (w *Waiter) dropLocked(fd int32) {
	delete(w.waiting, fd)
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
}

// newEpoll makes an epoll descriptor that the runtime's poller watches:
// it is readable while any descriptor in it is.
func newEpoll() (*os.File, int, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, 0, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), "idle-fds"), fd, nil
}

// run waits on ep until it is no longer w's.
func (w *Waiter) run(ep *os.File) {
	defer ep.Close()
	raw, err := ep.SyscallConn()
	if err != nil {
		w.failAll(ep)
		return
	}
	buf := make([]unix.EpollEvent, 16)
	for {
		var events []fdEvent
		var werr error
		err := raw.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), buf, 0)
			if err != nil && err != syscall.EINTR {
				werr = err
				return true
			}
			for _, ev := range buf[:max(n, 0)] {
				events = append(events, fdEvent{fd: ev.Fd, n: ev.Pad})
			}
			return n > 0 // none yet: wait in the poller
		})
		if err != nil || werr != nil {
			w.failAll(ep)
			return
		}
		if !w.take(ep, events) {
			return
		}
	}
}

// take removes the ready descriptors and calls what waited for each.
// False once ep is no longer w's: nothing else is waited for on it.
func (w *Waiter) take(ep *os.File, events []fdEvent) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep != ep {
		return false // StopWaiting let go of it
	}
	for _, ev := range events {
		wt, ok := w.waiting[ev.fd]
		if !ok || wt.n != ev.n {
			continue // removed meanwhile, and maybe its number reused
		}
		w.dropLocked(ev.fd)
		go wt.ready() // what waited never runs under the lock
	}
	if len(w.waiting) == 0 {
		w.ep = nil
		return false
	}
	return true
}

// failAll is the poller failing ep, which should not happen: whatever
// waited on it is called as if ready, and finds out for itself.
func (w *Waiter) failAll(ep *os.File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep != ep {
		return // not w's any more: it waits for nothing on ep
	}
	w.ep = nil
	for fd, wt := range w.waiting {
		delete(w.waiting, fd)
		go wt.ready()
	}
}

// WhenExited calls exited on a goroutine of its own once the child pid
// has exited (it may have already), waiting for its pidfd. False, with
// nothing started, when pid has no pidfd (a kernel before 5.3) or w
// cannot take it: the caller waits for it as it can.
func (w *Waiter) WhenExited(pid int, exited func()) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	if !w.WhenReadable(fd, func() { unix.Close(fd); exited() }) {
		unix.Close(fd)
		return false
	}
	return true
}
