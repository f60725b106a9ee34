package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// Input is kept until the server has it. On a channel served with ack by
// a server with input-ack, a byte is freed only when an input-ack's
// input_offset covers it, and Write waits while 1 MiB is kept; a refusal
// there shows as an input-ack whose input_end is beyond its
// input_offset, and the input is resent from input_offset after the
// pause below. With other servers, sent bytes beyond 1 MiB are dropped
// (a reconnect may then report them lost) and Write waits only while
// 1 MiB is unsent.
//
// Input pacing, as PROTOCOL.md describes it: frames of at most 16 KiB, at
// most a window of 64 KiB (the gateway's input queue) per send, sends at
// least 20 ms apart (writes meanwhile go out together); after a refusal,
// one window per pause, until a pause passes without a refusal or all
// was sent. The pause is 200 ms after a refusal that shows progress and
// doubles, to 3.2 s, after one that does not.
const (
	maxInputBuffer = 1 << 20 // kept (acking) or unsent input beyond this makes Write wait
	maxInputFrame  = 16 << 10
	inputWindow    = 64 << 10
	inputGap       = 20 * time.Millisecond
	inputPause     = 200 * time.Millisecond
	maxInputPause  = 3200 * time.Millisecond
	frameTimeout   = 10 * time.Second
)

// input is an execution's written input, kept from the first byte the
// server may lack (base) to the last written (end); next is the offset of
// the next byte to send. Guarded by the execution's mu.
type input struct {
	buf   []byte
	base  uint64
	next  uint64
	end   uint64
	acked uint64 // the largest offset the server reported having

	// acking: the server acknowledges input (input-ack), so nothing is
	// dropped before it has it, and Write waits while maxInputBuffer is kept.
	acking bool

	gen        uint64        // pacer generation: an older pacer's firing does nothing
	armed      bool          // a pacer is due
	pause      time.Duration // between windows while recovering
	recovering bool          // from a refusal until everything was sent again
	refused    bool          // refusals came since the last rewind
	refusedAt  uint64        // the largest offset they reported
	lastRound  uint64        // the offset the previous round of refusals reported

	wake chan struct{} // closed and replaced when next, armed or refused change
}

// keep appends p. Without acking, bytes already sent are dropped beyond
// maxInputBuffer; unsent ones never are (Write waits instead). With
// acking, nothing is dropped here: only release frees bytes.
func (in *input) keep(p []byte) {
	in.buf = append(in.buf, p...)
	in.end += uint64(len(p))
	if over := len(in.buf) - maxInputBuffer; over > 0 && !in.acking {
		drop := min(uint64(over), in.next-in.base)
		in.buf, in.base = in.buf[drop:], in.base+drop
	}
}

// rewind restarts sending from received, what the server reported having
// (never below what it reported before). It returns how many bytes the
// server lacks that are no longer kept: what is kept then follows what
// the server has.
func (in *input) rewind(received uint64) (lost uint64) {
	received = max(received, in.acked)
	in.acked = received
	switch {
	case received >= in.end:
		// The server has everything (or more, from another writer): number
		// the next bytes after what it has.
		in.buf, in.base, in.end = in.buf[:0], received, received
	case received < in.base:
		lost = in.base - received
		in.base, in.end = received, in.end-lost
	default:
		in.buf, in.base = in.buf[received-in.base:], received
	}
	in.next = in.base
	in.changed()
	return lost
}

// room is how many bytes Write may keep now.
func (in *input) room() int {
	if in.acking {
		return maxInputBuffer - int(in.end-in.base)
	}
	if in.end-in.next > maxInputBuffer {
		return 0
	}
	return maxInputBuffer // and a little more: as before, a Write is taken whole
}

// release frees the bytes below received, which the server acknowledged
// having. Bytes not sent yet that it has (another writer's) are skipped.
func (in *input) release(received uint64) {
	in.acked = max(in.acked, received)
	to := min(received, in.end)
	if to <= in.base {
		return
	}
	in.buf, in.base = in.buf[to-in.base:], to
	in.next = max(in.next, in.base)
	in.changed()
}

