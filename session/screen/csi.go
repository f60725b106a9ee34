package screen

import (
	"bytes"
	"unicode/utf8"
)

// dispatchCSI performs a complete control sequence with final byte f.
// Sequences that query the terminal (DA, DSR, DECRQM, window reports) are
// ignored: the Screen never answers.
func (s *Screen) dispatchCSI(f byte) {
	p := &s.p
	switch {
	case p.prefix == '?' && p.inter == 0 && (f == 'h' || f == 'l'):
		for i := 0; i < p.nparams; i++ {
			s.setDECMode(p.params[i], f == 'h')
		}
		return
	case p.prefix != 0:
		return
	case p.inter == ' ' && f == 'q':
		s.modes.cursorSh = min(p.param(0, 0), 6)
		return
	case p.inter == '!' && f == 'p':
		s.softReset()
		return
	case p.inter != 0:
		return
	}
	s.dispatchPlainCSI(f)
}

// dispatchPlainCSI performs a control sequence without marker or
// intermediate.
func (s *Screen) dispatchPlainCSI(f byte) {
	p := &s.p
	n := p.param(0, 1)
	switch f {
	case 'A':
		s.moveY(-n, true)
	case 'B', 'e':
		s.moveY(n, true)
	case 'C', 'a':
		s.moveTo(s.cur.x+n, s.cur.y)
	case 'D':
		s.moveTo(s.cur.x-n, s.cur.y)
	case 'E':
		s.moveY(n, true)
		s.cur.x = 0
	case 'F':
		s.moveY(-n, true)
		s.cur.x = 0
	case 'G', '`':
		s.moveTo(n-1, s.cur.y)
	case 'H', 'f':
		s.cursorPosition(p.param(0, 1), p.param(1, 1))
	case 'd':
		s.cursorPosition(n, s.cur.x+1)
	case 'I':
		for range min(n, s.cols) {
			s.cur.tab(s.tabs)
		}
	case 'Z':
		s.backTab(n)
	default:
		s.editCSI(f, n)
	}
}

// editCSI performs the control sequences that change the screen.
func (s *Screen) editCSI(f byte, n int) {
	p := &s.p
	switch f {
	case 'J':
		s.eraseDisplay(p.param(0, 0))
	case 'K':
		s.eraseLine(p.param(0, 0))
	case '@':
		s.cur.wrapNext = false
		s.line().insert(s.cur.x, n, s.pen)
	case 'P':
		s.cur.wrapNext = false
		s.line().delete(s.cur.x, n, s.pen)
	case 'X':
		s.cur.wrapNext = false
		s.line().erase(s.cur.x, s.cur.x+n, s.pen)
	case 'L', 'M':
		s.insertDeleteLines(f == 'L', n)
	case 'S':
		s.scrollUp(s.top, s.bot, n, false)
	case 'T':
		s.scrollDown(s.top, s.bot, n)
	case 'b':
		if s.last != 0 {
			for range min(n, s.rows*s.cols) {
				s.print(s.last)
			}
		}
	case 'g':
		s.clearTabs(p.param(0, 0))
	case 'h', 'l':
		if p.params[0] == 4 {
			s.modes.insert = f == 'h'
		}
	case 'm':
		s.sgr()
	case 'r':
		s.setRegion(p.param(0, 1), p.param(1, s.rows))
	case 's':
		s.saveCursor()
	case 'u':
		s.restoreCursor()
	}
}

// line is the cursor's line, full width, to draw on.
func (s *Screen) line() *line {
	l := &s.buf().lines[s.cur.y]
	l.full(s.cols)
	return l
}

// moveTo puts the cursor at (x, y), clamped to the screen.
func (s *Screen) moveTo(x, y int) {
	s.cur.x = max(0, min(x, s.cols-1))
	s.cur.y = max(0, min(y, s.rows-1))
	s.cur.wrapNext = false
}

// moveY moves the cursor n lines, stopping at the scroll margins when it
// starts inside them.
func (s *Screen) moveY(n int, margins bool) {
	top, bot := 0, s.rows-1
	if margins && s.cur.y >= s.top && s.cur.y <= s.bot {
		top, bot = s.top, s.bot
	}
	s.moveTo(s.cur.x, max(top, min(s.cur.y+n, bot)))
}

// cursorPosition is CUP with 1-based row and column, relative to the
// scroll region in origin mode.
func (s *Screen) cursorPosition(row, col int) {
	y := row - 1
	if s.modes.origin {
		y = min(s.top+y, s.bot)
	}
	s.moveTo(col-1, y)
}

// backTab moves the cursor to the n-th previous tab stop.
func (s *Screen) backTab(n int) {
	s.cur.wrapNext = false
	for ; n > 0 && s.cur.x > 0; n-- {
		for s.cur.x--; s.cur.x > 0 && !s.tabs[s.cur.x]; s.cur.x-- {
		}
	}
}

// clearTabs is TBC: 0 clears the stop at the cursor, 3 all stops.
func (s *Screen) clearTabs(mode int) {
	switch mode {
	case 0:
		s.tabs[s.cur.x] = false
	case 3:
		clear(s.tabs)
	}
}

