package gatewaytest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// ScriptTimeout bounds every wait of a Scripted server: for a connection,
// for what a client sends. It is a bound for a loaded machine, not a
// measure of speed.
const ScriptTimeout = 20 * time.Second

// Scripted is a WebSocket server on 127.0.0.1 that speaks the subprotocol
// termgate.v1 and nothing else on its own: a test accepts each connection
// and plays the gateway step by step, sending messages and frames and
// reading what the client sent. Its methods that wait call t.Fatal on a
// timeout, so they belong to the test's goroutine.
type Scripted struct {
	// URL is the server's base URL, http://127.0.0.1:port, as a client's
	// Config.URL wants it; any path is accepted.
	URL string

	addr  string // host:port, kept across Down and Up
	conns chan *ScriptConn

	mu       sync.Mutex
	srv      *http.Server  // nil while down
	served   chan struct{} // closed when srv's Serve returned
	all      []*ScriptConn
	handlers sync.WaitGroup
}

// NewScripted starts a scripted server that stops when the test ends.
func NewScripted(t testing.TB) *Scripted {
	t.Helper()
	s := &Scripted{conns: make(chan *ScriptConn, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("scripted server: %v", err)
	}
	s.addr = ln.Addr().String()
	s.URL = "http://" + s.addr
	s.listen(ln)
	t.Cleanup(s.close)
	return s
}

// listen serves ln.
func (s *Scripted) listen(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: ScriptTimeout}
	served := make(chan struct{})
	s.mu.Lock()
	s.srv, s.served = srv, served
	s.mu.Unlock()
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
}

// Down stops the server as a gateway that went away: every connection
// is dropped and dials are refused until Up. Down twice is harmless.
func (s *Scripted) Down() {
	s.mu.Lock()
	srv, served, all := s.srv, s.served, s.all
	s.srv, s.all = nil, nil
	s.mu.Unlock()
	for _, c := range all {
		c.stop()
	}
	if srv != nil {
		srv.Close()
		<-served
	}
}

// Up serves again on the same address, as a restarted gateway would.
func (s *Scripted) Up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after Down
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("scripted server: listen again on %s: %v", s.addr, err)
	}
	s.listen(ln)
}

// serve accepts one WebSocket and keeps it until the script or the
// client closes it.
func (s *Scripted) serve(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{wire.Subprotocol}})
	if err != nil {
		return
	}
	ws.SetReadLimit(64 << 20)
	c := &ScriptConn{ws: ws, Header: r.Header.Clone(), frames: make(chan scriptFrame, 1024), done: make(chan struct{}), quit: make(chan struct{})}
	s.mu.Lock()
	s.all = append(s.all, c)
	s.mu.Unlock()
	s.conns <- c
	c.read() // until the connection ends
}

// close drops every connection and stops the server.
func (s *Scripted) close() {
	s.Down()
	s.handlers.Wait()
}

// stop ends the connection for good: its reader gives up.
func (c *ScriptConn) stop() {
	c.quitOnce.Do(func() { close(c.quit) })
	c.ws.CloseNow()
}

// Accept waits for the client's next connection.
func (s *Scripted) Accept(t testing.TB) *ScriptConn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(ScriptTimeout):
		t.Fatal("scripted server: no connection came")
		return nil
	}
}

// Hello is a hello as a server with every feature of acknowledged
// delivery sends it, with limits like the defaults.
func Hello() wire.Message {
	return wire.Message{Type: wire.MsgHello, Server: "termgate scripted", Protocol: 1,
		Features: []string{wire.FeatureAck, wire.FeatureInputAck, wire.FeatureSeen, wire.FeatureFlow},
		Limits: &wire.Bounds{MaxMessageBytes: 1 << 20, MaxChannels: 64, RingBytes: 1 << 20, RingEvents: 4096,
			HoldMS: 300_000, InputBufferBytes: 64 << 10, InputFrameBytes: 16 << 10, InputPerSecond: 1 << 20,
			PingIntervalMS: 15_000, PongTimeoutMS: 5_000, WriteTimeoutMS: 10_000, DefaultTimeoutMS: 120_000,
			RetentionMS: 900_000}}
}

// ScriptConn is one client connection to a Scripted server.
type ScriptConn struct {
	// Header is the upgrade request's header (Authorization, ...).
	Header http.Header

	ws     *websocket.Conn
	frames chan scriptFrame
	done   chan struct{} // closed when the connection ends
	quit   chan struct{} // closed when the server stops: read gives up

	quitOnce sync.Once
}

// scriptFrame is one message from the client: a request or an input
// frame, or what failed to decode.
type scriptFrame struct {
	req *wire.Request
	in  *wire.Input
	err error
	raw []byte
}

// read decodes the client's messages into frames until the connection
// ends. A client that sends more than the buffer holds without the
// script reading has the connection's reads wait, as a real server's
// would.
func (c *ScriptConn) read() {
	defer close(c.done)
	defer close(c.frames)
	for {
		typ, b, err := c.ws.Read(context.Background())
		if err != nil {
			return
		}
		f := scriptFrame{raw: b}
		if typ == websocket.MessageBinary {
			in, err := wire.DecodeInput(b)
			in.Data = append([]byte(nil), in.Data...)
			f.in, f.err = &in, err
		} else {
			r, err := wire.DecodeRequest(b)
			f.req, f.err = &r, err
		}
		select {
		case c.frames <- f:
		case <-c.quit:
			return
		}
	}
}

