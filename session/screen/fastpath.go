package screen

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// skipRun returns the length of the plain run at the start of p, the
// bytes the skip may cover (bytes other than ESC and C0 controls, except
// \r \n \t \b), and how many newlines it holds.
func skipRun(p []byte) (n, newlines int) {
	for {
		n = nextControl(p, n)
		if n == len(p) {
			return n, newlines
		}
		switch p[n] {
		case '\n':
			newlines++
		case '\r', '\t', '\b':
		default:
			return n, newlines
		}
		n++
	}
}

// Word masks for nextControl.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// nextControl returns the index of the first C0 control (a byte below
// 0x20) in p from i on, or len(p). It tests eight bytes at a time: in
// (x - 0x20 per byte) &^ x, the high bit of the lowest byte below 0x20
// is set, and no lower byte's is.
func nextControl(p []byte, i int) int {
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		if t := (x - 0x20*ones) &^ x & highs; t != 0 {
			return i + bits.TrailingZeros64(t)/8
		}
	}
	for ; i < len(p); i++ {
		if p[i] < 0x20 {
			return i
		}
	}
	return i
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
// which holds at least n. It counts whole blocks first: bytes.Count is
// much faster than a call of bytes.IndexByte per line.
func afterNewlines(p []byte, n int) int {
	const block = 2048
	i := 0
	for i+block <= len(p) {
		k := bytes.Count(p[i:i+block], []byte{'\n'})
		if k >= n {
			break
		}
		n -= k
		i += block
	}
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

// follow moves cursor c over the plain run p as Screen.Write would,
// without drawing, and returns it with the last character drawn.
//
// Once the cursor is on the last row it stays there (nothing in a plain
// run moves it up), and \r puts it in the first column: when the
// newlines before the last \r of p take the cursor to the last row, only
// what follows that \r places it, and the characters before it only
// matter for the last one drawn. Bulk output has a \r on every line, so
// this looks at the end of p alone.
func (s *Screen) follow(p []byte, c cursor, last rune) (cursor, rune) {
	r := bytes.LastIndexByte(p, '\r')
	if r < 0 || c.y+bytes.Count(p[:r], []byte{'\n'}) < s.rows-1 {
		return s.followAll(p, c, last)
	}
	c, l := s.followAll(p[r+1:], cursor{y: s.rows - 1}, noRune)
	if l == noRune {
		l = s.lastDrawn(p[:r], last)
	}
	return c, l
}

// noRune stands for no character drawn.
const noRune rune = -1

// lastDrawn returns the last character the plain run p draws, or last if
// it draws none. It follows p from its end one \r-separated segment at a
// time: a segment starts a fresh UTF-8 decoding (\r is ASCII) and what
// it draws does not depend on the cursor.
func (s *Screen) lastDrawn(p []byte, last rune) rune {
	for {
		i := bytes.LastIndexByte(p, '\r')
		if _, l := s.followAll(p[i+1:], cursor{}, noRune); l != noRune {
			return l
		}
		if i < 0 {
			return last
		}
		p = p[:i]
	}
}

// followAll is follow, one byte or run of ASCII at a time.
func (s *Screen) followAll(p []byte, c cursor, last rune) (cursor, rune) {
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
