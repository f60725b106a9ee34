package gateway

import (
	"sync"

	"github.com/termgate/termgate/gateway/wire"
)

// controlMessages are a connection's control messages waiting for its
// writer, oldest first, at most controlQueue of them. The queue holds
// memory only while messages wait: controlSlices lends it a slice when the
// first message comes, and gets it back once the writer wrote them. An
// idle connection holds none: a channel of controlQueue messages would
// hold controlQueue*sizeof(wire.Message), over 100 KiB, for its whole
// life, and a drained slice kept for reuse held about 470 bytes. Any
// goroutine adds; the one writing takes.
type controlMessages struct {
	mu      sync.Mutex
	pending *[]wire.Message // nil while none wait
}

// controlSlices lends the queues their slices, so that a connection that
// sends control messages often (an input acknowledgement for every
// keystroke) allocates none in the long run.
var controlSlices = sync.Pool{New: func() any { return new([]wire.Message) }}

// controlSpare is the largest slice given back to controlSlices; a larger
// one, left by a burst, goes to the collector.
const controlSpare = 16

// add queues m; false when the queue is full. The caller kicks the
// writer.
func (q *controlMessages) add(m wire.Message) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = controlSlices.Get().(*[]wire.Message)
	}
	if len(*q.pending) >= controlQueue {
		return false
	}
	*q.pending = append(*q.pending, m)
	return true
}

// take removes and returns the waiting messages, oldest first; nil when
// none. Hand them back with done once they are written.
func (q *controlMessages) take() *[]wire.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	ms := q.pending
	q.pending = nil
	return ms
}

// done gives back what take returned.
func (q *controlMessages) done(ms *[]wire.Message) {
	if ms == nil || cap(*ms) > controlSpare {
		return
	}
	clear(*ms) // the messages' strings and slices go with them
	*ms = (*ms)[:0]
	controlSlices.Put(ms)
}
