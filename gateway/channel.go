package gateway

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// channel is one attached execution on a connection. Its pump reads the
// ring through a subscription and hands one batch at a time to the
// connection's writing (flush), which it usually does itself: a slow
// client makes the pump wait, the ring evicts, and the client later sees
// a gap. Nothing else is buffered.
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
	detach context.CancelFunc // stops the pump
	// inputRefused: an input refusal was sent and no input accepted
	// since; further refusals stay silent (read loop only).
	inputRefused bool
	audit        channelAudit // the audit trail's (audit_events.go)

	mu      sync.Mutex
	pending batch
	taken   chan struct{} // the writer finished with pending; buffered so the writer never waits
}

// batch is what a pump hands to the writer.
type batch struct {
	events []replay.Event
	gap    *replay.Gap
}

func (ch *channel) take() batch {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.pending
}

func (ch *channel) release() { ch.taken <- struct{}{} }

// pump runs until the exit event was written, the channel is detached, or
// the connection ends. It owns the subscription.
func (c *conn) pump(ch *channel) {
	defer c.pumps.Done()
	defer c.s.closeChannel()
	defer c.dropChannel(ch.id)
	defer ch.detach()
	defer ch.sub.Close()
	defer c.auditDetach(ch)
	ctx := ch.ctx
	for {
		evs, gap, err := ch.sub.Next(ctx)
		if errors.Is(err, io.EOF) || err != nil {
			return
		}
		ch.mu.Lock()
		ch.pending = batch{events: evs, gap: gap}
		ch.mu.Unlock()
		select {
		case c.ready <- ch:
		case <-ctx.Done():
			return
		}
		c.want()
		c.flush() // writes this batch here, unless another goroutine is writing
		select {
		case <-ch.taken:
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *conn) dropChannel(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.channels, id)
}

func (c *conn) channel(id uint32) (*channel, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.channels[id]
	return ch, ok
}

// bucket is a token bucket: rate tokens per second up to burst.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// allow takes a token if one is left.
func (b *bucket) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
