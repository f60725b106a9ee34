package session

import (
	"context"

	"github.com/termgate/termgate/replay"
)

// Subscription follows one execution's events: first the retained history
// after the sequence it was attached at, then live events, with no
// duplicate and no gap across that switch, or an explicit gap when the
// ring no longer holds what was asked for. Not safe for concurrent use.
type Subscription struct {
	id     string
	cursor *replay.Cursor
}

// Attach subscribes to owner's execution id after sequence after (0 for
// everything retained). Detach by dropping the subscription: it holds
// nothing but its cursor.
func (s *Supervisor) Attach(owner, id string, after uint64) (*Subscription, Info, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return nil, Info{}, err
	}
	return &Subscription{id: id, cursor: e.ring.Cursor(after)}, e.info(), nil
}

// Next waits for and returns the next batch: events, or a gap after which
// the subscription continues at the first retained event. It returns
// io.EOF after the exit event, and context.Cause(ctx) when ctx ends. The
// events' Data belongs to the ring: copy it to keep it.
func (sub *Subscription) Next(ctx context.Context) ([]replay.Event, *replay.Gap, error) {
	return sub.cursor.Next(ctx)
}

// After returns the last sequence delivered (or skipped by a gap).
func (sub *Subscription) After() uint64 { return sub.cursor.After() }

// ID returns the execution's ID.
func (sub *Subscription) ID() string { return sub.id }
