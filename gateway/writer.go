package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
)

// writer is a connection's write side, and the one owner of what waits
// to be written: control messages, input-acks, the channels ready to be
// read, and (drain) the relay's frames. Its conn reads, handles requests
// and queues; the writer writes.
//
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
// is ready, and control messages are drained again before a batch is
// written: a client must never receive output of a channel it does not
// know yet.
type writer struct {
	c *conn // the connection it writes for: its socket, context and close

	control   controlMessages // answers and events for the writer, FIFO, bounded
	ready     readyQueue      // channels with a turn at the writer, FIFO: fair
	inputAcks inputAcks       // input-acks waiting for the writer, at most one per channel
	nb        *nbConn         // the socket's writer that never blocks, nil on TLS (nbconn.go)
	writing   atomic.Bool     // a goroutine is writing (flush)
	wants     atomic.Uint64   // work queued for the writer, counted (flush)
	bytesOut  atomic.Uint64   // message bytes written
	flushers  sync.WaitGroup  // the goroutines kick started
	// flushersMu guards flushersDone: serve waits for the flushers, and
	// kick starts none after that.
	flushersMu   sync.Mutex
	flushersDone bool
}

// flush writes what waits unless another goroutine is writing, which
// then writes it. Before flush, the caller queued its work and counted it
// in wants: a writer that finishes re-checks wants, so nothing queued is
// left behind.
func (w *writer) flush() {
	for w.writing.CompareAndSwap(false, true) {
		seen := w.wants.Load()
		ok := w.drain()
		w.writing.Store(false)
		if !ok || w.wants.Load() == seen {
			return
		}
	}
}

// want counts work queued for the writer; call flush or kick after it.
func (w *writer) want() { w.wants.Add(1) }

// kick has what waits written without waiting on the client: on the
// caller's goroutine when the socket's writer never blocks (nb), else
// from a new goroutine; neither when one is writing already.
func (w *writer) kick() {
	w.want()
	if w.writing.Load() {
		return // it re-checks wants when it is done
	}
	w.flushersMu.Lock()
	if w.flushersDone {
		w.flushersMu.Unlock()
		return // serve returns: nothing more is written
	}
	w.flushers.Add(1)
	w.flushersMu.Unlock()
	if w.nb != nil {
		defer w.flushers.Done()
		w.flush()
		return
	}
	go func() {
		defer w.flushers.Done()
		w.flush()
	}()
}

// useNonBlocking has the connection write through nb, when it has one:
// kick then flushes inline, and a writer that finds nb congested leaves
// the rest for nb's backlog goroutine, which resumes once it is written.
func (w *writer) useNonBlocking(nb *nbConn) {
	if nb == nil {
		return
	}
	w.nb = nb
	nb.idle = w.c.s.cfg.parkAfter
	nb.notify(w.kick, w.stalled)
}

// stalled is nb's backlog not taken within the write timeout: as a
// frame's write past it, the client is closed as too slow.
func (w *writer) stalled(err error) {
	w.c.close(websocket.StatusTryAgainLater, "client too slow")
	w.c.cancel(err)
}

// waitFlushers waits for the flushers kick started; it starts no more.
func (w *writer) waitFlushers() {
	w.flushersMu.Lock()
	w.flushersDone = true
	w.flushersMu.Unlock()
	w.flushers.Wait()
}

