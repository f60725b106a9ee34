package gateway

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// serve runs the connection until the client leaves or it is closed:
// it greets the client and reads (read). The end of c.ctx closes the
// socket, which ends the read loop wherever it waits.
func (c *conn) serve() {
	c.greet()
	c.unwatch = context.AfterFunc(c.ctx, func() { c.raw.Close() })
	c.read()
}

// read runs the read loop until the connection ends, then tears it down
// (finish, ended). Or until the loop parks the connection: it returns
// then, and an idle connection holds no goroutine until its socket is
// readable again, when the waiter runs read anew (nbConn.park).
func (c *conn) read() {
	parked, err := c.readLoop()
	if parked {
		return
	}
	c.unwatch()
	c.finish(err)
	c.ended()
}

// greet writes the hello and arms the heartbeat and the token's expiry.
func (c *conn) greet() {
	c.w.writeJSON(c.s.hello()) // a failure cancels c.ctx, which ends the read loop
	c.w.writing.Store(false)   // held since newConn, so that the hello goes first
	c.w.flush()
	c.beat.ctx, c.beat.ping, c.beat.timedOut = c.ctx, c.ws.Ping, func() { c.close(wire.CloseHeartbeatTimeout, "no pong") }
	c.beat.every, c.beat.within = c.s.cfg.PingInterval, c.s.cfg.PongTimeout
	c.beat.start()
	c.expiry.ahead, c.expiry.expire = c.s.cfg.AuthWarning, func() { c.close(wire.CloseAuthExpired, "token expired") }
	c.expiry.warn = func(exp time.Time) {
		c.send(wire.Message{Type: wire.MsgAuthExpiring, ExpiresAt: exp.UTC().Format(time.RFC3339)})
	}
	c.expiry.arm(c.currentClaims())
	c.log.Info("connected")
}

// finish tears the connection down once its read loop ended with err.
func (c *conn) finish(err error) {
	// Let a close handshake we started finish before cancelling: a write
	// cancelled mid-flight would drop the connection without its code.
	c.shut.once.Do(func() { close(c.shut.done) }) // nobody started one
	<-c.shut.done
	c.cancel(err)
	c.expiry.stop()
	c.beat.stop()
	c.w.stopInputAcks()
	if c.relay != nil {
		c.relay.close()
	}
	if f := c.forwardsNow(); f != nil {
		f.close()
	}
	c.calls.wait()
	c.w.waitFlushers()
	c.w.control.dropAll() // nothing more is written: the subject's budget gets its bytes back
	c.finishChannels()
	if errors.Is(err, websocket.ErrMessageTooBig) {
		linger(c.raw)
	}
	c.ws.CloseNow()
	code := int(c.shut.code.Load())
	if code == 0 {
		code = readCloseCode(err) // the client's, 1009 for a message too big, or -1 (metrics.go)
	}
	c.s.metrics.connClosed(code)
	c.log.Info("disconnected", "close_code", code, "duration", time.Since(c.started).Seconds(),
		"bytes_in", c.bytesIn.Load(), "bytes_out", c.w.bytesOut.Load(), "err", err)
}

// readLoop is the connection's only reader: one long-lived Read per
// message, never a short read deadline used as a poll. It parks the
// connection once the client sent no message for the idle period
// (errIdle), and returns.
//
// The connection's end is watched once, not by each Read: a Read given a
// context that can end registers on it and deregisters, twice a message.
// When c.ctx ends while the loop reads, the socket is closed, as the
// WebSocket's Read would have closed it.
func (c *conn) readLoop() (parked bool, err error) {
	ctx := context.WithoutCancel(c.ctx)
	for {
		typ, b, held, err := c.nextMessage(ctx)
		if errors.Is(err, errIdle) {
			if c.w.nb.park(c.read) {
				return true, nil
			}
			continue // the waiter refused it: wait on here
		}
		if err != nil {
			return false, err
		}
		c.bytesIn.Add(uint64(len(b)))
		if held != nil && c.closing() {
			giveBack(held)
			held = nil
		}
		switch {
		case c.closing():
			// a close handshake is under way: drain, act on nothing
		case held != nil:
			c.forwardInput(b, held)
			continue
		case typ == websocket.MessageBinary:
			c.input(b)
		default:
			if err := c.serveRequest(b); err != nil {
				return false, err
			}
		}
	}
}

