package session

import (
	"time"

	"github.com/termgate/termgate/replay"
)

// Output flow. An execution that is not Live never evicts output that an
// acknowledging writer (a subscription with Writer and Ack) has not
// acknowledged: its ring holds it (replay.Hold), and once the ring is
// full of it the output writer waits (replay.Ring.WaitRoom), so the
// sandbox stops reading the program's terminal or pipes and the program
// waits in write(2). Memory stays bounded by the ring.
//
// While no acknowledging writer is attached (before the first attaches,
// and after the last one left) the output after what it acknowledged is
// parked: held for Spec.Hold, so a writer that reconnects within it loses
// nothing. After that the execution runs free and later gaps say the
// hold expired. A writer that does not acknowledge (a client of the
// protocol before acknowledgements) releases the parked hold: it is
// served as before, free running. Stopping an execution (cancel, timeout,
// shutdown) unpins it for good: output never keeps a stopped program
// alive.

// Causes of lost output that Subscription.LossCause reports.
const (
	LossReadOnly    = "read_only"    // a read-only viewer never holds output
	LossLive        = "live"         // the execution runs Live
	LossHoldExpired = "hold_expired" // no acknowledging writer came back within the hold
	LossStopped     = "stopped"      // evicted after the execution was stopped
	LossUnheld      = "unheld"       // evicted while no acknowledging writer held it
)

// flow is an execution's hold state, guarded by execution.mu.
type flow struct {
	holders  int          // subscriptions holding output
	free     int          // writers attached that do not acknowledge
	parked   *replay.Hold // holds for writers who are away; nil when none
	timer    *time.Timer  // expires parked
	touched  time.Time    // when parked was made or last acknowledged
	expired  bool         // a parked hold expired
	unpinned bool         // the execution is being stopped
}

// parkLocked holds the output after acked for Spec.Hold, for a writer who
// is not attached. Called with e.mu held.
func (e *execution) parkLocked(acked uint64) {
	f := &e.flow
	if e.spec.Live || f.unpinned || f.parked != nil || f.free > 0 || e.ring.Closed() {
		return // a writer that does not acknowledge is served free running
	}
	h := e.ring.Hold(acked)
	f.parked, f.touched = h, time.Now()
	f.timer = time.AfterFunc(e.spec.Hold, func() { e.expireHold(h) })
}

// expireHold releases parked hold h once Spec.Hold passed since it was
// last acknowledged.
func (e *execution) expireHold(h *replay.Hold) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := &e.flow
	if f.parked != h {
		return // replaced or released meanwhile
	}
	if left := e.spec.Hold - time.Since(f.touched); left > 0 {
		f.timer.Reset(left) // acknowledged by a poll meanwhile
		return
	}
	e.unparkLocked()
	f.expired = true
	e.s.log.Info("hold expired: output runs free", "execution", e.key.id, "tenant", e.key.owner)
}

// unparkLocked releases the parked hold, if any. Called with e.mu held.
func (e *execution) unparkLocked() {
	f := &e.flow
	if f.parked == nil {
		return
	}
	f.timer.Stop()
	f.parked.Release()
	f.parked, f.timer = nil, nil // the timer's closure holds the hold
}

// holdLocked returns a hold for a new acknowledging writer after after,
// which replaces the parked one; nil when the execution does not hold.
// Called with e.mu held.
func (e *execution) holdLocked(after uint64) *replay.Hold {
	if e.spec.Live || e.flow.unpinned {
		return nil
	}
	h := e.ring.Hold(after)
	e.flow.holders++
	e.unparkLocked()
	return h
}

// unhold releases a writer's hold; the last one parks what it had not
// acknowledged.
func (e *execution) unhold(h *replay.Hold) {
	e.mu.Lock()
	e.flow.holders--
	if e.flow.holders == 0 {
		e.parkLocked(h.Acked())
	}
	e.mu.Unlock()
	h.Release()
}

// unfree counts out a writer that did not acknowledge; with the last one
// gone, the output after acked is parked unless a writer holds it.
func (e *execution) unfree(acked uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flow.free--
	if e.flow.free == 0 && e.flow.holders == 0 {
		e.parkLocked(acked)
	}
}

// unpin stops holding output for good: the execution is being stopped.
func (e *execution) unpin() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flow.unpinned = true
	e.unparkLocked()
	e.ring.Unpin()
}

// lossCause says why output may have been lost for a reader.
func (e *execution) lossCause(readOnly bool) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case readOnly:
		return LossReadOnly
	case e.spec.Live:
		return LossLive
	case e.flow.expired:
		return LossHoldExpired
	case e.flow.unpinned:
		return LossStopped
	}
	return LossUnheld
}

// AckPoll counts a writer's poll for the events after after as its
// acknowledgement of them (the HTTP API's long poll): while no
// acknowledging writer is attached, the parked hold moves to after and
// its hold window starts again. A poller that keeps polling within the
// hold window so loses nothing.
func (s *Supervisor) AckPoll(owner, id string, after uint64) error {
	e, err := s.lookup(owner, id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f := &e.flow
	if f.parked == nil {
		return nil
	}
	if err := f.parked.Ack(after); err != nil {
		return ErrAfter
	}
	f.touched = time.Now()
	return nil
}

// RingStats returns the state of an execution's event history: what it
// retains, holds and evicted.
func (s *Supervisor) RingStats(owner, id string) (replay.Stats, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return replay.Stats{}, err
	}
	return e.ring.Stats(), nil
}
