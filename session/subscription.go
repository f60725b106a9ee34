package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/termgate/termgate/replay"
)

// Subscription follows one execution's events: first the retained history
// after the sequence it was attached at, then live events, with no
// duplicate and no gap across that switch, or an explicit gap when the
// ring no longer holds what was asked for. Next is not safe for
// concurrent use; Ack and Close may be called from another goroutine.
type Subscription struct {
	id       string
	e        *execution
	cursor   *replay.Cursor
	readOnly bool
	hold     *replay.Hold                // nil unless an acknowledging writer of a holding execution
	snapshot *Snapshot                   // in place of evicted history; nil when none
	pin      atomic.Pointer[replay.Hold] // keeps the events after the snapshot until the first batch
	free     bool                        // a writer that does not acknowledge: nothing is held while it is attached
	// resumeGap: a resume after evicted history; its first gap is counted (metrics.go).
	resumeGap bool
	close     sync.Once
}

// AttachOptions say how a subscription reads.
type AttachOptions struct {
	// After is the last sequence the reader has (0 for everything
	// retained). Beyond the newest event it is ErrAfter.
	After uint64
	// Seen, when set, is the output bytes up to and including After as the
	// reader counted them (events' data plus gaps' bytes), which makes a
	// gap exact even when After was evicted.
	Seen *uint64
	// Incarnation is the one After belongs to; when it is set and is not
	// the execution's, the reader's position means nothing here and it
	// reads from the start.
	Incarnation string
	// Writer: the reader may write to the execution (not read-only).
	Writer bool
	// Ack: the reader acknowledges what it processed (Ack). A writer that
	// does, holds the output it has not acknowledged; one that does not
	// releases the parked hold and is served free running (flow.go).
	Ack bool
	// Snapshot: when the execution is a terminal and history after After
	// was evicted, start with a snapshot of its screen in its place
	// (Subscription.Snapshot) and continue after it.
	Snapshot bool
}

// Attach subscribes a viewer to owner's execution id after sequence after
// (0 for everything retained): Subscribe with only After. Close it when
// done.
func (s *Supervisor) Attach(owner, id string, after uint64) (*Subscription, Info, error) {
	return s.Subscribe(owner, id, AttachOptions{After: after})
}

// Subscribe subscribes to owner's execution id as o says. Close the
// subscription when done: an acknowledging writer's hold is parked then.
func (s *Supervisor) Subscribe(owner, id string, o AttachOptions) (*Subscription, Info, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return nil, Info{}, err
	}
	if o.Incarnation != "" && o.Incarnation != e.incarnation {
		o.After, o.Seen = 0, nil
	}
	if _, last := e.ring.Bounds(); o.After > last {
		return nil, Info{}, fmt.Errorf("%w: after %d, newest is %d", ErrAfter, o.After, last)
	}
	sub := &Subscription{id: id, e: e, readOnly: !o.Writer}
	after := o.After
	if o.Snapshot && e.screen != nil {
		var pin *replay.Hold
		if sub.snapshot, pin = e.snapshotFor(o.After, o.Seen); sub.snapshot != nil {
			sub.pin.Store(pin)
			o.After, o.Seen = sub.snapshot.Seq, &sub.snapshot.Seen
		}
	}
	sub.countResume(after, sub.snapshot != nil)
	if o.Seen != nil {
		sub.cursor = e.ring.CursorSeen(o.After, *o.Seen)
	} else {
		sub.cursor = e.ring.Cursor(o.After)
	}
	if o.Writer {
		e.mu.Lock()
		e.writerAttachedLocked()
		if o.Ack {
			sub.hold = e.holdLocked(o.After)
		} else {
			sub.free = true
			e.flow.free++
			e.unparkLocked()
		}
		e.mu.Unlock()
	}
	return sub, e.info(), nil
}

// Next waits for and returns the next batch: events, or a gap after which
// the subscription continues at the first retained event. It returns
// io.EOF after the exit event, and context.Cause(ctx) when ctx ends. The
// events' Data belongs to the ring: copy it to keep it.
func (sub *Subscription) Next(ctx context.Context) ([]replay.Event, *replay.Gap, error) {
	evs, gap, err := sub.cursor.Next(ctx)
	sub.unpinSnapshot()
	sub.countGap(gap)
	return evs, gap, err
}

// TryNext is Next without waiting: ok is false, and nothing else is
// returned, when there is no batch yet (Notify arms a callback for when
// there is). It is not safe for concurrent use with Next or itself.
func (sub *Subscription) TryNext() ([]replay.Event, *replay.Gap, bool, error) {
	evs, gap, ok, err := sub.cursor.TryNext()
	if !ok {
		return nil, nil, false, nil
	}
	sub.unpinSnapshot()
	sub.countGap(gap)
	return evs, gap, true, err
}

// Notify arms f to be called once when TryNext has a batch (or the end)
// for the subscription, in place of a goroutine waiting in Next; false,
// arming nothing, when it has one already. f runs on the goroutine that
// appended to the execution and must not block. StopNotify disarms it.
func (sub *Subscription) Notify(f func()) bool { return sub.cursor.Notify(f) }

// StopNotify disarms Notify's callback, which may still run once if it
// was being called.
func (sub *Subscription) StopNotify() { sub.cursor.StopNotify() }

// Snapshot returns the screen that stands in for evicted history, to be
// applied before the first batch; nil when none (AttachOptions.Snapshot).
func (sub *Subscription) Snapshot() *Snapshot { return sub.snapshot }

// unpinSnapshot lets the ring evict the events after the snapshot once the
// reader has had its first batch of them.
func (sub *Subscription) unpinSnapshot() {
	if pin := sub.pin.Swap(nil); pin != nil {
		pin.Release()
	}
}

// Ack acknowledges the events up to and including seq: the execution
// may drop them and read on. Without a hold it does nothing; beyond the
// newest event it is ErrAck.
func (sub *Subscription) Ack(seq uint64) error {
	if sub.hold == nil {
		return nil
	}
	if err := sub.hold.Ack(seq); err != nil {
		if errors.Is(err, replay.ErrAckAhead) {
			return fmt.Errorf("%w: %w", ErrAck, err)
		}
		return err
	}
	return nil
}

// Holds reports whether the subscription holds output it has not
// acknowledged.
func (sub *Subscription) Holds() bool { return sub.hold != nil }

// LossCause says why a gap this subscription met lost output: one of the
// Loss constants.
func (sub *Subscription) LossCause() string { return sub.e.lossCause(sub.readOnly) }

// Close ends the subscription. The output an acknowledging writer had
// not acknowledged stays held for the execution's hold window when it
// was the last. Closing twice is harmless.
func (sub *Subscription) Close() {
	sub.close.Do(func() {
		sub.unpinSnapshot()
		if sub.hold != nil {
			sub.e.unhold(sub.hold)
		}
		if sub.free {
			sub.e.unfree(sub.cursor.After())
		}
		if !sub.readOnly {
			sub.e.writerDetached()
		}
	})
}

// After returns the last sequence delivered (or skipped by a gap).
func (sub *Subscription) After() uint64 { return sub.cursor.After() }

// ID returns the execution's ID.
func (sub *Subscription) ID() string { return sub.id }
