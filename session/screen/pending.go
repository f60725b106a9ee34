package screen

import "unicode/utf8"

// The pending run. Plain text that reaches the end of a Write is kept
// rather than emulated, so that the skip also covers text that comes in
// many small writes: when later text pushes it out of the scrollback, it
// is never drawn. It is emulated when a byte that is not plain text
// comes, and before any method reads the state.
//
// Invariant: while s.pend is not empty, the parser is in the ground state
// with no UTF-8 character pending and canSkip holds, since only the
// emulation of a byte outside a plain run could change that; the state
// is s's fields followed by the emulation of s.pend.

// pendingSlack is how many newlines, as a fraction of keep, the pending
// run may hold beyond keep before its head is skipped: trimming copies
// the rest, so it is done once per keep/pendingSlack lines.
const pendingSlack = 4

// maxPending is the most bytes the pending run holds: its keep lines,
// the slack and one partial line, at cols+2 bytes a line (a full line of
// ASCII with \r\n). Longer lines (that wrap, or of multi-byte
// characters) are emulated beyond it.
func (s *Screen) maxPending() int {
	keep := s.keep()
	return (keep + keep/pendingSlack + 2) * (s.cols + 2)
}

// pendPlain adds the plain run p, which holds newlines, to the pending
// run. When the two hold more than keep newlines plus the slack, or more
// than maxPending bytes, their head is skipped down to the last keep
// newlines; if what remains is still too long, it is emulated.
func (s *Screen) pendPlain(p []byte, newlines int) {
	// Room is left for completeRune's bytes.
	keep, limit := s.keep(), s.maxPending()-utf8.UTFMax
	if total := s.pendNL + newlines; total > keep+keep/pendingSlack || len(s.pend)+len(p) > limit {
		p, newlines = s.trimPending(p, newlines)
	}
	if len(s.pend)+len(p) > limit {
		s.emulatePending()
		for s.p.u8n > 0 && len(p) > 0 { // the run ended inside a character
			p = s.finishRune(p)
		}
		if len(p) > limit {
			s.emulatePlain(p, newlines)
			return
		}
	}
	s.growPending(len(p), limit)
	s.pend = append(s.pend, p...)
	s.pendNL += newlines
}

// growPending makes room for n more bytes in the pending run, doubling
// its buffer but never beyond limit, so the buffer stays within the bound.
func (s *Screen) growPending(n, limit int) {
	need := len(s.pend) + n
	if need <= cap(s.pend) {
		return
	}
	buf := make([]byte, len(s.pend), max(need, min(limit, 2*cap(s.pend))))
	copy(buf, s.pend)
	s.pend = buf
}

// trimPending skips the head of the pending run followed by p down to
// their last keep newlines, and returns what is left of p.
func (s *Screen) trimPending(p []byte, newlines int) ([]byte, int) {
	drop := s.pendNL + newlines - s.keep()
	switch {
	case drop <= 0:
		return p, newlines
	case drop < s.pendNL:
		i := afterNewlines(s.pend, drop)
		s.skipHead(s.pend[:i])
		s.pend = s.pend[:copy(s.pend, s.pend[i:])]
		s.pendNL -= drop
		return p, newlines
	}
	p = s.completeRune(p)
	s.skipHead(s.pend)
	s.pend, s.pendNL = s.pend[:0], 0
	return s.cut(p, newlines)
}

// completeRune moves to the pending run the bytes at the start of p that
// may continue a character split at its end (at most three continuation
// bytes), so that the two can be followed one after the other. It
// returns the rest of p.
func (s *Screen) completeRune(p []byte) []byte {
	i := 0
	for i < len(p) && i < utf8.UTFMax-1 && !utf8.RuneStart(p[i]) {
		i++
	}
	s.growPending(i, s.maxPending())
	s.pend = append(s.pend, p[:i]...)
	return p[i:]
}

// maxIdlePending is the largest pending buffer kept once emulated: a
// terminal that printed much and went quiet does not hold it.
const maxIdlePending = 16 << 10

// emulatePending emulates the pending run, skipping what it draws before
// its last keep newlines. Every method that reads the state calls it
// first.
func (s *Screen) emulatePending() {
	if len(s.pend) == 0 {
		return
	}
	s.emulatePlain(s.pend, s.pendNL)
	s.pend, s.pendNL = s.pend[:0], 0
	if cap(s.pend) > maxIdlePending {
		s.pend = nil
	}
}
