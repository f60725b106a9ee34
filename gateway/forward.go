package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/fdio"
)

// ScopeForward lets a token open forward streams to the ports programs
// listen on in its tenant's executions. exec:write does not imply it: a
// port reaches whatever the program serves there.
const ScopeForward = "exec:forward"

// Forward streams' bounds.
const (
	// ForwardWindow is how many bytes either side may send on a stream
	// ahead of the other's credit (forward-ack): what a stream holds in
	// the server, each way, at most.
	ForwardWindow = 1 << 20
	// MaxStreams bounds the forward streams open on one connection.
	MaxStreams = 32
	// forwardChunk is the most bytes of one forward frame the server
	// sends.
	forwardChunk = 128 << 10
	// forwardDialTimeout bounds the connect to a port.
	forwardDialTimeout = 10 * time.Second
)

// Audit events of forward streams.
const (
	eventForward    = wire.TypeForward
	eventForwardEnd = wire.MsgForwardEnd
)

// forwards are a connection's forward streams: each a TCP connection
// made from the host to a port on an execution's loopback
// (session.Ports), its bytes carried in forward frames, each way within
// ForwardWindow of the other side's credit, so that a stream whose
// reader is slow waits alone: the program's writes wait, and no
// terminal or other stream on the connection does. Made on the first
// forward request.
type forwards struct {
	c *conn

	mu      sync.Mutex
	streams map[uint32]*stream
	next    uint32 // the last stream number given
	opening int    // streams being connected
	closed  bool
	queue   []forwardFrame // for the writer, in order
	wg      sync.WaitGroup
}

// forwardFrame is one message of a stream for the writer: a forward
// frame of a pooled buffer, or a control message that must follow the
// stream's frames (forward-eof, forward-end).
type forwardFrame struct {
	b   *[]byte // a binary frame, given back once written
	n   int     // its length
	msg *wire.Message
	s   *stream // the binary frame's stream
	end uint64  // and the offset of the stream its bytes end at
}

// forwardsOf returns the connection's forwards, made on first use.
func (c *conn) forwardsOf() *forwards {
	if f := c.fwd.Load(); f != nil {
		return f
	}
	c.fwd.CompareAndSwap(nil, &forwards{c: c, streams: map[uint32]*stream{}})
	return c.fwd.Load()
}

// forwardsNow returns the connection's forwards, nil before the first
// forward.
func (c *conn) forwardsNow() *forwards { return c.fwd.Load() }

// forward opens a stream to req.Port of execution req.ID.
func (c *conn) forward(req wire.Request) {
	if !c.need(req, ScopeForward) {
		return
	}
	f := c.forwardsOf()
	f.mu.Lock()
	if f.closed || len(f.streams)+f.opening >= MaxStreams {
		f.mu.Unlock()
		c.fail(req, 0, wire.CodeTooManyStreams, "the connection has as many forward streams open as it may")
		return
	}
	f.opening++
	f.wg.Add(1)
	f.mu.Unlock()
	go func() { // the connect must not hold the read loop
		defer f.wg.Done()
		f.open(req)
	}()
}

// open connects a stream and answers forwarded, or the refusal.
func (f *forwards) open(req wire.Request) {
	c := f.c
	claims := c.currentClaims()
	ctx, cancel := context.WithTimeout(c.ctx, forwardDialTimeout)
	target, err := c.s.cfg.Supervisor.Ports().Dial(ctx, claims.Tenant, req.ID, uint16(req.Port))
	cancel()
	f.mu.Lock()
	f.opening--
	if err == nil && f.closed {
		target.Close()
		err = context.Cause(c.ctx)
	}
	if err != nil {
		f.mu.Unlock()
		c.s.metrics.forwardOpened(false)
		c.failErr(req, 0, err)
		return
	}
	f.next++
	s := &stream{f: f, id: f.next, port: req.Port, exec: req.ID, target: target, credit: ForwardWindow,
		pace: newPace(), wake: make(chan struct{}, 1), inWake: make(chan struct{}, 1)}
	f.mu.Unlock()
	if !c.auditForward(eventForward, s, "") {
		target.Close()
		c.unavailable(req, 0)
		return
	}
	f.mu.Lock()
	f.streams[s.id] = s
	f.wg.Add(2)
	f.mu.Unlock()
	c.s.metrics.forwardOpened(true)
	// forwarded is queued before the stream's first frame can be.
	c.send(wire.Message{Type: wire.MsgForwarded, Req: req.Req, Stream: s.id, ID: req.ID, Port: req.Port, Window: ForwardWindow})
	go func() {
		defer f.wg.Done()
		s.toClient()
	}()
	go func() {
		defer f.wg.Done()
		s.toPort()
	}()
}

