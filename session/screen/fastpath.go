package screen

import (
	"bytes"
	"unicode/utf8"
)

// skipRun returns the length of the plain run at the start of p, the
// bytes the skip may cover (bytes other than ESC and C0 controls, except \r \n \t \b)
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

// canSkip reports whether the fast path may apply to plain text written
// now: no scroll region, origin mode or insert mode is set (none of them
// can change inside a plain run) and no UTF-8 character is pending.
func (s *Screen) canSkip() bool {
	return !s.skipOff && s.p.u8n == 0 && s.top == 0 && s.bot == s.rows-1 && !s.modes.origin && !s.modes.insert
}

// keep is how many newlines at the end of a plain run may still draw
// what is visible at its end: rows+scrollback, rows alone in the
// alternate buffer. What a plain run draws before its last keep newlines
// has left the scrollback by the time the run ends.
func (s *Screen) keep() int {
	if s.altActive {
		return s.rows
	}
	return s.rows + s.sb.max
}

// cut skips the head of the plain run p, which holds newlines, down to
// its last keep newlines: it moves the cursor over the head without
// drawing it and returns the rest and its newlines.
func (s *Screen) cut(p []byte, newlines int) ([]byte, int) {
	keep := s.keep()
	if newlines <= keep {
		return p, newlines
	}
	i := afterNewlines(p, newlines-keep)
	s.skipHead(p[:i])
	return p[i:], keep
}

// skipHead moves the cursor over p, the head of a plain run whose rest
// holds at least keep newlines, without drawing it.
func (s *Screen) skipHead(p []byte) {
	s.cur, s.last = s.follow(p, s.cur, s.last)
	s.skipped += len(p)
}

// afterNewlines returns the index just after the n-th newline of p,
// which holds at least n.
func afterNewlines(p []byte, n int) int {
	i := 0
	for range n {
		i += bytes.IndexByte(p[i:], '\n') + 1
	}
	return i
}

// emulatePlain emulates the plain run p, which holds newlines, skipping
// what it draws before its last keep newlines.
func (s *Screen) emulatePlain(p []byte, newlines int) {
	p, _ = s.cut(p, newlines)
	for len(p) > 0 {
		p = s.ground(p)
	}
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
