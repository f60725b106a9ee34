package session

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/termgate/termgate/sandbox/fdio"
	"github.com/termgate/termgate/session/internal/statedir"
)

// inputQueue accepts input by offset and feeds it to the process. When
// nothing waits to be written, the caller writes what the process takes
// at once itself, without blocking (direct); the rest waits in the queue
// for its writer goroutine, so a process that does not read its input
// never blocks a client: a full queue answers ErrInputFull, and the
// client retries from the same offset.
type inputQueue struct {
	mu       sync.Mutex
	offset   uint64   // bytes accepted so far
	pending  [][]byte // accepted, not yet written
	size     int      // bytes in pending
	max      int
	closeReq bool // close stdin once pending is written
	closed   bool // stdin was closed
	shut     bool // the process ended: accept nothing more

	// The writer goroutine runs only while input waits, so an idle
	// execution costs no goroutine: it starts when a write would block
	// and ends once the queue drained.
	dst     io.WriteCloser
	raw     syscall.RawConn // dst's non-blocking descriptor, for direct writes; nil without one
	running bool            // the writer goroutine runs
	writers sync.WaitGroup

	counted  *atomic.Uint64     // the supervisor's input bytes (metrics.go)
	log      *statedir.InputLog // durable executions only
	onAccept func([]byte)       // sees accepted input in order, with mu held (a recording); may be nil
	wroteOff uint64             // input offset written to the program; the writer's, or direct's with mu held
}

func newInputQueue(max int, counted *atomic.Uint64) *inputQueue {
	return &inputQueue{max: max, counted: counted}
}

// attach sets where input goes, once the process runs.
func (q *inputQueue) attach(w io.WriteCloser) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dst, q.raw = w, nonBlocking(w)
	q.startLocked()
}

// nonBlocking returns the raw descriptor of w when it has one in
// non-blocking mode (a PTY master, a pipe or socket through Go's poller),
// which a write can try without waiting.
func nonBlocking(w io.Writer) syscall.RawConn {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	ok = false
	if raw.Control(func(fd uintptr) { ok = fdio.IsNonBlocking(fd) }) != nil || !ok {
		return nil
	}
	return raw
}

// startLocked starts the writer when there is work for it and it does
// not run. Called with q.mu held.
func (q *inputQueue) startLocked() {
	if q.running || q.dst == nil || q.shut || len(q.pending) == 0 && (!q.closeReq || q.closed) {
		return
	}
	q.running = true
	q.writers.Add(1)
	go func() {
		defer q.writers.Done()
		q.run(q.dst)
	}()
}

// wait returns once the writer, if it runs, has returned. Called after
// shutdown, which starts no writer any more.
func (q *inputQueue) wait() { q.writers.Wait() }

// write applies the part of p the queue has not seen yet.
func (q *inputQueue) write(offset uint64, p []byte) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.shut:
		return q.offset, ErrNotRunning
	case offset > q.offset:
		return q.offset, fmt.Errorf("%w: got offset %d, have received %d bytes", ErrInputOffset, offset, q.offset)
	}
	skip := q.offset - offset
	if skip >= uint64(len(p)) {
		return q.offset, nil // a retry of input already received
	}
	if q.closeReq {
		return q.offset, fmt.Errorf("%w: stdin was closed", ErrNotRunning)
	}
	fresh := p[skip:]
	if q.size+len(fresh) > q.max {
		return q.offset, ErrInputFull
	}
	if q.log != nil {
		q.log.Accept(q.offset, fresh)
	}
	if q.onAccept != nil {
		q.onAccept(fresh)
	}
	q.offset += uint64(len(fresh))
	q.counted.Add(uint64(len(fresh)))
	if rest := q.writeDirectLocked(fresh); len(rest) > 0 {
		q.pending = append(q.pending, append([]byte(nil), rest...))
		q.size += len(rest)
		q.startLocked()
	}
	return q.offset, nil
}