// number gives a stream number, for a stream a relay serves from
// another node: local and relayed streams share the connection's
// numbering.
func (f *forwards) number() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return f.next
}

// stream returns an open stream.
func (f *forwards) stream(id uint32) (*stream, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.streams[id]
	return s, ok
}

// push queues a message of a stream for the writer.
func (f *forwards) push(fr forwardFrame) {
	f.mu.Lock()
	f.queue = append(f.queue, fr)
	f.mu.Unlock()
	f.c.w.kick()
}

// queued reports whether a message of a stream waits for the writer:
// only then does the writer look for room for it in the socket.
func (f *forwards) queued() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue) > 0
}

// pop takes the writer's next forward message, if any.
func (f *forwards) pop() (forwardFrame, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) == 0 {
		return forwardFrame{}, false
	}
	fr := f.queue[0]
	f.queue[0] = forwardFrame{}
	f.queue = f.queue[1:]
	if len(f.queue) == 0 {
		f.queue = nil // let the array go
	}
	return fr, true
}

// close ends every stream and waits for their goroutines: the
// connection is gone.
func (f *forwards) close() {
	f.mu.Lock()
	f.closed = true
	streams := make([]*stream, 0, len(f.streams))
	for _, s := range f.streams {
		streams = append(streams, s)
	}
	f.mu.Unlock()
	for _, s := range streams {
		s.cancel(wire.ForwardCancelled)
	}
	f.wg.Wait()
	f.mu.Lock()
	for _, fr := range f.queue {
		if fr.b != nil {
			forwardBuffers.Put(fr.b)
		}
	}
	f.queue = nil
	f.mu.Unlock()
}

// forwardInput takes a forward frame from the client, b within the
// read loop's buffer held, which it gives back or hands on.
func (c *conn) forwardInput(b []byte, held *bytes.Buffer) {
	id, data, err := wire.DecodeForward(b)
	if err != nil {
		giveBack(held)
		c.close(wire.CloseProtocolError, "malformed forward frame")
		return
	}
	if c.relay != nil && c.relay.forwardFrame(b, id) {
		giveBack(held)
		return
	}
	if f := c.forwardsNow(); f != nil {
		if s, ok := f.stream(id); ok {
			s.fromClient(data, held)
			return
		}
	} // else: the stream ended meanwhile; its bytes have nowhere to go
	giveBack(held)
}

// carriesChannels reports whether the connection has channels open: a
// stream's frames then pass before their messages.
func (c *conn) carriesChannels() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.channels) > 0
}

// forwardAck gives a stream credit.
func (c *conn) forwardAck(req wire.Request) {
	f := c.forwardsNow()
	if f == nil {
		return
	}
	if s, ok := f.stream(req.Stream); ok {
		s.addCredit(req.Bytes)
	}
}

// forwardClose ends what the client sends on a stream, or resets it.
func (c *conn) forwardClose(req wire.Request) {
	f := c.forwardsNow()
	if f == nil {
		return
	}
	s, ok := f.stream(req.Stream)
	switch {
	case !ok:
	case req.Reset:
		s.cancel(wire.ForwardCancelled)
	default:
		s.closeIn()
	}
}

// stream is one forward stream: the connection to the port and its two
// ways, each on a goroutine of its own.
type stream struct {
	f      *forwards
	id     uint32
	port   int
	exec   string
	target net.Conn

	mu       sync.Mutex
	credit   int       // bytes the server may still send to the client
	pace     pace      // and how many of them it may have in flight
	in       []inFrame // from the client, for the port
	inBytes  int
	inClosed bool   // the client sends no more
	reason   string // why it ends, when it ends other than closed
	ways     int    // the ways that ended (2: the stream is over)
	wake     chan struct{}
	inWake   chan struct{}
	up, down atomic.Uint64
}

