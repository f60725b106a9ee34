package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/termgate/termgate/gateway/internal/park"
	"github.com/termgate/termgate/sandbox/fdio"
	"golang.org/x/sys/unix"
)

// Buffer sizes of an upgraded connection. net/http hands a hijacked
// connection a 4 KiB reader and a 4 KiB writer, which the WebSocket keeps
// for the connection's life: 7 KiB of an idle connection's 20. Keystrokes
// and control messages are a few bytes to a few hundred, and a read or a
// write larger than its buffer bypasses it, at the cost of one more
// system call for frames between the two sizes.
//
// A non-blocking connection's reader is smaller still: nbConn reads the
// socket itself between messages (awaitInput), up to upgradeReadBuffer at
// once into a buffer it lends only while it holds bytes, and the reader
// copies them from there. It holds a frame's header (at most 14 bytes)
// and a little more; a larger read bypasses it, from nbConn's bytes.
const (
	upgradeReadBuffer  = 512
	upgradeWriteBuffer = 1 << 10
	nbReadBuffer       = 64
)

// backlogBound is how much a connection's backlog may hold before its
// writer stops draining (conn.drain): a client that reads slowly gets
// flow control from the ring (a gap) instead of memory held for it. A
// round already under way may add one batch past it.
const backlogBound = 64 << 10

// parkAfter is how long a connection's read loop waits for the client's
// next message before it parks the connection (nbConn.park), and gives
// its goroutine and stack up: 4-8 KiB of an idle session's memory. A
// client that keeps sending parks once a parkAfter and is resumed by its
// next message, a few microseconds; the heartbeat's pong (every
// DefaultPingInterval) resumes an idle one for a parkAfter.
const parkAfter = time.Second

// errIdle is a connection that sent no message for parkAfter: its read
// loop parks it (nbConn.park).
var errIdle = errors.New("gateway: connection idle")

// errBacklogStalled is a backlog that the client did not take within
// the write timeout.
var errBacklogStalled = errors.New("gateway: client did not read its output in time")

// nbConn is a hijacked TCP or unix connection whose Write never blocks:
// it makes one non-blocking write, and what the socket does not take
// goes to a backlog that a goroutine of its own (flushBacklog, started
// only then, ended when the backlog is empty) writes with the write
// timeout. While a backlog exists, writes append to it, so bytes leave
// in the order they were written. The WebSocket above it then never
// blocks in Write, which lets whoever has output write it on its own
// goroutine (conn.kick). Reads are the socket's, made raw (Read), and
// between messages the read loop waits in awaitInput, which tells it
// when to park the connection (park): give its goroutine up until the
// client sends again. Addresses are the socket's own; Close takes a
// parked socket back first.
type nbConn struct {
	net.Conn
	raw syscall.RawConn
	// try is the non-blocking write: the bytes the socket took, fewer
	// than asked (maybe none) when it would block.
	try     func(p []byte) (int, error)
	timeout time.Duration

	mu       sync.Mutex
	backlog  []byte // written, not yet taken by the socket
	spare    []byte // the buffer flushBacklog last wrote, for its next round
	flushing bool   // flushBacklog runs; writes append to backlog
	err      error  // the write error that ended the connection, sticky
	closed   bool
	drained  func()      // called once a backlog was written (conn.resume)
	stalled  func(error) // called when it was not, in time (conn.stalled)
	done     sync.WaitGroup

	// What Read hands out before it reads the socket: the bytes the
	// client sent with its upgrade request (unread), or what awaitInput
	// read, in a buffer lent by inputBuffers (lent). rmu serializes the
	// reads: the WebSocket's close handshake reads on a goroutine of its
	// own while the read loop may wait in awaitInput.
	rmu     sync.Mutex
	pending []byte
	lent    *[]byte
	readErr error            // awaitInput's read's error, for the next Read
	armed   atomic.Bool      // the socket's read deadline is awaitInput's (idle)
	frames  park.FrameCursor // the client's frames in the bytes Read handed out
	mayIdle atomic.Bool      // the read loop reads: Read may report errIdle
	noIdle  atomic.Bool      // a close handshake began: no Read reports errIdle

	// Parking (park): once the client sent nothing for idle, the read
	// loop gives its goroutine up, and the descriptor waits in the
	// process's waiter for idle descriptors (park.Spot).
	fd   int
	idle time.Duration // parkAfter; 0 or less: never park
	spot *park.Spot

	// Bulk bytes (roomForBulk): lowWater says the socket has
	// TCP_NOTSENT_LOWAT; roomWait that a goroutine waits for room.
	lowWater bool
	roomWait atomic.Bool
}

