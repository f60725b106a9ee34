package gateway

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// controlQueue bounds the control messages waiting for the writer. A
// client that floods requests without reading the answers is closed.
const controlQueue = 256

// conn is one WebSocket connection: its read loop, its requests (handlers.go)
// and its channels. It delegates writing to its writer (writer.go) and,
// on a node of a cluster, the channels of other nodes' executions to its
// relay (relay.go). Its goroutines: the read loop (serve, on a goroutine
// of its own: serveConn; none while the connection is parked, and a new
// one each time it resumes), the writer's short-lived flushers, the
// heartbeat's and the expiry's timers while they fire (heartbeat.go), and
// the relay's reader and pinger per upstream; the read loop's end
// (finish) waits for all of them.
type conn struct {
	s      *Server
	ws     *websocket.Conn
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	claims   auth.Claims
	channels map[uint32]*channel
	next     uint32 // the last channel number given, local or relayed
	// open are the channels not finished yet, attached or detached
	// (finishChannel); serve finishes those left.
	open map[*channel]struct{}

	w     writer // the write side (writer.go)
	relay *relay // the channels of other nodes' executions; nil on a single node (relay.go)

	raw net.Conn      // the hijacked connection, for linger (hijack.go)
	br  *bufio.Reader // the WebSocket's reader of raw (hijack.go)
	// readGate orders awaitMessage's look at the WebSocket's reader before
	// a close handshake, which reads on a goroutine of its own.
	readGate sync.Mutex
	shut     closeHandshake

	beat    heartbeat
	expiry  expiry
	started time.Time
	remote  string        // the client's address
	hop     bool          // a verified hop's connection: served here only, never relayed (route_connect.go)
	bytesIn atomic.Uint64 // message bytes read
	unwatch func() bool   // stops the watch on c.ctx that closes the socket (serve)
	ended   func()        // the server's, once the connection ended (serveConn)
}

// closeHandshake is the close handshake this side starts (conn.close).
type closeHandshake struct {
	once    sync.Once
	started chan struct{} // closed when close was called, under readGate
	code    atomic.Int32  // the code this side closed with, once it did
	done    chan struct{} // closed when a close handshake we started ended
}

func newConn(s *Server, ws *websocket.Conn, claims auth.Claims, remote string) *conn {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &conn{
		s: s, ws: ws, ctx: ctx, cancel: cancel, claims: claims,
		log:      s.log.With("remote_addr", remote, "tenant", claims.Tenant, "subject", claims.Subject),
		remote:   remote,
		channels: map[uint32]*channel{},
		open:     map[*channel]struct{}{},
		shut:     closeHandshake{started: make(chan struct{}), done: make(chan struct{})},
		started:  time.Now(),
	}
	c.w.c, c.beat.c = c, c
	c.w.inputAcks.pending = map[uint32]*wire.Message{}
	c.w.control.max, c.w.control.maxSub = s.cfg.MaxQueuedBytes, s.cfg.MaxQueuedBytesPerSubject
	c.w.writing.Store(true) // serve writes the hello first
	return c
}

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
	c.beat.start()
	c.expiry.arm(c)
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
		typ, b, err := c.nextMessage(ctx)
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
		switch {
		case c.closing():
			// a close handshake is under way: drain, act on nothing
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
// pong, nbConn.Read).
func (c *conn) nextMessage(ctx context.Context) (websocket.MessageType, []byte, error) {
	if c.w.nb == nil {
		return c.ws.Read(ctx)
	}
	if c.awaitMessage() {
		return 0, nil, errIdle
	}
	c.w.nb.mayIdle.Store(true)
	defer c.w.nb.mayIdle.Store(false)
	return c.ws.Read(ctx)
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

// send queues a control message; a client that does not read its answers
// while sending requests is closed rather than buffered without bound.
func (c *conn) send(m wire.Message) {
	if !c.w.control.add(m) {
		if c.ctx.Err() == nil {
			c.close(wire.CloseLimit, "control messages not read")
		}
		return
	}
	c.w.kick()
}

// fail answers req with a stable error code and a message safe to show.
func (c *conn) fail(req wire.Request, channel uint32, code, msg string) {
	c.auditRefusal(req, channel, code)
	c.send(wire.Message{Type: wire.MsgError, Req: req.Req, Channel: channel, Error: code, Message: msg})
}

// failErr maps a session error to its code; other errors stay in the log.
func (c *conn) failErr(req wire.Request, channel uint32, err error) {
	code, msg := c.errorText(req, err)
	c.fail(req, channel, code, msg)
}

// errorText is the code and the message safe to show for err.
func (c *conn) errorText(req wire.Request, err error) (code, msg string) {
	code = errorCode(err)
	switch {
	case code == wire.CodeInternal:
		c.log.Error("request failed", "type", req.Type, "err", err)
		return code, "internal error"
	case session.OutOfDescriptors(err):
		c.log.Warn("request refused: out of file descriptors", "type", req.Type, "err", err)
		return code, outOfDescriptorsText
	}
	return code, err.Error()
}

// outOfDescriptorsText answers any request that ran out of file
// descriptors; the error itself may name host paths.
var outOfDescriptorsText = strings.TrimPrefix(session.ErrOutOfDescriptors.Error(), session.ErrCapacity.Error()+": ")

// closing reports whether a close handshake was started.
func (c *conn) closing() bool {
	select {
	case <-c.shut.started:
		return true
	default:
		return false
	}
}

// close starts the close handshake once with code; the read loop ends
// when it completes (the library bounds it in time).
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.shut.once.Do(func() {
		c.readGate.Lock()
		close(c.shut.started)
		if c.w.nb != nil {
			// The handshake reads the client's answer, maybe while the
			// read loop is in the WebSocket's Read: it must wait for
			// it, not take the idle deadline as the client idle.
			c.w.nb.noIdle.Store(true)
		}
		c.readGate.Unlock()
		c.shut.code.Store(int32(code))
		c.log.Info("closing", "code", int(code), "reason", reason)
		go func() {
			defer close(c.shut.done)
			c.ws.Close(code, reason)
		}()
	})
}

// The connection has no writer goroutine: whoever has something to write
// writes, one goroutine at a time (writing), so output crosses at
// most one goroutine between the ring and the socket. A relay reader
// writes inline (flush); the read loop, timers and a channel's ring
// callback, which must never wait on the client, start a short-lived
// flusher instead (kick) unless one is writing. The hello goes
// first, before any answer.
//
// The one writing drains in rounds: all control messages first, then the
// input-acks, one channel's turn (in the order they became ready, one
// batch per channel at a time, so every channel gets its turn) and one
// relayed frame. A channel's attached answer is queued before the channel
// is ready, and
// control messages are drained again before a batch is written: a client
// must never receive output of a channel it does not know yet.

func (c *conn) currentClaims() auth.Claims {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims
}
