package session

import (
	"fmt"
	"sync"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
)

// ResizeCoalesce is how long after a resize is applied the next ones of
// the same execution wait: a burst reaches the terminal, the ring and the
// emulator as its first size at once and its last size ResizeCoalesce
// later, never as every size in between. A person dragging a window sees
// the program follow 20 times a second; a client flooding resizes costs
// the program, the ring and the emulator as little.
const ResizeCoalesce = 50 * time.Millisecond

// resizes coalesces an execution's resizes (Supervisor.Resize).
type resizes struct {
	mu      sync.Mutex
	applied sandbox.WindowSize // the size applied last; zero before the first
	pending sandbox.WindowSize // the last size asked for while the window was open; zero: none
	timer   *time.Timer        // non-nil while the window after an applied resize is open
}

// resize applies ws to proc now, or, within ResizeCoalesce of the last
// resize applied, keeps it to apply when that window closes (replacing
// any kept before). A size the terminal already has is not applied again:
// it adds no event.
func (e *execution) resize(proc Process, ws sandbox.WindowSize) error {
	r := &e.resizes
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.pending = ws
		return nil
	}
	return e.applyResizeLocked(proc, ws)
}

// applyResizeLocked sets the terminal's size and records it in the ring,
// opening a window in which further resizes wait. Called with
// e.resizes.mu held.
func (e *execution) applyResizeLocked(proc Process, ws sandbox.WindowSize) error {
	r := &e.resizes
	if ws == r.applied {
		return nil
	}
	if err := proc.Resize(ws); err != nil {
		return fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	e.ring.Append(replay.Event{Kind: replay.KindResize, Rows: ws.Rows, Cols: ws.Cols})
	r.applied = ws
	r.timer = time.AfterFunc(ResizeCoalesce, e.closeResizeWindow)
	return nil
}

// closeResizeWindow applies the last size asked for while the window was
// open, if any and the execution still runs (which opens a new window).
func (e *execution) closeResizeWindow() {
	r := &e.resizes
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	ws := r.pending
	if ws == (sandbox.WindowSize{}) {
		return
	}
	r.pending = sandbox.WindowSize{}
	if e.s.detached.Load() {
		return // the next server owns the ring and the screen now
	}
	if proc, err := e.running(); err == nil {
		e.applyResizeLocked(proc, ws) // an execution that ended meanwhile has no size to keep
	}
}
