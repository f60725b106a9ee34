// Package client is a Go client of termgate's WebSocket protocol v1
// (gateway/PROTOCOL.md) that survives network failures: it reconnects with
// exponential backoff and jitter, reattaches every execution after the
// last sequence it delivered, and resends input the server has not
// received. The caller sees one continuous stream per execution, or an
// explicit gap when the server no longer holds what was missed. Forward
// opens a stream to a port a program listens on in its sandbox; a stream
// ends with its connection (TCP has no offsets to resume from), and later
// ones open on the next. Exec and Write are the agent exec's calls: a
// command and its output as text, answered at its exit or after a wait.
//
// It imports only gateway/wire and coder/websocket, so it builds on Linux,
// macOS and Windows, without the server.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("client: closed")

// ErrGatewayGone is what every execution and request ends with once the
// gateway was unreachable for the whole reconnect budget
// (Config.ReconnectBudget). The error is an *UnreachableError, which
// says for how long. The executions may still be running on the server.
var ErrGatewayGone = errors.New("client: gateway unreachable")

// UnreachableError is ErrGatewayGone with its details.
type UnreachableError struct {
	URL string        // the gateway's base URL (Config.URL)
	For time.Duration // how long the client tried
	Err error         // the last attempt's failure
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("client: gateway at %s unreachable for %v: %v", e.URL, e.For.Round(time.Second), e.Err)
}

// Is reports ErrGatewayGone.
func (e *UnreachableError) Is(target error) bool { return target == ErrGatewayGone }

// Unwrap returns the last attempt's failure.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Errors the server answers, to match with errors.Is: an *Error is each
// of these whose Code it has.
var (
	// ErrNotFound: the server has no such execution, and never had for
	// all it knows: a wrong ID, another tenant's, or one whose retention
	// expired while the server ran.
	ErrNotFound = &Error{Code: wire.CodeNotFound, Message: "client: execution not found"}
	// ErrGone: the execution existed, but the server restarted and no
	// longer has it (it ended while no server was up, and its result
	// expired, or the node lost it).
	ErrGone = &Error{Code: wire.CodeGone, Message: "client: execution gone: the server restarted without it"}
)

// CodeInputLost is the code of an error the client reports itself, never
// the server: input it could not deliver before the execution ended.
const CodeInputLost = "input_lost"

// Error is an error answer from the server, or CodeInputLost.
type Error struct {
	Code    string // a stable code: a wire.Code constant or CodeInputLost
	Message string

	received uint64        // input offset the server reported with input_offset
	retry    time.Duration // how long the server asked to wait (retry_ms), with unavailable
}

func (e *Error) Error() string { return e.Message }

// RetryAfter is how long the server advised waiting before asking again
// (its retry_ms, with CodeUnavailable); 0 when it advised nothing.
func (e *Error) RetryAfter() time.Duration { return e.retry }

// Is reports whether target is an *Error with the same Code, such as
// ErrGone or ErrNotFound.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// DefaultReconnectBudget is Config.ReconnectBudget's default.
const DefaultReconnectBudget = 60 * time.Second

// DefaultPingInterval is Config.PingInterval's default.
const DefaultPingInterval = 15 * time.Second

// keepaliveReq is the req of the pings that check the connection is alive.
const keepaliveReq = "keepalive"

// restartBackoff caps the reconnect delay after the server closed with
// 1012: a restarting gateway is back within seconds.
const restartBackoff = 2 * time.Second

