package screen

import "unicode/utf8"

// Parser states, after the DEC VT500 state machine: ground prints, escape
// follows ESC, csi collects a control sequence, osc an operating system
// command, and str a DCS, SOS, PM or APC string, which is ignored.
const (
	stGround uint8 = iota
	stEsc
	stCSI
	stOSC
	stStr
)

// Parser limits: a control sequence with more parameters is ignored, a
// parameter is capped, and an OSC string is cut (its tail is dropped).
const (
	maxParams = 16
	maxParam  = 65535
	maxOSC    = MaxTitle + 8
)

// parser holds the state of a sequence that may continue in the next
// Write: nothing is lost when a sequence or a UTF-8 character is split.
type parser struct {
	state   uint8
	strEsc  bool // in an OSC or string, ESC was seen: '\' ends it
	inter   byte // first intermediate byte of an ESC or CSI sequence
	prefix  byte // private marker of a CSI sequence ('?', '>', ...)
	ignore  bool // the sequence is malformed or too long: drop it
	nparams int
	params  [maxParams]int
	colon   uint32 // bit i: params[i] is followed by ':' (a sub-parameter)
	osc     []byte
	u8      [utf8.UTFMax]byte
	u8n     int
	// raw is the bytes of the escape or control sequence under way (or
	// the introducer of a string), so that a snapshot taken in its middle
	// ends with them and the sequence completes on the client as here.
	raw  [maxRaw]byte
	rawN int
}

// maxRaw bounds raw: a longer sequence has more than maxParams
// parameters and is ignored anyway.
const maxRaw = 96

// record keeps b as part of the sequence under way.
func (p *parser) record(b byte) {
	if p.rawN < maxRaw {
		p.raw[p.rawN] = b
		p.rawN++
	}
}

// partial returns the bytes that put a fresh parser in p's state: the
// sequence or UTF-8 character under way, an OSC string with what it
// holds so far, or a string's introducer.
func (p *parser) partial(dst []byte) []byte {
	switch p.state {
	case stGround:
		return append(dst, p.u8[:p.u8n]...)
	case stEsc, stCSI:
		return append(dst, p.raw[:p.rawN]...)
	}
	dst = append(dst, p.raw[:min(p.rawN, 2)]...) // ESC and its introducer
	if p.state == stOSC {
		dst = append(dst, p.osc...)
	}
	if p.strEsc {
		dst = append(dst, 0x1b)
	}
	return dst
}

// memory is the bytes the parser holds beyond its struct.
func (p *parser) memory() int { return cap(p.osc) }

// param returns parameter i, or def when it is absent or zero.
func (p *parser) param(i, def int) int {
	if i >= p.nparams || p.params[i] == 0 {
		return def
	}
	return p.params[i]
}

// startCSI begins a control sequence.
func (p *parser) startCSI() {
	p.state, p.inter, p.prefix, p.ignore = stCSI, 0, 0, false
	p.nparams, p.params[0], p.colon = 1, 0, 0
}

// csiByte consumes one byte of a control sequence and reports whether it
// was the final byte, after which the sequence is dispatched.
func (p *parser) csiByte(b byte) (final bool) {
	switch {
	case b >= '0' && b <= '9':
		if p.inter != 0 {
			p.ignore = true
		}
		v := &p.params[p.nparams-1]
		*v = min(*v*10+int(b-'0'), maxParam)
	case b == ';' || b == ':':
		if b == ':' {
			p.colon |= 1 << (p.nparams - 1)
		}
		if p.nparams == maxParams {
			p.ignore = true
			return false
		}
		p.params[p.nparams] = 0
		p.nparams++
	case b >= '<' && b <= '?':
		if p.prefix != 0 || p.nparams > 1 || p.params[0] != 0 {
			p.ignore = true
		}
		p.prefix = b
	case b >= 0x20 && b <= 0x2f:
		if p.inter != 0 {
			p.ignore = true
		}
		p.inter = b
	case b >= 0x40 && b <= 0x7e:
		p.state = stGround
		return true
	default:
		p.ignore = true
	}
	return false
}

// oscByte collects a byte of an OSC string, keeping at most maxOSC.
func (p *parser) oscByte(b byte) {
	if b < 0x20 {
		return // C0 controls inside the string are ignored
	}
	if len(p.osc) < maxOSC {
		p.osc = append(p.osc, b)
	}
}
