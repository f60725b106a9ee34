package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway"
)

const (
	// maxInputBuffer bounds the input kept for resending after a reconnect.
	maxInputBuffer = 1 << 20
	// maxInputFrame bounds the bytes of one input frame: well under the
	// gateway's input queue (64 KiB) and message limit.
	maxInputFrame = 16 << 10
	// inputRetryDelay is the pause before input the gateway refused
	// (queue full, rate limited) is sent again.
	inputRetryDelay = 200 * time.Millisecond
)

// Event is one event of an execution, in order: output, the other ring
// events (started, resize, stdin-closed, signal), a gap, an error the
// server reported about the execution, and finally exit.
type Event struct {
	Seq    uint64
	Kind   string // output, started, resize, stdin-closed, signal, exit, gap, error
	Stream uint8  // output: 1 pty, 2 stdout, 3 stderr
	Offset uint64 // output: of Data in its stream; error refusing input: input received
	Data   []byte
	Rows   int
	Cols   int
	Signal string
	Exit   *Exit
	Gap    *Gap
	Err    *Error
}

// Exit is how an execution ended.
type Exit struct {
	Code   int // -1 without a normal exit
	Signal string
	Reason string // exited, cancelled, timed_out, failed, limit:...
}

// Status returns a shell-style status: the code, or 128+n for a signal.
func (e Exit) Status() int {
	if e.Signal != "" {
		if n, ok := signalNumbers[e.Signal]; ok {
			return 128 + n
		}
		return 128 + 9
	}
	if e.Code < 0 {
		return 126
	}
	return e.Code
}

var signalNumbers = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10,
	"SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGSEGV": 11, "SIGABRT": 6, "SIGBUS": 7}

// Gap reports events the server no longer held when the client resumed.
type Gap struct{ From, To, Bytes uint64 }

// Execution is one execution followed by the client across reconnects.
type Execution struct {
	c        *Client
	id       string
	pty      bool
	readOnly bool
	events   chan Event // bounded: a caller that stops reading stops the connection's reads

	mu      sync.Mutex
	ready   chan struct{}   // closed once attached on the current connection and input resent
	ws      *websocket.Conn // the connection channel belongs to
	channel uint32
	last    uint64      // last sequence delivered
	base    uint64      // input offset of input[0]
	input   []byte      // sent input the server may not have yet
	sent    uint64      // input offset after everything written
	retry   *time.Timer // pending resend of refused input
	retryAt uint64      // largest input offset the server reported while refusing
	ended   bool
	err     error
	closed  chan struct{}
	endOnce sync.Once
}

// ID is the execution's canonical ID.
func (e *Execution) ID() string { return e.id }

// PTY reports whether the execution runs on a terminal.
func (e *Execution) PTY() bool { return e.pty }

// Start starts an execution (its canonical ID comes from the server) and
// attaches to it. r.Type and r.Attach are set by Start.
func (c *Client) Start(ctx context.Context, r gateway.Request) (*Execution, error) {
	r.Type, r.Attach = gateway.TypeStart, false
	m, err := c.request(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.Attach(ctx, m.ID, 0, false)
}

// Attach follows an execution from after sequence after.
func (c *Client) Attach(ctx context.Context, id string, after uint64, readOnly bool) (*Execution, error) {
	e := &Execution{c: c, id: id, readOnly: readOnly, last: after, events: make(chan Event, 256),
		closed: make(chan struct{}), ready: make(chan struct{})}
	if _, err := c.request(ctx, e.attachRequest(), e.attached); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.execs[e] = struct{}{}
	c.mu.Unlock()
	return e, nil
}

func (e *Execution) attachRequest() gateway.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return gateway.Request{Type: gateway.TypeAttach, ID: e.id, After: e.last, ReadOnly: e.readOnly}
}

// attached runs in the read loop when the server answers an attach: it
// routes the new channel here and resends input the server lacks.
func (e *Execution) attached(m gateway.Message) {
	if m.Type != gateway.MsgAttached {
		return
	}
	e.c.mu.Lock()
	delete(e.c.channels, e.channel)
	e.c.channels[m.Channel] = e
	ws := e.c.ws
	e.c.mu.Unlock()
	e.mu.Lock()
	e.channel, e.pty, e.readOnly, e.ws = m.Channel, m.PTY, m.ReadOnly, ws
	resend, from, lost := e.unsentLocked(m.InputOffset)
	e.mu.Unlock()
	if lost {
		e.deliver(Event{Kind: "error", Err: &Error{Code: "input_lost", Message: "input older than the resend buffer was not received"}})
	}
	if ws != nil {
		// Before the execution counts as ready: resent input stays ahead
		// of anything the caller sends next (close-stdin, say).
		e.sendInput(ws, m.Channel, from, resend)
	}
	e.mu.Lock()
	select {
	case <-e.ready:
	default:
		close(e.ready)
	}
	e.mu.Unlock()
}

