package screen

import (
	"strconv"
)

// Snapshot appends to dst the sequences that reproduce the terminal state
// on a fresh terminal of the same size, and returns the extended slice.
//
// It starts with RIS (ESC c), which xterm.js and tmux both implement as a
// full reset: modes, pen, margins, tab stops, charsets and both buffers
// (xterm.js also drops its scrollback), so the result does not depend on
// what the client showed before. A soft reset (DECSTR) would leave the
// screen, the alternate buffer and the mouse modes as they were.
//
// Then it draws the scrollback and the normal buffer line by line (lines
// leave the top into the client's scrollback as they did here), sets up
// the saved cursors, enters and draws the alternate buffer if it is
// active, and sets the tab stops, scroll region, origin mode, cursor
// (with a pending wrap, by printing the last character of its line
// again), modes, charset, pen, cursor shape and visibility, and title.
// It never contains a query, so a client never answers into the program.
func (s *Screen) Snapshot(dst []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emulatePending()
	return s.snapshot(dst, s.scrollbackLines(s.sb.n), nil)
}

// SnapshotMax is Snapshot within limit, as cost measures the sequences
// (nil: their length; cost must add up over whole lines, as the length
// of a JSON string does). When the whole scrollback does not fit, it
// holds only its newest lines that do; when the screen alone does not
// fit, SnapshotMax returns dst unchanged and false. It never holds more
// than limit in memory beyond dst while it finds out.
func (s *Screen) SnapshotMax(dst []byte, limit int, cost func([]byte) int) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emulatePending()
	if cost == nil {
		cost = func(b []byte) int { return len(b) }
	}
	mark := len(dst)
	b := &bound{cost: cost, left: limit}
	dst = s.snapshot(dst, nil, b)
	rest := cost(dst[mark:])
	if b.over || rest > limit {
		return dst[:mark], false
	}
	// A scrollback line costs itself and what joins it to the next; with
	// a scrollback, the screen's empty lines at the bottom are drawn too.
	join := cost([]byte("\r\n")) + cost([]byte(" "))
	left := limit - rest - s.rows*join
	k := 0
	var scratch []byte
	for i := s.sb.n - 1; i >= 0 && left >= 0; i-- {
		scratch = s.appendScrollbackLine(scratch[:0], s.sb.at(i))
		if left -= cost(scratch) + join; left >= 0 {
			k++
		}
	}
	if k == 0 {
		return dst, true
	}
	return s.snapshot(dst[:mark], s.scrollbackLines(k), nil), true
}

// scrollbackLines returns the newest k lines of the scrollback, oldest
// first.
func (s *Screen) scrollbackLines(k int) []*sbLine {
	sb := make([]*sbLine, k)
	for i := range sb {
		sb[i] = s.sb.at(s.sb.n - k + i)
	}
	return sb
}

// bound stops a snapshot that goes beyond its limit, as cost measures it
// (SnapshotMax); a nil bound stops none.
type bound struct {
	cost func([]byte) int
	left int
	over bool
}

// spend counts p, the sequences of one line.
func (b *bound) spend(p []byte) {
	if b != nil {
		b.left -= b.cost(p)
		b.over = b.over || b.left < 0
	}
}

// stop reports whether the snapshot went beyond its limit.
func (b *bound) stop() bool { return b != nil && b.over }

// snapshot appends the snapshot with the scrollback lines sb; it stops
// early once b is over its limit.
func (s *Screen) snapshot(dst []byte, sb []*sbLine, b *bound) []byte {
	dst = append(dst, "\x1bc"...)
	dst = s.appendLines(dst, sb, s.normal.lines, b)
	dst = appendSaved(dst, s.normal.saved)
	switch {
	case s.altActive:
		dst = append(dst, "\x1b[m\x1b[?1047h\x1b[H"...)
		dst = s.appendLines(dst, nil, s.alt.lines, b)
		dst = appendSaved(dst, s.alt.saved)
	case s.alt != nil && s.alt.saved != (saved{}):
		dst = append(dst, "\x1b[?1047h"...)
		dst = appendSaved(dst, s.alt.saved)
		dst = append(dst, "\x1b[?1047l"...)
	}
	dst = s.appendTabs(dst)
	dst = s.appendCursor(dst)
	dst = s.appendModes(dst)
	// Last, a sequence or character the output is in the middle of: the
	// events that follow the snapshot complete it.
	return s.p.partial(dst)
}

// appendLines draws the scrollback lines sb and then the screen lines ls
// from the home position; with no scrollback, empty lines at the bottom
// are left out. It stops once b is over its limit.
func (s *Screen) appendLines(dst []byte, sb []*sbLine, ls []line, b *bound) []byte {
	last := len(ls) - 1
	if len(sb) == 0 {
		for last >= 0 && !ls[last].wraps && lineEmpty(&ls[last]) && (last == 0 || !ls[last-1].wraps) {
			last--
		}
	}
	wraps := false
	for i := 0; i < len(sb)+last+1 && !b.stop(); i++ {
		start := len(dst)
		if i > 0 && !wraps {
			dst = append(dst, "\r\n"...)
		}
		mark := len(dst)
		if i < len(sb) {
			dst = s.appendScrollbackLine(dst, sb[i])
			wraps = s.sbWraps(sb[i])
		} else {
			l := &ls[i-len(sb)]
			dst, _ = appendLine(dst, l)
			wraps = l.wraps
		}
		if i > 0 && len(dst) == mark && s.prevWraps(sb, ls, i) {
			dst = append(dst, ' ') // print something, so the wrap happens
		}
		b.spend(dst[start:])
	}
	return dst
}

