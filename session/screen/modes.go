package screen

// setDECMode sets or resets the DEC private mode m (CSI ? m h / l).
func (s *Screen) setDECMode(m int, on bool) {
	md := &s.modes
	switch m {
	case 1:
		md.appCursor = on
	case 6:
		md.origin = on
		s.cursorPosition(1, 1)
	case 7:
		md.autowrap = on
	case 25:
		md.cursorHidden = !on
	case 9, 1000, 1002, 1003:
		md.mouse = exclusive(md.mouse, m, on)
	case 1005, 1006, 1015:
		md.mouseEncoding = exclusive(md.mouseEncoding, m, on)
	case 1004:
		md.focus = on
	case 2004:
		md.paste = on
	case 1048:
		if on {
			s.saveCursor()
		} else {
			s.restoreCursor()
		}
	case 47, 1047, 1049:
		s.switchBuffer(m, on)
	}
}

// exclusive sets one of a group of modes of which at most one is on;
// resetting a mode that is not the current one changes nothing.
func exclusive(cur, m int, on bool) int {
	switch {
	case on:
		return m
	case cur == m:
		return 0
	}
	return cur
}

// switchBuffer enters or leaves the alternate buffer as xterm.js does:
// the alternate buffer is cleared on every switch, the cursor position
// carries over, and mode 1049 also saves the cursor before entering and
// restores it after leaving.
func (s *Screen) switchBuffer(m int, on bool) {
	if on == s.altActive {
		return
	}
	if on {
		if m == 1049 {
			s.saveCursor()
		}
		if s.alt == nil {
			s.alt = newBuffer(s.rows)
		}
		for i := range s.alt.lines {
			s.alt.lines[i].reset(s.pen, s.cols)
		}
		s.altActive = true
		return
	}
	s.altActive = false
	if m == 1049 {
		s.restoreCursor()
	}
}

// sgr applies SGR parameters to the pen.
func (s *Screen) sgr() {
	p := &s.p
	for i := 0; i < p.nparams; i++ {
		i = s.sgrParam(i)
	}
}

// sgrAttrs maps SGR codes 1-9 to the attribute they set.
var sgrAttrs = [10]attrs{0, attrBold, attrDim, attrItalic, attrUnderline, attrBlink, attrBlink, attrInverse, attrHidden, attrStrike}

// sgrParam applies the SGR parameter at i and returns the index of the
// last parameter it used (colours take several).
func (s *Screen) sgrParam(i int) int {
	p, pn := &s.p, &s.pen
	v := p.params[i]
	switch {
	case v == 0:
		*pn = pen{}
	case v == 4 && p.colon&(1<<i) != 0 && i+1 < p.nparams:
		// 4:n is an underline style; 4:0 turns it off.
		pn.attr = pn.attr&^attrUnderline | attrIf(p.params[i+1] != 0, attrUnderline)
		return i + 1
	case v >= 1 && v <= 9:
		pn.attr |= sgrAttrs[v]
	case v == 21:
		pn.attr |= attrUnderline
	case v == 22:
		pn.attr &^= attrBold | attrDim
	case v == 23:
		pn.attr &^= attrItalic
	case v == 24:
		pn.attr &^= attrUnderline
	case v == 25:
		pn.attr &^= attrBlink
	case v == 27:
		pn.attr &^= attrInverse
	case v == 28:
		pn.attr &^= attrHidden
	case v == 29:
		pn.attr &^= attrStrike
	case v >= 30 && v <= 37:
		pn.fg = colorIndexed | color(v-30)
	case v == 38 || v == 48:
		var c color
		c, i = s.extendedColor(i)
		if c != 0 {
			if v == 38 {
				pn.fg = c
			} else {
				pn.bg = c
			}
		}
	case v == 39:
		pn.fg = 0
	case v >= 40 && v <= 47:
		pn.bg = colorIndexed | color(v-40)
	case v == 49:
		pn.bg = 0
	case v >= 90 && v <= 97:
		pn.fg = colorIndexed | color(v-90+8)
	case v >= 100 && v <= 107:
		pn.bg = colorIndexed | color(v-100+8)
	}
	return i
}

// attrIf returns a when cond holds.
func attrIf(cond bool, a attrs) attrs {
	if cond {
		return a
	}
	return 0
}

// extendedColor parses the colour after 38 or 48 at i: 5;n or 2;r;g;b,
// with ';' or ':' (where 2:cs:r:g:b may carry a colour space). It returns
// the colour (0 if malformed) and the index of the last parameter used.
func (s *Screen) extendedColor(i int) (color, int) {
	p := &s.p
	if i+1 >= p.nparams {
		return 0, i
	}
	colon := p.colon&(1<<i) != 0
	switch p.params[i+1] {
	case 5:
		if i+2 >= p.nparams {
			return 0, p.nparams - 1
		}
		return colorIndexed | color(min(p.params[i+2], 255)), i + 2
	case 2:
		j := i + 2
		if colon && i+5 < p.nparams && p.colon&(1<<(i+4)) != 0 {
			j++ // 38:2:cs:r:g:b
		}
		if j+2 >= p.nparams {
			return 0, p.nparams - 1
		}
		r, g, b := min(p.params[j], 255), min(p.params[j+1], 255), min(p.params[j+2], 255)
		return colorRGB | color(r<<16|g<<8|b), j + 2
	}
	return 0, i + 1
}
