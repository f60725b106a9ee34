package session

import (
	"sync"

	"github.com/termgate/termgate/replay"
)

// Screen state. A PTY execution's ring holds only its recent history; a
// client whose position was evicted would redraw from a partial history
// and see a wrong screen. So the supervisor keeps a terminal emulator
// just behind the ring: the ring hands it every event it evicts
// (replay.Ring.OnEvict), and its state is always the screen as it was
// after the newest evicted event, so that a snapshot of it plus the
// retained events reproduce the screen exactly. It costs nothing until
// history is first evicted. The ring's hook only queues the evicted
// events; the output writer feeds them to the emulator after its append,
// outside the ring's lock.

// terminal is the subset of *screen.Screen the supervisor uses.
type terminal interface {
	Write(p []byte)
	Resize(rows, cols int)
	Snapshot(dst []byte) []byte
	Size() (rows, cols int)
}

// newTerminal makes the emulator of a terminal of rows x cols with
// scrollback lines of history.
var newTerminal func(rows, cols, scrollback int) terminal

// Snapshot is a terminal's screen standing in for history the ring no
// longer holds: Data reproduces, on a fresh terminal of Rows x Cols, the
// screen after event Seq; Seen is the output bytes up to and including
// Seq. The subscription continues after Seq. From, To and Bytes describe
// the events it replaces for this reader (Bytes exact unless Inexact),
// like a replay.Gap.
type Snapshot struct {
	Seq, Seen       uint64
	Rows, Cols      int
	Data            []byte
	From, To, Bytes uint64
	Inexact         bool
}

// screenState is an execution's emulator and the evicted output it has
// not been fed yet.
type screenState struct {
	rows, cols, scrollback int // the size the emulator starts with

	mu      sync.Mutex
	term    terminal // nil until the first eviction
	pending []byte   // evicted output not fed yet; its memory is reused
	resizes []resize // evicted resizes, at their places in pending
}

// resize is an evicted resize: it applies after pending[:at].
type resize struct{ at, rows, cols int }

func newScreenState(rows, cols, scrollback int) *screenState {
	return &screenState{rows: rows, cols: cols, scrollback: scrollback}
}

// evicted queues an event the ring evicts. It runs under the ring's
// lock: it only copies, into memory it reuses.
func (s *screenState) evicted(ev replay.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Kind {
	case replay.KindOutput:
		s.pending = append(s.pending, ev.Data...)
	case replay.KindResize:
		s.resizes = append(s.resizes, resize{len(s.pending), int(ev.Rows), int(ev.Cols)})
	}
}

// feed gives the emulator what the append evicted. It is fed each
// eviction at once, not in batches: the emulator skips the text a long
// run of plain text scrolls out of its scrollback unseen across writes,
// so batching would only hold evicted output in memory longer.
func (s *screenState) feed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feedLocked()
}

// maxPendingCap is the most memory the queue keeps for reuse.
const maxPendingCap = 256 << 10

func (s *screenState) feedLocked() {
	if len(s.pending) == 0 && len(s.resizes) == 0 {
		return
	}
	if s.term == nil {
		s.term = newTerminal(s.rows, s.cols, s.scrollback)
	}
	from := 0
	for _, r := range s.resizes {
		s.term.Write(s.pending[from:r.at])
		s.term.Resize(r.rows, r.cols)
		from = r.at
	}
	s.term.Write(s.pending[from:])
	s.pending, s.resizes = s.pending[:0], s.resizes[:0]
	if cap(s.pending) > maxPendingCap {
		s.pending = nil
	}
}

// snapshot returns the screen after every event evicted so far.
func (s *screenState) snapshot() (data []byte, rows, cols int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feedLocked()
	if s.term == nil {
		s.term = newTerminal(s.rows, s.cols, s.scrollback)
	}
	rows, cols = s.term.Size()
	return s.term.Snapshot(nil), rows, cols
}

// snapshotFor returns the screen standing in for the history a reader
// after after lacks, or nil when the ring still holds all of it, with a
// hold that keeps the events after the snapshot until the reader has had
// them (release it then). seen is what the reader counted, if it did.
func (e *execution) snapshotFor(after uint64, seen *uint64) (*Snapshot, *replay.Hold) {
	pin := e.ring.Hold(0) // its acked is the newest evicted event; nothing after it goes now
	last := pin.Acked()
	if last == 0 || after >= last {
		pin.Release()
		return nil, nil
	}
	data, rows, cols := e.screen.snapshot()
	total, _ := e.ring.OutputThrough(last)
	snap := &Snapshot{Seq: last, Seen: total, Rows: rows, Cols: cols, Data: data, From: after + 1, To: last + 1}
	switch had, known := e.ring.OutputThrough(after); {
	case seen != nil:
		snap.Bytes = total - min(*seen, total)
	case known:
		snap.Bytes = total - had
	default:
		snap.Bytes, snap.Inexact = total, true
	}
	return snap, pin
}