// bulkLowWater bounds the bytes the socket holds unsent ahead of a
// terminal's output when bulk bytes (forward streams' frames) are
// written: those wait above it, so that a keystroke's echo queues behind
// at most this much of a transfer on the same connection.
const bulkLowWater = 64 << 10

// roomWaitStep is how often a wait for room polls the socket.
const roomWaitStep = 2 * time.Millisecond

// roomForBulk reports whether bulk bytes may be written now: no
// backlog, and fewer than bulkLowWater bytes unsent in the socket (it
// polls writable, which TCP_NOTSENT_LOWAT makes mean that). When not, it
// has kick called once there is room, from a goroutine that polls until
// there is or the connection is closed.
func (c *nbConn) roomForBulk(kick func()) bool {
	c.mu.Lock()
	backlog := len(c.backlog) > 0
	c.mu.Unlock()
	if !backlog && (!c.lowWater || fdio.PollOutNow(c.fd)) {
		return true
	}
	if c.roomWait.CompareAndSwap(false, true) {
		go func() {
			defer c.roomWait.Store(false)
			for range int(c.timeout/roomWaitStep) + 1 { // the write timeout closes a connection that never drains
				c.mu.Lock()
				closed, backlog := c.closed, len(c.backlog) > 0
				c.mu.Unlock()
				if closed {
					return
				}
				if !backlog && (!c.lowWater || fdio.PollOutNow(c.fd)) {
					break
				}
				time.Sleep(roomWaitStep)
			}
			c.roomWait.Store(false)
			kick()
		}()
	}
	return false
}

// inputBuffers lend awaitInput a buffer for the bytes it reads, as big as
// the WebSocket's read buffer, which takes them at once.
var inputBuffers = sync.Pool{New: func() any { b := make([]byte, upgradeReadBuffer); return &b }}

// newNBConn wraps nc when it is a plain TCP or unix socket, or one that
// the Listener counts (limitedConn); ok is false for any other
// connection (TLS), which keeps blocking writes.
func newNBConn(nc net.Conn, timeout time.Duration) (*nbConn, bool) {
	sock := nc
	if lc, ok := nc.(*limitedConn); ok {
		sock = lc.Conn // nc itself stays the one to close: it gives its place back
	}
	switch sock.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil, false
	}
	raw, err := sock.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, false
	}
	c := &nbConn{Conn: nc, raw: raw, try: rawTry(raw), timeout: timeout, fd: -1}
	raw.Control(func(fd uintptr) { c.fd = int(fd) })
	if _, ok := sock.(*net.TCPConn); ok {
		// Writable now means fewer than bulkLowWater bytes unsent (roomForBulk).
		c.lowWater = unix.SetsockoptInt(c.fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, bulkLowWater) == nil
	}
	c.spot = park.NewSpot(c.fd)
	return c, true
}

// rawTry is a non-blocking write on raw: one write(2) that never waits
// for the socket to become writable (the callback never asks to wait).
func rawTry(raw syscall.RawConn) func(p []byte) (int, error) {
	return func(p []byte) (int, error) {
		var n int
		var werr error
		err := raw.Write(func(fd uintptr) bool {
			for {
				n, werr = fdio.Write(int(fd), p)
				if werr != syscall.EINTR {
					return true
				}
			}
		})
		switch {
		case err != nil:
			return 0, err
		case werr == syscall.EAGAIN:
			return 0, nil
		case werr != nil:
			return 0, &net.OpError{Op: "write", Net: "tcp", Err: werr}
		}
		return n, nil
	}
}