// Config configures a Client.
type Config struct {
	// URL is the gateway's base URL, http(s)://host:port; the WebSocket
	// URL is derived from it.
	URL string
	// Token returns a token for each connection and for reauth before
	// expiry. It is called again after every disconnect.
	Token func(ctx context.Context) (string, error)
	// MinBackoff and MaxBackoff bound the reconnect delay (100ms, 10s).
	// After a close with 1012 (the server is restarting) the delay is at
	// most 2s.
	MinBackoff, MaxBackoff time.Duration
	// ReconnectBudget is how long the client keeps trying to reconnect
	// once its connection is lost (DefaultReconnectBudget; negative:
	// for ever). Past it every execution ends with ErrGatewayGone.
	ReconnectBudget time.Duration
	// PingInterval is how often the client pings the server, and how long
	// it waits for the pong: none within it drops the connection, and the
	// client reconnects and resumes. Behind a proxy that passes bytes
	// through, this is how a frozen server is noticed
	// (DefaultPingInterval; negative: no pings).
	PingInterval time.Duration
	// HTTPClient dials the WebSocket (http.DefaultClient).
	HTTPClient *http.Client
	// Logger receives reconnects; nil discards.
	Logger *slog.Logger
}

// Client is one logical connection to a gateway, re-established as needed.
type Client struct {
	cfg    Config
	url    string
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ws       *websocket.Conn
	connUp   chan struct{} // closed when a connection is up; replaced on loss
	execs    map[*Execution]struct{}
	channels map[uint32]*Execution
	streams  map[uint32]*ForwardConn // the forward streams of the current connection
	pending  map[string]*pending
	nextReq  uint64
	fatal    error
	hello    Hello // of the current (or the last) connection

	pong chan struct{} // a keepalive pong came; buffered 1
}

// Hello is what the server said of itself when a connection opened: its
// name and version, its protocol, the features and limits it has. A
// server from before acknowledged delivery says nothing: a zero Hello.
type Hello struct {
	Server string
	// Node names the node that served the connection, from a gateway of
	// several nodes ("" from a single one).
	Node     string
	Protocol int
	Features []string
	Limits   wire.Bounds
}

// Has reports whether the server listed feature (a wire.Feature constant).
func (h Hello) Has(feature string) bool { return slices.Contains(h.Features, feature) }

// hello turns a hello message into a Hello.
func hello(m wire.Message) Hello {
	h := Hello{Server: m.Server, Node: m.Node, Protocol: m.Protocol, Features: slices.Clone(m.Features)}
	if m.Limits != nil {
		h.Limits = *m.Limits
	}
	return h
}

// Server returns what the server said of itself on the current
// connection, or on the last one while the client reconnects.
func (c *Client) Server() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hello
	h.Features = slices.Clone(h.Features)
	return h
}

// Dial connects to the gateway and keeps the connection up until Close.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	u, err := wsURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Token == nil {
		return nil, errors.New("client: Config.Token is required")
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.ReconnectBudget == 0 {
		cfg.ReconnectBudget = DefaultReconnectBudget
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg: cfg, url: u, log: cfg.Logger, ctx: cctx, cancel: cancel, done: make(chan struct{}),
		connUp: make(chan struct{}), execs: map[*Execution]struct{}{}, channels: map[uint32]*Execution{},
		pending: map[string]*pending{}, pong: make(chan struct{}, 1),
	}
	ws, err := c.dial(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	h, err := c.handshake(ctx, ws)
	if err != nil {
		ws.CloseNow()
		cancel()
		return nil, err
	}
	c.hello = h
	go c.run(ws, h)
	return c, nil
}

// wsURL turns http(s)://host into ws(s)://host/v1/connect. A query is
// kept: ?node=NAME asks a load balancer or node for the node that owns
// the executions followed (a routing hint, PROTOCOL.md "Nodes").
func wsURL(base string) (string, error) {
	base, query, _ := strings.Cut(base, "?")
	if query != "" {
		query = "?" + query
	}
	base = strings.TrimRight(base, "/")
	switch {
	case strings.HasPrefix(base, "http://"):
		return "ws://" + strings.TrimPrefix(base, "http://") + "/v1/connect" + query, nil
	case strings.HasPrefix(base, "https://"):
		return "wss://" + strings.TrimPrefix(base, "https://") + "/v1/connect" + query, nil
	}
	return "", fmt.Errorf("client: URL %q must start with http:// or https://", base)
}