// serveRequest runs the control request b. A request (a start, above
// all) calls deep into the supervisor and the sandbox, and the goroutine
// it ran on keeps the stack it grew, 8-16 KiB, until collections halve it
// again. A connection that parks once idle gives its goroutine up then,
// grown stack and all, so the request runs on the read loop's goroutine:
// a goroutine per request more only left the runtime more freed stacks
// to keep (about 2 kB of RSS an idle session). One that cannot park
// (served over TLS, or never parking) waits for the next message for as
// long as the session idles, so the request runs aside and the read loop
// keeps the short stack of reading.
func (c *conn) serveRequest(b []byte) error {
	if c.w.nb != nil && c.w.nb.idle > 0 {
		return c.request(b)
	}
	return aside(func() error { return c.request(b) })
}

// aside runs f on a goroutine of its own and returns its error.
func aside(f func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	return <-errc
}

// nextMessage reads the client's next message, or returns errIdle when
// none came for the idle period: no bytes at all (awaitMessage), or only
// control frames, which the WebSocket's Read answers itself (a ping's
// pong, nbConn.Read). See readMessage for held.
func (c *conn) nextMessage(ctx context.Context) (_ websocket.MessageType, _ []byte, held *bytes.Buffer, _ error) {
	if c.w.nb == nil {
		return c.readMessage(ctx)
	}
	if c.awaitMessage() {
		return 0, nil, nil, errIdle
	}
	c.w.nb.mayIdle.Store(true)
	defer c.w.nb.mayIdle.Store(false)
	return c.readMessage(ctx)
}

// inboundBuffers hold the messages the read loop reads; one of more
// than inboundKeep is not kept.
var inboundBuffers = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 64<<10)) }}

const inboundKeep = 1 << 20

// readMessage reads the client's next message into a pooled buffer. A
// forward frame stays there: held is the buffer, which the caller hands
// on to the stream (it gives it back once the port has the bytes). Any
// other message is copied out, of exactly its size, and held is nil.
// Read (websocket.Conn.Read) would grow each message from 512 bytes by
// doubling, a fresh allocation each time: a page fault on each page of
// a forward stream's 128 KiB frames, as much as a copy.
func (c *conn) readMessage(ctx context.Context) (_ websocket.MessageType, _ []byte, held *bytes.Buffer, _ error) {
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	buf := inboundBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		giveBack(buf)
		return 0, nil, nil, err
	}
	s := buf.Bytes()
	if typ == websocket.MessageBinary && len(s) > 0 && s[0] == wire.FrameForward {
		return typ, s, buf, nil
	}
	b := bytes.Clone(s)
	giveBack(buf)
	return typ, b, nil, nil
}

// giveBack returns a buffer of inboundBuffers, unless it grew past
// inboundKeep.
func giveBack(buf *bytes.Buffer) {
	if buf.Cap() <= inboundKeep {
		inboundBuffers.Put(buf)
	}
}

// awaitMessage waits for the client's next bytes (nbConn.awaitInput),
// unless the WebSocket's reader already holds some or a close handshake
// started (it reads the reader then). True when none came for the idle
// period: the read loop parks the connection.
func (c *conn) awaitMessage() (idle bool) {
	if c.w.nb == nil || c.br == nil {
		return false
	}
	c.readGate.Lock()
	wait := !c.closing() && c.br.Buffered() == 0
	c.readGate.Unlock()
	return wait && c.w.nb.awaitInput()
}

// request decodes and handles one control message; an error ends the
// connection.
func (c *conn) request(b []byte) error {
	req, err := wire.DecodeRequest(b)
	var refused *wire.RequestError
	switch {
	case errors.As(err, &refused):
		c.fail(req, req.Channel, refused.Code, refused.Msg)
	case err != nil:
		c.close(wire.CloseProtocolError, "malformed control message")
		return err
	default:
		c.handle(req)
	}
	return nil
}
