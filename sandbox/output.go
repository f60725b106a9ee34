//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox/fdio"
	"golang.org/x/sys/unix"
)

// Reserver is implemented by an output writer that lends its own memory
// to reads: a process's output is then read straight into it, so a byte
// the kernel handed over is already the writer's (a ring in shared memory
// keeps it if termgate dies right after). When Stdio.Stdout or Stderr
// implements it, its Write is never called.
//
// An event is read in pieces, as the copier's other path reads a burst:
// Reserve, then for each read Extend by exactly what the kernel said was
// waiting, which that one read fills entirely or not at all, then Commit.
// The copier asks for the next piece only after the read of the last one,
// so a writer that finds its memory touched after a crash knows that every
// earlier piece was read, and the last one too when its first bytes
// changed.
type Reserver interface {
	io.Writer
	// Reserve begins an event of at most max bytes (at most 32 KiB).
	Reserve(max int)
	// Extend returns the next k bytes of the event's memory, right after
	// the pieces before, for one read: at least k bytes, the copier's
	// until Commit. The pieces together never exceed max.
	Extend(k int) []byte
	// Commit says the first n bytes of the event's memory were read and
	// belong to the output: all pieces but the last in full, and what the
	// last read returned; 0 before a second piece gives the reservation
	// back.
	Commit(n int) error
}

// copy drains r into w until end of file, on a goroutine owned by the
// process, or on none while the output is idle (copier); Wait waits for
// it. A PTY master reports EIO once every slave is closed: that is its end
// of file. With capture, the first bytes are kept for the setup message.
func (p *Process) copy(r *os.File, w io.Writer, capture bool) {
	if w == nil {
		w = io.Discard
	}
	var head io.Writer = io.Discard
	if capture {
		head = p.head
	}
	c := newCopier(r, head, p.copies.Done)
	c.stopping = &p.stopCopies
	if rw, ok := w.(Reserver); ok {
		c.reserver = rw
	} else {
		c.w = io.MultiWriter(head, w)
	}
	p.outputs = append(p.outputs, r)
	p.copiers = append(p.copiers, c)
	p.copies.Add(1)
	go c.start()
}

// idleAfter is how long a copier reads in the runtime's poller before it
// gives its goroutine up: the descriptor then waits in the process's
// idle-descriptor waiter (fdio.WhenReadable), which runs the copier again
// once output comes or the writers hang up. An idle execution then has no
// goroutine reading its output.
var idleAfter = 5 * time.Second

// copier drains one output descriptor until end of file. It waits in the
// poller holding no buffer, so an idle execution costs little: a read
// borrows one from readBufs, and gives it back after writing what it
// read; or it reads straight into a Reserver's memory (readReserved).
type copier struct {
	stopping *atomic.Bool // set when the launcher lets go of the process (letGo)
	r        *os.File
	head     io.Writer
	reserver Reserver        // the writer, when it lends its memory
	w        io.Writer       // the writer otherwise, head included
	done     func()          // called once the copier ended and closed r
	raw      syscall.RawConn // nil for a descriptor without a poller, read blocking
	fd       int
}

// newCopier is a copier of r, whose descriptor it learns before any
// goroutine runs it: letGo may read it from another.
func newCopier(r *os.File, head io.Writer, done func()) *copier {
	c := &copier{r: r, head: head, done: done}
	if raw, ok := polledRaw(r); ok {
		c.raw = raw
		raw.Control(func(fd uintptr) { c.fd = int(fd) })
	}
	return c
}

// start copies in the poller, or blocking where r has none.
func (c *copier) start() {
	if c.raw != nil {
		c.run()
		return
	}
	w := c.w
	if c.reserver != nil {
		w = io.MultiWriter(c.head, c.reserver)
	}
	copyBlocking(c.r, w)
	c.finish()
}

// run copies until end of file, or for idleAfter: then it parks the
// descriptor in fdio's waiter and returns, and the waiter runs it again
// once output comes, at once if some waits. The deadline is set once a
// run, not once a read: a keystroke's echo pays for no timer, and a
// copier that keeps busy only goes through the waiter every idleAfter.
func (c *copier) run() {
	c.r.SetReadDeadline(time.Now().Add(idleAfter))
	for {
		if c.stopping.Load() { // checked after the deadline was set: see letGo
			c.finish()
			return
		}
		err := c.round()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			if !c.stopping.Load() && c.park() {
				return
			}
			c.r.SetReadDeadline(time.Now().Add(idleAfter))
		case err != nil:
			c.finish()
			return
		}
	}
}

