package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// Event is one event of an execution, in order: output, the other ring
// events (started, resize, stdin-closed, signal, notice), a gap, an error
// the server reported about the execution, and finally exit.
type Event struct {
	Seq    uint64
	Kind   string // output, started, resize, stdin-closed, signal, notice, exit, gap, error, snapshot
	Stream uint8  // output: 1 pty, 2 stdout, 3 stderr
	// Offset: output: of Data in its stream; error refusing input: input
	// received; snapshot: the output bytes up to Seq.
	Offset uint64
	// Data: output: the bytes; snapshot: the escape sequences that redraw
	// the screen as it was after event Seq on a fresh terminal of Rows x
	// Cols (Gap then says what history it stands in for).
	Data   []byte
	Rows   int
	Cols   int
	Signal string
	Exit   *Exit
	Gap    *Gap
	Err    *Error
	Notice *Notice

	gen uint64 // the execution's incarnation count when delivered
}

// Exit is how an execution ended.
type Exit struct {
	Code   int // -1 without a normal exit
	Signal string
	Reason string // exited, cancelled, timed_out, failed, limit:...
}

// Notice is a message for people about the execution, such as a timeout
// about to stop it.
type Notice struct {
	// Reason is a wire.Notice constant: timeout, idle_timeout, or
	// idle_timeout_cancelled (an idle warning no longer holds).
	Reason  string
	Message string
	// At is when what the notice announces happens (the timeout fires);
	// zero when nothing is due, or the server sent no valid time.
	At time.Time
}

// newNotice reads a notice event's fields.
func newNotice(m wire.Message) *Notice {
	n := &Notice{Reason: m.Reason, Message: m.Message}
	if at, err := time.Parse(time.RFC3339, m.At); err == nil {
		n.At = at
	}
	return n
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

// Gap reports events the server no longer held for this client: the
// sequences From up to (not including) To, and the output bytes in them.
type Gap struct {
	From, To, Bytes uint64
	// Cause says why they were lost: a wire.Loss constant (read_only,
	// live, hold_expired, unheld), or "" from a server that does not say.
	Cause string
	// Inexact is set when Bytes is only an upper bound.
	Inexact bool
}

// Acknowledgement of output: a channel served with ack gets an ack once
// the caller has taken ackBytes of output from Next since the last one,
// or ackDelay after the first event taken since it, whichever is first.
const ackBytes = 64 << 10

var ackDelay = 25 * time.Millisecond // a variable for tests (export_test.go)

// Execution is one execution followed by the client across reconnects.
type Execution struct {
	c        *Client
	id       string
	pty      bool
	readOnly bool
	snapshot bool       // ask for a screen snapshot in place of evicted history
	events   chan Event // bounded: a caller that stops reading stops the connection's reads

	sendMu sync.Mutex // held while input frames are written: they leave in offset order

	mu      sync.Mutex
	ready   chan struct{}   // closed once attached on the current connection and input resent
	ws      *websocket.Conn // the connection channel belongs to
	channel uint32
	last    uint64 // last sequence delivered
	seen    uint64 // output bytes up to last: events' data and gaps' bytes, as replay.Cursor counts
	known   bool   // seen is exact: counted from the first event, or from a gap
	inc     string // the incarnation last and seen belong to
	gen     uint64 // counts incarnation changes: events of an older one are not acked
	in      input  // guarded by mu
	// stopResume cancels the reattach in progress: a newer one (a new
	// connection, a server-sent detached) replaces it.
	stopResume context.CancelFunc

	ack       bool       // the channel is served with acknowledged delivery
	processed uint64     // the last sequence Next handed to the caller
	acked     uint64     // the last sequence acked
	unacked   int        // output bytes handed since the last ack
	ackArmed  bool       // an ack timer is due
	ackMu     sync.Mutex // held while an ack is written: acks leave in order
	ended     bool
	err       error
	closed    chan struct{}
	endOnce   sync.Once
	history   uint64 // the newest sequence held when Attach was answered; set once, before Attach returns
}

// ID is the execution's canonical ID.
func (e *Execution) ID() string { return e.id }

// HistoryEnd is the newest sequence the server held when Attach was
// answered: the events up to it are history, replayed, and those after it
// are new. A terminal that replays history answers the terminal queries in
// it, and such answers are not the user's input.
func (e *Execution) HistoryEnd() uint64 { return e.history }

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

// Attach follows an execution from after sequence after; a non-zero
// after needs AttachWith and the incarnation it belongs to.
func (c *Client) Attach(ctx context.Context, id string, after uint64, readOnly bool) (*Execution, error) {
	return c.AttachWith(ctx, id, AttachOptions{After: after, ReadOnly: readOnly})
}

// AttachOptions say how AttachWith follows an execution.
type AttachOptions struct {
	After uint64 // the last sequence the caller has; 0 for everything retained
	// Incarnation is the one After belongs to (Execution.Incarnation when
	// the caller got it). A server refuses a non-zero After without it
	// (invalid_after): the ID may name a new execution since.
	Incarnation string
	ReadOnly    bool
	// Snapshot: for a terminal whose history the server no longer holds,
	// deliver a "snapshot" event that redraws its screen in place of that
	// history (from a server that offers snapshots), not a gap. For a
	// caller that shows the terminal, not one that keeps a transcript.
	Snapshot bool
}

// AttachWith follows an execution as o says.
func (c *Client) AttachWith(ctx context.Context, id string, o AttachOptions) (*Execution, error) {
	e := &Execution{c: c, id: id, readOnly: o.ReadOnly, snapshot: o.Snapshot, last: o.After, known: o.After == 0, inc: o.Incarnation,
		events: make(chan Event, 256), closed: make(chan struct{}), ready: make(chan struct{})}
	m, err := c.request(ctx, e.attachRequest(), e.attached)
	if err != nil {
		return nil, err
	}
	e.history = m.LastSeq
	c.mu.Lock()
	c.execs[e] = struct{}{}
	c.mu.Unlock()
	return e, nil
}

// Incarnation is the execution's incarnation as the server last named it
// ("" from a server that does not).
func (e *Execution) Incarnation() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inc
}

