package replay

import (
	"context"
	"errors"
	"fmt"
)

// ErrAckAhead is returned by Hold.Ack for a sequence the ring has not
// reached.
var ErrAckAhead = errors.New("replay: ack beyond the newest event")

// Hold is an acknowledging reader's claim on the ring: the ring never
// evicts an event after the hold's acknowledged sequence. While holds
// keep MaxBytes of output or MaxEvents events unacknowledged, the ring is
// full and WaitRoom blocks, so the writer stops producing until an Ack
// or a Release makes room. Appends never block and never fail for a
// hold: a ring that is full keeps what it is given, and only beyond twice
// its bounds (which a writer that calls WaitRoom never reaches, except
// through control events) evicts held events anyway.
//
// A Hold is safe for concurrent use. Release it when the reader goes.
type Hold struct {
	ring     *Ring
	acked    uint64 // guarded by ring.mu
	released bool   // guarded by ring.mu
}

// Hold returns a hold that has acknowledged everything up to and
// including after. An after older than the retained history holds from
// the oldest retained event; one beyond the newest holds nothing yet.
func (r *Ring) Hold(after uint64) *Hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &Hold{ring: r, acked: min(max(after, r.first()-1), r.last)}
	r.holds = append(r.holds, h)
	r.refloor()
	return h
}

// Ack acknowledges the events up to and including seq. Acknowledging
// less than before changes nothing; a seq the ring has not reached is
// ErrAckAhead and changes nothing either.
func (h *Hold) Ack(seq uint64) error {
	r := h.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq > r.last {
		return fmt.Errorf("%w: ack of %d, newest is %d", ErrAckAhead, seq, r.last)
	}
	if h.released || seq <= h.acked {
		return nil
	}
	h.acked = seq
	r.refloor()
	return nil
}

// Acked returns the sequence acknowledged so far.
func (h *Hold) Acked() uint64 {
	h.ring.mu.Lock()
	defer h.ring.mu.Unlock()
	return h.acked
}

// Release drops the hold; the ring may evict what it held. Releasing
// twice is harmless.
func (h *Hold) Release() {
	r := h.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	for i, o := range r.holds {
		if o == h {
			r.holds = append(r.holds[:i], r.holds[i+1:]...)
			break
		}
	}
	r.refloor()
}

// Unpin makes every hold, present and future, powerless: the ring evicts
// as if there were none and WaitRoom never blocks again. It is for an
// execution being stopped, whose output must not keep it alive.
func (r *Ring) Unpin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unpinned = true
	r.refloor()
}

// WaitRoom blocks while the ring is full of held output: until acks or
// releases bring what the holds keep below the ring's bounds, the ring
// is closed or unpinned, or ctx is done (then it returns
// context.Cause(ctx)). Without holds it returns at once.
func (r *Ring) WaitRoom(ctx context.Context) error {
	for {
		room := r.roomChan()
		if room == nil {
			return nil
		}
		select {
		case <-room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// roomChan returns nil when the ring is not full, and otherwise a channel
// closed by the next change of the holds.
func (r *Ring) roomChan() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fullLocked() {
		return nil
	}
	if r.room == nil {
		r.room = make(chan struct{})
	}
	return r.room
}

// Full reports whether holds keep the ring at its bounds: a writer that
// respects holds waits (WaitRoom) before it appends more output.
func (r *Ring) Full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fullLocked()
}

func (r *Ring) fullLocked() bool {
	if !r.pinned() || r.closed {
		return false
	}
	from := r.heldFrom()
	return r.outputBytes-r.cumThrough(from) >= uint64(r.maxBytes) || r.last-from >= uint64(r.maxEvents)
}

// heldFrom returns the sequence after which the retained events are held:
// the floor, or the event before the oldest retained when the hard
// ceiling evicted held events, which no longer count. Called with r.mu
// held, while pinned.
func (r *Ring) heldFrom() uint64 { return max(r.floor, r.first()-1) }

// pinned reports whether holds restrict eviction.
func (r *Ring) pinned() bool { return len(r.holds) > 0 && !r.unpinned }

// refloor recomputes the lowest acknowledged sequence of the holds and
// wakes writers waiting for room. Called with r.mu held.
func (r *Ring) refloor() {
	if r.pinned() {
		r.floor = r.holds[0].acked
		for _, h := range r.holds[1:] {
			r.floor = min(r.floor, h.acked)
		}
	}
	if r.room != nil {
		close(r.room)
		r.room = nil
	}
}

// evictable reports whether the oldest retained event may go to keep the
// ring within its bounds, when the ring would hold events events: nothing
// holds it, or the ring is beyond twice its bounds, the hard ceiling that
// keeps memory bounded whatever happens (evictOldest counts what it
// forces out). Called before the new event is stored, with events and
// incoming (its output bytes) counting it.
func (r *Ring) evictable(events, incoming int) bool {
	if !r.pinned() || r.first() <= r.floor {
		return true
	}
	return r.retainedBytes()+uint64(incoming) > 2*uint64(r.maxBytes) || events > 2*r.maxEvents
}