// reset forgets the input of an incarnation that ended: the next bytes
// follow received, what the new one has. It returns the bytes the old
// one never acknowledged.
func (in *input) reset(received uint64) (lost uint64) {
	lost = in.end - max(in.base, min(in.acked, in.end))
	in.buf, in.base, in.next, in.end, in.acked = in.buf[:0], received, received, received, received
	in.changed()
	return lost
}

// window takes the next bytes to send: at most inputWindow from next.
func (in *input) window() (from uint64, p []byte) {
	from = in.next
	to := min(in.end, from+inputWindow)
	p = append([]byte(nil), in.buf[from-in.base:to-in.base]...)
	in.next = to
	in.changed()
	return from, p
}

func (in *input) changed() {
	if in.wake != nil {
		close(in.wake)
		in.wake = nil
	}
}

// waitChan returns a channel closed at the next change.
func (in *input) waitChan() <-chan struct{} {
	if in.wake == nil {
		in.wake = make(chan struct{})
	}
	return in.wake
}

// stopPacing forgets any due pacer and the refusals: on a new connection
// or at the end.
func (in *input) stopPacing() {
	in.gen++
	in.armed, in.refused, in.recovering, in.pause, in.lastRound = false, false, false, 0, 0
	in.changed()
}

// armLocked schedules e.paced after d, replacing any due pacer.
func (e *Execution) armLocked(d time.Duration) {
	e.in.gen++
	e.in.armed = true
	gen := e.in.gen
	time.AfterFunc(d, func() { e.paced(gen) })
	e.in.changed()
}

// Write sends input. It is kept until the server has it: after a
// reconnect or a refusal, whatever the server lacks is resent by offset,
// so nothing is typed twice or lost. Input goes out paced to the server's
// input queue. Write waits while the buffer is full (1 MiB kept until
// acknowledged, or unsent with a server without input-ack), until the
// execution ends; WriteContext also until ctx ends.
func (e *Execution) Write(p []byte) (int, error) {
	return e.WriteContext(context.Background(), p)
}

// WriteContext is Write, waiting for room only until ctx ends. It
// returns how many bytes of p it kept: they will be sent.
func (e *Execution) WriteContext(ctx context.Context, p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := e.writeSome(ctx, p[written:])
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeSome keeps as much of p as there is room for, once there is some.
func (e *Execution) writeSome(ctx context.Context, p []byte) (int, error) {
	e.mu.Lock()
	for !e.ended && e.in.room() <= 0 {
		wake := e.in.waitChan()
		e.mu.Unlock()
		select {
		case <-wake:
		case <-e.closed:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		e.mu.Lock()
	}
	if e.ended {
		e.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	n := len(p)
	if e.in.acking {
		n = min(n, e.in.room())
	}
	e.in.keep(p[:n])
	send := !e.in.armed && e.readyLocked()
	e.mu.Unlock()
	if send {
		e.flush()
	}
	return n, nil
}

// inputAcked handles an input-ack: the server has the input below
// received, and refused frames up to end when end is beyond it; those
// are resent from received after a pause.
func (e *Execution) inputAcked(received, end uint64) {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.in.release(received)
	e.mu.Unlock()
	if end > received {
		e.refused(received)
	}
}

// flush sends the next window of input on the connection the channel
// belongs to and arms the pacer for the next send. If that connection is
// gone, the bytes stay kept and the reattach resends them.
func (e *Execution) flush() {
	e.sendMu.Lock() // frames leave in offset order
	defer e.sendMu.Unlock()
	e.mu.Lock()
	if e.ended || e.ws == nil || e.in.next >= e.in.end {
		e.mu.Unlock()
		return
	}
	from, p := e.in.window()
	gap := inputGap
	if e.in.recovering {
		gap = e.in.pause
	}
	e.in.recovering = e.in.recovering && e.in.next < e.in.end
	e.armLocked(gap)
	ws, channel := e.ws, e.channel
	e.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), maxInputFrame)
		ctx, cancel := context.WithTimeout(e.c.ctx, frameTimeout)
		err := ws.Write(ctx, websocket.MessageBinary, wire.AppendInput(nil, channel, from, p[:n]))
		cancel()
		if err != nil {
			return
		}
		p, from = p[n:], from+uint64(n)
	}
}

