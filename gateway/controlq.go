package gateway

import (
	"sync"

	"github.com/termgate/termgate/gateway/wire"
)

// controlMessages are a connection's control messages waiting for its
// writer, oldest first, at most controlQueue of them. The queue holds
// memory only while messages wait: an idle connection keeps at most a
// small slice, where a channel of controlQueue messages would hold
// controlQueue*sizeof(wire.Message) (over 100 KiB) for its whole life.
// Any goroutine adds; the one writing takes.
type controlMessages struct {
	mu      sync.Mutex
	pending []wire.Message
	spare   []wire.Message // a small drained slice, reused by the next add
}

// controlSpare is the largest drained slice kept for reuse.
const controlSpare = 2

// add queues m; false when the queue is full. The caller kicks the
// writer.
func (q *controlMessages) add(m wire.Message) bool {
	q.mu.Lock()
	if len(q.pending) >= controlQueue {
		q.mu.Unlock()
		return false
	}
	if q.pending == nil {
		q.pending, q.spare = q.spare[:0], nil
	}
	q.pending = append(q.pending, m)
	q.mu.Unlock()
	return true
}

// take removes and returns the waiting messages, oldest first; nil when
// none. Hand the slice back with done once they are written.
func (q *controlMessages) take() []wire.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	ms := q.pending
	q.pending = nil
	return ms
}

// done gives back a slice take returned, to be reused when small.
func (q *controlMessages) done(ms []wire.Message) {
	if cap(ms) > controlSpare {
		return
	}
	clear(ms)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spare == nil {
		q.spare = ms[:0]
	}
}