func (c *Client) dial(ctx context.Context) (*websocket.Conn, error) {
	tok, err := c.cfg.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: token: %w", err)
	}
	ws, resp, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{
		HTTPClient:   c.cfg.HTTPClient,
		Subprotocols: []string{wire.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, &Error{Code: wire.CodeUnauthorized, Message: fmt.Sprintf("the gateway refused the token (HTTP %d)", resp.StatusCode)}
		}
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	return ws, nil
}

// handshakeReq is the req of the ping that opens every connection.
const handshakeReq = "hello"

// handshake learns what the server supports before anything is sent
// that depends on it: a server with acknowledged delivery sends hello
// before any answer, one from before sends none. So the client pings
// and reads until the hello or the pong, whichever comes first; a pong
// left behind is ignored. Only hello or pong can come before a request.
func (c *Client) handshake(ctx context.Context, ws *websocket.Conn) (Hello, error) {
	b, _ := json.Marshal(wire.Request{Type: wire.TypePing, Req: handshakeReq})
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		return Hello{}, fmt.Errorf("client: connect: %w", err)
	}
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return Hello{}, fmt.Errorf("client: connect: %w", err)
		}
		var m wire.Message
		if typ != websocket.MessageText || json.Unmarshal(b, &m) != nil {
			continue
		}
		switch {
		case m.Type == wire.MsgHello:
			return hello(m), nil
		case m.Type == wire.MsgPong && m.Req == handshakeReq:
			return Hello{}, nil
		case m.Type == wire.MsgError && m.Req == handshakeReq:
			return Hello{}, &Error{Code: m.Error, Message: m.Message}
		}
	}
}

// run owns the connection: it reads until the connection breaks, then
// reconnects with backoff and reattaches, until Close or until the
// reconnect budget is spent.
func (c *Client) run(ws *websocket.Conn, h Hello) {
	defer close(c.done)
	for {
		c.up(ws, h)
		err := c.serve(ws)
		ws.CloseNow()
		c.down(err)
		if c.ctx.Err() != nil {
			return
		}
		var ok bool
		if ws, h, ok = c.reconnect(time.Now(), websocket.CloseStatus(err) == wire.CloseServiceRestart); !ok {
			return
		}
	}
}

// serve reads ws until it breaks, pinging it meanwhile.
func (c *Client) serve(ws *websocket.Conn) error {
	if c.cfg.PingInterval < 0 {
		return c.readLoop(ws)
	}
	ctx, stop := context.WithCancel(c.ctx)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		c.keepalive(ctx, ws)
	}()
	err := c.readLoop(ws)
	stop()
	<-pinged
	return err
}

// keepalive pings ws every PingInterval until ctx ends, and drops it when
// a pong does not come within PingInterval: the read loop then ends and
// the client reconnects. A server or a node behind a proxy that stopped
// (frozen, or its network gone without a reset) is noticed this way.
func (c *Client) keepalive(ctx context.Context, ws *websocket.Conn) {
	d := c.cfg.PingInterval
	tick := time.NewTicker(d)
	defer tick.Stop()
	b, _ := json.Marshal(wire.Request{Type: wire.TypePing, Req: keepaliveReq})
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case <-c.pong: // a late pong of the last ping
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		err := ws.Write(wctx, websocket.MessageText, b)
		cancel()
		if err == nil {
			err = c.awaitPong(ctx, d)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("the gateway does not answer pings: reconnecting", "url", c.cfg.URL, "err", err)
				ws.CloseNow()
			}
			return
		}
	}
}

// errNoPong is keepalive's failure when the pong does not come in time.
var errNoPong = errors.New("client: no pong within the ping interval")

