// Package transcript turns an execution's output into the text an agent
// reads: each stream decoded as UTF-8 across the chunks it arrives in (a
// character split between two reads stays one character), terminal escape
// sequences removed on request, and the whole kept within a budget as its
// head and its tail, with the exact number of bytes left out between them.
//
// Text and omitted bytes are counted in the text produced (after decoding
// and stripping): the text's length and the omitted bytes add up to all
// of it.
package transcript

import (
	"unicode/utf8"
)

// maxSequence bounds an escape sequence or control string (OSC, DCS, ...)
// being stripped: output that opens one and never ends it is shown again
// after this many bytes instead of being swallowed whole.
const maxSequence = 64 << 10

// Options say how a Builder shapes its text.
type Options struct {
	// Budget is the most bytes of text kept: up to half of it from the
	// head, the rest from the tail. At least 1.
	Budget int
	// StripANSI removes escape sequences and control characters but tab,
	// newline and carriage return, and turns CRLF into LF: what a terminal
	// shows as text, without what it only does.
	StripANSI bool
}

// Builder collects text. The zero value is not usable; use New.
type Builder struct {
	opt      Options
	streams  map[int]*stream
	head     []byte
	headCap  int
	headDone bool
	tail     []byte // a ring of tailCap bytes once full
	tailCap  int
	tailPos  int // next write in a full ring
	tailFull bool
	total    int64
	replaced int64
}

// stream is one output stream's decoding state.
type stream struct {
	partial []byte // the start of a character cut off by the last chunk
	esc     escState
	escLen  int
	cr      bool // a carriage return waits to see whether LF follows
}

type escState uint8

const (
	ground    escState = iota
	escape             // after ESC
	escInter           // ESC and intermediates, until a final byte
	csi                // control sequence, until a final byte
	oscString          // operating system command, until BEL or ST
	ctlString          // DCS, SOS, PM, APC, until ST
	stringEsc          // ESC inside a string: ST when '\' follows
)

// New returns a Builder with opt; a Budget below 1 is taken as 1.
func New(opt Options) *Builder {
	opt.Budget = max(opt.Budget, 1)
	h := opt.Budget / 2
	return &Builder{opt: opt, streams: map[int]*stream{}, headCap: h, tailCap: opt.Budget - h}
}

// Write adds p, the next bytes of output stream s (any small integer
// naming a stream: each stream is decoded on its own).
func (b *Builder) Write(s int, p []byte) {
	st := b.streams[s]
	if st == nil {
		st = &stream{}
		b.streams[s] = st
	}
	if had := len(st.partial); had > 0 {
		joined := append(st.partial, p[:min(utf8.UTFMax-had, len(p))]...)
		if !utf8.FullRune(joined) {
			st.partial = joined
			return
		}
		r, n := utf8.DecodeRune(joined)
		if n > had {
			p = p[n-had:]
		} else { // the start was not one: what followed it is read again
			p = append(append([]byte(nil), joined[n:had]...), p...)
		}
		st.partial = st.partial[:0]
		b.rune(st, r, n)
	}
	for len(p) > 0 {
		if n := b.asIs(st, p); n > 0 { // the common case: a run of plain text
			b.emitRun(p[:n])
			p = p[n:]
			continue
		}
		if p[0] < utf8.RuneSelf {
			b.rune(st, rune(p[0]), 1)
			p = p[1:]
			continue
		}
		if !utf8.FullRune(p) {
			st.partial = append(st.partial[:0], p...)
			return
		}
		r, n := utf8.DecodeRune(p)
		b.rune(st, r, n)
		p = p[n:]
	}
}

