package screen

import "unicode/utf8"

// Write feeds program output to the terminal. A sequence or a UTF-8
// character split across calls is handled as if it came in one call.
//
// A run of plain text that reaches the end of p may be kept pending
// rather than emulated (see the package documentation, Fast path); every
// method that reads the state emulates it first.
func (s *Screen) Write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(p) > 0 {
		switch {
		case s.p.state != stGround:
			i := 0
			for i < len(p) && s.p.state != stGround {
				s.sequence(p[i])
				i++
			}
			p = p[i:]
		case s.canSkip():
			p = s.plain(p)
		default:
			p = s.ground(p)
		}
	}
}

// plain handles p in the ground state while the fast path may apply: the
// plain run at its start goes to the pending run, or is emulated at once
// (skipping what it scrolls away) when it ends inside p and nothing is
// pending; a byte after the run emulates the pending run first. It
// returns the rest of p.
func (s *Screen) plain(p []byte) []byte {
	n, newlines := skipRun(p)
	switch {
	case n == len(p):
		s.pendPlain(p, newlines)
		return nil
	case len(s.pend) == 0:
		s.emulatePlain(p[:n], newlines)
	default:
		s.pendPlain(p[:n], newlines)
		s.emulatePending()
	}
	return s.ground(p[n:])
}

// ground handles the bytes at the start of p in the ground state: a run of
// printable ASCII, a control, or one UTF-8 character. It returns the rest.
func (s *Screen) ground(p []byte) []byte {
	if s.p.u8n > 0 {
		return s.finishRune(p)
	}
	i := 0
	for i < len(p) && p[i] >= 0x20 && p[i] < 0x7f {
		i++
	}
	if i > 0 {
		s.printASCII(p[:i])
		return p[i:]
	}
	switch b := p[0]; {
	case b < 0x20:
		s.execute(b)
		return p[1:]
	case b == 0x7f:
		return p[1:]
	}
	if !utf8.FullRune(p) {
		s.p.u8n = copy(s.p.u8[:], p)
		return nil
	}
	r, n := utf8.DecodeRune(p)
	s.print(r)
	return p[n:]
}

// finishRune completes a UTF-8 character whose first bytes came in an
// earlier Write, decoding exactly as if all bytes had come at once.
func (s *Screen) finishRune(p []byte) []byte {
	had := s.p.u8n
	k := copy(s.p.u8[had:], p)
	buf := s.p.u8[:had+k]
	if !utf8.FullRune(buf) {
		s.p.u8n += k
		return p[k:]
	}
	r, n := utf8.DecodeRune(buf)
	s.print(r)
	if n >= had {
		s.p.u8n = 0
		return p[n-had:]
	}
	s.p.u8n = copy(s.p.u8[:], s.p.u8[n:had])
	return p
}

// execute performs a C0 control.
func (s *Screen) execute(b byte) {
	switch b {
	case '\b':
		s.cur.backspace()
	case '\t':
		s.cur.tab(s.tabs)
	case '\n', '\v', '\f':
		s.lineFeed()
	case '\r':
		s.cur.x, s.cur.wrapNext = 0, false
	case 0x1b:
		s.p.state, s.p.inter = stEsc, 0
		s.p.rawN = 0
		s.p.record(0x1b)
	}
}

// backspace moves the cursor one column left, leaving a pending wrap as
// xterm does (from the last column it lands one before it).
func (c *cursor) backspace() {
	c.wrapNext = false
	if c.x > 0 {
		c.x--
	}
}

// tab moves the cursor to the next tab stop, or the last column.
func (c *cursor) tab(tabs []bool) {
	c.wrapNext = false
	for c.x++; c.x < len(tabs)-1 && !tabs[c.x]; c.x++ {
	}
	c.x = min(c.x, len(tabs)-1)
}

// sequence consumes one byte outside the ground state.
func (s *Screen) sequence(b byte) {
	p := &s.p
	if p.state == stOSC || p.state == stStr {
		s.stringByte(b)
		return
	}
	switch {
	case b == 0x18 || b == 0x1a: // CAN, SUB abort the sequence
		p.state = stGround
		return
	case b == 0x1b:
		p.state, p.inter = stEsc, 0
		p.rawN = 0
		p.record(0x1b)
		return
	case b < 0x20:
		s.execute(b)
		return
	}
	p.record(b)
	if p.state == stEsc {
		s.escByte(b)
		return
	}
	if p.csiByte(b) && !p.ignore {
		s.dispatchCSI(b)
	}
}

// stringByte consumes a byte of an OSC or an ignored string, which ends at
// BEL (OSC only), ST (ESC \), CAN or SUB.
func (s *Screen) stringByte(b byte) {
	p := &s.p
	if p.strEsc {
		p.strEsc = false
		if b == '\\' {
			s.endString()
			return
		}
		p.state = stEsc // ESC began another sequence: the string is dropped
		p.inter = 0
		p.rawN = 0
		p.record(0x1b)
		s.sequence(b)
		return
	}
	switch b {
	case 0x1b:
		p.strEsc = true
	case 0x18, 0x1a:
		p.state = stGround
	case 0x07:
		if p.state == stOSC {
			s.endString()
		}
	default:
		if p.state == stOSC {
			p.oscByte(b)
		}
	}
}

// endString dispatches a complete OSC (strings are ignored).
func (s *Screen) endString() {
	if s.p.state == stOSC {
		s.dispatchOSC(s.p.osc)
	}
	s.p.state = stGround
	s.p.osc = s.p.osc[:0]
}

// escByte consumes a byte after ESC.
func (s *Screen) escByte(b byte) {
	p := &s.p
	if b >= 0x20 && b <= 0x2f {
		if p.inter == 0 {
			p.inter = b
		}
		return
	}
	p.state = stGround
	if p.inter != 0 {
		s.dispatchEscInter(p.inter, b)
		return
	}
	switch b {
	case '[':
		p.startCSI()
	case ']':
		p.state, p.strEsc, p.osc = stOSC, false, p.osc[:0]
	case 'P', 'X', '^', '_':
		p.state, p.strEsc = stStr, false
	default:
		s.dispatchEsc(b)
	}
}