// drain writes in rounds until nothing waits; false when the connection
// ended, a write failed or a close started: the close frame follows what
// was written, and the rest waits in the rings for the client's resume.
func (w *writer) drain() bool {
	for {
		if w.c.ctx.Err() != nil || w.c.closing() {
			return false
		}
		if w.nb != nil && w.nb.congested() {
			return true // the backlog's goroutine kicks once it wrote it
		}
		if !w.writeControl() {
			return false
		}
		wrote := false
		if msgs := w.inputAcks.take(); len(msgs) > 0 {
			wrote = true
			if !w.writeInputAcks(msgs) {
				return false
			}
		}
		if ch := w.ready.pop(); ch != nil {
			wrote = true
			if !w.writeControl() || !w.serveChannel(ch) {
				return false
			}
		}
		if f := w.c.forwardsNow(); f != nil && f.queued() && (w.nb == nil || w.nb.roomForBulk(w.kick)) {
			if fr, ok := f.pop(); ok {
				wrote = true
				if !w.writeControl() || !w.writeForward(fr) {
					return false
				}
			}
		}
		if q := w.relayed(); q != nil {
			select {
			case f := <-q.out:
				wrote = true
				if !w.writeControl() || !w.writeRelayed(q, f) {
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
func (w *writer) writeControl() bool {
	ms := w.control.take()
	if ms == nil {
		return true
	}
	defer w.control.done(ms)
	for i := range *ms {
		if i > 0 && w.nb != nil && w.nb.congested() {
			// The rest waits here, counted against the budgets, rather
			// than in nb's backlog; the backlog's goroutine kicks.
			w.control.putBack((*ms)[i:])
			return true
		}
		m := &(*ms)[i]
		ok := true
		if m.raw != nil {
			ok = w.write(websocket.MessageText, m.raw)
		} else {
			ok = w.writeJSON(m.m)
		}
		w.control.wrote(m)
		if !ok {
			w.control.abandon((*ms)[i+1:]) // never written: off the budgets
			return false
		}
	}
	return true
}

// write writes one message. Through nb it cannot block, so it needs no
// deadline (nb's backlog has one); otherwise the write timeout bounds it.
// A client too slow for either is closed with 1013.
func (w *writer) write(typ websocket.MessageType, b []byte) bool {
	w.bytesOut.Add(uint64(len(b)))
	var err error
	if w.nb != nil {
		err = w.c.ws.Write(context.Background(), typ, b)
	} else {
		ctx, cancel := context.WithTimeout(w.c.ctx, w.c.s.cfg.WriteTimeout)
		err = w.c.ws.Write(ctx, typ, b)
		cancel()
	}
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errBacklogStalled):
			w.c.close(websocket.StatusTryAgainLater, "client too slow")
		case w.c.closing() && errors.Is(err, net.ErrClosed):
			// The close frame went first. Cancelling would end the
			// handshake and drop the backlog ahead of it; the handshake
			// ends the connection.
			return false
		}
		w.c.cancel(err)
		return false
	}
	return true
}

func (w *writer) writeJSON(m wire.Message) bool {
	b, err := json.Marshal(m)
	if err != nil {
		w.c.log.Error("encode message", "err", err)
		return true
	}
	return w.write(websocket.MessageText, b)
}

// writeBatch writes a batch read from a channel's subscription.
func (w *writer) writeBatch(ch *channel, b batch) bool {
	if b.gap != nil {
		ch.sent.Store(b.gap.To - 1)
		return w.writeJSON(wire.Message{Type: wire.MsgGap, Channel: ch.id, From: b.gap.From, To: b.gap.To,
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
			if !w.write(websocket.MessageBinary, *frame) {
				return false
			}
			continue
		}
		if !w.writeJSON(eventMessage(ch.id, ev)) {
			return false
		}
	}
	return true
}

// startChannel lets the writer read ch; its attached answer was queued
// first.
func (w *writer) startChannel(ch *channel) {
	ch.wake = func() { w.wake(ch) }
	w.enqueue(ch)
	w.kick()
}

// wake marks ch ready and has the connection written: the subscription's
// callback and detach. It never blocks on the client.
func (w *writer) wake(ch *channel) {
	if w.enqueue(ch) {
		w.kick()
	}
}

// enqueue puts ch in the ready queue unless it waits there already.
func (w *writer) enqueue(ch *channel) bool {
	if !ch.queued.CompareAndSwap(false, true) {
		return false
	}
	w.ready.push(ch)
	return true
}

// serveChannel is one turn of ch at the writer: it writes the batch the
// subscription has, or arms its callback when it has none, or ends the
// channel after its exit, on detach or when the subscription fails.
// false when a write failed.
func (w *writer) serveChannel(ch *channel) bool {
	if ch.finished {
		return true
	}
	ch.queued.Store(false)
	if ch.ctx.Err() != nil {
		w.c.finishChannel(ch)
		return true
	}
	evs, gap, ok, err := ch.sub.TryNext()
	switch {
	case err != nil: // io.EOF after the exit event
		w.c.finishChannel(ch)
		return true
	case !ok:
		if !ch.sub.Notify(ch.wake) {
			w.enqueue(ch) // it has a batch now: the next round reads it
		}
		return true
	}
	if !w.writeBatch(ch, batch{events: evs, gap: gap}) {
		return false
	}
	w.enqueue(ch) // its next turn, after the other ready channels
	return true
}

// writeInputAcks writes the input-acks of channels still attached (the
// one writing only).
func (w *writer) writeInputAcks(msgs []wire.Message) bool {
	for _, m := range msgs {
		if _, ok := w.c.channel(m.Channel); !ok {
			continue // detached meanwhile: its detached answer ended it
		}
		if !w.writeJSON(m) {
			return false
		}
	}
	return true
}

// holdInputAck arms the hold timer unless it is armed: whoever writes
// for the connection first sends the acks waiting, and disarms it;
// otherwise the timer has them written.
func (w *writer) holdInputAck() {
	a := &w.inputAcks
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.armed || a.stopped {
		return
	}
	a.armed = true
	a.running.Add(1) // one per firing to come; the firing or a Stop ends it
	if a.timer == nil {
		a.timer = time.AfterFunc(w.c.s.cfg.inputAckDelay, w.inputAckDue)
		return
	}
	if a.timer.Reset(w.c.s.cfg.inputAckDelay) {
		// A firing was still to come (a take disarmed it while it had
		// begun, and its run then cleared armed): Reset moved it instead
		// of adding one, and it already counts.
		a.running.Done()
	}
}

// inputAckDue is the hold timer firing: no output took the acks in time.
func (w *writer) inputAckDue() {
	defer w.inputAcks.running.Done()
	a := &w.inputAcks
	a.mu.Lock()
	due := a.armed
	a.armed = false
	a.mu.Unlock()
	if due {
		w.kick()
	}
}

// stopInputAcks stops the hold timer for good and waits for a firing
// under way.
func (w *writer) stopInputAcks() {
	a := &w.inputAcks
	a.mu.Lock()
	a.stopped = true
	a.disarmLocked()
	a.mu.Unlock()
	a.running.Wait()
}

// relayed is the relay's FIFO, nil while no frame was queued (or on a
// single node).
func (w *writer) relayed() *relayQueue {
	if w.c.relay == nil {
		return nil
	}
	return w.c.relay.q.Load()
}

// writeRelayed writes one relayed frame and frees its budget and buffer.
func (w *writer) writeRelayed(q *relayQueue, f relayFrame) bool {
	defer q.bytes.release(len(f.b))
	if f.buf != nil {
		defer putRelayBuffer(f.buf)
	}
	return w.write(f.typ, f.b)
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