// attachRequest asks to follow after the last event delivered, of which
// incarnation; with a server that acknowledges, it asks for ack and says
// what was seen.
func (e *Execution) attachRequest() wire.Request {
	h := e.c.Server()
	e.mu.Lock()
	defer e.mu.Unlock()
	r := wire.Request{Type: wire.TypeAttach, ID: e.id, After: e.last, ReadOnly: e.readOnly, Incarnation: e.inc}
	r.Ack = h.Has(wire.FeatureAck)
	if h.Has(wire.FeatureSeen) && e.known {
		r.Seen = e.seen
	}
	r.Snapshot = e.snapshot && h.Has(wire.FeatureSnapshot)
	return r
}

// attached runs in the read loop when the server answers an attach: it
// routes the new channel here and resends input the server lacks.
func (e *Execution) attached(m wire.Message) {
	if m.Type != wire.MsgAttached {
		return
	}
	e.c.mu.Lock()
	if e.c.channels[e.channel] == e {
		// Only its own: after a reconnect the old number may be another
		// execution's new channel.
		delete(e.c.channels, e.channel)
	}
	e.c.channels[m.Channel] = e
	ws := e.c.ws
	e.c.mu.Unlock()
	inputAck := e.c.Server().Has(wire.FeatureInputAck)
	e.mu.Lock()
	e.channel, e.pty, e.readOnly, e.ws = m.Channel, m.PTY, m.ReadOnly, ws
	var lost uint64
	if e.inc != "" && m.Incarnation != "" && m.Incarnation != e.inc {
		lost = e.restartLocked(m.InputOffset)
	}
	if m.Incarnation != "" {
		e.inc = m.Incarnation
	}
	e.ack, e.in.acking = m.Ack, m.Ack && inputAck
	e.processed, e.acked, e.unacked = max(e.processed, e.last), max(e.processed, e.last), 0
	e.in.stopPacing()
	lost += e.in.rewind(m.InputOffset)
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

// restartLocked starts over with a new incarnation of the ID: the server
// serves it from its first event, and input kept for the old one is not
// sent to the new one. It returns the input bytes the old one never got.
func (e *Execution) restartLocked(received uint64) (lost uint64) {
	e.c.log.Warn("the execution ID names a new execution: following it from the start", "execution", e.id, "incarnation", e.inc)
	e.last, e.seen, e.known, e.processed, e.acked = 0, 0, true, 0, 0
	e.gen++
	return e.in.reset(received)
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

// reattach follows the execution on the current connection after
// e.last. An unavailable answer (the node that owns the execution is down
// or cut off) keeps the execution: the attach is asked again after
// max(retry_ms, backoff) until the reconnect budget is spent, and then the
// execution ends with ErrGatewayGone. Any other error answer ends it.
func (e *Execution) reattach() {
	ctx, cancel := context.WithCancel(e.c.ctx)
	defer cancel()
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	if e.stopResume != nil {
		e.stopResume()
	}
	e.stopResume = cancel
	e.mu.Unlock()
	var since time.Time
	for attempt := 0; ; attempt++ {
		_, err := e.c.request(ctx, e.attachRequest(), e.attached)
		var se *Error
		switch {
		case err == nil || !errors.As(err, &se):
			return // attached; or closed, or replaced by a newer reattach
		case se.Code != wire.CodeUnavailable:
			e.finish(err)
			return
		}
		if since.IsZero() {
			since = time.Now()
		}
		d, ok := e.retryDelay(attempt, since, se)
		if !ok {
			return
		}
		e.c.log.Info("the execution's node is unavailable: attaching again", "execution", e.id, "in", d.String(), "err", se.Message)
		if !sleepContext(ctx, d) {
			return
		}
	}
}

// retryDelay is how long reattach waits after an unavailable answer:
// what the server asked (retry_ms) or the backoff, whichever is longer,
// cut to the end of the reconnect budget counted from since. Past the
// budget it ends the execution with ErrGatewayGone and ok is false.
func (e *Execution) retryDelay(attempt int, since time.Time, se *Error) (time.Duration, bool) {
	budget, tried := e.c.cfg.ReconnectBudget, time.Since(since)
	if budget > 0 && tried >= budget {
		e.c.log.Warn("the execution's node stayed unavailable: giving up", "execution", e.id, "for", tried.String(), "err", se.Message)
		e.finish(&UnreachableError{URL: e.c.cfg.URL, For: tried, Err: se})
		return 0, false
	}
	d := max(se.retry, e.c.backoff(attempt, e.c.cfg.MaxBackoff))
	if budget > 0 {
		d = max(0, min(d, budget-tried)) // the last attempt comes at the budget's end
	}
	return d, true
}

// detachedByServer handles a detached the server sent unasked, with an
// error: the node relaying the channel lost the execution's owner, after
// passing on everything it had. The execution attaches again on this
// connection after what it delivered; the owner's ring and hold keep
// what was not acked, and input is resent from the attached input offset.
// It runs in the read loop, so no later message is read before the
// channel is forgotten.
func (e *Execution) detachedByServer(m wire.Message) {
	e.c.mu.Lock()
	if e.c.channels[m.Channel] == e {
		delete(e.c.channels, m.Channel)
	}
	e.c.mu.Unlock()
	e.unready()
	e.c.log.Info("the server detached the execution: attaching again", "execution", e.id, "code", m.Error, "err", m.Message)
	go e.reattach()
}

// sleepContext waits d, or until ctx ends (false).
func sleepContext(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
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
	case ev.Kind == "snapshot":
		if ev.Seq <= e.last {
			e.mu.Unlock()
			return
		}
		e.last, e.seen, e.known = ev.Seq, ev.Offset, true
	case ev.Gap != nil:
		e.last = ev.Gap.To - 1
		e.seen += ev.Gap.Bytes
		e.known = true
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
		e.seen += uint64(len(ev.Data))
	}
	if ev.Data != nil {
		ev.Data = append([]byte(nil), ev.Data...)
	}
	ev.gen = e.gen
	e.mu.Unlock()
	if ev.Err != nil && wire.InputRefused(ev.Err.Code) {
		e.refused(ev.Offset)
		return
	}
	if ev.Err != nil && (ev.Err.Code == wire.CodeNotAttached || ev.Err.Code == wire.CodeInvalidRequest) {
		// Unasked for: the answer to an ack or input frame on a channel a
		// reconnect replaced. The reattach covers both.
		e.c.log.Warn("the server refused an ack or input", "execution", e.id, "code", ev.Err.Code, "err", ev.Err.Message)
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
		return e.took(ev), nil
	default:
	}
	select {
	case ev := <-e.events:
		return e.took(ev), nil
	case <-e.closed:
		select {
		case ev := <-e.events:
			return e.took(ev), nil
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

// took records that the caller processed ev and acks it when due: at
// once after ackBytes of output, else by a timer ackDelay later.
func (e *Execution) took(ev Event) Event {
	seq := ev.Seq
	if ev.Gap != nil {
		seq = ev.Gap.To - 1
	}
	if seq == 0 || ev.Exit != nil {
		return ev // the exit needs no ack
	}
	e.mu.Lock()
	if !e.ack || ev.gen != e.gen || e.ended {
		e.mu.Unlock()
		return ev
	}
	e.processed = max(e.processed, seq)
	e.unacked += len(ev.Data)
	now := e.unacked >= ackBytes
	if !now && !e.ackArmed {
		e.ackArmed = true
		time.AfterFunc(ackDelay, e.ackDue)
	}
	e.mu.Unlock()
	if now {
		e.sendAck()
	}
	return ev
}

// ackDue runs when the ack timer fires.
func (e *Execution) ackDue() {
	e.mu.Lock()
	e.ackArmed = false
	e.mu.Unlock()
	e.sendAck()
}

// sendAck acks the last sequence processed, if it was not acked yet, on
// the channel's connection. An ack lost with its connection needs no
// resend: the reattach's after tells the server as much.
func (e *Execution) sendAck() {
	e.ackMu.Lock()
	defer e.ackMu.Unlock()
	e.mu.Lock()
	seq, ws, channel := e.processed, e.ws, e.channel
	if e.ended || !e.ack || ws == nil || !e.readyLocked() || seq <= e.acked {
		e.mu.Unlock()
		return
	}
	e.acked, e.unacked = seq, 0
	e.mu.Unlock()
	b, _ := json.Marshal(wire.Request{Type: wire.TypeAck, Channel: channel, Seq: seq})
	ctx, cancel := context.WithTimeout(e.c.ctx, frameTimeout)
	defer cancel()
	ws.Write(ctx, websocket.MessageText, b)
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