// awaitPong waits up to d for a keepalive pong.
func (c *Client) awaitPong(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.pong:
		return nil
	case <-t.C:
		return errNoPong
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reconnect dials until a connection is up (ok), the client is closed,
// a refusal is final, or the reconnect budget counted from lost is
// spent; the last two end every execution. restart: the server closed
// with 1012, so it is back soon and the delays stay short.
func (c *Client) reconnect(lost time.Time, restart bool) (*websocket.Conn, Hello, bool) {
	maxDelay := c.cfg.MaxBackoff
	if restart {
		maxDelay = min(maxDelay, restartBackoff)
		c.log.Info("the gateway is restarting; reconnecting")
	}
	for attempt := 0; ; attempt++ {
		d := c.backoff(attempt, maxDelay)
		if budget := c.cfg.ReconnectBudget; budget > 0 {
			d = max(0, min(d, budget-time.Since(lost))) // the last attempt comes at the budget's end
		}
		if !c.sleep(d) {
			return nil, Hello{}, false
		}
		ws, h, err := c.open()
		if err == nil {
			return ws, h, true
		}
		var te *Error
		switch tried := time.Since(lost); {
		case c.ctx.Err() != nil:
			return nil, Hello{}, false
		case errors.As(err, &te):
			c.fail(err)
			return nil, Hello{}, false
		case c.cfg.ReconnectBudget > 0 && tried >= c.cfg.ReconnectBudget:
			c.log.Warn("gateway unreachable: giving up", "url", c.cfg.URL, "for", tried.String(), "err", err)
			c.fail(&UnreachableError{URL: c.cfg.URL, For: tried, Err: err})
			return nil, Hello{}, false
		}
		c.log.Info("reconnect failed", "err", err, "attempt", attempt+1)
	}
}

// openTimeout bounds a reconnect's dial and handshake: a gateway that
// accepts and never answers (frozen) is given up and dialled again.
var openTimeout = 10 * time.Second // a variable for tests (export_test.go)

// open dials and handshakes within openTimeout, or PingInterval when
// longer.
func (c *Client) open() (*websocket.Conn, Hello, error) {
	ctx, cancel := context.WithTimeout(c.ctx, max(openTimeout, c.cfg.PingInterval))
	defer cancel()
	ws, err := c.dial(ctx)
	if err != nil {
		return nil, Hello{}, err
	}
	h, err := c.handshake(ctx, ws)
	if err != nil {
		ws.CloseNow()
		return nil, Hello{}, err
	}
	return ws, h, nil
}

// backoff is exponential with full jitter, at most maxDelay.
func (c *Client) backoff(attempt int, maxDelay time.Duration) time.Duration {
	d := c.cfg.MinBackoff << min(attempt, 16)
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	return d/2 + rand.N(d/2+1)
}

func (c *Client) sleep(d time.Duration) bool { return sleepContext(c.ctx, d) }

// up installs a fresh connection and reattaches every live execution
// after the last sequence it delivered.
func (c *Client) up(ws *websocket.Conn, h Hello) {
	c.mu.Lock()
	c.ws, c.hello = ws, h
	c.channels = map[uint32]*Execution{}
	execs := make([]*Execution, 0, len(c.execs))
	for e := range c.execs {
		execs = append(execs, e)
	}
	close(c.connUp)
	c.mu.Unlock()
	for _, e := range execs {
		go e.reattach()
	}
}

// down forgets the connection and fails requests in flight.
func (c *Client) down(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ws = nil
	c.connUp = make(chan struct{})
	c.loseStreams()
	for req, p := range c.pending {
		close(p.answer)
		delete(c.pending, req)
	}
	for e := range c.execs {
		e.unready()
	}
	if c.ctx.Err() == nil {
		c.log.Info("disconnected; reconnecting", "err", err)
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	c.fatal = err
	execs := c.snapshot()
	c.mu.Unlock()
	for _, e := range execs {
		e.finish(err)
	}
}

// snapshot lists the followed executions. Called with c.mu held.
func (c *Client) snapshot() []*Execution {
	out := make([]*Execution, 0, len(c.execs))
	for e := range c.execs {
		out = append(out, e)
	}
	return out
}

// readLoop dispatches server messages until the connection breaks.
func (c *Client) readLoop(ws *websocket.Conn) error {
	scratch := messageBuffers.Get().(*bytes.Buffer)
	defer func() { messageBuffers.Put(scratch) }()
	for {
		typ, b, err := readMessage(c.ctx, ws, scratch)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary && len(b) > 0 && b[0] == wire.FrameForward {
			kept, err := c.forwardFrame(b, scratch)
			if err != nil {
				return err
			}
			if kept { // the stream holds the buffer until its bytes are read
				scratch = messageBuffers.Get().(*bytes.Buffer)
			}
			continue
		}
		if typ == websocket.MessageBinary {
			out, err := wire.DecodeOutput(b)
			if err != nil {
				// A message cut short by a dying connection: resume instead.
				return err
			}
			c.route(out.Channel, Event{Seq: out.Seq, Kind: "output", Stream: out.Stream, Offset: out.Offset, Data: bytes.Clone(out.Data)})
			continue
		}
		var m wire.Message
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		c.dispatch(m)
	}
}

// messageBuffers hold the read loop's messages: a forward frame's is
// handed to its stream, which gives it back once its bytes are read;
// a fresh buffer for every frame would cost a page fault on each of
// its pages, as much as a copy.
var messageBuffers = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 64<<10)) }}

