package gateway

import "github.com/termgate/termgate/gateway/wire"

// ack records that the client processed its channel's events up to
// req.Seq, which lets the execution drop them and read on.
func (c *conn) ack(req wire.Request) {
	if _, ok := c.channel(req.Channel); !ok {
		c.fail(req, req.Channel, wire.CodeNotAttached, "no such channel")
	}
}
