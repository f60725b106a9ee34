package gateway

import (
	"bufio"
	"context"
	"encoding/json"
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
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// controlQueue bounds the control messages waiting for the writer. A
// client that floods requests without reading the answers is closed.
const controlQueue = 256

// conn is one WebSocket connection. Its goroutines: the read loop (serve,
// on a goroutine of its own: serveConn; none while the connection is
// parked, and a new one each time it resumes), a short-lived flusher
// while the read loop, a timer or a channel's ring has something written
// (flush), the heartbeat's and the expiry's timers while they fire, and a
// reader and a pinger per relay upstream (relay.go); the read loop's end
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
	next     uint32
	expiry   *time.Timer
	warning  *time.Timer

	control   controlMessages // answers and events for the writer, FIFO, bounded
	ready     readyQueue      // channels with a turn at the writer, FIFO: fair
	inputAcks inputAcks       // input-acks waiting for the writer, at most one per channel
	// open are the channels not finished yet, attached or detached
	// (finishChannel); serve finishes those left.
	open     map[*channel]struct{}
	nb       *nbConn        // the socket's writer that never blocks, nil on TLS (nbconn.go)
	raw      net.Conn       // the hijacked connection, for linger (hijack.go)
	br       *bufio.Reader  // the WebSocket's reader of raw (hijack.go)
	writing  atomic.Bool    // a goroutine is writing (flush)
	wants    atomic.Uint64  // work queued for the writer, counted (flush)
	flushers sync.WaitGroup // the goroutines kick started
	// flushersMu guards flushersDone: serve waits for the flushers, and
	// kick starts none after that.
	flushersMu   sync.Mutex
	flushersDone bool

	// readGate orders awaitMessage's look at the WebSocket's reader before
	// a close handshake, which reads on a goroutine of its own.
	readGate sync.Mutex

	beat         heartbeat
	closeOnce    sync.Once
	closeStarted chan struct{} // closed when close was called, under readGate
	closeCode    atomic.Int32  // the code this side closed with, once it did
	started      time.Time
	remote       string        // the client's address
	hop          bool          // a verified hop's connection: served here only, never relayed (route_connect.go)
	bytesIn      atomic.Uint64 // message bytes read
	bytesOut     atomic.Uint64 // message bytes written
	closed       chan struct{} // closed when a close handshake we started ended
	unwatch      func() bool   // stops the watch on c.ctx that closes the socket (serve)
	ended        func()        // the server's, once the connection ended (serveConn)

	// The relay's (relay.go): channels on executions of other nodes, one
	// upstream per owner node, and their FIFO into the writer. The maps
	// are made with the first upstream, the FIFO with the first frame
	// queued (relayFIFO): most connections never relay.
	token   string // the raw bearer, for upstream dials and reauth; never logged
	relayed map[uint32]*relayChannel
	ups     map[string]*upstream
	relayQ  atomic.Pointer[relayQueue] // nil until a frame is first queued
	relays  sync.WaitGroup             // the upstreams' goroutines
}

// heartbeat is a connection's ping timer (startHeartbeat).
type heartbeat struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool           // stopHeartbeat was called: arm no more
	running sync.WaitGroup // the armed timer, or its ping under way
}

func newConn(s *Server, ws *websocket.Conn, claims auth.Claims, remote string) *conn {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &conn{
		s: s, ws: ws, ctx: ctx, cancel: cancel, claims: claims,
		log:          s.log.With("remote_addr", remote, "tenant", claims.Tenant, "subject", claims.Subject),
		remote:       remote,
		channels:     map[uint32]*channel{},
		open:         map[*channel]struct{}{},
		inputAcks:    inputAcks{pending: map[uint32]*wire.Message{}},
		closed:       make(chan struct{}),
		closeStarted: make(chan struct{}),
		started:      time.Now(),
	}
	c.control.max, c.control.maxSub = s.cfg.MaxQueuedBytes, s.cfg.MaxQueuedBytesPerSubject
	c.writing.Store(true) // serve writes the hello first
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
	c.writeJSON(c.s.hello()) // a failure cancels c.ctx, which ends the read loop
	c.writing.Store(false)   // held since newConn, so that the hello goes first
	c.flush()
	c.startHeartbeat()
	c.armExpiry()
	c.log.Info("connected")
}

