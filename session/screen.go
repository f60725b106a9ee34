package session

import (
	"bytes"
	"sync"
	"unicode/utf8"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session/screen"
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
//
// Bounds. A snapshot's data takes at most Config.MaxSnapshotBytes as a
// JSON string (the scrollback is cut to its newest lines that fit; a
// screen that alone does not fit has no snapshot, and its readers get a
// gap). The emulator's scrollback holds at most as many bytes, since no
// snapshot could carry more. An emulator reserves the most memory it can
// hold at its size (screen.MemoryBound) from the screen budget, per
// owner and in total, when it is made and when an evicted resize makes
// it larger; a reservation refused turns the screen state off for that
// execution (its readers get gaps) and says so in the log. When the
// execution ends, its emulator is replaced by its final snapshot, which
// stays counted at its size until the execution is removed; one that
// does not fit is not kept.

// terminal is the subset of *screen.Screen the supervisor uses.
type terminal interface {
	Write(p []byte)
	Resize(rows, cols int)
	Snapshot(dst []byte) []byte
	SnapshotMax(dst []byte, limit int, cost func([]byte) int) ([]byte, bool)
	Size() (rows, cols int)
}

// newTerminal makes the emulator of a terminal as cfg says;
// terminalMemory is the most memory it holds at that size.
var (
	newTerminal    func(cfg screen.Config) terminal
	terminalMemory = screen.MemoryBound
)

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
// not been fed yet; once the execution ended, its final snapshot.
type screenState struct {
	cfg    screen.Config // the size the emulator starts with
	limit  int           // Config.MaxSnapshotBytes
	budget *screenBudget
	owner  string
	off    func(why string) // logs that the state was turned off

	mu       sync.Mutex
	term     terminal // nil until the first eviction, and once ended
	reserved int      // of the budget, for term
	pending  []byte   // evicted output not fed yet; its memory is reused
	resizes  []resize // evicted resizes, at their places in pending
	final    *finalScreen
	ended    bool
	lost     bool // no state: over the budget, or no snapshot fit when it ended
}

// finalScreen is the screen as the execution left it.
type finalScreen struct {
	data       []byte
	rows, cols int
}

// resize is an evicted resize: it applies after pending[:at].
type resize struct{ at, rows, cols int }

func (s *Supervisor) newScreenState(e *execution, rows, cols int) *screenState {
	return &screenState{
		cfg:   screen.Config{Rows: rows, Cols: cols, Scrollback: s.cfg.Scrollback, ScrollbackBytes: s.cfg.MaxSnapshotBytes},
		limit: s.cfg.MaxSnapshotBytes, budget: s.screens, owner: e.key.owner,
		off: func(why string) {
			s.log.Warn("terminal screen state off: readers behind the ring get a gap", append(e.logAttrs, "why", why)...)
		},
	}
}

// evicted queues an event the ring evicts. It runs under the ring's
// lock: it only copies, into memory it reuses.
func (s *screenState) evicted(ev replay.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost {
		return
	}
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
	if s.ended && !s.lost {
		s.loseLocked("output evicted after the end") // the final snapshot no longer stands for it
	}
	if !s.lost && s.term == nil && s.reserveLocked(s.cfg.Rows, s.cfg.Cols) {
		s.term = newTerminal(s.cfg)
	}
	from := 0
	for _, r := range s.resizes {
		if s.term == nil {
			break
		}
		s.term.Write(s.pending[from:r.at])
		if s.reserveLocked(r.rows, r.cols) {
			s.term.Resize(r.rows, r.cols)
		}
		from = r.at
	}
	if s.term != nil {
		s.term.Write(s.pending[from:])
	}
	s.pending, s.resizes = s.pending[:0], s.resizes[:0]
	if cap(s.pending) > maxPendingCap || s.lost {
		s.pending = nil
	}
}

// reserveLocked makes the emulator's reservation the most it holds at
// rows x cols; when the budget refuses, the state is lost.
func (s *screenState) reserveLocked(rows, cols int) bool {
	cfg := s.cfg
	cfg.Rows, cfg.Cols = rows, cols
	need := terminalMemory(cfg)
	if need <= s.reserved {
		return true
	}
	if !s.budget.reserve(s.owner, need-s.reserved) {
		s.loseLocked("over the screen memory budget")
		return false
	}
	s.reserved = need
	return true
}

// loseLocked turns the state off: readers behind the ring get gaps.
func (s *screenState) loseLocked(why string) {
	s.lost, s.term, s.final = true, nil, nil
	s.releaseLocked()
	s.off(why)
}

func (s *screenState) releaseLocked() {
	s.budget.release(s.owner, s.reserved)
	s.reserved = 0
}

// finish replaces the emulator with its final snapshot once the
// execution ended, and gives its memory back.
func (s *screenState) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.feedLocked()
	s.ended = true
	if s.term == nil {
		return
	}
	data, rows, cols, ok := s.snapshotLocked()
	s.term = nil
	s.releaseLocked()
	if !ok {
		s.loseLocked("no snapshot of the final screen fits")
		return
	}
	// The final screen is kept as long as the result, counted as the
	// emulator was, without the encoder's spare capacity.
	if !s.budget.reserve(s.owner, len(data)) {
		s.loseLocked("the final screen is over the screen memory budget")
		return
	}
	s.reserved = len(data)
	s.final = &finalScreen{data: bytes.Clone(data), rows: rows, cols: cols}
}