// writeDirectLocked writes what it can of p to the program without
// waiting, when nothing is queued before it, and returns the rest: all
// of p when the writer runs or dst has no non-blocking descriptor. A
// durable execution writes in pieces, each recorded as writeOut does;
// a piece written in part leaves nothing in flight. Called with q.mu held.
func (q *inputQueue) writeDirectLocked(p []byte) []byte {
	if q.raw == nil || q.running || len(q.pending) > 0 {
		return p
	}
	for len(p) > 0 {
		k := len(p)
		if q.log != nil {
			k = min(k, statedir.InputPiece)
			q.log.BeginWrite(q.wroteOff + uint64(k))
		}
		n := tryWrite(q.raw, p[:k])
		p = p[n:]
		q.wroteOff += uint64(n)
		if q.log != nil {
			q.log.Wrote(q.wroteOff)
			if n < k {
				q.log.BeginWrite(q.wroteOff) // the rest is the writer's: none in flight
			}
		}
		if n < k {
			break
		}
	}
	return p
}

// tryWrite is one write(2) of p to raw's descriptor that never waits,
// made raw (fdio.Write). It returns the bytes written: 0 on any error,
// which the writer goroutine then meets again, or not.
func tryWrite(raw syscall.RawConn, p []byte) int {
	var n int
	var err error
	if cerr := raw.Write(func(fd uintptr) bool {
		n, err = fdio.Write(int(fd), p)
		return true // never wait: the writer goroutine does
	}); cerr != nil || err != nil || n < 0 {
		return 0
	}
	return n
}

// received returns the input offset: bytes accepted so far.
func (q *inputQueue) received() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.offset
}

// closeStdin asks for end of file after the pending input; it returns
// the input offset received and whether this call was the first to ask.
func (q *inputQueue) closeStdin(at *uint64) (uint64, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if at != nil && *at != q.offset && !q.closeReq {
		return q.offset, false, fmt.Errorf("%w: close after %d bytes, have received %d", ErrInputOffset, *at, q.offset)
	}
	first := !q.closeReq && !q.shut
	q.closeReq = true
	q.startLocked()
	return q.offset, first, nil
}

// shutdown stops the writer: the process has ended.
func (q *inputQueue) shutdown() {
	q.mu.Lock()
	q.shut = true
	q.pending, q.size = nil, 0
	q.mu.Unlock()
}

// run writes pending input to w, and closes w once asked to after it,
// until nothing is left or shutdown. A write blocks only this goroutine;
// it fails once the process has ended and its stdin is closed.
func (q *inputQueue) run(w io.WriteCloser) {
	for {
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		closing := len(batch) == 0 && q.closeReq && !q.closed && !q.shut
		if len(batch) == 0 && !closing || q.shut {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.closed = q.closed || closing
		q.mu.Unlock()
		if closing {
			w.Close()
			continue
		}
		for _, b := range batch {
			q.writeOut(w, b)
			q.mu.Lock()
			q.size -= len(b)
			q.mu.Unlock()
		}
	}
}

// writeOut writes b to the program. A durable execution writes it in
// pieces and records each as written (statedir.InputLog).
func (q *inputQueue) writeOut(w io.Writer, b []byte) {
	if q.log == nil {
		w.Write(b)
		return
	}
	for len(b) > 0 {
		n := min(len(b), statedir.InputPiece)
		q.log.BeginWrite(q.wroteOff + uint64(n))
		w.Write(b[:n])
		b = b[n:]
		q.wroteOff += uint64(n)
		q.log.Wrote(q.wroteOff)
	}
}

// restore resumes the queue of a durable execution where an earlier
// supervisor left it: accepted input, of which pending is not written.
func (q *inputQueue) restore(log *statedir.InputLog, accepted uint64, pending []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.log, q.offset = log, accepted
	q.wroteOff = accepted - uint64(len(pending))
	if len(pending) > 0 {
		q.pending, q.size = [][]byte{pending}, len(pending)
		q.startLocked()
	}
}
