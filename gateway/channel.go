package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// channel is one attached execution on a connection. It has no goroutine
// of its own: whoever writes for the connection reads the ring through
// the channel's subscription when the channel is ready, one batch at a
// turn, and when the ring has nothing more arms the subscription's
// callback, which marks the channel ready again on the goroutine that
// appends to the execution. The PTY reader never blocks on a client
// socket; it may wait for acknowledgements: a channel attached with ack
// holds the ring's events until the client acknowledged them, within the
// hold window (session's flow.go). A slow client otherwise makes the
// writer lag, the ring evicts, and the client later sees a gap. Nothing
// else is buffered.
type channel struct {
	id       uint32
	execID   string
	readOnly bool
	pty      bool
	// ack: the client acknowledges what it processed (the ack request)
	// and gets input-ack messages.
	ack bool
	sub *session.Subscription
	// sent is the newest sequence the writer sent on the channel: the
	// most a client may acknowledge.
	sent   atomic.Uint64
	ctx    context.Context    // ends with the connection or on detach
	detach context.CancelFunc // ends the channel at the writer's next turn
	// inputRefused: an input refusal was sent and no input accepted
	// since; further refusals stay silent (read loop only).
	inputRefused bool
	// resizeRefused: a resize or signal without a req was refused for
	// its rate and none accepted since; further such refusals stay
	// silent (read loop only).
	resizeRefused bool
	audit         channelAudit // the audit trail's (audit_events.go)
	// ports: the channel watches its execution's ports (portWatch).
	ports bool

	// queued: the channel waits in the connection's ready queue; at most
	// once there (wake).
	queued atomic.Bool
	// wake is the subscription's callback: c.w.wake(ch), made once.
	wake func()
	// finished: the channel ended (finishChannel); the writer's, or
	// serve's once no writer is left.
	finished bool
}

// batch is what the writer read from a channel's subscription.
type batch struct {
	events []replay.Event
	gap    *replay.Gap
}

// readyQueue is the connection's channels ready for the writer, FIFO:
// every channel gets its turn. A channel is in it at most once.
type readyQueue struct {
	mu  sync.Mutex
	chs []*channel
}

func (q *readyQueue) push(ch *channel) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.chs = append(q.chs, ch)
}

// pop returns the oldest ready channel, or nil.
func (q *readyQueue) pop() *channel {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.chs) == 0 {
		return nil
	}
	ch := q.chs[0]
	q.chs[0] = nil
	q.chs = q.chs[1:]
	if len(q.chs) == 0 {
		q.chs = q.chs[:0:0] // let the drained backing array go
	}
	return ch
}

// channelAudit is a channel's audit state. inputSeen and refusing and
// received belong to the read loop; bytes is read by the writer at detach.
type channelAudit struct {
	inputSeen bool          // the first input's record was written
	refusing  bool          // an input refusal was recorded, no input accepted since
	received  uint64        // the execution's input offset after this channel's last input
	bytes     atomic.Uint64 // input bytes this channel delivered
}
