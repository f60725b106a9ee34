package screen

// decGraphics maps 0x5f..0x7e to the DEC special graphics set (line
// drawing), used while G0 designates it (ESC ( 0).
var decGraphics = [...]rune{
	' ', '◆', '▒', '␉', '␌', '␍', '␊', '°', '±', '␤', '␋', '┘', '┐', '┌', '└', '┼',
	'⎺', '⎻', '─', '⎼', '⎽', '├', '┤', '┴', '┬', '│', '≤', '≥', 'π', '≠', '£', '·',
}

// glyph returns the character r draws under the current charset and its
// width in cells; width -1 means r draws nothing (a C1 control).
func glyph(r rune, graphic bool) (rune, int) {
	if graphic && r >= 0x5f && r <= 0x7e {
		return decGraphics[r-0x5f], 1
	}
	if r >= 0x80 && r < 0xa0 {
		return r, -1
	}
	return r, runeWidth(r)
}

// place computes where a character of width w (1 or 2) goes from cursor
// c: whether autowrap first moves to the next line, the column it is drawn
// at, and the cursor after it. Screen.print and the skip both use it, so
// they agree.
func place(c cursor, w, cols int, autowrap bool) (wrap bool, x int, next cursor) {
	if c.wrapNext && autowrap {
		wrap, c.x = true, 0
	}
	if w == 2 && c.x == cols-1 {
		if autowrap {
			wrap, c.x = true, 0
		} else {
			c.x = cols - 2
		}
	}
	x = c.x
	if x+w >= cols {
		return wrap, x, cursor{x: cols - 1, y: c.y, wrapNext: autowrap}
	}
	return wrap, x, cursor{x: x + w, y: c.y}
}

// printASCII prints a run of printable ASCII bytes.
func (s *Screen) printASCII(run []byte) {
	if s.graphic || s.modes.insert || !s.modes.autowrap {
		for _, b := range run {
			s.print(rune(b))
		}
		return
	}
	cols := s.cols
	for len(run) > 0 {
		if s.cur.wrapNext {
			s.wrapLine()
		}
		l := s.line()
		x := s.cur.x
		n := min(len(run), cols-x)
		if l.cells[x].kind == cellWideTail {
			l.fixWideAt(x)
		}
		cells := l.cells[x : x+n]
		for i, b := range run[:n] {
			cells[i] = cell{r: rune(b), pen: s.pen}
		}
		if x+n < cols && l.cells[x+n].kind == cellWideTail {
			l.cells[x+n] = blankCell(l.cells[x+n].pen)
		}
		s.last = rune(run[n-1])
		run = run[n:]
		if x+n >= cols {
			s.cur.x, s.cur.wrapNext = cols-1, true
		} else {
			s.cur.x = x + n
		}
	}
}

// fixWideAt blanks the wide character whose right half is at x, before x
// is overwritten.
func (l *line) fixWideAt(x int) {
	if x > 0 && l.cells[x-1].kind == cellWide {
		l.cells[x-1] = blankCell(l.cells[x-1].pen)
	}
}

// wrapLine moves the cursor to the start of the next line because of
// autowrap, marking the line it leaves as continued.
func (s *Screen) wrapLine() {
	s.line().wraps = true
	s.cur.x, s.cur.wrapNext = 0, false
	s.lineFeed()
}

// print draws one character at the cursor.
func (s *Screen) print(r rune) {
	r, w := glyph(r, s.graphic)
	switch {
	case w < 0:
		return
	case w == 0:
		s.combine(r)
		return
	case w == 2 && s.cols < 2:
		return
	}
	wrap, x, next := place(s.cur, w, s.cols, s.modes.autowrap)
	if wrap {
		s.wrapLine()
	}
	l := s.line()
	if s.modes.insert {
		l.insert(x, w, s.pen)
	}
	s.put(l, x, cell{r: r, pen: s.pen}, w)
	s.cur.x, s.cur.wrapNext = next.x, next.wrapNext
	s.last = r
}

// put writes c of width w at column x, keeping wide characters whole.
func (s *Screen) put(l *line, x int, c cell, w int) {
	if l.cells[x].kind == cellWideTail {
		l.fixWideAt(x)
	}
	end := x + w
	if end < len(l.cells) && l.cells[end].kind == cellWideTail {
		l.cells[end] = blankCell(l.cells[end].pen)
	}
	if w == 2 {
		c.kind = cellWide
		l.cells[x+1] = cell{pen: c.pen, kind: cellWideTail}
	}
	l.cells[x] = c
}

// combine joins a zero-width character to the cell before the cursor.
// A cell keeps one such mark; more are dropped.
func (s *Screen) combine(r rune) {
	x := s.cur.x
	if !s.cur.wrapNext {
		x--
	}
	l := s.line()
	if x < 0 {
		return
	}
	if l.cells[x].kind == cellWideTail && x > 0 {
		x--
	}
	if l.cells[x].comb == 0 {
		l.cells[x].comb = r
	}
}

// lineFeed moves the cursor down one line, scrolling the region when it is
// on the bottom margin.
func (s *Screen) lineFeed() {
	s.cur.wrapNext = false
	switch {
	case s.cur.y == s.bot:
		s.scrollUp(s.top, s.bot, 1, true)
	case s.cur.y < s.rows-1:
		s.cur.y++
	}
}

// scrollUp moves the lines top..bot up by n, blanking n lines at the
// bottom. With keep, lines leaving the top row of the normal buffer go to
// the scrollback (as xterm.js does for a line feed, not for SU).
func (s *Screen) scrollUp(top, bot, n int, keep bool) {
	b := s.buf()
	n = min(n, bot-top+1)
	toScrollback := keep && top == 0 && !s.altActive
	for i := 0; i < n; i++ {
		if toScrollback {
			s.sb.push(&b.lines[top+i])
		}
	}
	rotate(b.lines[top:bot+1], n)
	for i := bot - n + 1; i <= bot; i++ {
		b.lines[i].reset(s.pen, s.cols)
	}
}

// scrollDown moves the lines top..bot down by n, blanking n at the top.
func (s *Screen) scrollDown(top, bot, n int) {
	b := s.buf()
	n = min(n, bot-top+1)
	rotate(b.lines[top:bot+1], bot-top+1-n)
	for i := top; i < top+n; i++ {
		b.lines[i].reset(s.pen, s.cols)
	}
}

// rotate moves ls left by n, the first n lines coming round to the end,
// so their cells are reused.
func rotate(ls []line, n int) {
	if n <= 0 || n >= len(ls) {
		return
	}
	if n == 1 {
		first := ls[0]
		copy(ls, ls[1:])
		ls[len(ls)-1] = first
		return
	}
	tmp := append([]line(nil), ls[:n]...)
	copy(ls, ls[n:])
	copy(ls[len(ls)-n:], tmp)
}
