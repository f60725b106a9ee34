package screen

// color is a cell colour: 0 is the terminal's default, colorIndexed|n one
// of the 256 palette colours, colorRGB|0xRRGGBB a truecolor.
type color uint32

const (
	colorIndexed color = 1 << 24
	colorRGB     color = 2 << 24
	colorKind    color = 3 << 24
)

// attrs is the set of SGR attributes of a cell or of the pen.
type attrs uint16

const (
	attrBold attrs = 1 << iota
	attrDim
	attrItalic
	attrUnderline
	attrBlink
	attrInverse
	attrHidden
	attrStrike
)

// pen is how the next printed character looks (the current SGR state).
type pen struct {
	fg, bg color
	attr   attrs
}

// Cell kinds: a normal cell, the left half of a wide character, and the
// right half that belongs to it.
const (
	cellNormal uint8 = iota
	cellWide
	cellWideTail
)

// cell is one character cell. An erased cell holds a space with the
// background of the pen that erased it.
type cell struct {
	r    rune // the character
	comb rune // one combining mark joined to it, or 0
	pen  pen
	kind uint8
}

// line is one row of cells. It may hold fewer cells than the screen has
// columns: the cells past its end are default blanks (cell{r: ' '}), so
// a line no one drew on costs nothing, and neither does growing the
// screen. Screen.line makes the cursor's line full width before it is
// drawn on; a line that wraps is always full width.
type line struct {
	cells []cell
	// wraps is set when autowrap carried the cursor from this line to the
	// next: the two are one logical line.
	wraps bool
}

// blankCell is an erased cell drawn with the background of p.
func blankCell(p pen) cell { return cell{r: ' ', pen: pen{bg: p.bg}} }

// reset erases the whole line of a screen cols wide with the background
// of p. Erased with the default background, it holds no cells (it keeps
// their memory for the next time it is drawn on).
func (l *line) reset(p pen, cols int) {
	l.wraps = false
	if p.bg == 0 {
		l.cells = l.cells[:0]
		return
	}
	l.full(cols)
	c := blankCell(p)
	for i := range l.cells {
		l.cells[i] = c
	}
}

// full makes the line hold all cols cells, the new ones default blanks.
func (l *line) full(cols int) {
	old := len(l.cells)
	if old >= cols {
		return
	}
	if cols > cap(l.cells) {
		nc := make([]cell, cols)
		copy(nc, l.cells)
		l.cells = nc
	}
	l.cells = l.cells[:cols]
	for i := old; i < cols; i++ {
		l.cells[i] = cell{r: ' '}
	}
}

// erase blanks the cells [from, to) with the background of p and repairs
// wide characters cut in half. Like insert and delete, it works on a full
// line (Screen.line).
func (l *line) erase(from, to int, p pen) {
	from, to = max(from, 0), min(to, len(l.cells))
	c := blankCell(p)
	for i := from; i < to; i++ {
		l.cells[i] = c
	}
	l.fixWide(from)
	l.fixWide(to)
}

// fixWide blanks a wide character half whose other half is no longer
// beside it at the boundary i (between cells i-1 and i).
func (l *line) fixWide(i int) {
	n := len(l.cells)
	if i > 0 && i <= n && l.cells[i-1].kind == cellWide && (i == n || l.cells[i].kind != cellWideTail) {
		l.cells[i-1] = blankCell(l.cells[i-1].pen)
	}
	if i >= 0 && i < n && l.cells[i].kind == cellWideTail && (i == 0 || l.cells[i-1].kind != cellWide) {
		l.cells[i] = blankCell(l.cells[i].pen)
	}
}

// insert shifts the cells from x right by n, blanking the gap; cells
// pushed past the right edge are lost, as on a terminal.
func (l *line) insert(x, n int, p pen) {
	w := len(l.cells)
	n = min(n, w-x)
	copy(l.cells[x+n:], l.cells[x:w-n])
	l.erase(x, x+n, p)
	l.fixWide(w)
	l.fixWide(x + n)
}

// delete removes n cells at x, shifting the rest left and blanking the
// cells that come in at the right edge.
func (l *line) delete(x, n int, p pen) {
	w := len(l.cells)
	n = min(n, w-x)
	copy(l.cells[x:], l.cells[x+n:])
	l.erase(w-n, w, p)
	l.fixWide(x)
}

// resize makes the line fit a screen cols wide: it cuts the cells past
// cols, and pads only a line that wraps (always full width); the others
// stay as they are, their missing cells blank. The cost is the cells cut
// or padded, not the width.
func (l *line) resize(cols int) {
	switch old := len(l.cells); {
	case cols < old:
		l.cells = l.cells[:cols]
		if cap(l.cells) > 2*cols+minLineCap {
			l.cells = append(make([]cell, 0, cols), l.cells...) // let the wider memory go
		}
		l.fixWide(cols)
		l.wraps = false
	case l.wraps:
		l.full(cols)
	}
}

// minLineCap is the memory in cells a line cut narrower may keep beyond
// twice its width.
const minLineCap = 64

// cursor is the cursor position and the state DECSC saves with it.
type cursor struct {
	x, y int
	// wrapNext is the pending-wrap state: a character was printed in the
	// last column and the next one wraps first.
	wrapNext bool
}

// saved is what DECSC (ESC 7) saves and DECRC (ESC 8) restores.
type saved struct {
	x, y    int
	pen     pen
	graphic bool // G0 is the DEC special graphics set
}

// buffer is one of the two screens: the lines on screen and the cursor
// state saved on it.
type buffer struct {
	lines []line
	saved saved
}

// newBuffer is a blank buffer of rows: its lines hold no cells until
// drawn on.
func newBuffer(rows int) *buffer {
	return &buffer{lines: make([]line, rows)}
}
