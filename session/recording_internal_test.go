package session

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/termgate/termgate/session/execid"
)

// FuzzAppendJSONString checks that any bytes become a JSON string that
// decodes to them, with each invalid byte as U+FFFD, counted.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\n\r\t\x00\x1f\x7f", "€😀", "\xff\xe2\x82", "\u2028<&>"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		enc, invalid := appendJSONString(nil, b)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("%q encodes as %s: %v", b, enc, err)
		}
		if want := strings.ToValidUTF8(replaceEach(b), "\uFFFD"); got != want {
			t.Fatalf("%q decodes as %q, want %q", b, got, want)
		}
		if want := int64(countInvalid(b)); invalid != want {
			t.Fatalf("%q: %d invalid bytes counted, want %d", b, invalid, want)
		}
	})
}

// replaceEach replaces every invalid byte with U+FFFD, one for each.
func replaceEach(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		sb.WriteRune(r)
		b = b[n:]
	}
	return sb.String()
}

func countInvalid(b []byte) int {
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			n++
		}
		b = b[size:]
	}
	return n
}

// BenchmarkAppendJSONString encodes a terminal's typical output: lines of
// ASCII with CR LF, now and then a multi-byte character.
func BenchmarkAppendJSONString(b *testing.B) {
	line := []byte(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz ", 2) + "€\r\n")
	p := []byte(strings.Repeat(string(line), 32<<10/len(line)))
	b.SetBytes(int64(len(p)))
	var dst []byte
	for b.Loop() {
		dst, _ = appendJSONString(dst[:0], p)
	}
}

// TestCastNameTellsTenantsApart: two tenants never share a recording's
// file prefix, however long and alike their names, and every name fits
// a file name's 255 bytes with the longest ID.
func TestCastNameTellsTenantsApart(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 300)
	pairs := [][2]string{
		{"x_____________________alpha", "x_____________________beta"},
		{long + "a", long + "b"},
		{"acme", "acme2"},
		{"a_b", "a%5Fb"},
	}
	id := strings.Repeat("i", 63) + ".abcdef~" + strings.Repeat("k", 128)
	if len(id) != execid.MaxCanonical || !execid.Valid(id) {
		t.Fatalf("the test's ID is not the longest: %d bytes", len(id))
	}
	inc := execid.NewIncarnation()
	if got, want := castName(key{"acme", "run"}, inc), "acme_run_"+inc+".cast"; got != want {
		t.Errorf("acme's run is recorded as %q, want %q", got, want)
	}
	for _, p := range pairs {
		a, b := castName(key{p[0], id}, inc), castName(key{p[1], id}, inc)
		pa, _, _ := strings.Cut(a, "_")
		pb, _, _ := strings.Cut(b, "_")
		if pa != castTenantOf(a) || pa == pb {
			t.Errorf("tenants %q and %q share the file prefix %q", p[0], p[1], pa)
		}
		for _, name := range []string{a, b} {
			if len(name) > 255 {
				t.Errorf("%q is %d bytes, more than a file name holds", name, len(name))
			}
		}
	}
}
