package session

import (
	"fmt"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
)

// Timeouts. An execution has up to two, and whichever comes first stops
// it (it ends timed_out):
//
//   - the absolute timeout (Spec.Timeout), wall-clock time from the start:
//     Config.DefaultTimeout for a batch execution (pipes), and
//     Config.DefaultInteractiveTimeout for an interactive one;
//   - the idle timeout (Spec.IdleTimeout), for interactive executions
//     only (every PTY execution, and any with Spec.Interactive): it fires
//     once no writer has been attached and no input has arrived for that
//     long. Its clock starts at the start, and again at each input and
//     when the last writer leaves; it stands still while a writer is
//     attached.
//
// Before either fires, a notice event (replay.KindNotice) in the ring
// warns every reader, in order with the rest: Config.TimeoutWarning
// before (at most half the timeout, so a short one still warns before
// it fires). Input or a writer attaching after an idle warning withdraws
// it with a notice of reason NoticeIdleCancelled; the idle clock starts
// again. The idle timeout does not warn when the absolute one comes
// first: that one warns.
//
// Input does not reset a timer: it records the time, and the timer, when
// it fires, sleeps again until the deadline that time gives. A keystroke
// costs a timestamp.

// Defaults of the timeouts (Config).
const (
	DefaultIdleTimeout        = 30 * time.Minute
	DefaultInteractiveTimeout = 12 * time.Hour
	DefaultTimeoutWarning     = 60 * time.Second
)

// Reasons of notice events.
const (
	NoticeTimeout       = "timeout"                // the absolute timeout fires at the notice's At
	NoticeIdleTimeout   = "idle_timeout"           // the idle timeout fires at At unless input arrives or a writer attaches
	NoticeIdleCancelled = "idle_timeout_cancelled" // input arrived or a writer attached: the idle warning no longer holds
	NoticeNetwork       = "network"                // a connection was refused, or the network policy changed (network.go)
)

// timeouts is an execution's timeout state, guarded by execution.mu.
type timeouts struct {
	armed      bool        // the process runs: timers may be set
	ended      bool        // the process ended: no timer is set again
	absolute   *time.Timer // the absolute timeout's warning, then its stop
	idle       *time.Timer // the idle timeout's warning, then its stop; stopped while a writer is attached
	writers    int         // writers attached
	active     time.Time   // the idle clock's start: the start, the last input, or the last writer leaving
	idleWarned bool        // an idle warning is in force
	idleStop   bool        // the idle timeout stopped the execution
}

// normalizeTimeouts fills the timeouts of spec: whether it is
// interactive, and its defaults.
func (s *Supervisor) normalizeTimeouts(spec *Spec) error {
	if spec.Policy.TTY != nil {
		spec.Interactive = true
	}
	if !spec.Interactive {
		if spec.IdleTimeout != 0 {
			return fmt.Errorf("%w: an idle timeout needs an interactive execution (a terminal, or interactive)", ErrInvalidSpec)
		}
		if spec.Timeout == 0 {
			spec.Timeout = s.cfg.DefaultTimeout
		}
		return nil
	}
	if spec.Timeout == 0 {
		spec.Timeout = s.cfg.DefaultInteractiveTimeout
	}
	if spec.IdleTimeout == 0 {
		spec.IdleTimeout = s.cfg.DefaultIdleTimeout
	}
	return nil
}

// warningLead is how long before a timeout of d its warning comes: the
// configured warning, at most d/2; 0 for none.
func (e *execution) warningLead(d time.Duration) time.Duration {
	return max(min(e.s.cfg.TimeoutWarning, d/2), 0)
}

// armTimeouts sets the timers once the process runs. Called by supervise.
func (e *execution) armTimeouts() {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &e.timeouts
	t.armed = true
	if e.spec.Timeout > 0 {
		deadline := e.started.Add(e.spec.Timeout)
		wake := deadline.Add(-e.warningLead(e.spec.Timeout))
		t.absolute = time.AfterFunc(time.Until(wake), func() { e.absoluteTick(deadline) })
	}
	e.scheduleIdleLocked()
}

// disarmTimeouts stops the timers: the process ended. Called by exited.
func (e *execution) disarmTimeouts() {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &e.timeouts
	t.ended = true
	if t.absolute != nil {
		t.absolute.Stop()
	}
	if t.idle != nil {
		t.idle.Stop()
	}
}

