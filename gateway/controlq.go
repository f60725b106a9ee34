package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/termgate/termgate/gateway/wire"
)

// controlQueue bounds the control messages waiting for the writer. A
// client that floods requests without reading the answers is closed.
const controlQueue = 256

// controlMessages are a connection's control messages waiting for its
// writer, oldest first: at most controlQueue of them, and their bytes
// counted against the connection's and its subject's budgets
// (Config.MaxQueuedBytes, MaxQueuedBytesPerSubject) until the writer
// wrote them. The queue holds memory only while messages wait:
// controlSlices lends it a slice when the first message comes, and gets
// it back once the writer wrote them. An idle connection holds none: a
// channel of controlQueue messages would hold
// controlQueue*sizeof(wire.Message), over 100 KiB, for its whole life,
// and a drained slice kept for reuse held about 470 bytes. Any goroutine
// adds; the one writing takes.
type controlMessages struct {
	mu      sync.Mutex
	pending *[]queued // nil while none wait
	bytes   int64     // of the messages waiting, and of those being written
	max     int64     // Config.MaxQueuedBytes
	subject *atomic.Int64
	maxSub  int64 // Config.MaxQueuedBytesPerSubject
	ended   bool  // dropAll was called: nothing more is queued or counted
}

// queued is a control message, or one encoded already (raw).
type queued struct {
	m   wire.Message
	raw []byte
}

// size is what q counts against the budgets: its encoding, or for a
// message not encoded yet its strings and a little for the rest.
func (q *queued) size() int64 {
	if q.raw != nil {
		return int64(len(q.raw))
	}
	return int64(len(q.m.Data)+len(q.m.Message)) + controlMessageBytes
}

// controlMessageBytes is counted for a control message's fields beside
// its data and message.
const controlMessageBytes = 256

// controlSlices lends the queues their slices, so that a connection that
// sends control messages often (an input acknowledgement for every
// keystroke) allocates none in the long run.
var controlSlices = sync.Pool{New: func() any { return new([]queued) }}

// controlSpare is the largest slice given back to controlSlices; a larger
// one, left by a burst, goes to the collector.
const controlSpare = 16

// add queues m; false when the queue is full. The caller kicks the
// writer.
func (q *controlMessages) add(m wire.Message) bool {
	return q.push(queued{m: m}, false)
}

// addEncoded queues a message encoded already, when its bytes fit the
// connection's and the subject's budgets; false, queueing nothing,
// otherwise. The caller kicks the writer.
func (q *controlMessages) addEncoded(b []byte) bool {
	return q.push(queued{raw: b}, true)
}

func (q *controlMessages) push(m queued, budgeted bool) bool {
	n := m.size()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended || q.pending != nil && len(*q.pending) >= controlQueue {
		return false
	}
	if budgeted && q.bytes+n > q.max {
		return false
	}
	if q.subject != nil && !reserve(q.subject, n, q.maxSub, budgeted) {
		return false
	}
	if q.pending == nil {
		q.pending = controlSlices.Get().(*[]queued)
	}
	*q.pending = append(*q.pending, m)
	q.bytes += n
	return true
}

// reserve adds n to the subject's bytes, within max when budgeted. The
// subject's connections add at once, each under its own lock, so the
// check and the add are one step.
func reserve(subject *atomic.Int64, n, max int64, budgeted bool) bool {
	for {
		had := subject.Load()
		if budgeted && had+n > max {
			return false
		}
		if subject.CompareAndSwap(had, had+n) {
			return true
		}
	}
}

// take removes and returns the waiting messages, oldest first; nil when
// none. Give each back with wrote once it is written, then the slice
// with done.
func (q *controlMessages) take() *[]queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	ms := q.pending
	q.pending = nil
	return ms
}

// wrote takes a written message's bytes off the budgets.
func (q *controlMessages) wrote(m *queued) {
	n := m.size()
	q.mu.Lock()
	q.bytes -= n
	q.mu.Unlock()
	if q.subject != nil {
		q.subject.Add(-n)
	}
}

// putBack queues ms, taken and not written, ahead of what came since;
// once the queue ended it takes them off the budgets instead.
func (q *controlMessages) putBack(ms []queued) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		q.abandon(ms)
		return
	}
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = controlSlices.Get().(*[]queued)
	}
	*q.pending = append(append(make([]queued, 0, len(ms)+len(*q.pending)), ms...), *q.pending...)
}

// abandon takes ms, taken and never to be written (the connection
// failed), off the budgets.
func (q *controlMessages) abandon(ms []queued) {
	for i := range ms {
		q.wrote(&ms[i])
	}
}

// dropAll takes what waits off the budgets once the connection ended:
// nothing more is written, and nothing more is queued, so that no bytes
// stay counted against the subject.
func (q *controlMessages) dropAll() {
	q.mu.Lock()
	q.ended = true
	q.mu.Unlock()
	ms := q.take()
	if ms == nil {
		return
	}
	q.abandon(*ms)
	q.done(ms)
}

// done gives back what take returned.
func (q *controlMessages) done(ms *[]queued) {
	if ms == nil || cap(*ms) > controlSpare {
		return
	}
	clear(*ms) // the messages' strings and slices go with them
	*ms = (*ms)[:0]
	controlSlices.Put(ms)
}
