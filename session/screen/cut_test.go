package screen

import (
	"bytes"
	"testing"
)

// TestSnapshotAtAnyCut: a snapshot taken at any byte of the output, even
// in the middle of an escape sequence, a string or a UTF-8 character,
// then the rest of the output, gives the state of a terminal that was
// fed all of it. That is how a reattaching client uses it: the retained
// events after a snapshot may begin in the middle of a sequence.
func TestSnapshotAtAnyCut(t *testing.T) {
	t.Parallel()
	in := []byte("\x1b[?1049h\x1b[2J\x1b[H\x1b]0;the t\xc3\xbci\x07line 1 \x1b[1;31mcolour\x1b[0m\r\n" +
		"\x1bP1;2qsixel-ish\x1b\\wide \xe6\xbc\xa2 emoji \xf0\x9f\x98\x80\r\n\x1b[22;1H\x1b[7mcounter 1\x1b[0m" +
		"\x1b(0lqk\x1b(B\x1b[?25l\x1b[5;20r\x1b[6;1H\x1b]2;second\x1b\\\x1b[?1000h\x1b[?1006h\x1b[38;2;1;2;3mrgb\x1b[m")
	for i := range len(in) + 1 {
		whole := New(Config{Rows: 24, Cols: 80})
		whole.Write(in)
		cut := New(Config{Rows: 24, Cols: 80})
		cut.Write(in[:i])
		snap := cut.Snapshot(nil)
		fresh := New(Config{Rows: 24, Cols: 80})
		fresh.Write(snap)
		fresh.Write(in[i:])
		if w, g := whole.Snapshot(nil), fresh.Snapshot(nil); !bytes.Equal(w, g) {
			t.Fatalf("cut at byte %d (%q | %q):\n got %q\nwant %q", i, in[max(0, i-8):i], in[i:min(len(in), i+8)], g, w)
		}
	}
}
