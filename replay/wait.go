package replay

import "context"

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
	if after < r.last || r.closed {
		return nil
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}