// round waits for output, then reads and writes what came.
func (c *copier) round() error {
	if c.reserver != nil {
		return readReserved(c.raw, c.reserver, c.head)
	}
	buf, n, err := readWaiting(c.raw)
	if n > 0 {
		c.w.Write((*buf)[:n])
	}
	if buf != nil {
		readBufs.Put(buf)
	}
	return err
}

// park hands the descriptor to fdio's waiter; false when it cannot take
// it, and the copier waits on in the poller. Once parked, the copier is
// the waiter's, unless letGo began meanwhile and looked before it was
// parked.
func (c *copier) park() bool {
	if !fdio.WhenReadable(c.fd, c.run) {
		return false
	}
	if c.stopping.Load() && fdio.StopWaiting(c.fd) {
		c.finish()
	}
	return true
}

// unpark ends a copier parked in fdio's waiter, for letGo; one that runs
// finds stopping set itself.
func (c *copier) unpark() {
	if c.raw != nil && fdio.StopWaiting(c.fd) {
		go c.run() // it finds stopping set and ends
	}
}

// finish closes the descriptor and says the copier ended.
func (c *copier) finish() {
	c.r.Close()
	c.done()
}

// readBufs lends the output readers their buffers while they read.
var readBufs = sync.Pool{New: func() any { b := make([]byte, maxReadBuf); return &b }}

// readWaiting waits until raw's descriptor is readable and reads what
// waits into a buffer of readBufs, and with a read of at least burstMin
// what came meanwhile (readBurst); the caller puts the buffer back. Its
// error is io.EOF at end of file, when a PTY master's slaves closed, or
// the read's.
func readWaiting(raw syscall.RawConn) (*[]byte, int, error) {
	var buf *[]byte
	var n int
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		buf = readBufs.Get().(*[]byte)
		n, rerr = fdio.Read(int(fd), *buf)
		if errors.Is(rerr, unix.EAGAIN) {
			readBufs.Put(buf) // wait in the poller without it
			buf = nil
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return buf, 0, err
	case errors.Is(rerr, unix.EINTR):
		return buf, 0, nil
	case errors.Is(rerr, unix.EIO) || rerr == nil && n == 0:
		return buf, 0, io.EOF
	case rerr != nil:
		return buf, 0, rerr
	}
	if n >= burstMin {
		n = readBurst(raw, *buf, n)
	}
	return buf, n, nil
}

// polledRaw returns r's descriptor when it waits in the poller, which
// only a descriptor in non-blocking mode does (and the raw reads need).
func polledRaw(r *os.File) (syscall.RawConn, bool) {
	raw, err := r.SyscallConn()
	if err != nil {
		return nil, false
	}
	ok := false
	if err := raw.Control(func(fd uintptr) { ok = fdio.IsNonBlocking(fd) }); err != nil {
		return nil, false
	}
	return raw, ok
}

