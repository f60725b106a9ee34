package gateway

import (
	"fmt"

	"github.com/termgate/termgate/gateway/wire"
)

// ack records that the client processed its channel's events up to
// req.Seq, which lets a held execution drop them and read on. It has no
// answer unless it is wrong: a channel never attached, one attached
// without ack, or a sequence the channel was not sent. An ack for a
// channel that has ended (after its exit, or detached) is dropped: the
// client sent it before it learned.
func (c *conn) ack(req wire.Request) {
	ch, ok := c.channel(req.Channel)
	switch {
	case !ok && c.allocated(req.Channel):
	case !ok:
		c.fail(req, req.Channel, wire.CodeNotAttached, "no such channel")
	case !ch.ack:
		c.fail(req, ch.id, wire.CodeInvalidRequest, "the channel was attached without ack")
	case req.Seq > ch.sent.Load():
		c.fail(req, ch.id, wire.CodeInvalidRequest, fmt.Sprintf("ack of %d, but the channel was sent up to %d", req.Seq, ch.sent.Load()))
	default:
		if err := ch.sub.Ack(req.Seq); err != nil {
			c.failErr(req, ch.id, err)
		}
	}
}

// allocated reports whether channel id was ever attached on c: channel
// numbers count from 1 and are never reused on a connection.
func (c *conn) allocated(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return id >= 1 && id <= c.next
}