// finish tears the connection down once its read loop ended with err.
func (c *conn) finish(err error) {
	// Let a close handshake we started finish before cancelling: a write
	// cancelled mid-flight would drop the connection without its code.
	c.closeOnce.Do(func() { close(c.closed) }) // nobody started one
	<-c.closed
	c.cancel(err)
	c.stopExpiry()
	c.stopHeartbeat()
	c.stopInputAcks()
	c.closeUpstreams()
	c.waitFlushers()
	c.control.dropAll() // nothing more is written: the subject's budget gets its bytes back
	c.finishChannels()
	if errors.Is(err, websocket.ErrMessageTooBig) {
		linger(c.raw)
	}
	c.ws.CloseNow()
	code := int(c.closeCode.Load())
	if code == 0 {
		code = readCloseCode(err) // the client's, 1009 for a message too big, or -1 (metrics.go)
	}
	c.s.metrics.connClosed(code)
	c.log.Info("disconnected", "close_code", code, "duration", time.Since(c.started).Seconds(),
		"bytes_in", c.bytesIn.Load(), "bytes_out", c.bytesOut.Load(), "err", err)
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
			if c.nb.park(c.read) {
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
	if c.nb != nil && c.nb.idle > 0 {
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
	if c.nb == nil {
		return c.ws.Read(ctx)
	}
	if c.awaitMessage() {
		return 0, nil, errIdle
	}
	c.nb.mayIdle.Store(true)
	defer c.nb.mayIdle.Store(false)
	return c.ws.Read(ctx)
}

// awaitMessage waits for the client's next bytes (nbConn.awaitInput),
// unless the WebSocket's reader already holds some or a close handshake
// started (it reads the reader then). True when none came for the idle
// period: the read loop parks the connection.
func (c *conn) awaitMessage() (idle bool) {
	if c.nb == nil || c.br == nil {
		return false
	}
	c.readGate.Lock()
	wait := !c.closing() && c.br.Buffered() == 0
	c.readGate.Unlock()
	return wait && c.nb.awaitInput()
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
	if !c.control.add(m) {
		if c.ctx.Err() == nil {
			c.close(wire.CloseLimit, "control messages not read")
		}
		return
	}
	c.kick()
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
	case <-c.closeStarted:
		return true
	default:
		return false
	}
}

// close starts the close handshake once with code; the read loop ends
// when it completes (the library bounds it in time).
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.readGate.Lock()
		close(c.closeStarted)
		if c.nb != nil {
			// The handshake reads the client's answer, maybe while the
			// read loop is in the WebSocket's Read: it must wait for
			// it, not take the idle deadline as the client idle.
			c.nb.noIdle.Store(true)
		}
		c.readGate.Unlock()
		c.closeCode.Store(int32(code))
		c.log.Info("closing", "code", int(code), "reason", reason)
		go func() {
			defer close(c.closed)
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

// flush writes what waits unless another goroutine is writing, which
// then writes it. Before flush, the caller queued its work and counted it
// in wants: a writer that finishes re-checks wants, so nothing queued is
// left behind.
func (c *conn) flush() {
	for c.writing.CompareAndSwap(false, true) {
		seen := c.wants.Load()
		ok := c.drain()
		c.writing.Store(false)
		if !ok || c.wants.Load() == seen {
			return
		}
	}
}

// want counts work queued for the writer; call flush or kick after it.
func (c *conn) want() { c.wants.Add(1) }

// kick has what waits written without waiting on the client: on the
// caller's goroutine when the socket's writer never blocks (nb), else
// from a new goroutine; neither when one is writing already.
func (c *conn) kick() {
	c.want()
	if c.writing.Load() {
		return // it re-checks wants when it is done
	}
	c.flushersMu.Lock()
	if c.flushersDone {
		c.flushersMu.Unlock()
		return // serve returns: nothing more is written
	}
	c.flushers.Add(1)
	c.flushersMu.Unlock()
	if c.nb != nil {
		defer c.flushers.Done()
		c.flush()
		return
	}
	go func() {
		defer c.flushers.Done()
		c.flush()
	}()
}

// useNonBlocking has the connection write through nb, when it has one:
// kick then flushes inline, and a writer that finds nb congested leaves
// the rest for nb's backlog goroutine, which resumes once it is written.
func (c *conn) useNonBlocking(nb *nbConn) {
	if nb == nil {
		return
	}
	c.nb = nb
	nb.idle = c.s.cfg.parkAfter
	nb.notify(c.kick, c.stalled)
}

// stalled is nb's backlog not taken within the write timeout: as a
// frame's write past it, the client is closed as too slow.
func (c *conn) stalled(err error) {
	c.close(websocket.StatusTryAgainLater, "client too slow")
	c.cancel(err)
}

// waitFlushers waits for the flushers kick started; it starts no more.
func (c *conn) waitFlushers() {
	c.flushersMu.Lock()
	c.flushersDone = true
	c.flushersMu.Unlock()
	c.flushers.Wait()
}

// drain writes in rounds until nothing waits; false when the connection
// ended, a write failed or a close started: the close frame follows what
// was written, and the rest waits in the rings for the client's resume.
func (c *conn) drain() bool {
	for {
		if c.ctx.Err() != nil || c.closing() {
			return false
		}
		if c.nb != nil && c.nb.congested() {
			return true // the backlog's goroutine kicks once it wrote it
		}
		if !c.writeControl() {
			return false
		}
		wrote := false
		if msgs := c.inputAcks.take(); len(msgs) > 0 {
			wrote = true
			if !c.writeInputAcks(msgs) {
				return false
			}
		}
		if ch := c.ready.pop(); ch != nil {
			wrote = true
			if !c.writeControl() || !c.serveChannel(ch) {
				return false
			}
		}
		if q := c.relayQ.Load(); q != nil {
			select {
			case f := <-q.out:
				wrote = true
				if !c.writeControl() || !c.writeRelayed(q, f) {
					return false
				}
			default:
			}
		}
		if !wrote {
			return true
		}
	}
}

// writeControl writes the control messages queued now.
func (c *conn) writeControl() bool {
	ms := c.control.take()
	if ms == nil {
		return true
	}
	defer c.control.done(ms)
	for i := range *ms {
		if i > 0 && c.nb != nil && c.nb.congested() {
			// The rest waits here, counted against the budgets, rather
			// than in nb's backlog; the backlog's goroutine kicks.
			c.control.putBack((*ms)[i:])
			return true
		}
		m := &(*ms)[i]
		ok := true
		if m.raw != nil {
			ok = c.write(websocket.MessageText, m.raw)
		} else {
			ok = c.writeJSON(m.m)
		}
		c.control.wrote(m)
		if !ok {
			c.control.abandon((*ms)[i+1:]) // never written: off the budgets
			return false
		}
	}
	return true
}

// write writes one message. Through nb it cannot block, so it needs no
// deadline (nb's backlog has one); otherwise the write timeout bounds it.
// A client too slow for either is closed with 1013.
func (c *conn) write(typ websocket.MessageType, b []byte) bool {
	c.bytesOut.Add(uint64(len(b)))
	var err error
	if c.nb != nil {
		err = c.ws.Write(context.Background(), typ, b)
	} else {
		ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.WriteTimeout)
		err = c.ws.Write(ctx, typ, b)
		cancel()
	}
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errBacklogStalled):
			c.close(websocket.StatusTryAgainLater, "client too slow")
		case c.closing() && errors.Is(err, net.ErrClosed):
			// The close frame went first. Cancelling would end the
			// handshake and drop the backlog ahead of it; the handshake
			// ends the connection.
			return false
		}
		c.cancel(err)
		return false
	}
	return true
}

