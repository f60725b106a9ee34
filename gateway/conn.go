package gateway

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// conn is one WebSocket connection: its read loop (readloop.go), its
// requests (handlers.go) and its channels. It delegates writing to its
// writer (writer.go) and, on a node of a cluster, the channels of other
// nodes' executions to its relay (cluster_relay.go). Its goroutines: the
// read loop (serve, on a goroutine of its own: serveConn; none while the
// connection is parked, and a new one each time it resumes), the
// writer's short-lived flushers, the heartbeat's and the expiry's timers
// while they fire (heartbeat.go), and the relay's reader and pinger per
// upstream; the read loop's end (finish) waits for all of them.
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

	w     writer                   // the write side (writer.go)
	relay *relay                   // the channels of other nodes' executions; nil on a single node (cluster_relay.go)
	fwd   atomic.Pointer[forwards] // the forward streams, made by the first forward (forward.go)
	calls agentCalls               // exec and write requests waiting (agentexec_ws.go)

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
	hop     bool          // a verified hop's connection: served here only, never relayed (cluster_connect.go)
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
	c.w.c = c
	c.w.inputAcks.pending = map[uint32]*wire.Message{}
	c.w.control.max, c.w.control.maxSub = s.cfg.MaxQueuedBytes, s.cfg.MaxQueuedBytesPerSubject
	c.w.writing.Store(true) // serve writes the hello first
	return c
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
	if ae := (*apiError)(nil); errors.As(err, &ae) {
		return code, ae.msg
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

// finishChannel ends ch once: the writer's after the channel's end, or
// serve's for the channels left when the connection ends.
func (c *conn) finishChannel(ch *channel) {
	if ch.finished {
		return
	}
	ch.finished = true
	ch.queued.Store(true) // never queued again
	c.mu.Lock()
	watching := ch.ports
	c.mu.Unlock()
	if watching {
		c.s.ports.unwatch(ch, c.currentClaims().Tenant)
	}
	ch.sub.StopNotify()
	c.auditDetach(ch)
	ch.sub.Close()
	ch.detach()
	c.dropChannel(ch.id)
	c.mu.Lock()
	delete(c.open, ch)
	c.mu.Unlock()
	c.s.closeChannel()
}

// finishChannels ends the channels left when the connection ends, once
// no goroutine writes any more.
func (c *conn) finishChannels() {
	c.mu.Lock()
	left := slices.Collect(maps.Keys(c.open))
	c.mu.Unlock()
	for _, ch := range left {
		c.finishChannel(ch)
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