// unready marks the execution detached from a lost connection: input is
// only buffered, and control requests wait, until it is attached again.
func (e *Execution) unready() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.ready:
		e.ready = make(chan struct{})
	default:
	}
}

// whenReady waits until the execution is attached on a live connection.
func (e *Execution) whenReady(ctx context.Context) error {
	e.mu.Lock()
	ready := e.ready
	e.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-e.closed:
		return io.ErrClosedPipe
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// unsentLocked trims input the server has received and returns the rest.
func (e *Execution) unsentLocked(received uint64) ([]byte, uint64, bool) {
	if received > e.base {
		drop := min(received-e.base, uint64(len(e.input)))
		e.input, e.base = e.input[drop:], e.base+drop
	}
	return append([]byte(nil), e.input...), e.base, received < e.base
}

// reattach follows the execution on a new connection after e.last.
func (e *Execution) reattach() {
	e.mu.Lock()
	ended := e.ended
	e.mu.Unlock()
	if ended {
		return
	}
	if _, err := e.c.request(e.c.ctx, e.attachRequest(), e.attached); err != nil {
		var se *Error
		if errors.As(err, &se) {
			e.finish(err)
		}
	}
}

// deliver passes an event to the caller, dropping duplicates a resume may
// repeat, and ends the execution after its exit.
func (e *Execution) deliver(ev Event) {
	e.mu.Lock()
	switch {
	case e.ended:
		e.mu.Unlock()
		return
	case ev.Gap != nil:
		e.last = ev.Gap.To - 1
	case ev.Seq != 0 && ev.Seq <= e.last:
		e.mu.Unlock()
		return
	case ev.Seq != 0:
		e.last = ev.Seq
	}
	if ev.Data != nil {
		ev.Data = append([]byte(nil), ev.Data...)
	}
	e.mu.Unlock()
	if ev.Err != nil && (ev.Err.Code == "input_full" || ev.Err.Code == "input_offset" || ev.Err.Code == "rate_limited") {
		e.retryInput(ev.Offset)
		return
	}
	select {
	case e.events <- ev:
	case <-e.c.ctx.Done():
		return
	}
	if ev.Exit != nil {
		e.finish(nil)
	}
}

// finish ends the event stream: nil after exit, or the error that ended it.
func (e *Execution) finish(err error) {
	e.endOnce.Do(func() {
		e.mu.Lock()
		e.ended, e.err = true, err
		if e.retry != nil {
			e.retry.Stop()
		}
		e.mu.Unlock()
		e.c.mu.Lock()
		delete(e.c.execs, e)
		e.c.mu.Unlock()
		close(e.closed)
	})
}

// Next returns the next event. After the exit event it returns io.EOF;
// if the execution could not be followed, the error that stopped it.
func (e *Execution) Next(ctx context.Context) (Event, error) {
	select {
	case ev := <-e.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-e.events:
		return ev, nil
	case <-e.closed:
		select {
		case ev := <-e.events:
			return ev, nil
		default:
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.err != nil {
			return Event{}, e.err
		}
		return Event{}, io.EOF
	case <-ctx.Done():
		return Event{}, context.Cause(ctx)
	}
}

// Write sends input. It is kept until the server has it: after a
// reconnect, whatever the server lacks is resent by offset, so nothing is
// typed twice or lost.
func (e *Execution) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	offset := e.sent
	e.sent += uint64(len(p))
	e.input = append(e.input, p...)
	if over := len(e.input) - maxInputBuffer; over > 0 {
		e.input, e.base = e.input[over:], e.base+uint64(over)
	}
	channel, ws := e.channel, e.ws
	ready := e.readyLocked()
	e.mu.Unlock()
	if ready && ws != nil {
		// On the connection the channel belongs to; if that one is gone,
		// the bytes stay buffered and are resent from the server's offset.
		e.sendInput(ws, channel, offset, p)
	}
	return len(p), nil
}

// sendInput writes p, which starts at input offset, in frames of at most
// maxInputFrame bytes.
func (e *Execution) sendInput(ws *websocket.Conn, channel uint32, offset uint64, p []byte) {
	ctx, cancel := context.WithTimeout(e.c.ctx, 10*time.Second)
	defer cancel()
	for len(p) > 0 {
		n := min(len(p), maxInputFrame)
		if ws.Write(ctx, websocket.MessageBinary, gateway.AppendInput(nil, channel, offset, p[:n])) != nil {
			return // the connection failed: the reattach resends
		}
		p, offset = p[n:], offset+uint64(n)
	}
}

func (e *Execution) readyLocked() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// retryInput resends refused input after inputRetryDelay, once however
// many frames were refused meanwhile: from received, the largest offset
// the server reported, or else from the oldest input kept.
func (e *Execution) retryInput(received uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retryAt = max(e.retryAt, received)
	if e.retry == nil && !e.ended {
		e.retry = time.AfterFunc(inputRetryDelay, e.resendRefused)
	}
}

func (e *Execution) resendRefused() {
	e.mu.Lock()
	e.retry = nil
	resend, from, _ := e.unsentLocked(e.retryAt)
	e.retryAt = 0
	channel, ws, ready := e.channel, e.ws, e.readyLocked() && !e.ended
	e.mu.Unlock()
	if ready && ws != nil {
		e.sendInput(ws, channel, from, resend)
	}
}

// control sends a request about this execution's channel.
func (e *Execution) control(ctx context.Context, r gateway.Request) error {
	for attempt := 0; attempt < 50; attempt++ {
		if err := e.whenReady(ctx); err != nil {
			return err
		}
		e.mu.Lock()
		r.Channel = e.channel
		e.mu.Unlock()
		_, err := e.c.request(ctx, r)
		var se *Error
		if errors.As(err, &se) && se.Code == "not_attached" {
			// The request went out on a newer connection than the channel:
			// the reattach that follows every reconnect gives a new one.
			if !e.c.sleep(20 * time.Millisecond) {
				return ErrClosed
			}
			continue
		}
		return err
	}
	return &Error{Code: "not_attached", Message: "the execution could not be reattached"}
}

// CloseStdin delivers end of file after the input written so far. The
// server closes only once it has all of it; until then the client resends
// from what the server has and asks again, as long as the server keeps
// receiving more.
func (e *Execution) CloseStdin(ctx context.Context) error {
	var received uint64
	for stalled := 0; stalled < 20; {
		e.mu.Lock()
		sent := e.sent
		e.mu.Unlock()
		err := e.control(ctx, gateway.Request{Type: gateway.TypeCloseStdin, InputOffset: &sent})
		var se *Error
		switch {
		case errors.Is(err, io.ErrClosedPipe) || errors.As(err, &se) && se.Code == "not_running":
			return nil // it ended: an earlier attempt's answer was lost, or it needed no more input
		case se == nil || se.Code != "input_offset":
			return err
		}
		if se.received <= received {
			stalled++
		}
		received = max(received, se.received)
		e.retryInput(se.received)
		if !e.c.sleep(2 * inputRetryDelay) {
			return ErrClosed
		}
	}
	return &Error{Code: "input_offset", Message: "the server did not receive all input"}
}

// Resize sets the terminal size.
func (e *Execution) Resize(ctx context.Context, rows, cols int) error {
	return e.control(ctx, gateway.Request{Type: gateway.TypeResize, Rows: rows, Cols: cols})
}

// Signal sends a signal (INT, TERM, HUP, KILL, ...).
func (e *Execution) Signal(ctx context.Context, name string) error {
	return e.control(ctx, gateway.Request{Type: gateway.TypeSignal, Signal: name})
}

// Cancel stops the execution: SIGTERM, then SIGKILL after the grace period.
func (e *Execution) Cancel(ctx context.Context) error { return e.c.Cancel(ctx, e.id) }

// Cancel stops the execution id, followed or not.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := c.request(ctx, gateway.Request{Type: gateway.TypeCancel, ID: id})
	return err
}

// Detach stops following the execution; it keeps running.
func (e *Execution) Detach(ctx context.Context) error {
	err := e.control(ctx, gateway.Request{Type: gateway.TypeDetach})
	e.finish(nil)
	return err
}
