package wire_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/termgate/termgate/gateway/wire"
)

func TestEscapeC1(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`"plain é ü"`, `"plain é ü"`},
		{"\"\u009b2J\u009d0;x\u009c\"", `"\u009b2J\u009d0;x\u009c"`},
		{"\"\x7f\u0080\u009f\u00a0\"", `"\u007f\u0080\u009f` + "\u00a0\""},
	} {
		if got := string(wire.EscapeC1([]byte(c.in))); got != c.want {
			t.Errorf("EscapeC1(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzEscapeC1: the escaped JSON decodes to the same value, and holds no
// DEL or C1 control.
func FuzzEscapeC1(f *testing.F) {
	f.Add("\u009b31m\u009d0;t\u009c\x7f")
	f.Add("\xc2")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(map[string]string{"k": s})
		if err != nil {
			t.Skip()
		}
		esc := wire.EscapeC1(b)
		var got, want map[string]string
		if err := json.Unmarshal(esc, &got); err != nil {
			t.Fatalf("%q: %v", esc, err)
		}
		json.Unmarshal(b, &want)
		if got["k"] != want["k"] {
			t.Fatalf("%q decodes to %q, want %q", esc, got["k"], want["k"])
		}
		if !utf8.Valid(esc) || strings.ContainsFunc(string(esc), func(r rune) bool { return r >= 0x7f && r <= 0x9f }) {
			t.Fatalf("%q holds a raw control", esc)
		}
	})
}
