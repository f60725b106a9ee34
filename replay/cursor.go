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
// safe for concurrent use.
type Cursor struct {
	ring  *Ring
	after uint64
	// seen is the output bytes appended up to and including after, so that
	// a gap's Bytes is exact. It is 0 (and gaps over-count) only for a cursor
	// created after a sequence already evicted, until its first gap.
	seen uint64
}

// Cursor returns a cursor positioned after sequence after: its first batch
// starts at after+1 (0 for everything retained).
func (r *Ring) Cursor(after uint64) *Cursor {
	return &Cursor{ring: r, after: after, seen: r.seenThrough(after)}
}

// seenThrough returns the output bytes appended up to and including
// sequence after, or a lower bound (0 or all output so far) when after
// is evicted or in the future.
func (r *Ring) seenThrough(after uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after >= r.last {
		return r.outputBytes
	}
	if after+1 < r.first() {
		return 0
	}
	seen := r.evictedBytes
	for i := range int(after + 1 - r.first()) {
		seen += uint64(len(r.slots[r.index(i)].Data))
	}
	return seen
}

// Next waits as Wait does, then returns the next batch: up to 256 events
// and 256 KiB of Data (but at least one event), or a gap. After a gap the
// cursor has moved past it, so the following call returns events from
// gap.To. Next returns io.EOF once the exit event has been returned, and
// context.Cause(ctx) when ctx is done.
//
// The returned slice belongs to the caller; the events' Data belongs to
// the ring and must not be modified.
func (c *Cursor) Next(ctx context.Context) ([]Event, *Gap, error) {
	if err := c.ring.Wait(ctx, c.after); err != nil {
		return nil, nil, err
	}
	c.ring.mu.Lock()
	evs, gap := c.ring.readLocked(nil, c.after, c.seen, cursorMaxEvents, cursorMaxBytes)
	c.ring.mu.Unlock()
	switch {
	case gap != nil:
		c.after = gap.To - 1
		c.seen += gap.Bytes
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

// After returns the last sequence delivered or skipped by a gap.
func (c *Cursor) After() uint64 { return c.after }