// Next returns the client's next message: a request or an input frame.
// It fails the test when what came does not decode, or nothing came.
func (c *ScriptConn) Next(t testing.TB) (*wire.Request, *wire.Input) {
	t.Helper()
	f, ok, timedOut := c.next(ScriptTimeout)
	switch {
	case timedOut:
		t.Fatal("scripted server: the client sent nothing")
	case !ok:
		t.Fatal("scripted server: the client closed the connection")
	}
	if f.err != nil {
		t.Fatalf("scripted server: the client sent %q: %v", f.raw, f.err)
	}
	return f.req, f.in
}

// Within returns the client's next message if one comes within d; ok is
// false when none came or the connection ended. For checks that the
// client sends nothing (meanwhile) or that it sends something (later).
func (c *ScriptConn) Within(t testing.TB, d time.Duration) (req *wire.Request, in *wire.Input, ok bool) {
	t.Helper()
	f, ok, _ := c.next(d)
	if !ok {
		return nil, nil, false
	}
	if f.err != nil {
		t.Fatalf("scripted server: the client sent %q: %v", f.raw, f.err)
	}
	return f.req, f.in, true
}

// next waits up to d for the client's next message; ok is false when
// none came, timedOut tells a timeout from the connection's end.
func (c *ScriptConn) next(d time.Duration) (f scriptFrame, ok, timedOut bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case f, ok := <-c.frames:
		return f, ok, false
	case <-timer.C:
		return scriptFrame{}, false, true
	}
}

// Request waits for the client's next request, skipping input frames
// and the requests of other types; types empty takes any. Input frames
// skipped are lost to the script.
func (c *ScriptConn) Request(t testing.TB, types ...string) wire.Request {
	t.Helper()
	deadline := time.Now().Add(ScriptTimeout)
	for time.Now().Before(deadline) {
		req, _, ok := c.Within(t, time.Until(deadline))
		if !ok {
			break
		}
		if req != nil && (len(types) == 0 || slices.Contains(types, req.Type)) {
			return *req
		}
	}
	t.Fatalf("scripted server: no request of type %v came", types)
	return wire.Request{}
}

// Input waits for the client's next input frame, skipping requests.
func (c *ScriptConn) Input(t testing.TB) wire.Input {
	t.Helper()
	deadline := time.Now().Add(ScriptTimeout)
	for time.Now().Before(deadline) {
		_, in, ok := c.Within(t, time.Until(deadline))
		if !ok {
			break
		}
		if in != nil {
			return *in
		}
	}
	t.Fatal("scripted server: no input frame came")
	return wire.Input{}
}

// Send sends a control message.
func (c *ScriptConn) Send(t testing.TB, m wire.Message) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("scripted server: encode %+v: %v", m, err)
	}
	c.write(t, websocket.MessageText, b)
}

// SendOutput sends an output frame.
func (c *ScriptConn) SendOutput(t testing.TB, channel uint32, seq uint64, stream uint8, offset uint64, data []byte) {
	t.Helper()
	f := wire.AppendOutputHeader(nil, channel, seq, stream, offset, len(data))
	c.write(t, websocket.MessageBinary, append(f, data...))
}

// SendRaw sends b as one message of the given kind, for malformed frames.
func (c *ScriptConn) SendRaw(t testing.TB, typ websocket.MessageType, b []byte) {
	t.Helper()
	c.write(t, typ, b)
}

// write sends one message; a client that went away is not the script's
// failure (the caller reads what follows and sees it).
func (c *ScriptConn) write(t testing.TB, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ScriptTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		t.Logf("scripted server: write: %v", err)
	}
}

// Handshake plays a connection's start: it sends hello (none for a zero
// Message, as a server before acknowledged delivery), then answers the
// ping a client sends to learn whether a hello comes.
func (c *ScriptConn) Handshake(t testing.TB, hello wire.Message) {
	t.Helper()
	if hello.Type != "" {
		c.Send(t, hello)
	}
	p := c.Request(t, wire.TypePing)
	c.Send(t, wire.Message{Type: wire.MsgPong, Req: p.Req})
}

// Attached answers an attach (or a start with attach) with an attached
// message for channel; the other fields come from m.
func (c *ScriptConn) Attached(t testing.TB, req wire.Request, channel uint32, m wire.Message) {
	t.Helper()
	m.Type, m.Req, m.Channel = wire.MsgAttached, req.Req, channel
	if m.ID == "" {
		m.ID = req.ID
	}
	if m.Status == "" {
		m.Status = "running"
	}
	c.Send(t, m)
}

// Close closes the connection with code and reason, as the server would.
func (c *ScriptConn) Close(code websocket.StatusCode, reason string) {
	c.ws.Close(code, reason)
}

// Drop cuts the connection without a close handshake.
func (c *ScriptConn) Drop() { c.ws.CloseNow() }

// Done is closed when the connection has ended.
func (c *ScriptConn) Done() <-chan struct{} { return c.done }