func (c *conn) writeJSON(m wire.Message) bool {
	b, err := json.Marshal(m)
	if err != nil {
		c.log.Error("encode message", "err", err)
		return true
	}
	return c.write(websocket.MessageText, b)
}

// writeBatch writes a batch read from a channel's subscription.
func (c *conn) writeBatch(ch *channel, b batch) bool {
	if b.gap != nil {
		ch.sent.Store(b.gap.To - 1)
		return c.writeJSON(wire.Message{Type: wire.MsgGap, Channel: ch.id, From: b.gap.From, To: b.gap.To,
			Bytes: b.gap.Bytes, Inexact: b.gap.Inexact, Cause: ch.sub.LossCause()})
	}
	if n := len(b.events); n > 0 {
		ch.sent.Store(b.events[n-1].Seq) // before the client can ack it
	}
	frame := framePool.Get().(*[]byte)
	defer framePool.Put(frame)
	for _, ev := range b.events {
		if ev.Kind == replay.KindOutput {
			*frame = wire.AppendOutputHeader((*frame)[:0], ch.id, ev.Seq, uint8(ev.Stream), ev.Offset, len(ev.Data))
			*frame = append(*frame, ev.Data...)
			if !c.write(websocket.MessageBinary, *frame) {
				return false
			}
			continue
		}
		if !c.writeJSON(eventMessage(ch.id, ev)) {
			return false
		}
	}
	return true
}