// toClient reads the port and sends what it reads, within the client's
// credit; at the port's end it sends forward-eof.
func (s *stream) toClient() {
	for {
		n := s.waitCredit()
		if n == 0 {
			break
		}
		bp, k, err := readReady(s.target, min(n, forwardChunk))
		if k > 0 {
			(*bp)[0] = wire.FrameForward
			binary.BigEndian.PutUint32((*bp)[1:wire.ForwardHeaderLen], s.id)
			s.mu.Lock()
			s.credit -= k
			s.mu.Unlock()
			end := s.down.Add(uint64(k))
			s.f.c.s.metrics.forwardBytes("down", k)
			s.f.push(forwardFrame{b: bp, n: wire.ForwardHeaderLen + k, s: s, end: end})
		} else if bp != nil {
			forwardBuffers.Put(bp)
		}
		if errors.Is(err, io.EOF) {
			s.f.push(forwardFrame{msg: &wire.Message{Type: wire.MsgForwardEOF, Stream: s.id}})
			break
		}
		if err != nil {
			s.cancel(wire.ForwardReset)
			break
		}
	}
	s.wayEnded()
}

// waitCredit waits until the stream may send, within the client's
// credit and its pace; 0 once it is cancelled.
func (s *stream) waitCredit() int {
	for {
		s.mu.Lock()
		room, over := s.credit-(ForwardWindow-s.pace.limit), s.reason != ""
		s.mu.Unlock()
		switch {
		case over:
			return 0
		case room > 0:
			return room
		}
		<-s.wake
	}
}

// addCredit takes the client's forward-ack: never more than the window.
func (s *stream) addCredit(n uint64) {
	shared := s.f.c.carriesChannels()
	s.mu.Lock()
	s.credit = int(min(uint64(s.credit)+n, ForwardWindow))
	s.pace.acknowledged(n, time.Now(), shared)
	s.mu.Unlock()
	signal(s.wake)
}

// written notes a frame of the stream written to the client.
func (s *stream) written(end uint64) {
	s.mu.Lock()
	s.pace.written(end, time.Now())
	s.mu.Unlock()
}

// inFrame is a forward frame's bytes from the client, in the read
// loop's buffer held until the port has them.
type inFrame struct {
	data []byte
	held *bytes.Buffer
}

// fromClient queues the client's bytes, data within the read loop's
// buffer held, for the port; past the window the client broke the
// protocol, and the stream is reset.
func (s *stream) fromClient(data []byte, held *bytes.Buffer) {
	s.mu.Lock()
	if s.inClosed || s.reason != "" {
		s.mu.Unlock()
		giveBack(held)
		return
	}
	if s.inBytes+len(data) > ForwardWindow {
		s.mu.Unlock()
		giveBack(held)
		s.cancel(wire.ForwardWindow)
		return
	}
	s.in = append(s.in, inFrame{data, held})
	s.inBytes += len(data)
	s.mu.Unlock()
	signal(s.inWake)
}

// closeIn takes the client's half-close.
func (s *stream) closeIn() {
	s.mu.Lock()
	s.inClosed = true
	s.mu.Unlock()
	signal(s.inWake)
}

// toPort writes the client's bytes to the port and gives the client
// credit for each; at the client's half-close it shuts the port's
// connection for writing.
func (s *stream) toPort() {
	for {
		in, ok := s.nextIn()
		if !ok {
			break
		}
		_, err := s.target.Write(in.data)
		giveBack(in.held)
		if err != nil {
			s.cancel(wire.ForwardReset)
			break
		}
		n := len(in.data)
		s.mu.Lock()
		s.inBytes -= n
		s.mu.Unlock()
		s.up.Add(uint64(n))
		s.f.c.s.metrics.forwardBytes("up", n)
		s.f.c.send(wire.Message{Type: wire.MsgForwardAck, Stream: s.id, Bytes: uint64(n)})
	}
	s.wayEnded()
}

// nextIn waits for the client's next bytes; false at its half-close
// (the port's connection is then shut for writing) or the stream's end.
func (s *stream) nextIn() (inFrame, bool) {
	for {
		s.mu.Lock()
		switch {
		case s.reason != "":
			s.mu.Unlock()
			return inFrame{}, false
		case len(s.in) > 0:
			in := s.in[0]
			s.in[0] = inFrame{}
			if s.in = s.in[1:]; len(s.in) == 0 {
				s.in = nil // let the array go
			}
			s.mu.Unlock()
			return in, true
		case s.inClosed:
			s.mu.Unlock()
			if tc, ok := s.target.(interface{ CloseWrite() error }); ok {
				tc.CloseWrite()
			}
			return inFrame{}, false
		}
		s.mu.Unlock()
		<-s.inWake
	}
}

