package replay

import (
	"context"
	"slices"
)

// Wait blocks until an event with Seq > after exists, or the ring is
// closed, or ctx is done. It returns nil in the first two cases and
// context.Cause(ctx) in the last. A done ctx wins: Wait then returns at
// once, even when events are available.
//
// Wait does not poll: Append closes a channel that waiters share, and the
// channel exists only while someone waits.
func (r *Ring) Wait(ctx context.Context, after uint64) error {
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		wake := r.waitChan(after)
		if wake == nil {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// waitChan returns nil when a reader after after need not wait, and
// otherwise a channel that the next Append closes.
func (r *Ring) waitChan(after uint64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readyLocked(after) {
		return nil
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}

// Notify arms c to call f once, when an event after c's position exists
// or the ring is closed, instead of a goroutine waiting in Next. It
// reports false, and arms nothing, when that is so already: call TryNext
// then. f runs on the appending goroutine after the ring's lock is
// released, so it may call into the ring, but it must not block: it
// delays the writer of the ring. A cursor is armed at most once at a
// time; Notify on an armed cursor replaces f. StopNotify disarms it.
func (c *Cursor) Notify(f func()) bool {
	r := c.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readyLocked(c.after) {
		return false
	}
	c.notify = f
	if !c.armed {
		c.armed = true
		r.notified = append(r.notified, c)
	}
	return true
}

// StopNotify disarms c: its f is not called unless an Append took it
// already (it may then run once, concurrently with StopNotify).
func (c *Cursor) StopNotify() {
	r := c.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if !c.armed {
		return
	}
	c.armed, c.notify = false, nil
	if i := slices.Index(r.notified, c); i >= 0 {
		r.notified = slices.Delete(r.notified, i, i+1) // clears the freed slot
	}
}

// takeNotified disarms the armed cursors and moves their callbacks to
// firing, for unlock to call. Called with r.mu held, when an event was
// appended.
func (r *Ring) takeNotified() {
	for i, c := range r.notified {
		r.firing = append(r.firing, c.notify)
		c.armed, c.notify = false, nil
		r.notified[i] = nil
	}
	r.notified = r.notified[:0]
}

// unlock releases r.mu, then calls the callbacks an Append took.
func (r *Ring) unlock() {
	fs := r.firing
	r.firing = nil
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// ready reports whether a reader after after need not wait.
func (r *Ring) ready(after uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyLocked(after)
}

func (r *Ring) readyLocked(after uint64) bool { return after < r.last || r.closed }
