package screen

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func FuzzSnapshotRoundTrip(f *testing.F) {
	for _, tc := range features {
		f.Add([]byte(tc.in), uint8(len(tc.in)))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		cfg := Config{Rows: 6, Cols: 12, Scrollback: 8}
		s := New(cfg)
		s.Write(in)
		want := dump(s, false)
		if got := dump(roundTrip(t, s, cfg), false); got != want {
			t.Fatalf("snapshot %q\n%s", s.Snapshot(nil), diff(want, got))
		}
		k := int(split) % (len(in) + 1)
		two := New(cfg)
		two.Write(in[:k])
		two.Write(in[k:])
		if got := dump(two, true); got != dump(s, true) {
			t.Fatalf("split at %d: %s", k, diff(dump(s, true), got))
		}
	})
}

// pieces are what random output is made of: text of every width, the
// controls the skip allows, and sequences that change what it may do.
var pieces = []string{
	"a", "hello ", "\r\n", "\n", "\n", "\n", "\r", "\t", "\b", "日", "😀", "e\u0301", "\xff", "\xe6\x97", "\x7f", " ",
	strings.Repeat("x", 13), "\u0085",
	"\x1b[31m", "\x1b[m", "\x1b[3;5r", "\x1b[r", "\x1b[?6h", "\x1b[?6l", "\x1b[4h", "\x1b[4l",
	"\x1b[?7l", "\x1b[?7h", "\x1b(0", "\x1b(B", "\x1b[?1049h", "\x1b[?1049l", "\x1b[2;3H", "\x1b[5b",
	"\x1b[3g", "\x1b[1;4H\x1bH",
}

// randomOutput joins n random pieces, mostly newlines and text.
func randomOutput(r *rand.Rand, n int) []byte {
	var b strings.Builder
	for range n {
		if r.IntN(3) == 0 {
			b.WriteString(pieces[r.IntN(18)]) // text and allowed controls only
		} else {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		switch r.IntN(8) {
		case 0, 1:
			b.WriteString(strings.Repeat("line\r\n", r.IntN(30)))
		case 2:
			b.WriteString(strings.Repeat("\n", r.IntN(30)))
		}
	}
	return []byte(b.String())
}

func TestSkipSameState(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 1))
	skipped := 0
	for i := range 400 {
		cfg := Config{Rows: 1 + r.IntN(8), Cols: 1 + r.IntN(14), Scrollback: r.IntN(6) - 1}
		in := randomOutput(r, 5+r.IntN(60))
		fast := New(cfg)
		fast.Write(in)
		slow := New(cfg)
		for j := range in {
			slow.Write(in[j : j+1]) // one byte never holds enough newlines to skip
		}
		if slow.skipped != 0 {
			t.Fatal("byte-by-byte writes skipped")
		}
		skipped += fast.skipped
		if want, got := dump(slow, true), dump(fast, true); want != got {
			t.Fatalf("case %d %+v, input %q:\n%s", i, cfg, in, diff(want, got))
		}
	}
	if skipped == 0 {
		t.Fatal("the skip never applied: the test tests nothing")
	}
	t.Logf("skipped %d bytes", skipped)
}

func TestSkipApplies(t *testing.T) {
	t.Parallel()
	cfg := Config{Rows: 24, Cols: 80, Scrollback: 100}
	in := []byte(strings.Repeat(strings.Repeat("y", 77)+"\r\n", 1000))
	for _, tc := range []struct {
		name, before string
		skip         bool
	}{
		{"plain", "", true},
		{"scroll region", "\x1b[2;10r", false},
		{"origin", "\x1b[?6h", false},
		{"insert", "\x1b[4h", false},
		{"alternate buffer", "\x1b[?1049h", true},
	} {
		s := New(cfg)
		s.Write([]byte(tc.before))
		s.Write(in)
		if got := s.skipped > 0; got != tc.skip {
			t.Errorf("%s: skipped %d bytes, want skip %v", tc.name, s.skipped, tc.skip)
		}
	}
}