// eraseDisplay is ED: 0 below the cursor, 1 above, 2 all, 3 scrollback.
func (s *Screen) eraseDisplay(mode int) {
	b := s.buf()
	s.cur.wrapNext = false
	switch mode {
	case 0:
		s.line().erase(s.cur.x, s.cols, s.pen)
		for i := s.cur.y + 1; i < s.rows; i++ {
			b.lines[i].reset(s.pen, s.cols)
		}
	case 1:
		for i := 0; i < s.cur.y; i++ {
			b.lines[i].reset(s.pen, s.cols)
		}
		s.line().erase(0, s.cur.x+1, s.pen)
	case 2:
		for i := range b.lines {
			b.lines[i].reset(s.pen, s.cols)
		}
	case 3:
		s.sb.clear()
	}
}

// eraseLine is EL: 0 right of the cursor, 1 left, 2 the whole line.
func (s *Screen) eraseLine(mode int) {
	s.cur.wrapNext = false
	switch mode {
	case 0:
		s.line().erase(s.cur.x, s.cols, s.pen)
	case 1:
		s.line().erase(0, s.cur.x+1, s.pen)
	case 2:
		s.line().erase(0, s.cols, s.pen)
	}
}

// insertDeleteLines is IL and DL: they work inside the scroll region, from
// the cursor's line, and move the cursor to the first column.
func (s *Screen) insertDeleteLines(insert bool, n int) {
	if s.cur.y < s.top || s.cur.y > s.bot {
		return
	}
	if insert {
		s.scrollDown(s.cur.y, s.bot, n)
	} else {
		s.scrollUp(s.cur.y, s.bot, n, false)
	}
	s.cur.x, s.cur.wrapNext = 0, false
}

// setRegion is DECSTBM with 1-based margins; an invalid region is ignored.
// It homes the cursor.
func (s *Screen) setRegion(top, bot int) {
	bot = min(bot, s.rows)
	if top >= bot {
		return
	}
	s.top, s.bot = top-1, bot-1
	s.cursorPosition(1, 1)
}

// saveCursor is DECSC: the position, pen and charset, per buffer.
func (s *Screen) saveCursor() {
	s.buf().saved = saved{x: s.cur.x, y: s.cur.y, pen: s.pen, graphic: s.graphic}
}

// restoreCursor is DECRC. In origin mode the cursor stays inside the
// scroll region.
func (s *Screen) restoreCursor() {
	sv := s.buf().saved
	y := sv.y
	if s.modes.origin {
		y = max(s.top, min(y, s.bot))
	}
	s.moveTo(sv.x, y)
	s.pen, s.graphic = sv.pen, sv.graphic
}

// softReset is DECSTR: modes, pen, margins and saved cursor to their
// defaults; the screen and the cursor position stay.
func (s *Screen) softReset() {
	s.modes.insert, s.modes.origin, s.modes.appCursor, s.modes.appKeypad = false, false, false, false
	s.modes.autowrap, s.modes.cursorHidden = true, false
	s.pen, s.graphic = pen{}, false
	s.top, s.bot = 0, s.rows-1
	s.buf().saved = saved{}
	s.cur.wrapNext = false
}

// dispatchEsc performs an ESC sequence without intermediate.
func (s *Screen) dispatchEsc(f byte) {
	switch f {
	case '7':
		s.saveCursor()
	case '8':
		s.restoreCursor()
	case 'D':
		s.lineFeed()
	case 'E':
		s.lineFeed()
		s.cur.x = 0
	case 'H':
		s.tabs[s.cur.x] = true
	case 'M':
		s.reverseIndex()
	case 'c':
		s.reset()
	case '=':
		s.modes.appKeypad = true
	case '>':
		s.modes.appKeypad = false
	}
}

// reverseIndex is RI: up one line, scrolling down at the top margin.
func (s *Screen) reverseIndex() {
	s.cur.wrapNext = false
	switch {
	case s.cur.y == s.top:
		s.scrollDown(s.top, s.bot, 1)
	case s.cur.y > 0:
		s.cur.y--
	}
}

// dispatchEscInter performs an ESC sequence with an intermediate byte:
// G0 charset designation and DECALN.
func (s *Screen) dispatchEscInter(inter, f byte) {
	switch {
	case inter == '(':
		s.graphic = f == '0'
	case inter == '#' && f == '8':
		s.alignmentTest()
	}
}

// alignmentTest is DECALN: fill the screen with E, reset the margins and
// home the cursor.
func (s *Screen) alignmentTest() {
	for i := range s.buf().lines {
		l := &s.buf().lines[i]
		l.full(s.cols)
		for j := range l.cells {
			l.cells[j] = cell{r: 'E'}
		}
		l.wraps = false
	}
	s.top, s.bot = 0, s.rows-1
	s.moveTo(0, 0)
}

// dispatchOSC handles OSC 0 and 2 (window title); other commands are
// ignored, queries included.
func (s *Screen) dispatchOSC(data []byte) {
	cmd, text, ok := bytes.Cut(data, []byte{';'})
	if !ok || (string(cmd) != "0" && string(cmd) != "2") {
		return
	}
	s.title = cleanTitle(text)
}

// cleanTitle makes a title safe to send back inside an OSC: valid UTF-8,
// no C1 controls (a terminal may take U+009C for the string terminator),
// at most MaxTitle bytes cut at a character boundary.
func cleanTitle(text []byte) string {
	t := string(bytes.ToValidUTF8(text, []byte("\uFFFD")))
	out := make([]byte, 0, min(len(text), MaxTitle))
	for _, r := range t {
		if r >= 0x80 && r < 0xa0 {
			continue
		}
		if len(out)+utf8.RuneLen(r) > MaxTitle {
			break
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}
