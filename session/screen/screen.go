package screen

import (
	"sync"
	"unsafe"
)

// Defaults and limits of Config. New clamps values beyond the limits to
// them, so a Screen is always bounded.
const (
	DefaultRows       = 24
	DefaultCols       = 80
	DefaultScrollback = 1000
	MaxRows           = 1000
	MaxCols           = 1000
	MaxScrollback     = 100_000
	// MaxTitle is the most bytes of a window title kept; the rest of a
	// longer OSC string is dropped.
	MaxTitle = 1024
)

// Config sizes a Screen. A zero or negative field takes its default; a
// field above its limit takes the limit.
type Config struct {
	Rows, Cols int // the terminal size; defaults DefaultRows x DefaultCols
	// Scrollback is how many lines that scrolled off the top of the normal
	// buffer are kept; default DefaultScrollback. Negative means none.
	Scrollback int
	// ScrollbackBytes bounds the memory of those lines, kept encoded (see
	// Bounds): the oldest go first beyond it. Zero or negative: only
	// Scrollback bounds them.
	ScrollbackBytes int
}

// modes are the terminal modes a snapshot restores.
type modes struct {
	origin, autowrap, insert       bool
	appCursor, appKeypad           bool
	paste, focus, cursorHidden     bool
	mouse, mouseEncoding, cursorSh int // DEC mode numbers (0 = off) and DECSCUSR
}

// Screen is the state of one terminal: both buffers, the bounded
// scrollback, cursor, pen, modes and title. Its methods are safe for
// concurrent use.
type Screen struct {
	mu         sync.Mutex
	rows, cols int
	normal     *buffer
	alt        *buffer // allocated on first use
	altActive  bool
	sb         scrollback
	cur        cursor
	pen        pen
	top, bot   int // scroll region, inclusive rows
	modes      modes
	tabs       []bool
	title      string
	graphic    bool // G0 is the DEC special graphics set
	last       rune // last printed character, for REP
	p          parser
	pend       []byte // the pending plain run (pending.go)
	pendNL     int    // newlines in pend
	skipped    int    // bytes the fast path skipped, for tests
	skipOff    bool   // turns the fast path off, for tests and benchmarks
}

// New returns a blank Screen sized by cfg.
func New(cfg Config) *Screen {
	s := &Screen{
		rows: clamp(cfg.Rows, DefaultRows, MaxRows),
		cols: clamp(cfg.Cols, DefaultCols, MaxCols),
	}
	sb := cfg.Scrollback
	switch {
	case sb == 0:
		sb = DefaultScrollback
	case sb < 0:
		sb = 0
	}
	s.sb.max = min(sb, MaxScrollback)
	s.sb.maxBytes = max(cfg.ScrollbackBytes, 0)
	s.reset()
	return s
}

// MemoryBound is the most memory a Screen made with cfg holds at its
// size: what MemoryBytes reports never exceeds it until a Resize makes
// the Screen larger. Without ScrollbackBytes, each line of scrollback
// counts as maxCellBytes a cell.
func MemoryBound(cfg Config) int {
	s := New(Config{Rows: 1, Cols: 1, Scrollback: cfg.Scrollback})
	rows, cols := clamp(cfg.Rows, DefaultRows, MaxRows), clamp(cfg.Cols, DefaultCols, MaxCols)
	sbBytes := s.sb.max * cols * maxCellBytes
	if cfg.ScrollbackBytes > 0 {
		sbBytes = min(sbBytes, cfg.ScrollbackBytes)
	}
	keep := rows + s.sb.max
	n := int(unsafe.Sizeof(*s)) + cols + MaxTitle + maxOSC
	n += 2 * rows * (int(unsafe.Sizeof(line{})) + cols*cellBytes) // both buffers
	n += (keep + keep/pendingSlack + 2) * (cols + 2)              // the pending plain run (maxPending)
	return n + s.sb.max*sbLineBytes + sbBytes + 1024              // a line's buffer kept for reuse
}

// maxCellBytes is the most bytes a cell takes encoded: its SGR with every
// attribute and two truecolors, a character and a combining mark.
const maxCellBytes = 64