// readMessage reads ws's next message into scratch, which it grows as
// needed and keeps, and returns it: valid until the next read into
// scratch. websocket.Conn.Read would grow a new one from 512 bytes by
// doubling, for each message.
func readMessage(ctx context.Context, ws *websocket.Conn, scratch *bytes.Buffer) (websocket.MessageType, []byte, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	scratch.Reset()
	if _, err := scratch.ReadFrom(r); err != nil {
		return 0, nil, err
	}
	return typ, scratch.Bytes(), nil
}

// pending is a request waiting for its answer. onAnswer, when set, runs
// in the read loop before any later message is read: an attach registers
// its channel there, so no event of the channel can arrive unrouted.
type pending struct {
	answer   chan wire.Message
	onAnswer func(wire.Message)
}

func (c *Client) dispatch(m wire.Message) {
	if m.Req != "" {
		c.mu.Lock()
		p, ok := c.pending[m.Req]
		delete(c.pending, m.Req)
		c.mu.Unlock()
		if ok {
			if p.onAnswer != nil {
				p.onAnswer(m)
			}
			p.answer <- m
			return
		}
	}
	switch m.Type {
	case wire.MsgPong:
		if m.Req == keepaliveReq {
			select {
			case c.pong <- struct{}{}:
			default:
			}
		}
	case wire.MsgDetached:
		// Unasked: the node relaying the channel lost the execution's
		// owner. The execution resumes on this connection.
		if e := c.channel(m.Channel); e != nil && m.Error != "" {
			e.detachedByServer(m)
		}
	case wire.MsgEvent:
		ev := Event{Seq: m.Seq, Kind: m.Event, Rows: m.Rows, Cols: m.Cols, Signal: m.Signal}
		if m.Event == wire.EventNotice {
			ev.Notice = newNotice(m)
		}
		c.route(m.Channel, ev)
	case wire.MsgExit:
		code := -1
		if m.Code != nil {
			code = *m.Code
		}
		c.route(m.Channel, Event{Seq: m.Seq, Kind: "exit", Exit: &Exit{Code: code, Signal: m.Signal, Reason: m.Reason}})
	case wire.MsgGap:
		c.route(m.Channel, Event{Kind: "gap", Gap: &Gap{From: m.From, To: m.To, Bytes: m.Bytes, Cause: m.Cause, Inexact: m.Inexact}})
	case wire.MsgSnapshot:
		c.route(m.Channel, Event{Seq: m.Seq, Kind: "snapshot", Offset: m.Seen, Data: []byte(m.Data), Rows: m.Rows, Cols: m.Cols,
			Gap: &Gap{From: m.From, To: m.To, Bytes: m.Bytes, Cause: m.Cause, Inexact: m.Inexact}})
	case wire.MsgInputAck:
		if e := c.channel(m.Channel); e != nil {
			e.inputAcked(m.InputOffset, m.InputEnd)
		}
	case wire.MsgAuthExpiring:
		go c.reauth()
	case wire.MsgForwardAck, wire.MsgForwardEOF, wire.MsgForwardEnd:
		c.forwardMessage(m)
	case wire.MsgError:
		// Offset: the input offset received, with a refusal of input.
		c.route(m.Channel, Event{Kind: "error", Offset: m.InputOffset, Err: &Error{Code: m.Error, Message: m.Message}})
	}
}

