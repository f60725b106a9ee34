package screen

import (
	"math/bits"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// sbLine is one line of scrollback, kept as the sequences that draw it
// (see appendLine): a line costs about as many bytes as it shows.
type sbLine struct {
	data  []byte
	width int  // columns the line covers
	wraps bool // autowrap continued it on the next line
}

// scrollback is a ring of the newest lines that left the top of the
// normal buffer: at most max of them, holding at most maxBytes of
// encoded lines (0: no bound), the oldest dropped first. Line i of n is
// lines[(start+i) % len(lines)].
type scrollback struct {
	max, maxBytes int
	lines         []sbLine
	start, n      int
	bytes         int // the capacity of the lines' data, together
}

// push encodes l as the newest line, dropping the oldest while there are
// more than max lines or more than maxBytes.
func (sb *scrollback) push(l *line) {
	if sb.max == 0 {
		return
	}
	var slot *sbLine
	if sb.n < sb.max {
		if sb.n == len(sb.lines) {
			if sb.start != 0 { // lines were dropped for bytes: unwrap the ring to grow it
				sb.lines = append(sb.lines[sb.start:len(sb.lines):len(sb.lines)], sb.lines[:sb.start]...)
				sb.start = 0
			}
			sb.lines = append(sb.lines, sbLine{})
		}
		slot = &sb.lines[(sb.start+sb.n)%len(sb.lines)]
		sb.n++
	} else {
		slot = &sb.lines[sb.start]
		sb.start = (sb.start + 1) % len(sb.lines)
	}
	sb.bytes -= cap(slot.data)
	data := slot.data[:0]
	if cap(data) > 1024 {
		data = nil // do not keep the buffer of one long line forever
	}
	slot.data, slot.width = appendLine(data, l)
	slot.wraps = l.wraps
	sb.bytes += cap(slot.data)
	for sb.maxBytes > 0 && sb.bytes > sb.maxBytes && sb.n > 0 {
		sb.dropOldest()
	}
}

// dropOldest forgets the oldest line.
func (sb *scrollback) dropOldest() {
	l := &sb.lines[sb.start]
	sb.bytes -= cap(l.data)
	*l = sbLine{}
	sb.start = (sb.start + 1) % len(sb.lines)
	sb.n--
}

// at returns the i-th oldest line.
func (sb *scrollback) at(i int) *sbLine { return &sb.lines[(sb.start+i)%max(1, len(sb.lines))] }

// clear drops every line.
func (sb *scrollback) clear() { sb.lines, sb.start, sb.n, sb.bytes = nil, 0, 0, 0 }

// memory is the bytes held by the lines.
func (sb *scrollback) memory() int { return cap(sb.lines)*sbLineBytes + sb.bytes }

// sbLineBytes is the size of a line's entry in the ring.
const sbLineBytes = int(unsafe.Sizeof(sbLine{}))

// isDefaultBlank reports whether c looks like a cell never written.
func isDefaultBlank(c *cell) bool { return *c == cell{r: ' '} }

// appendLine appends the sequences that draw l from its first column on a
// terminal whose pen is the default, and leave the pen the default. A line
// that wraps is drawn to its last column, so the next character printed
// wraps as the original did; otherwise trailing default blanks are left
// out. It returns the columns covered.
func appendLine(dst []byte, l *line) ([]byte, int) {
	n := len(l.cells)
	if !l.wraps {
		for n > 0 && isDefaultBlank(&l.cells[n-1]) {
			n--
		}
	}
	cur := pen{}
	for i := 0; i < n; i++ {
		c := &l.cells[i]
		if c.kind == cellWideTail {
			continue
		}
		if c.pen != cur {
			dst = appendSGR(dst, c.pen)
			cur = c.pen
		}
		dst = utf8.AppendRune(dst, c.r)
		if c.comb != 0 {
			dst = utf8.AppendRune(dst, c.comb)
		}
	}
	if cur != (pen{}) {
		dst = append(dst, "\x1b[m"...)
	}
	return dst, n
}

// appendSGR appends the SGR sequence that sets exactly the pen p: one,
// or two when it takes more than maxParams parameters (every attribute
// and two truecolors take 19), since a terminal (this one included)
// ignores a sequence with too many.
func appendSGR(dst []byte, p pen) []byte {
	dst = append(dst, "\x1b[0"...)
	for i, code := range [...]byte{1, 2, 3, 4, 5, 7, 8, 9} {
		if p.attr&(1<<i) != 0 {
			dst = append(dst, ';', '0'+code)
		}
	}
	dst = appendColor(dst, p.fg, 30)
	if 1+bits.OnesCount16(uint16(p.attr))+colorParams(p.fg)+colorParams(p.bg) <= maxParams {
		dst = appendColor(dst, p.bg, 40)
		return append(dst, 'm')
	}
	dst = append(dst, "m\x1b["...)
	mark := len(dst)
	dst = appendColor(dst, p.bg, 40)
	dst = append(dst[:mark], dst[mark+1:]...) // the ';' before the first parameter
	return append(dst, 'm')
}

// colorParams is how many SGR parameters appendColor uses for c.
func colorParams(c color) int {
	switch {
	case c&colorKind == colorRGB:
		return 5
	case c&colorKind == colorIndexed && c&^colorKind >= 16:
		return 3
	case c&colorKind == colorIndexed:
		return 1
	}
	return 0
}

// appendColor appends the SGR parameters for c as a foreground (base 30)
// or background (base 40) colour.
func appendColor(dst []byte, c color, base int) []byte {
	v := int(c &^ colorKind)
	switch c & colorKind {
	case colorIndexed:
		switch {
		case v < 8:
			dst = append(dst, ';')
			dst = strconv.AppendInt(dst, int64(base+v), 10)
		case v < 16:
			dst = append(dst, ';')
			dst = strconv.AppendInt(dst, int64(base+60+v-8), 10)
		default:
			dst = append(dst, ';')
			dst = strconv.AppendInt(dst, int64(base+8), 10)
			dst = append(dst, ";5;"...)
			dst = strconv.AppendInt(dst, int64(v), 10)
		}
	case colorRGB:
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(base+8), 10)
		dst = append(dst, ";2;"...)
		dst = strconv.AppendInt(dst, int64(v>>16), 10)
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(v>>8&0xff), 10)
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(v&0xff), 10)
	}
	return dst
}