// asIs is the length of p's prefix that goes into the text as it is:
// whole UTF-8 characters; when stripping, outside any escape sequence
// and without a carriage return or a control character.
func (b *Builder) asIs(st *stream, p []byte) int {
	strip := b.opt.StripANSI
	if strip && (st.esc != ground || st.cr) {
		return 0
	}
	if !strip && utf8.Valid(p) {
		return len(p)
	}
	i := 0
	for i < len(p) {
		c := p[i]
		if c < utf8.RuneSelf {
			if strip && (c < 0x20 && c != '\t' && c != '\n' || c == 0x7f) {
				break
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && n == 1 || strip && r >= 0x80 && r <= 0x9f {
			break // not UTF-8, cut off, or a C1 control
		}
		i += n
	}
	return i
}

// emitRun adds whole characters to the text: into the head while they
// fit, then the tail.
func (b *Builder) emitRun(p []byte) {
	b.total += int64(len(p))
	if !b.headDone {
		room := b.headCap - len(b.head)
		if len(p) <= room {
			b.head = append(b.head, p...)
			return
		}
		cut := room
		for cut > 0 && !utf8.RuneStart(p[cut]) {
			cut--
		}
		b.head = append(b.head, p[:cut]...)
		b.headDone = true
		p = p[cut:]
	}
	if len(p) >= b.tailCap { // only its last bytes stay
		b.tail = append(b.tail[:0], p[len(p)-b.tailCap:]...)
		b.tailFull, b.tailPos = true, 0
		return
	}
	if !b.tailFull {
		n := min(b.tailCap-len(b.tail), len(p))
		b.tail = append(b.tail, p[:n]...)
		b.tailFull = len(b.tail) == b.tailCap
		p = p[n:]
	}
	for len(p) > 0 { // a full ring: overwrite from tailPos, wrapping once at most
		n := copy(b.tail[b.tailPos:], p)
		b.tailPos = (b.tailPos + n) % b.tailCap
		p = p[n:]
	}
}

// rune takes one decoded rune (RuneError of size 1 for an invalid byte).
func (b *Builder) rune(st *stream, r rune, n int) {
	if r == utf8.RuneError && n == 1 {
		b.replaced++
		b.emitRune(st, utf8.RuneError)
		return
	}
	if !b.opt.StripANSI {
		b.emitRune(st, r)
		return
	}
	b.strip(st, r)
}

// strip runs the escape-sequence state machine on r, emitting what a
// terminal would show as text.
func (b *Builder) strip(st *stream, r rune) {
	if st.esc != ground {
		if st.escLen++; st.escLen > maxSequence {
			st.esc, st.escLen = ground, 0 // never ended: show what follows
		}
	}
	switch st.esc {
	case ground:
	case escape:
		switch {
		case r == '[':
			st.esc = csi
		case r == ']':
			st.esc = oscString
		case r == 'P' || r == 'X' || r == '^' || r == '_':
			st.esc = ctlString
		case r >= 0x20 && r <= 0x2f:
			st.esc = escInter
		case r == 0x1b:
		default:
			st.esc = ground
		}
		return
	case escInter:
		if r >= 0x30 && r <= 0x7e {
			st.esc = ground
		} else if r == 0x1b {
			st.esc = escape
		}
		return
	case csi:
		if r >= 0x40 && r <= 0x7e {
			st.esc = ground
		} else if r == 0x1b {
			st.esc = escape
		}
		return
	case oscString, ctlString:
		switch {
		case r == 0x07 && st.esc == oscString, r == 0x9c:
			st.esc = ground
		case r == 0x1b:
			st.esc = stringEsc
		}
		return
	case stringEsc:
		if r == '\\' {
			st.esc = ground
			return
		}
		st.esc = escape
		b.strip(st, r)
		return
	}
	switch {
	case r == 0x1b:
		st.esc, st.escLen = escape, 0
	case r == 0x9b:
		st.esc, st.escLen = csi, 0
	case r == 0x9d:
		st.esc, st.escLen = oscString, 0
	case r == 0x90 || r == 0x98 || r == 0x9e || r == 0x9f:
		st.esc, st.escLen = ctlString, 0
	case r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r != 0x7f && (r < 0x80 || r > 0x9f):
		b.emitRune(st, r)
	}
}

// emitRune adds r to the text; with StripANSI a CR directly before LF
// is dropped.
func (b *Builder) emitRune(st *stream, r rune) {
	if b.opt.StripANSI {
		if st.cr && r != '\n' {
			b.emit('\r')
		}
		if st.cr = r == '\r'; st.cr {
			return
		}
	}
	if r < utf8.RuneSelf {
		b.emit(byte(r))
		return
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	b.emitBytes(buf[:n])
}

func (b *Builder) emit(c byte) {
	b.total++
	if !b.headDone && len(b.head) < b.headCap {
		b.head = append(b.head, c)
		return
	}
	b.headDone = true
	b.toTail(c)
}

// emitBytes adds one character's bytes: the head takes it whole or not
// at all, so it never ends inside a character.
func (b *Builder) emitBytes(p []byte) {
	b.total += int64(len(p))
	if !b.headDone && len(b.head)+len(p) <= b.headCap {
		b.head = append(b.head, p...)
		return
	}
	b.headDone = true
	for _, c := range p {
		b.toTail(c)
	}
}

func (b *Builder) toTail(c byte) {
	if !b.tailFull {
		b.tail = append(b.tail, c)
		b.tailFull = len(b.tail) == b.tailCap
		return
	}
	b.tail[b.tailPos] = c
	b.tailPos = (b.tailPos + 1) % b.tailCap
}

// Result is a Builder's text and its counts.
type Result struct {
	Text string
	// Omitted is how many bytes of text were left out at OmittedAt, a
	// byte offset in Text (the end of the head).
	Omitted   int64
	OmittedAt int
	// Replaced counts the output bytes that were not UTF-8: each is one
	// U+FFFD in the text.
	Replaced int64
}

// Finish ends every stream (a character still cut off, or a carriage
// return, is taken as it is) and returns the text. The Builder is spent.
func (b *Builder) Finish() Result {
	for _, st := range b.streams {
		for len(st.partial) > 0 {
			_, n := utf8.DecodeRune(st.partial)
			b.replaced += int64(n)
			st.partial = st.partial[n:]
			b.emitRune(st, utf8.RuneError)
		}
		if st.cr {
			st.cr = false
			b.emit('\r')
		}
	}
	tail := b.tail
	if b.tailFull && b.tailPos > 0 {
		tail = append(append(make([]byte, 0, len(b.tail)), b.tail[b.tailPos:]...), b.tail[:b.tailPos]...)
	}
	kept := int64(len(b.head) + len(tail))
	omitted := b.total - kept
	if omitted > 0 {
		// The ring may start inside a character: its first bytes go with
		// the omitted ones.
		skip := 0
		for skip < len(tail) && skip < utf8.UTFMax-1 && !utf8.RuneStart(tail[skip]) {
			skip++
		}
		tail, omitted = tail[skip:], omitted+int64(skip)
	}
	return Result{Text: string(b.head) + string(tail), Omitted: omitted, OmittedAt: len(b.head), Replaced: b.replaced}
}