// drop forgets the state once its execution is removed, and gives its
// memory back.
func (s *screenState) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost, s.term, s.final, s.pending = true, nil, nil, nil
	s.releaseLocked()
}

// snapshot returns the screen after every event evicted so far; ok is
// false when there is none (the state is off, or it does not fit).
func (s *screenState) snapshot() (data []byte, rows, cols int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feedLocked()
	return s.snapshotLocked()
}

func (s *screenState) snapshotLocked() (data []byte, rows, cols int, ok bool) {
	switch {
	case s.lost:
		return nil, 0, 0, false
	case s.final != nil:
		return s.final.data, s.final.rows, s.final.cols, true
	case s.term == nil:
		// Nothing evicted changed the screen: a fresh terminal's snapshot
		// is the same at any size, so a small one makes it.
		return newTerminal(screen.Config{Rows: 1, Cols: 1, Scrollback: -1}).Snapshot(nil), s.cfg.Rows, s.cfg.Cols, true
	}
	rows, cols = s.term.Size()
	data, ok = s.term.SnapshotMax(nil, s.limit, jsonLen)
	return data, rows, cols, ok
}

// snapshotFor returns the screen standing in for the history a reader
// after after lacks, or nil when the ring still holds all of it or there
// is no snapshot that fits, with a hold that keeps the events after the
// snapshot until the reader has had them (release it then). seen is what
// the reader counted, if it did.
func (e *execution) snapshotFor(after uint64, seen *uint64) (*Snapshot, *replay.Hold) {
	pin := e.ring.Hold(0) // its acked is the newest evicted event; nothing after it goes now
	last := pin.Acked()
	if last == 0 || after >= last {
		pin.Release()
		return nil, nil
	}
	data, rows, cols, ok := e.screen.snapshot()
	if !ok {
		pin.Release()
		return nil, nil
	}
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

// screenBudget is the memory terminal emulators may reserve, in total
// and per owner (Config.MaxScreenMemory, MaxScreenMemoryPerOwner).
type screenBudget struct {
	max, perOwner int

	mu      sync.Mutex
	total   int
	byOwner map[string]int
}

func newScreenBudget(total, perOwner int) *screenBudget {
	return &screenBudget{max: total, perOwner: perOwner, byOwner: map[string]int{}}
}

// reserve takes n bytes for owner; false, taking none, beyond a bound.
func (b *screenBudget) reserve(owner string, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total+n > b.max || b.byOwner[owner]+n > b.perOwner {
		return false
	}
	b.total += n
	b.byOwner[owner] += n
	return true
}

// release gives back n bytes of owner's.
func (b *screenBudget) release(owner string, n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.byOwner[owner] -= n; b.byOwner[owner] <= 0 {
		delete(b.byOwner, owner)
	}
}

// reserved is the bytes reserved in total.
func (b *screenBudget) reserved() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// jsonLen is the length of b written as the text of a JSON string by
// encoding/json, or more: how a snapshot travels, in the protocol's
// messages and in a durable execution's screen file.
func jsonLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