// prevWraps reports whether line i-1 of sb followed by ls wraps.
func (s *Screen) prevWraps(sb []*sbLine, ls []line, i int) bool {
	if i-1 < len(sb) {
		return s.sbWraps(sb[i-1])
	}
	return ls[i-1-len(sb)].wraps
}

// sbWraps reports whether a scrollback line wraps at the current width:
// a line kept from a screen of another width cannot wrap the same way and
// is ended with a newline instead.
func (s *Screen) sbWraps(l *sbLine) bool { return l.wraps && l.width == s.cols }

// lineEmpty reports whether every cell of l is a default blank.
func lineEmpty(l *line) bool {
	for i := range l.cells {
		if !isDefaultBlank(&l.cells[i]) {
			return false
		}
	}
	return true
}

// appendScrollbackLine appends a scrollback line, cut to the screen width
// if it was kept from a wider screen.
func (s *Screen) appendScrollbackLine(dst []byte, l *sbLine) []byte {
	if l.width <= s.cols {
		return append(dst, l.data...)
	}
	t := New(Config{Rows: 1, Cols: l.width, Scrollback: -1})
	t.Write(l.data)
	t.emulatePending()
	ln := &t.normal.lines[0]
	ln.resize(s.cols)
	ln.wraps = false
	dst, _ = appendLine(dst, ln)
	return dst
}

// appendSaved sets up the cursor that DECSC saved on the active buffer.
func appendSaved(dst []byte, sv saved) []byte {
	if sv == (saved{}) {
		return dst
	}
	dst = appendCUP(dst, sv.y, sv.x)
	dst = appendSGR(dst, sv.pen)
	if sv.graphic {
		dst = append(dst, "\x1b(0\x1b7\x1b(B"...)
	} else {
		dst = append(dst, "\x1b7"...)
	}
	return append(dst, "\x1b[m"...)
}

// appendCUP appends a cursor position to 0-based (y, x).
func appendCUP(dst []byte, y, x int) []byte {
	dst = append(dst, "\x1b["...)
	dst = strconv.AppendInt(dst, int64(y+1), 10)
	dst = append(dst, ';')
	dst = strconv.AppendInt(dst, int64(x+1), 10)
	return append(dst, 'H')
}

// appendTabs sets the tab stops when they are not the default ones.
func (s *Screen) appendTabs(dst []byte) []byte {
	def := defaultTabs(s.cols, nil)
	if string(boolBytes(s.tabs)) == string(boolBytes(def)) {
		return dst
	}
	dst = append(dst, "\x1b[3g"...)
	for x, on := range s.tabs {
		if on {
			dst = appendCUP(dst, 0, x)
			dst = append(dst, "\x1bH"...)
		}
	}
	return dst
}

// boolBytes turns tab stops into bytes, to compare them.
func boolBytes(b []bool) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		if v {
			out[i] = 1
		}
	}
	return out
}

// appendCursor sets the scroll region and origin mode, then puts the
// cursor in place, with its pending wrap.
func (s *Screen) appendCursor(dst []byte) []byte {
	if s.top != 0 || s.bot != s.rows-1 {
		dst = append(dst, "\x1b["...)
		dst = strconv.AppendInt(dst, int64(s.top+1), 10)
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(s.bot+1), 10)
		dst = append(dst, 'r')
	}
	y := s.cur.y
	if s.modes.origin {
		dst = append(dst, "\x1b[?6h"...)
		y -= s.top
	}
	if !s.cur.wrapNext {
		return appendCUP(dst, y, s.cur.x)
	}
	l := s.line()
	x := s.cols - 1
	if l.cells[x].kind == cellWideTail {
		x--
	}
	c := l.cells[x]
	dst = appendCUP(dst, y, x)
	dst = appendSGR(dst, c.pen)
	dst = appendCell(dst, &c)
	return dst
}

// appendCell appends the character of c.
func appendCell(dst []byte, c *cell) []byte {
	dst = append(dst, string(c.r)...)
	if c.comb != 0 {
		dst = append(dst, string(c.comb)...)
	}
	return dst
}

// appendModes sets the modes, charset, pen, cursor shape and visibility
// and the title.
func (s *Screen) appendModes(dst []byte) []byte {
	m := &s.modes
	for _, f := range [...]struct {
		on  bool
		seq string
	}{
		{!m.autowrap, "\x1b[?7l"}, {m.insert, "\x1b[4h"}, {m.appCursor, "\x1b[?1h"},
		{m.appKeypad, "\x1b="}, {m.paste, "\x1b[?2004h"}, {m.focus, "\x1b[?1004h"},
		{s.graphic, "\x1b(0"}, {m.cursorHidden, "\x1b[?25l"},
	} {
		if f.on {
			dst = append(dst, f.seq...)
		}
	}
	for _, mode := range [...]int{m.mouse, m.mouseEncoding} {
		if mode != 0 {
			dst = append(dst, "\x1b[?"...)
			dst = strconv.AppendInt(dst, int64(mode), 10)
			dst = append(dst, 'h')
		}
	}
	if m.cursorSh != 0 {
		dst = append(dst, "\x1b["...)
		dst = strconv.AppendInt(dst, int64(m.cursorSh), 10)
		dst = append(dst, " q"...)
	}
	dst = appendSGR(dst, s.pen)
	if s.title != "" {
		dst = append(dst, "\x1b]2;"...)
		dst = append(dst, s.title...)
		dst = append(dst, "\x1b\\"...)
	}
	return dst
}