// framePool holds the writers' output frame buffers between batches: a
// connection holds one only while it writes, not while it is idle.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// eventMessage turns a ring event other than output into its message.
func eventMessage(channel uint32, ev replay.Event) wire.Message {
	m := wire.Message{Type: wire.MsgEvent, Channel: channel, Seq: ev.Seq, Event: ev.Kind.String()}
	switch ev.Kind {
	case replay.KindStarted, replay.KindResize:
		m.Rows, m.Cols = int(ev.Rows), int(ev.Cols)
	case replay.KindSignal:
		m.Signal = signalName(ev.Signal)
	case replay.KindNotice:
		m.Reason, m.Message, m.At = ev.Notice.Reason, ev.Notice.Message, noticeTime(ev.Notice.At)
	case replay.KindExit:
		m.Type, m.Event = wire.MsgExit, ""
		code := ev.Exit.Code
		m.Code, m.Reason = &code, ev.Exit.Reason
		m.Signal = signalName(ev.Exit.Signal)
	}
	return m
}

// noticeTime is a notice's At as the wire gives it: RFC 3339 in UTC, or
// "" when nothing is due.
func noticeTime(at time.Time) string {
	if at.IsZero() {
		return ""
	}
	return at.UTC().Format(time.RFC3339)
}

// startHeartbeat pings every PingInterval from a timer, not a goroutine
// of its own: an idle connection holds no stack for it. No pong within
// PongTimeout closes the connection. stopHeartbeat ends it.
func (c *conn) startHeartbeat() {
	c.beat.mu.Lock()
	defer c.beat.mu.Unlock()
	c.beat.running.Add(1) // the armed timer's; its ping or a Stop ends it
	c.beat.timer = time.AfterFunc(c.s.cfg.PingInterval, c.ping)
}

// ping is one heartbeat: it pings, then arms the next unless the
// connection is ending.
func (c *conn) ping() {
	defer c.beat.running.Done()
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.PongTimeout)
	err := c.ws.Ping(ctx)
	cancel()
	if err != nil && c.ctx.Err() == nil {
		c.close(wire.CloseHeartbeatTimeout, "no pong")
		return
	}
	c.beat.mu.Lock()
	defer c.beat.mu.Unlock()
	if !c.beat.stopped && c.ctx.Err() == nil {
		c.beat.running.Add(1)
		c.beat.timer.Reset(c.s.cfg.PingInterval)
	}
}

// stopHeartbeat stops the timer and waits for a ping under way (its
// context ends with the connection's).
func (c *conn) stopHeartbeat() {
	c.beat.mu.Lock()
	c.beat.stopped = true
	if c.beat.timer.Stop() {
		c.beat.running.Done() // it will not fire
	}
	c.beat.mu.Unlock()
	c.beat.running.Wait()
}

// armExpiry warns the client AuthWarning before its token stops being
// valid and closes with CloseAuthExpired then (at exp plus the leeway,
// when a new connection would be refused too), unless a reauth moved it.
func (c *conn) armExpiry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopExpiryLocked()
	exp, until := c.claims.ExpiresAt, c.claims.ValidUntil
	if until.Before(exp) {
		until = exp
	}
	left := time.Until(until)
	c.warning = time.AfterFunc(left-c.s.cfg.AuthWarning, func() {
		c.send(wire.Message{Type: wire.MsgAuthExpiring, ExpiresAt: exp.UTC().Format(time.RFC3339)})
	})
	c.expiry = time.AfterFunc(left, func() { c.close(wire.CloseAuthExpired, "token expired") })
}

func (c *conn) stopExpiry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopExpiryLocked()
}

func (c *conn) stopExpiryLocked() {
	if c.warning != nil {
		c.warning.Stop()
		c.expiry.Stop()
	}
}

func (c *conn) currentClaims() auth.Claims {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims
}
