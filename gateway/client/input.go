package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway"
)

// Input pacing, as PROTOCOL.md describes it: frames of at most 16 KiB, at
// most a window of 64 KiB (the gateway's input queue) at a time, the next
// 50 ms later; refused input is sent again after 200 ms, doubling while
// refusals show no progress.
const (
	maxInputBuffer = 1 << 20 // written input kept until the server has it
	maxInputFrame  = 16 << 10
	inputWindow    = 64 << 10
	inputNext      = 50 * time.Millisecond
	inputPause     = 200 * time.Millisecond
	maxInputPause  = 3200 * time.Millisecond
	frameTimeout   = 10 * time.Second
)

// input is an execution's written input, kept from the first byte the
// server may lack (base) to the last written (end); next is the offset of
// the next byte to send.
type input struct {
	buf       []byte
	base      uint64
	end       uint64
	next      uint64
	pacer     *time.Timer   // the next paced send, while one is due
	pause     time.Duration // before the next send: inputNext when 0
	refused   bool          // a refusal came since the last send
	refusedAt uint64        // the largest offset those refusals reported
	lastRound uint64        // the offset the previous round of refusals reported
}

// keep appends p and drops the oldest bytes beyond maxInputBuffer.
func (in *input) keep(p []byte) {
	in.buf = append(in.buf, p...)
	in.end += uint64(len(p))
	if over := len(in.buf) - maxInputBuffer; over > 0 {
		in.buf, in.base = in.buf[over:], in.base+uint64(over)
	}
}

// rewind restarts sending from received, the input the server has. It
// returns how many bytes the server lacks that are no longer kept: what
// is kept then follows what the server has.
func (in *input) rewind(received uint64) (lost uint64) {
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
	return lost
}

// window returns the next bytes to send, at most inputWindow from next,
// and whether more remain after them.
func (in *input) window() (from uint64, p []byte, more bool) {
	from = max(in.next, in.base)
	to := min(in.end, from+inputWindow)
	p = append([]byte(nil), in.buf[from-in.base:to-in.base]...)
	in.next = to
	return from, p, to < in.end
}

func (in *input) stopPacing() {
	if in.pacer != nil {
		in.pacer.Stop()
		in.pacer = nil
	}
	in.pause, in.refused, in.lastRound = 0, false, 0
}

// Write sends input. It is kept until the server has it: after a
// reconnect or a refusal, whatever the server lacks is resent by offset,
// so nothing is typed twice or lost. A large write is paced to the
// server's input queue.
func (e *Execution) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	e.in.keep(p)
	send := e.in.pacer == nil && e.readyLocked()
	e.mu.Unlock()
	if send {
		e.flush()
	}
	return len(p), nil
}

// flush sends the next window of input on the connection the channel
// belongs to, and arms the pacer when more remains. If that connection
// is gone, the bytes stay kept and the reattach resends them.
func (e *Execution) flush() {
	e.sendMu.Lock() // frames leave in offset order
	defer e.sendMu.Unlock()
	e.mu.Lock()
	if e.ended || e.ws == nil {
		e.mu.Unlock()
		return
	}
	from, p, more := e.in.window()
	if more && e.in.pacer == nil {
		e.in.pacer = time.AfterFunc(max(e.in.pause, inputNext), e.paced)
	}
	ws, channel := e.ws, e.channel
	e.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), maxInputFrame)
		ctx, cancel := context.WithTimeout(e.c.ctx, frameTimeout)
		err := ws.Write(ctx, websocket.MessageBinary, gateway.AppendInput(nil, channel, from, p[:n]))
		cancel()
		if err != nil {
			return
		}
		p, from = p[n:], from+uint64(n)
	}
}

// paced runs when the pacer fires: after refusals it rewinds to what the
// server reported, then sends the next window.
func (e *Execution) paced() {
	e.mu.Lock()
	e.in.pacer = nil
	var lost uint64
	if e.in.refused {
		lost = e.in.rewind(e.in.refusedAt)
		e.in.refused = false
	} else {
		e.in.pause = 0 // no refusal came meanwhile
	}
	e.mu.Unlock()
	if lost > 0 {
		e.deliver(Event{Kind: "error", Err: &Error{Code: "input_lost", Message: "input older than the resend buffer was not received"}})
	}
	e.flush()
}

// refused handles input the server refused (queue full, ahead of what it
// received, rate limited): after a pause, input is sent again from the
// largest offset the refusals reported. The first refusal after a send
// sets the pause: the shortest after progress, doubled without.
func (e *Execution) refused(received uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	in := &e.in
	if !in.refused {
		if received > in.lastRound || in.pause < inputPause {
			in.pause = inputPause
		} else {
			in.pause = min(2*in.pause, maxInputPause)
		}
		in.lastRound, in.refused, in.refusedAt = received, true, received
	}
	in.refusedAt = max(in.refusedAt, received)
	if in.pacer != nil {
		in.pacer.Stop()
	}
	in.pacer = time.AfterFunc(in.pause, e.paced)
}

// CloseStdin delivers end of file after the input written so far. The
// server closes only once it has all of it; until then the client resends
// from what the server has and asks again, while the server keeps
// receiving more, until ctx ends.
func (e *Execution) CloseStdin(ctx context.Context) error {
	var received uint64
	for stalled := 0; stalled < 20; {
		e.mu.Lock()
		end := e.in.end
		e.mu.Unlock()
		err := e.control(ctx, gateway.Request{Type: gateway.TypeCloseStdin, InputOffset: &end})
		var se *Error
		switch {
		case errors.Is(err, io.ErrClosedPipe) || errors.As(err, &se) && se.Code == "not_running":
			return nil // it ended: an earlier attempt's answer was lost, or it needed no more input
		case se == nil || se.Code != "input_offset":
			return err
		}
		if se.received > received {
			received, stalled = se.received, 0
		} else {
			stalled++
		}
		e.refused(se.received)
		e.mu.Lock()
		wait := 2 * max(e.in.pause, inputPause)
		e.mu.Unlock()
		if err := e.c.sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
	return &Error{Code: "input_offset", Message: "the server stopped receiving input; stdin stays open"}
}

func (e *Execution) readyLocked() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}