func (c *Client) route(channel uint32, ev Event) {
	if e := c.channel(channel); e != nil {
		e.deliver(ev)
	}
}

// channel returns the execution attached on channel of this connection.
func (c *Client) channel(channel uint32) *Execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[channel]
}

// reauth sends a fresh token before the current one expires.
func (c *Client) reauth() {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	tok, err := c.cfg.Token(ctx)
	if err != nil {
		c.log.Warn("reauth: no token", "err", err)
		return
	}
	if _, err := c.request(ctx, wire.Request{Type: wire.TypeReauth, Token: tok}); err != nil {
		c.log.Warn("reauth refused", "err", err)
	}
}

// request sends r on the current connection, waiting for one if the
// client is reconnecting, and returns the answer. An error answer is an
// *Error. onAnswer, if set, sees the answer first, in the read loop.
func (c *Client) request(ctx context.Context, r wire.Request, onAnswer ...func(wire.Message)) (wire.Message, error) {
	var hook func(wire.Message)
	if len(onAnswer) > 0 {
		hook = onAnswer[0]
	}
	for {
		ws, up, answer, err := c.prepare(&r, hook)
		if err != nil {
			return wire.Message{}, err
		}
		if ws == nil {
			select {
			case <-up:
				continue
			case <-ctx.Done():
				return wire.Message{}, context.Cause(ctx)
			}
		}
		b, _ := json.Marshal(r)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			if ctx.Err() != nil {
				return wire.Message{}, context.Cause(ctx)
			}
			continue // the connection broke: retry on the next one
		}
		select {
		case m, ok := <-answer:
			if !ok {
				continue // lost with the connection
			}
			if m.Type == wire.MsgError {
				return m, &Error{Code: m.Error, Message: m.Message, received: m.InputOffset,
					retry: time.Duration(m.RetryMS) * time.Millisecond}
			}
			return m, nil
		case <-ctx.Done():
			return wire.Message{}, context.Cause(ctx)
		}
	}
}

// prepare registers r's answer channel on the current connection, or
// returns the channel that closes when one is up.
func (c *Client) prepare(r *wire.Request, hook func(wire.Message)) (*websocket.Conn, chan struct{}, chan wire.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal != nil {
		return nil, nil, nil, c.fatal
	}
	if c.ctx.Err() != nil {
		return nil, nil, nil, ErrClosed
	}
	if c.ws == nil {
		return nil, c.connUp, nil, nil
	}
	c.nextReq++
	r.Req = strconv.FormatUint(c.nextReq, 10)
	answer := make(chan wire.Message, 1)
	c.pending[r.Req] = &pending{answer: answer, onAnswer: hook}
	return c.ws, nil, answer, nil
}

// Close ends the connection; executions keep running on the server.
func (c *Client) Close() error {
	c.cancel()
	c.mu.Lock()
	ws := c.ws
	execs := c.snapshot()
	c.mu.Unlock()
	if ws != nil {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	<-c.done
	for _, e := range execs {
		e.finish(ErrClosed)
	}
	return nil
}
