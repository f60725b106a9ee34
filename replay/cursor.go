package replay

import (
	"context"
	"io"
)

// Batch limits of Cursor.Next: large enough to replay a full default ring
// in a few calls, small enough that one batch is one reasonable message.
const (
	cursorMaxEvents = 256
	cursorMaxBytes  = 256 << 10
)

// Cursor is one reader's position in a ring: it returns the history after
// a sequence, then follows live events, with no duplicate and no silent
// loss. Any number of cursors may read one ring; a Cursor itself is not
// safe for concurrent use. A cursor needs no closing: drop it.
type Cursor struct {
	ring  *Ring
	after uint64
	// seen is the output bytes appended up to and including after, so that
	// a gap's Bytes is exact. It is a lower bound (and gaps over-count) only
	// for a cursor created by Cursor at an evicted sequence, until its
	// first gap.
	seen  uint64
	guess bool // seen is a lower bound: the next gap's Bytes is Inexact
	// armed: Notify armed the cursor and notify is its callback (both
	// under the ring's lock).
	armed  bool
	notify func()
	held   []*slab // slabs lent to the last batch, returned by the next Next
	// buf holds the last batch's Data in a backed ring, whose log the
	// writer reuses at once: a copy costs less than keeping the writer
	// off leased log memory, which would make the log unbounded.
	buf []byte
}

// Cursor returns a cursor positioned after sequence after: its first batch
// starts at after+1 (0 for everything retained).
func (r *Ring) Cursor(after uint64) *Cursor {
	seen, known := r.seenThrough(after)
	return &Cursor{ring: r, after: after, seen: seen, guess: !known}
}

// CursorSeen is Cursor for a reader that counted seen, the output bytes
// up to and including after (the Data of the events it received plus
// the Bytes of its gaps), so that a gap is exact even when after was
// evicted. Where the ring still knows, its own count wins.
func (r *Ring) CursorSeen(after, seen uint64) *Cursor {
	if own, known := r.seenThrough(after); known {
		seen = own
	}
	return &Cursor{ring: r, after: after, seen: seen}
}

// seenThrough returns the output bytes appended up to and including
// sequence after, and whether the ring knows: it does not for an
// evicted after (0 is returned). An after in the future counts all
// output so far.
func (r *Ring) seenThrough(after uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after > 0 && after+1 < r.first() && after < r.last {
		return 0, false
	}
	return r.cumThrough(after), true
}

// Next waits as Wait does, then returns the next batch: up to 256 events
// and 256 KiB of Data (but at least one event), or a gap. After a gap the
// cursor has moved past it, so the following call returns events from
// gap.To. Next returns io.EOF once the exit event has been returned, and
// context.Cause(ctx) when ctx is done.
//
// The returned slice belongs to the caller, but the events' Data is lent:
// it must not be modified, and it stays valid only until the next call to
// Next, after which the ring may reuse the memory. Copy it to keep it.
func (c *Cursor) Next(ctx context.Context) ([]Event, *Gap, error) {
	c.release()
	if err := c.ring.Wait(ctx, c.after); err != nil {
		return nil, nil, err
	}
	return c.next()
}

// TryNext is Next without waiting: ok is false, and nothing else is
// returned, when the ring is open and has no event after the cursor yet
// (Notify arms a callback for when it has).
func (c *Cursor) TryNext() (evs []Event, gap *Gap, ok bool, err error) {
	c.release()
	if !c.ring.ready(c.after) {
		return nil, nil, false, nil
	}
	evs, gap, err = c.next()
	return evs, gap, true, err
}

// next reads the batch or gap after the cursor, which need not wait.
func (c *Cursor) next() ([]Event, *Gap, error) {
	evs, gap := c.read()
	switch {
	case gap != nil:
		c.after = gap.To - 1
		c.seen += gap.Bytes
		c.guess = false
		return nil, gap, nil
	case len(evs) == 0:
		// Wait returned without events: the ring is closed and the exit event
		// was delivered (or after is beyond it).
		return nil, nil, io.EOF
	}
	c.after = evs[len(evs)-1].Seq
	for i := range evs {
		c.seen += uint64(len(evs[i].Data))
	}
	return evs, nil, nil
}

// read returns the next batch or gap and borrows the batch's slabs.
func (c *Cursor) read() ([]Event, *Gap) {
	r := c.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	i, n, gap := r.span(c.after, c.seen, c.guess, cursorMaxEvents, cursorMaxBytes)
	r.eachSlab(i, n, func(s *slab) {
		s.leases++
		c.held = append(c.held, s)
	})
	if n == 0 {
		return nil, gap
	}
	var evs []Event
	evs, c.buf = r.appendEvents(nil, i, n, c.buf[:0])
	return evs, gap
}

// release returns the slabs lent to the last batch.
func (c *Cursor) release() {
	if len(c.held) == 0 {
		return
	}
	r := c.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range c.held {
		s.leases--
		r.recycle(s)
	}
	clear(c.held)
	c.held = c.held[:0]
}

// After returns the last sequence delivered or skipped by a gap.
func (c *Cursor) After() uint64 { return c.after }