// clamp returns v, or def when v <= 0, or limit when v > limit.
func clamp(v, def, limit int) int {
	if v <= 0 {
		return def
	}
	return min(v, limit)
}

// reset puts the terminal in its power-on state (RIS), keeping its size
// and dropping the scrollback.
func (s *Screen) reset() {
	s.normal = newBuffer(s.rows)
	s.alt = nil
	s.altActive = false
	s.sb.clear()
	s.cur = cursor{}
	s.pen = pen{}
	s.top, s.bot = 0, s.rows-1
	s.modes = modes{autowrap: true}
	s.tabs = defaultTabs(s.cols, nil)
	s.title = ""
	s.graphic = false
	s.last = 0
}

// defaultTabs returns tab stops every 8 columns, keeping those of old
// below its length.
func defaultTabs(cols int, old []bool) []bool {
	t := make([]bool, cols)
	for i := range t {
		if i < len(old) {
			t[i] = old[i]
		} else {
			t[i] = i%8 == 0 && i > 0
		}
	}
	return t
}

// buf is the active buffer.
func (s *Screen) buf() *buffer {
	if s.altActive {
		return s.alt
	}
	return s.normal
}

// Title returns the window title last set with OSC 0 or OSC 2.
func (s *Screen) Title() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.title
}

// Size returns the terminal size.
func (s *Screen) Size() (rows, cols int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows, s.cols
}

// Resize changes the terminal size (clamped like Config). Lines are cut or
// padded, not reflowed; when the screen gets shorter, lines above the
// cursor move into the scrollback so the cursor's line stays on screen.
// The scroll region is reset to the whole screen, as terminals do.
func (s *Screen) Resize(rows, cols int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows, cols = clamp(rows, s.rows, MaxRows), clamp(cols, s.cols, MaxCols)
	if rows == s.rows && cols == s.cols {
		return
	}
	s.emulatePending()
	s.resizeBuffer(s.normal, rows, cols, !s.altActive)
	if s.alt != nil {
		s.resizeBuffer(s.alt, rows, cols, s.altActive)
	}
	if !s.altActive {
		s.cur.y -= max(0, s.cur.y-(rows-1))
	}
	s.rows, s.cols = rows, cols
	s.tabs = defaultTabs(cols, s.tabs)
	s.top, s.bot = 0, rows-1
	s.cur.x, s.cur.y = min(s.cur.x, cols-1), min(s.cur.y, rows-1)
	s.cur.wrapNext = false
}

// resizeBuffer resizes b; for the normal buffer whose cursor line would
// fall off the bottom (active), the top lines go to the scrollback.
func (s *Screen) resizeBuffer(b *buffer, rows, cols int, active bool) {
	for i := range b.lines {
		b.lines[i].resize(cols)
	}
	if drop := len(b.lines) - rows; drop > 0 {
		push := 0
		if active {
			push = min(drop, max(0, s.cur.y-(rows-1)))
		}
		for i := 0; i < push; i++ {
			if b == s.normal {
				s.sb.push(&b.lines[i])
			}
		}
		n := copy(b.lines, b.lines[push:push+rows])
		clear(b.lines[n:]) // the cells of the lines dropped go
		b.lines = b.lines[:n]
	}
	for len(b.lines) < rows {
		b.lines = append(b.lines, line{})
	}
	b.saved.x, b.saved.y = min(b.saved.x, cols-1), min(b.saved.y, rows-1)
}

// MemoryBytes is the approximate memory the Screen holds: at most
// (2*rows) * cols * cellBytes for the two buffers plus the scrollback,
// whose lines are kept encoded (about one byte per printed cell for
// plain text, more where colours change).
func (s *Screen) MemoryBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int(unsafe.Sizeof(*s)) + len(s.tabs) + len(s.title) + s.p.memory() + cap(s.pend)
	for _, b := range []*buffer{s.normal, s.alt} {
		if b != nil {
			n += len(b.lines) * (int(unsafe.Sizeof(line{})) + s.cols*cellBytes)
		}
	}
	return n + s.sb.memory()
}

// cellBytes is the size of one cell in a buffer.
const cellBytes = int(unsafe.Sizeof(cell{}))