// cancel ends both ways for reason (the first one given stands).
func (s *stream) cancel(reason string) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason = reason
	}
	s.mu.Unlock()
	s.target.Close() // ends a read or write under way
	signal(s.wake)
	signal(s.inWake)
}

// wayEnded counts a way's end; the second ends the stream: it is
// forgotten, its connection closed, and forward-end sent after its
// frames.
func (s *stream) wayEnded() {
	s.mu.Lock()
	s.ways++
	last, reason := s.ways == 2, s.reason
	s.mu.Unlock()
	if !last {
		return
	}
	s.target.Close()
	f := s.f
	f.mu.Lock()
	delete(f.streams, s.id)
	f.mu.Unlock()
	if reason == "" {
		reason = wire.ForwardClosed
	}
	f.c.auditForward(eventForwardEnd, s, reason)
	if reason != wire.ForwardCancelled || !f.isClosed() {
		f.push(forwardFrame{msg: &wire.Message{Type: wire.MsgForwardEnd, Stream: s.id, Reason: reason, Up: s.up.Load(), Down: s.down.Load()}})
	}
}

func (f *forwards) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// signal wakes a waiter on c, a channel of one, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// forwardBuffers hold forward frames: a header's room and forwardChunk.
var forwardBuffers = sync.Pool{New: func() any { b := make([]byte, wire.ForwardHeaderLen+forwardChunk); return &b }}

// readReady reads at most n bytes of c into a pooled frame buffer taken
// only once c has bytes (an idle stream holds no buffer), past the room
// of the frame's header; it returns the buffer (possibly nil when
// nothing was read) and the bytes read.
func readReady(c net.Conn, n int) (*[]byte, int, error) {
	sc, ok := c.(syscall.Conn)
	var rc syscall.RawConn
	var err error
	if ok {
		rc, err = sc.SyscallConn()
	}
	if !ok || err != nil {
		bp := forwardBuffers.Get().(*[]byte)
		k, err := c.Read((*bp)[wire.ForwardHeaderLen : wire.ForwardHeaderLen+n])
		return bp, k, err
	}
	bp, k, err := fdio.ReadReady(rc, &forwardBuffers, wire.ForwardHeaderLen, wire.ForwardHeaderLen+n)
	if err == nil && k == 0 {
		err = io.EOF
	}
	return bp, k, err
}

// writeForward writes a stream's message.
func (w *writer) writeForward(fr forwardFrame) bool {
	if fr.msg != nil {
		return w.writeJSON(*fr.msg)
	}
	defer forwardBuffers.Put(fr.b)
	if !w.write(websocket.MessageBinary, (*fr.b)[:fr.n]) {
		return false
	}
	fr.s.written(fr.end)
	return true
}

// apiPort is one socket GET /v1/executions/{id}/ports lists.
type apiPort struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
}

// getPorts lists the TCP ports an execution's programs listen on.
func (a *httpAPI) getPorts(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	l, err := a.s.cfg.Supervisor.Ports().Listening(c.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	ports := make([]apiPort, 0, len(l))
	for _, ap := range l {
		ports = append(ports, apiPort{Address: ap.Addr().String(), Port: ap.Port()})
	}
	a.respond(w, http.StatusOK, struct {
		Ports []apiPort `json:"ports"`
	}{ports})
	return nil
}

// auditForward records a stream opened (reason "") or ended, with its
// bytes each way; false: the record could not be written, and a stream
// is not to be opened.
func (c *conn) auditForward(event string, s *stream, reason string) bool {
	if c.s.cfg.Audit == nil {
		return true
	}
	r := c.who(event)
	r.Execution, r.Port, r.Reason = clip(s.exec, auditMaxID), uint16(s.port), reason
	if reason != "" {
		up, down := s.up.Load(), s.down.Load()
		r.BytesUp, r.BytesDown = &up, &down
	}
	return c.s.cfg.Audit.Record(r) == nil
}