// absoluteTick warns of the absolute timeout, or stops the execution
// once deadline passed.
func (e *execution) absoluteTick(deadline time.Time) {
	e.mu.Lock()
	t := &e.timeouts
	if t.ended || e.stopping != "" {
		e.mu.Unlock()
		return
	}
	if left := time.Until(deadline); left > 0 {
		e.noticeLocked(NoticeTimeout, deadline,
			fmt.Sprintf("This %s will be stopped in %v, when its timeout of %v ends.", e.noun(), left.Round(time.Second), e.spec.Timeout))
		t.absolute.Reset(left)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.stopAs(StatusTimedOut, false)
}

// idleDeadline is when the idle timeout fires if nothing happens.
// Called with e.mu held.
func (e *execution) idleDeadlineLocked() time.Time {
	t := &e.timeouts
	if t.active.IsZero() {
		t.active = e.started
	}
	return t.active.Add(e.spec.IdleTimeout)
}

// scheduleIdleLocked sets the idle timer for the next warning or stop,
// when the idle timeout applies and no writer is attached. Called with
// e.mu held.
func (e *execution) scheduleIdleLocked() {
	t := &e.timeouts
	if !t.armed || t.ended || t.writers > 0 || e.spec.IdleTimeout <= 0 {
		return
	}
	wake := e.idleDeadlineLocked()
	if !t.idleWarned {
		wake = wake.Add(-e.warningLead(e.spec.IdleTimeout))
	}
	if t.idle == nil {
		t.idle = time.AfterFunc(time.Until(wake), e.idleTick)
		return
	}
	t.idle.Reset(time.Until(wake))
}

// idleTick warns of the idle timeout, or stops the execution once it
// has been idle for the idle timeout; when input moved the clock
// meanwhile, it sleeps again.
func (e *execution) idleTick() {
	e.mu.Lock()
	t := &e.timeouts
	if t.ended || t.writers > 0 || e.stopping != "" {
		e.mu.Unlock()
		return
	}
	deadline := e.idleDeadlineLocked()
	left := time.Until(deadline)
	if left <= 0 {
		e.mu.Unlock()
		e.stopAs(StatusTimedOut, true)
		return
	}
	if !t.idleWarned && left <= e.warningLead(e.spec.IdleTimeout) {
		if e.spec.Timeout > 0 && !e.started.Add(e.spec.Timeout).After(deadline) {
			e.mu.Unlock()
			return // the absolute timeout comes first, and warns
		}
		t.idleWarned = true
		e.noticeLocked(NoticeIdleTimeout, deadline, fmt.Sprintf(
			"This %s will be stopped in %v: no writer has been attached and no input has arrived for %v. Type or attach to keep it.",
			e.noun(), left.Round(time.Second), (e.spec.IdleTimeout-left).Round(time.Second)))
	}
	e.scheduleIdleLocked()
	e.mu.Unlock()
}

// inputArrived restarts the idle clock: the execution accepted input.
func (e *execution) inputArrived() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timeouts.active = time.Now()
	e.withdrawIdleWarningLocked("input arrived")
}

// writerAttachedLocked stops the idle clock while the writer stays.
// Called with e.mu held.
func (e *execution) writerAttachedLocked() {
	t := &e.timeouts
	t.writers++
	if t.idle != nil {
		t.idle.Stop()
	}
	e.withdrawIdleWarningLocked("a writer attached")
}

// writerDetached restarts the idle clock when the last writer left.
func (e *execution) writerDetached() {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &e.timeouts
	if t.writers--; t.writers > 0 {
		return
	}
	t.active = time.Now()
	e.scheduleIdleLocked()
}

// withdrawIdleWarningLocked tells readers that the idle warning in force,
// if any, no longer holds. Called with e.mu held.
func (e *execution) withdrawIdleWarningLocked(why string) {
	t := &e.timeouts
	if !t.idleWarned || t.ended || e.stopping != "" {
		return
	}
	t.idleWarned = false
	e.noticeLocked(NoticeIdleCancelled, time.Time{}, "The "+e.noun()+" is no longer idle ("+why+"): it keeps running.")
}

// noun is what notices call the execution.
func (e *execution) noun() string {
	if e.spec.Policy.TTY != nil {
		return "shell"
	}
	return "execution"
}

// noticeLocked appends a notice. It is appended under e.mu so that
// notices reach the ring in the order they were decided (a warning is
// never read after the notice withdrawing it). Called with e.mu held.
func (e *execution) noticeLocked(reason string, at time.Time, msg string) {
	e.ring.Append(replay.Event{Kind: replay.KindNotice, Notice: &replay.NoticeInfo{Reason: reason, Message: msg, At: at}})
}

// timeoutReason says which timeout stopped the execution, for people
// (Result.Reason) and for the exit event. Called with e.mu held.
func (e *execution) timeoutReason(exit sandbox.Exit) (reason, ringReason string) {
	if e.timeouts.idleStop {
		return fmt.Sprintf("idle timeout: no writer attached and no input for %v; %s", e.spec.IdleTimeout, exit), string(StatusTimedOut) + ":idle"
	}
	return fmt.Sprintf("timed out after %v; %s", e.spec.Timeout, exit), string(StatusTimedOut)
}
