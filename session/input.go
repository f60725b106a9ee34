package session

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// inputQueue accepts input by offset and feeds it to the process on the
// execution's writer goroutine, so a process that does not read its input
// never blocks a client: a full queue answers ErrInputFull, and the client
// retries from the same offset.
type inputQueue struct {
	mu       sync.Mutex
	offset   uint64   // bytes accepted so far
	pending  [][]byte // accepted, not yet written
	size     int      // bytes in pending
	max      int
	closeReq bool // close stdin once pending is written
	shut     bool // the process ended: accept nothing more
	wake     chan struct{}

	// The writer goroutine starts with the first input, so an execution
	// nobody types into costs no goroutine.
	dst     io.WriteCloser
	started bool
	done    chan struct{} // closed when the writer returned

	counted  *atomic.Uint64 // the supervisor's input bytes (metrics.go)
	log      *inputLog      // durable executions only (inputlog.go)
	onAccept func([]byte)   // sees accepted input in order, with mu held (a recording); may be nil
	wroteOff uint64         // input offset written to the program; the writer's
}

func newInputQueue(max int, counted *atomic.Uint64) *inputQueue {
	return &inputQueue{max: max, wake: make(chan struct{}, 1), done: make(chan struct{}), counted: counted}
}

// attach sets where input goes, once the process runs.
func (q *inputQueue) attach(w io.WriteCloser) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dst = w
	if len(q.pending) > 0 || q.closeReq {
		q.startLocked()
	}
}

// startLocked starts the writer once. Called with q.mu held.
func (q *inputQueue) startLocked() {
	if q.started || q.dst == nil || q.shut {
		return
	}
	q.started = true
	go func() {
		defer close(q.done)
		q.run(q.dst)
	}()
}

// wait returns once the writer, if it ever started, has returned.
func (q *inputQueue) wait() {
	q.mu.Lock()
	started := q.started
	q.mu.Unlock()
	if started {
		<-q.done
	}
}

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
	q.pending = append(q.pending, append([]byte(nil), fresh...))
	if q.log != nil {
		q.log.accept(q.offset, fresh)
	}
	if q.onAccept != nil {
		q.onAccept(fresh)
	}
	q.size += len(fresh)
	q.offset += uint64(len(fresh))
	q.counted.Add(uint64(len(fresh)))
	q.startLocked()
	q.signal()
	return q.offset, nil
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
	q.signal()
	return q.offset, first, nil
}

// shutdown stops the writer: the process has ended.
func (q *inputQueue) shutdown() {
	q.mu.Lock()
	q.shut = true
	q.pending, q.size = nil, 0
	q.signal()
	q.mu.Unlock()
}

func (q *inputQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run writes pending input to w until shutdown. A write blocks only this
// goroutine; it fails once the process has ended and its stdin is closed.
func (q *inputQueue) run(w io.WriteCloser) {
	for range q.wake {
		q.mu.Lock()
		batch, shut, closeReq := q.pending, q.shut, q.closeReq
		q.pending = nil
		q.mu.Unlock()
		for _, b := range batch {
			q.writeOut(w, b)
			q.mu.Lock()
			q.size -= len(b)
			q.mu.Unlock()
		}
		if shut {
			return
		}
		if closeReq {
			w.Close()
		}
	}
}

// writeOut writes b to the program. A durable execution writes it in
// pieces and records each as written (inputlog.go).
func (q *inputQueue) writeOut(w io.Writer, b []byte) {
	if q.log == nil {
		w.Write(b)
		return
	}
	for len(b) > 0 {
		n := min(len(b), inputPiece)
		q.log.beginWrite(q.wroteOff + uint64(n))
		w.Write(b[:n])
		b = b[n:]
		q.wroteOff += uint64(n)
		q.log.wrote(q.wroteOff)
	}
}

// restore resumes the queue of a durable execution where an earlier
// supervisor left it: accepted input, of which pending is not written.
func (q *inputQueue) restore(log *inputLog, accepted uint64, pending []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.log, q.offset = log, accepted
	q.wroteOff = accepted - uint64(len(pending))
	if len(pending) > 0 {
		q.pending, q.size = [][]byte{pending}, len(pending)
		q.signal()
	}
}
