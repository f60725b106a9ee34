package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
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

	sendMu sync.Mutex // held while input frames are written: they leave in offset order

	mu      sync.Mutex
	ready   chan struct{}   // closed once attached on the current connection and input resent
	ws      *websocket.Conn // the connection channel belongs to
	channel uint32
	last    uint64 // last sequence delivered
	in      input  // guarded by mu
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
func (c *Client) Start(ctx context.Context, r wire.Request) (*Execution, error) {
	r.Type, r.Attach = wire.TypeStart, false
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

func (e *Execution) attachRequest() wire.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return wire.Request{Type: wire.TypeAttach, ID: e.id, After: e.last, ReadOnly: e.readOnly}
}

// attached runs in the read loop when the server answers an attach: it
// routes the new channel here and resends input the server lacks.
func (e *Execution) attached(m wire.Message) {
	if m.Type != wire.MsgAttached {
		return
	}
	e.c.mu.Lock()
	delete(e.c.channels, e.channel)
	e.c.channels[m.Channel] = e
	ws := e.c.ws
	e.c.mu.Unlock()
	e.mu.Lock()
	e.channel, e.pty, e.readOnly, e.ws = m.Channel, m.PTY, m.ReadOnly, ws
	e.in.stopPacing()
	lost := e.in.rewind(m.InputOffset)
	e.mu.Unlock()
	if lost > 0 {
		e.inputLost(lost)
	}
	// Before the execution counts as ready: resent input stays ahead of
	// anything the caller sends next.
	e.flush()
	e.mu.Lock()
	select {
	case <-e.ready:
	default:
		close(e.ready)
	}
	e.mu.Unlock()
	e.kick() // input written meanwhile, which saw no pacer and no readiness
}

// unready marks the execution detached from a lost connection: input is
// only buffered, and control requests wait, until it is attached again.
func (e *Execution) unready() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.in.stopPacing() // the reattach resends from what the server has
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
	case ev.Seq > e.last+1:
		// Events are numbered without holes, and a range the gateway no
		// longer holds comes as a gap: a jump means messages were lost on
		// the way. Drop the connection; the reattach resumes after last.
		last, ws := e.last, e.ws
		e.mu.Unlock()
		e.c.log.Warn("events missing: reconnecting", "execution", e.id, "after", last, "got", ev.Seq)
		if ws != nil {
			ws.CloseNow()
		}
		return
	case ev.Seq != 0:
		e.last = ev.Seq
	}
	if ev.Data != nil {
		ev.Data = append([]byte(nil), ev.Data...)
	}
	e.mu.Unlock()
	if ev.Err != nil && wire.InputRefused(ev.Err.Code) {
		e.refused(ev.Offset)
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
		e.in.stopPacing()
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

// control sends a request about this execution's channel.
func (e *Execution) control(ctx context.Context, r wire.Request) error {
	for attempt := 0; attempt < 50; attempt++ {
		if err := e.whenReady(ctx); err != nil {
			return err
		}
		e.mu.Lock()
		r.Channel = e.channel
		e.mu.Unlock()
		_, err := e.c.request(ctx, r)
		var se *Error
		if errors.As(err, &se) && se.Code == wire.CodeNotAttached {
			// The request went out on a newer connection than the channel:
			// the reattach that follows every reconnect gives a new one.
			if !e.c.sleep(20 * time.Millisecond) {
				return ErrClosed
			}
			continue
		}
		return err
	}
	return &Error{Code: wire.CodeNotAttached, Message: "the execution could not be reattached"}
}

// Resize sets the terminal size.
func (e *Execution) Resize(ctx context.Context, rows, cols int) error {
	return e.control(ctx, wire.Request{Type: wire.TypeResize, Rows: rows, Cols: cols})
}

// Signal sends a signal (INT, TERM, HUP, KILL, ...).
func (e *Execution) Signal(ctx context.Context, name string) error {
	return e.control(ctx, wire.Request{Type: wire.TypeSignal, Signal: name})
}

// Cancel stops the execution: SIGTERM, then SIGKILL after the grace period.
func (e *Execution) Cancel(ctx context.Context) error { return e.c.Cancel(ctx, e.id) }

// Cancel stops the execution id, followed or not.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := c.request(ctx, wire.Request{Type: wire.TypeCancel, ID: id})
	return err
}

// Detach stops following the execution; it keeps running.
func (e *Execution) Detach(ctx context.Context) error {
	err := e.control(ctx, wire.Request{Type: wire.TypeDetach})
	e.finish(nil)
	return err
}