// Read reads from the socket as net.Conn's Read does, waiting in the
// poller within the read deadline, but its read(2) goes to the kernel
// without the scheduler's system-call bookkeeping (fdio.Read), as the
// writes do. What awaitInput read comes first.
func (c *nbConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pending) > 0 {
		n := c.takePending(p)
		c.frames.Feed(p[:n])
		return n, nil
	}
	if err := c.readErr; err != nil {
		c.readErr = nil
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil // as a socket does; and a nil p would ask read for a lent buffer
	}
	n, _, err := c.read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) && c.disarm() {
		if c.mayIdle.Load() && !c.noIdle.Load() && c.frames.AtRest() {
			// Only whole control frames came since awaitInput's wait (a
			// pong): the WebSocket waits for a message's first byte,
			// and a failed read leaves it as it was.
			return 0, errIdle
		}
		// In the middle of a message: read on without the deadline,
		// and awaitInput sets a new one.
		n, _, err = c.read(p)
	}
	c.frames.Feed(p[:n])
	return n, err
}

// awaitInput waits until the socket has bytes and reads them into a lent
// buffer, which the next Reads hand out; its error goes to the next Read.
// The read loop waits here between messages rather than in the
// WebSocket's Read, and parks the connection (park) when awaitInput
// reports it idle: the socket sent nothing for c.idle. The deadline is
// set once for each idle period, not for each wait: a keystroke pays for
// no timer, and a connection that keeps busy parks once each c.idle, to
// be resumed by its next message. The read replaces the one the
// WebSocket would have made: a message costs no extra system call.
func (c *nbConn) awaitInput() (idle bool) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pending) > 0 || c.readErr != nil {
		return false
	}
	if c.idle > 0 && !c.armed.Load() && c.Conn.SetReadDeadline(time.Now().Add(c.idle)) == nil {
		c.armed.Store(true)
	}
	n, b, err := c.read(nil)
	if errors.Is(err, os.ErrDeadlineExceeded) && c.disarm() {
		return true
	}
	if n == 0 {
		c.readErr = err
		return false
	}
	c.lent, c.pending = b, (*b)[:n]
	return false
}

// disarm takes awaitInput's deadline off the socket; false when the
// socket's deadline is not awaitInput's, and stays.
func (c *nbConn) disarm() bool {
	if !c.armed.CompareAndSwap(true, false) {
		return false
	}
	c.Conn.SetReadDeadline(time.Time{})
	return true
}

// SetReadDeadline sets the socket's read deadline, which replaces
// awaitInput's: a Read fails once it passed.
func (c *nbConn) SetReadDeadline(t time.Time) error {
	c.armed.Store(false)
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both of the socket's deadlines (SetReadDeadline).
func (c *nbConn) SetDeadline(t time.Time) error {
	c.armed.Store(false)
	return c.Conn.SetDeadline(t)
}

// park gives the socket to the process's waiter for idle descriptors,
// which calls resume on a goroutine of its own once the client sends
// something or hangs up, or Close does (park.Spot.Park). False, with
// nothing parked, when the connection is closing or the waiter cannot
// take the socket: the caller waits on in the poller.
func (c *nbConn) park(resume func()) bool { return c.spot.Park(resume) }

// unread makes b, read from the socket before the upgrade, what Read
// hands out first.
func (c *nbConn) unread(b []byte) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.pending = slices.Clone(b)
}

// takePending hands out pending bytes, and gives a lent buffer back once
// it is all taken.
func (c *nbConn) takePending(p []byte) int {
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		if c.lent != nil {
			inputBuffers.Put(c.lent)
		}
		c.lent, c.pending = nil, nil
	}
	return n
}

