package session

import (
	"crypto/sha256"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/termgate/termgate/session/execid"
)

// The asciicast v2 format of recordings: file names, the header, event lines.

// castTenantMax is the longest tenant part of a recording's name: with
// the longest ID (execid.MaxCanonical) and an incarnation (16 bytes) a
// name stays within the 255 bytes of a file name.
const castTenantMax = 32

// castName is the file name of an execution's recording: its tenant part
// (castTenant), the ID (execid.Pattern keeps it to safe bytes, never "_", "."
// or ".."), and the incarnation, joined by "_".
func castName(k key, incarnation string) string {
	return castTenant(k.owner) + "_" + k.id + "_" + incarnation + ".cast"
}

// castTenant is the tenant part of its recordings' names: the tenant with
// every byte outside [A-Za-z0-9-] escaped as %XX, so it never holds "_";
// when that is longer than castTenantMax, its first bytes (whole escapes
// only), "~" and 16 base32 characters of the full tenant's SHA-256
// (80 bits), so two tenants never share a prefix however alike their
// names, and a tenant has one prefix whatever its IDs.
func castTenant(owner string) string {
	if whole := escapeTenant(owner, math.MaxInt); len(whole) <= castTenantMax {
		return whole
	}
	sum := sha256.Sum256([]byte(owner))
	hash := execid.Encode(sum[:10])
	return escapeTenant(owner, castTenantMax-1-len(hash)) + "~" + hash
}

// escapeTenant escapes tenant as castTenant does, stopping before the
// escape that would take it past max bytes.
func escapeTenant(tenant string, max int) string {
	var b strings.Builder
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		n := 1
		if !castPlain(c) {
			n = 3
		}
		if b.Len()+n > max {
			break
		}
		if n == 1 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// castPlain reports whether a tenant's byte stays as it is in a name.
func castPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// legacyCastName is castName before tenants were hashed: the escaped
// tenant cut at 64 bytes. A server restored on a recording that an older
// one began goes on in the file of that name.
func legacyCastName(k key, incarnation string) string {
	var b strings.Builder
	for i := 0; i < len(k.owner) && b.Len() < 64; i++ {
		if c := k.owner[i]; castPlain(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String() + "_" + k.id + "_" + incarnation + ".cast"
}

// castTenantOf is the tenant part of a recording's file name: what comes
// before its first "_".
func castTenantOf(name string) string {
	t, _, _ := strings.Cut(name, "_")
	return t
}

// castHeader is an asciicast v2 header.
type castHeader struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp"`
	Env       map[string]string `json:"env,omitempty"`
}

// header returns the recording's header for e: the terminal's size (80x24
// for pipes), the start, TERM and SHELL (each when set and at most 256
// bytes).
func (e *execution) castHeader() castHeader {
	h := castHeader{Version: 2, Width: 80, Height: 24, Timestamp: e.started.Unix(), Env: map[string]string{}}
	p := e.spec.Policy
	if p.TTY != nil {
		h.Width, h.Height = int(p.TTY.Cols), int(p.TTY.Rows)
	}
	shell := p.Env["SHELL"]
	if shell == "" && len(p.Command) > 0 {
		shell = p.Command[0]
	}
	for k, v := range map[string]string{"TERM": p.Env["TERM"], "SHELL": shell} {
		if v != "" && len(v) <= 256 {
			h.Env[k] = v
		}
	}
	return h
}

// appendLine appends the event line [time, code, data] to dst: time in
// seconds since the start, never before the previous event's; data as a
// JSON string, its invalid UTF-8 bytes as U+FFFD, whose count it returns.
func (r *recorder) appendLine(dst []byte, at time.Time, code string, data []byte) ([]byte, int64) {
	t := max(at.Sub(r.base).Seconds(), r.last, 0)
	r.last = t
	dst = append(dst, '[')
	dst = strconv.AppendFloat(dst, t, 'f', 6, 64)
	dst = append(dst, `, "`...)
	dst = append(dst, code...)
	dst = append(dst, `", `...)
	dst, invalid := appendJSONString(dst, data)
	return append(dst, "]\n"...), invalid
}

// jsonPlain says which bytes a JSON string holds as they are: printable
// ASCII but the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends b as a JSON string: characters as they are
// (UTF-8), quotes, backslashes and control characters escaped, each
// invalid byte as \ufffd, whose count it returns. Runs of plain bytes
// are copied whole: output is mostly text.
func appendJSONString(dst, b []byte) ([]byte, int64) {
	const hex = "0123456789abcdef"
	var invalid int64
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(b); {
		c := b[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size > 1 {
				i += size
				continue
			}
		}
		dst = append(dst, b[start:i]...)
		switch {
		case c >= utf8.RuneSelf:
			dst = append(dst, `\ufffd`...)
			invalid++
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, `\n`...)
		case c == '\r':
			dst = append(dst, `\r`...)
		case c == '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, b[start:]...)
	return append(dst, '"'), invalid
}