// copyBlocking is a copier's work for a descriptor without a poller.
func copyBlocking(r *os.File, w io.Writer) {
	buf := make([]byte, minReadBuf)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// Output read buffer bounds: a reader without a poller reads minReadBuf at
// a time, the others a burst of at most maxReadBuf.
const (
	minReadBuf = 4 << 10
	maxReadBuf = 32 << 10
)

// burstMin is the read size from which the copier looks for more data
// already waiting: a keystroke's echo goes out at once, a flood of output
// goes out in large events instead of the terminal's 4 KiB reads.
const burstMin = 1024

// readBurst appends to buf[:n] whatever can be read without waiting. A
// failed or empty read is left for the next blocking read to report.
func readBurst(raw syscall.RawConn, buf []byte, n int) int {
	for n < len(buf) {
		var m int
		var err error
		raw.Read(func(fd uintptr) bool {
			m, err = fdio.Read(int(fd), buf[n:])
			return true // never wait
		})
		if err != nil || m <= 0 {
			return n
		}
		n += m
		if m < burstMin {
			return n // drained: wait in the poller rather than spin on small reads
		}
	}
	return n
}

// readReserved waits until r is readable, asks the kernel how many bytes
// wait (FIONREAD, TIOCINQ on a terminal), and reads them and what follows
// into one event (readPieces). It returns io.EOF once the other side hung
// up and nothing waits.
func readReserved(raw syscall.RawConn, w Reserver, head io.Writer) error {
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		k, err := waiting(int(fd))
		if err != nil {
			rerr = err
			return true
		}
		if k == 0 {
			if !hungUp(int(fd)) {
				return false // wait in the poller
			}
			if k, _ = waiting(int(fd)); k == 0 {
				rerr = io.EOF // and not data written just before the hang-up
				return true
			}
		}
		w.Reserve(maxReadBuf)
		n, err := readPieces(int(fd), w, head, min(k, maxReadBuf))
		w.Commit(n) // a writer's failure is its own to report: keep draining
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			return n > 0 // nothing after all: wait
		case errors.Is(err, unix.EIO) || err == nil && n == 0:
			rerr = io.EOF // a PTY master whose slaves closed
		case err != nil:
			rerr = err
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return err
}

// readPieces reads into w's reservation the k bytes waiting and then, while
// each read returned at least burstMin (a keystroke's echo goes out at
// once), what waits next, up to maxReadBuf in all. Each piece is exactly
// what FIONREAD said was waiting, read by one read, which the kernel then
// fills entirely. It returns the bytes read and the first read's error; a
// later failure is left for the next read to report.
func readPieces(fd int, w Reserver, head io.Writer, k int) (int, error) {
	total := 0
	for {
		piece := w.Extend(k)[:k]
		n, err := fdio.Read(fd, piece)
		if n > 0 {
			head.Write(piece[:n])
		}
		if total == 0 && err != nil {
			return n, err
		}
		total += n
		if err != nil || n < k || n < burstMin || total == maxReadBuf {
			return total, nil // a short piece must be the last: the next starts after all of it
		}
		if k, err = waitingNow(fd); err != nil || k == 0 {
			return total, nil
		}
		k = min(k, maxReadBuf-total)
	}
}

// waiting asks the kernel how many bytes wait to be read from fd, a pipe,
// a socket or a terminal.
func waiting(fd int) (int, error) {
	k, err := fdio.Waiting(fd)
	if err != nil {
		return 0, fmt.Errorf("sandbox: bytes waiting: %w", err)
	}
	return k, nil
}

// waitingNow is waiting, but on a terminal it counts as well what the
// writer has written and the line discipline not yet taken in, as a read
// would: when little waits, a poll (which flushes that) goes first.
func waitingNow(fd int) (int, error) {
	k, err := waiting(fd)
	if err != nil || k >= burstMin {
		return k, err
	}
	fdio.PollNow(fd)
	return waiting(fd)
}

// hungUp reports whether the other side of fd closed: the writers of a
// pipe, every slave of a PTY master.
func hungUp(fd int) bool {
	return fdio.PollNow(fd)&(unix.POLLHUP|unix.POLLERR) != 0
}

// headCapture keeps the first headSize bytes of output, where bwrap prints
// its setup error. Once it has them all it keeps only that error line, if
// they hold one: an execution that goes on for hours does not carry the
// first 2 KiB of its output along.
type headCapture struct {
	mu   sync.Mutex
	buf  []byte
	full bool   // headSize bytes came: msg is the answer, buf is gone
	msg  string // the setup message found in them, once full
}

const headSize = 2048

func (h *headCapture) Write(b []byte) (int, error) {
	h.mu.Lock()
	if !h.full { // then buf holds less than headSize
		h.buf = append(h.buf, b[:min(headSize-len(h.buf), len(b))]...)
		if len(h.buf) == headSize {
			h.msg, h.buf, h.full = setupLine(h.buf), nil, true
		}
	}
	h.mu.Unlock()
	return len(b), nil
}

// setupPrefixes start the error lines of bwrap and of the init, which
// writes to its output only when its control socket failed.
var setupPrefixes = []string{"bwrap: ", "termgate-init: "}

// setupMessage returns the error line of bwrap or of the init, if the
// output's first headSize bytes hold one.
func (h *headCapture) setupMessage() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.full {
		return h.msg
	}
	return setupLine(h.buf)
}

// setupLine returns the first line of head that starts as a setup error.
func setupLine(head []byte) string {
	for _, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		for _, prefix := range setupPrefixes {
			if bytes.HasPrefix(line, []byte(prefix)) {
				return string(line)
			}
		}
	}
	return ""
}