// paced runs when pacer gen fires: after refusals it rewinds to what the
// server reported, then sends what is unsent.
func (e *Execution) paced(gen uint64) {
	e.mu.Lock()
	if gen != e.in.gen {
		e.mu.Unlock()
		return
	}
	e.in.armed = false
	var lost uint64
	if e.in.refused {
		lost = e.in.rewind(e.in.refusedAt)
		e.in.refused = false
	} else {
		e.in.recovering = false // a pause passed without a refusal
	}
	e.in.changed()
	e.mu.Unlock()
	if lost > 0 {
		e.inputLost(lost)
	}
	e.flush()
}

// refused handles input the server refused (queue full, ahead of what it
// received, rate limited): after a pause, input is sent again from the
// largest offset reported, one window per pause until all was sent. The
// first refusal after a rewind sets the pause: 200 ms after progress,
// doubled without.
func (e *Execution) refused(received uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	in := &e.in
	if !in.refused {
		switch {
		case in.pause < inputPause || received > in.lastRound:
			in.pause = inputPause
		default:
			in.pause = min(2*in.pause, maxInputPause)
		}
		in.lastRound, in.refused, in.refusedAt, in.recovering = received, true, received, true
	}
	in.refusedAt = max(in.refusedAt, received)
	e.armLocked(in.pause)
}

func (e *Execution) inputLost(n uint64) {
	e.deliver(Event{Kind: "error", Err: &Error{Code: CodeInputLost,
		Message: fmt.Sprintf("%d bytes of input were not received and are no longer kept", n)}})
}

// kick sends input written while the execution was not ready, if no
// pacer will.
func (e *Execution) kick() {
	e.mu.Lock()
	pending := !e.in.armed && e.in.next < e.in.end
	e.mu.Unlock()
	if pending {
		e.flush()
	}
}

// CloseStdin delivers end of file after the input written so far. It
// asks once everything was sent; the server closes only once it has all
// of it. Until then the client resends from what the server has and asks
// again, while the server keeps receiving more, until ctx ends.
func (e *Execution) CloseStdin(ctx context.Context) error {
	var received uint64
	for stalled := 0; stalled < 20; {
		if err := e.waitSent(ctx); err != nil {
			return err
		}
		e.mu.Lock()
		end := e.in.end
		e.mu.Unlock()
		err := e.control(ctx, wire.Request{Type: wire.TypeCloseStdin, InputOffset: &end})
		var se *Error
		switch {
		case errors.Is(err, io.ErrClosedPipe) || errors.As(err, &se) && se.Code == wire.CodeNotRunning:
			return nil // it ended: an earlier attempt's answer was lost, or it needed no more input
		case se == nil || se.Code != wire.CodeInputOffset:
			return err
		}
		if se.received > received {
			received, stalled = se.received, 0
		} else {
			stalled++
		}
		// Everything was sent and some did not arrive: resend from there.
		e.refused(se.received)
	}
	return &Error{Code: wire.CodeInputOffset, Message: "the server stopped receiving input; stdin stays open"}
}

// waitSent waits until the execution is attached, everything written was
// sent and no resend is due.
func (e *Execution) waitSent(ctx context.Context) error {
	for {
		e.mu.Lock()
		if e.ended {
			e.mu.Unlock()
			return nil // control answers for an ended execution
		}
		if e.readyLocked() && !e.in.armed && !e.in.refused && e.in.next == e.in.end {
			e.mu.Unlock()
			return nil
		}
		wake := e.in.waitChan()
		var attached <-chan struct{} // nil (never ready) once attached
		if !e.readyLocked() {
			attached = e.ready
		}
		e.mu.Unlock()
		select {
		case <-wake:
		case <-attached:
		case <-e.closed:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-e.c.ctx.Done():
			return ErrClosed
		}
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
