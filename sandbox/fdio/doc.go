// Package fdio is termgate's one layer of raw descriptor I/O, importing
// golang.org/x/sys only.
//
// Read, Write, Waiting and PollNow are system calls on a descriptor in
// non-blocking mode made without the scheduler's system-call bookkeeping
// (unix.RawSyscall): each returns at once, and a call through the
// scheduler (unix.Read and the like) wakes the runtime's monitor thread
// whenever the process was idle, which for a keystroke's echo is a
// wakeup, a few sleeps and a context switch of their own. Use them only
// on descriptors that IsNonBlocking approved (or that Go's poller keeps
// non-blocking, as a socket's): a raw call that blocked would hold its P.
//
// A Waiter calls a function once a descriptor is readable or hung up,
// for many descriptors, from one goroutine parked in the runtime poller
// on an epoll descriptor that holds them all, instead of a goroutine
// each. The process has one (WhenReadable, StopWaiting, WhenExited),
// shared by the sandbox's idle output copiers and exit watches and the
// gateway's parked sockets: an idle process keeps one goroutine for all
// of them.
//
// ReadReady reads a socket through the runtime's poller into a pooled
// buffer it takes only once there are bytes: the network policies'
// tunnels and UDP flows and the gateway's forward streams hold no buffer
// while they idle.
package fdio
