package screen

import (
	"bytes"
	"unicode/utf8"
)

// skipRun returns the length of the run at the start of p that the skip
// may cover (bytes other than ESC and C0 controls, except \r \n \t \b)
// and how many newlines it holds.
func skipRun(p []byte) (n, newlines int) {
	for n < len(p) {
		b := p[n]
		if b < 0x20 {
			if b == '\n' {
				newlines++
			} else if b != '\r' && b != '\t' && b != '\b' {
				break
			}
		}
		n++
	}
	return n, newlines
}

// skip is the fast path for bulk output. When p starts with a run (see
// skipRun) holding more than keep = rows+scrollback newlines (rows alone in
// the alternate buffer), while no scroll region, origin mode or insert mode
// is set and no UTF-8 character is pending, everything the run draws before
// its last keep newlines scrolls out of the scrollback: skip then only
// computes where that part leaves the cursor (and the last character, for
// REP) and returns its length, and Write emulates the rest. The state is
// the same as without the skip. It also returns the length of the run, so
// Write does not look at its bytes again.
func (s *Screen) skip(p []byte) (skipped, scanned int) {
	run, newlines := skipRun(p)
	if s.skipOff || s.p.u8n > 0 || s.top != 0 || s.bot != s.rows-1 || s.modes.origin || s.modes.insert {
		return 0, run
	}
	keep := s.rows
	if !s.altActive {
		keep += s.sb.max
	}
	if newlines <= keep {
		return 0, run
	}
	start := run
	for range keep + 1 {
		start = bytes.LastIndexByte(p[:start], '\n')
	}
	start++
	s.cur, s.last = s.follow(p[:start], s.cur, s.last)
	s.skipped += start
	return start, run
}

// follow moves cursor c over the run p as Screen.Write would, without
// drawing, and returns it with the last character drawn.
func (s *Screen) follow(p []byte, c cursor, last rune) (cursor, rune) {
	for len(p) > 0 {
		b := p[0]
		switch {
		case b >= 0x20 && b < 0x7f:
			n := 1
			for n < len(p) && p[n] >= 0x20 && p[n] < 0x7f {
				n++
			}
			c, last = s.followASCII(c, p[:n]), rune(p[n-1])
			if s.graphic {
				last, _ = glyph(last, true)
			}
			p = p[n:]
			continue
		case b == '\n':
			c.y, c.wrapNext = min(c.y+1, s.rows-1), false
		case b == '\r':
			c.x, c.wrapNext = 0, false
		case b == '\t':
			c.tab(s.tabs)
		case b == '\b':
			c.backspace()
		case b >= 0x80:
			r, n := utf8.DecodeRune(p)
			c, last = s.followRune(c, r, last)
			p = p[n:]
			continue
		}
		p = p[1:]
	}
	return c, last
}

// followASCII moves c over a run of printable ASCII.
func (s *Screen) followASCII(c cursor, run []byte) cursor {
	cols := s.cols
	if !s.modes.autowrap {
		if len(run) > 0 {
			c.wrapNext = false
			c.x = min(c.x+len(run), cols-1)
		}
		return c
	}
	for n := len(run); n > 0; {
		if c.wrapNext {
			c.x, c.wrapNext, c.y = 0, false, min(c.y+1, s.rows-1)
		}
		k := min(n, cols-c.x)
		n -= k
		if c.x+k >= cols {
			c.x, c.wrapNext = cols-1, true
		} else {
			c.x += k
		}
	}
	return c
}

// followRune moves c over one character as Screen.print would.
func (s *Screen) followRune(c cursor, r, last rune) (cursor, rune) {
	r, w := glyph(r, s.graphic)
	if w <= 0 || (w == 2 && s.cols < 2) {
		return c, last
	}
	wrap, _, next := place(c, w, s.cols, s.modes.autowrap)
	if wrap {
		c.y = min(c.y+1, s.rows-1)
	}
	return cursor{x: next.x, y: c.y, wrapNext: next.wrapNext}, r
}
