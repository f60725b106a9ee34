package wire

// EscapeC1 returns JSON text b with DEL and the C1 controls
// (U+007F-U+009F) written as \u00XX escapes instead of raw UTF-8.
// encoding/json and slog's JSON handler escape only C0 controls, and a
// terminal that shows a line with a raw CSI (U+009B) or OSC (U+009D)
// acts on it. Outside strings JSON text is ASCII, so only string
// contents change; the decoded values stay the same. b is returned as
// it is when it holds none.
func EscapeC1(b []byte) []byte {
	n := c1Count(b)
	if n == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+n*5)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == 0x7f:
			out = appendU00(out, 0x7f)
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = appendU00(out, b[i+1])
			i++
		default:
			out = append(out, b[i])
		}
	}
	return out
}

// c1Count counts DEL and the C1 controls in b. A 0xc2 byte always leads
// a two-byte sequence in UTF-8, so a byte scan finds them exactly.
func c1Count(b []byte) int {
	n := 0
	for i, c := range b {
		if c == 0x7f || c == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f {
			n++
		}
	}
	return n
}

func appendU00(out []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	return append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}