// read is one read of the socket, waiting in the poller: into p, or,
// when p is nil, into a buffer from inputBuffers taken for each attempt
// and kept (lent) only when it got bytes, so that a connection holds none
// while it waits.
func (c *nbConn) read(p []byte) (n int, lent *[]byte, err error) {
	var rerr error
	err = c.raw.Read(func(fd uintptr) bool {
		buf := p
		if p == nil {
			lent = inputBuffers.Get().(*[]byte)
			buf = *lent
		}
		for {
			n, rerr = fdio.Read(int(fd), buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if n == 0 && lent != nil {
			inputBuffers.Put(lent)
			lent = nil
		}
		return rerr != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return 0, nil, err
	case rerr != nil:
		return 0, nil, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0:
		return 0, nil, io.EOF
	}
	return n, lent, nil
}

// notify sets what is called when a backlog was written, or was not
// within the timeout; both run on the backlog's goroutine.
func (c *nbConn) notify(drained func(), stalled func(error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drained, c.stalled = drained, stalled
}

// Write writes p without blocking: what the socket does not take now is
// kept in the backlog. It fails only once a write failed (or the
// backlog stalled) or the connection was closed.
func (c *nbConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return 0, c.err
	case c.closed:
		return 0, net.ErrClosed
	case c.flushing:
		c.backlog = append(c.backlog, p...)
		return len(p), nil
	}
	n, err := c.try(p)
	if err != nil {
		c.err = err
		return n, err
	}
	if n < len(p) {
		c.backlog = append(c.spare[:0], p[n:]...)
		c.spare = nil
		c.flushing = true
		c.done.Add(1)
		go c.flushBacklog()
	}
	return len(p), nil
}

// congested reports whether the backlog holds more than backlogBound:
// the writer should leave the rest until it was written.
func (c *nbConn) congested() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.backlog) > backlogBound
}

// flushBacklog is the backlog's goroutine: it writes the backlog, and
// what was added meanwhile, each part within the timeout, and ends when
// the backlog is empty, the connection closed or a write failed.
func (c *nbConn) flushBacklog() {
	defer c.done.Done()
	for {
		c.mu.Lock()
		b := c.backlog
		if len(b) == 0 || c.closed {
			// An idle connection holds no buffer: the spare serves one
			// backlog's rounds only.
			c.backlog, c.spare, c.flushing = nil, nil, false
			drained := c.drained
			c.mu.Unlock()
			if drained != nil && len(b) == 0 {
				drained()
			}
			return
		}
		c.backlog, c.spare = c.spare[:0], nil // never two owners of a buffer
		c.mu.Unlock()
		err := c.writeAll(b)
		c.mu.Lock()
		if err != nil {
			if errors.Is(err, errBacklogStalled) || c.err == nil {
				c.err = err
			}
			c.backlog, c.spare, c.flushing = nil, nil, false
			stalled := c.stalled
			c.mu.Unlock()
			if stalled != nil && errors.Is(err, errBacklogStalled) {
				stalled(err)
			}
			return
		}
		if cap(b) <= backlogBound {
			c.spare = b[:0]
		}
		c.mu.Unlock()
	}
}

// writeAll writes b to the socket, blocking, within the timeout. The
// deadline is taken off again: left on the socket, it would fail the
// next non-blocking write once it passed.
func (c *nbConn) writeAll(b []byte) error {
	if c.timeout > 0 {
		c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
		defer c.Conn.SetWriteDeadline(time.Time{})
	}
	_, err := c.Conn.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", errBacklogStalled, c.timeout)
	}
	return err
}

// Close closes the socket and waits for the backlog's goroutine, which
// the close ends.
func (c *nbConn) Close() error {
	c.spot.Close() // a parked socket is taken back from the waiter first
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.Conn.Close()
	c.done.Wait()
	return err
}
