package screen

import (
	"bytes"
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
		ref, pieces := emulated(cfg), New(cfg)
		ref.Write(in)
		writeInPieces(rand.New(rand.NewPCG(uint64(split), 7)), pieces, nil, in)
		if want, got := dump(ref, true), dump(s, true); got != want {
			t.Fatalf("skip in one write: %s", diff(want, got))
		}
		if want, got := dump(ref, true), dump(pieces, true); got != want {
			t.Fatalf("skip across writes: %s", diff(want, got))
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

// writeInPieces writes in to s in pieces of random length, mostly small,
// and sometimes resizes both s and ref (which was fed the same bytes so
// far) to the same random size. It returns how many pieces it wrote.
func writeInPieces(r *rand.Rand, s, ref *Screen, in []byte) int {
	n := 0
	for i := 0; i < len(in); n++ {
		k := 1 + r.IntN(16)
		if r.IntN(8) == 0 {
			k = 1 + r.IntN(256)
		}
		k = min(k, len(in)-i)
		s.Write(in[i : i+k])
		if ref != nil {
			ref.Write(in[i : i+k])
			if r.IntN(40) == 0 {
				rows, cols := 1+r.IntN(8), 1+r.IntN(14)
				s.Resize(rows, cols)
				ref.Resize(rows, cols)
			}
		}
		i += k
	}
	return n
}

// emulated is a Screen that emulates every byte: the reference the
// skip must agree with.
func emulated(cfg Config) *Screen {
	s := New(cfg)
	s.skipOff = true
	return s
}

func TestSkipSameState(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 1))
	var skipped, skippedSplit int
	for i := range 400 {
		cfg := Config{Rows: 1 + r.IntN(8), Cols: 1 + r.IntN(14), Scrollback: r.IntN(6) - 1}
		in := randomOutput(r, 5+r.IntN(60))
		slow := emulated(cfg)
		slow.Write(in)
		fast := New(cfg)
		fast.Write(in)
		split := New(cfg)
		writeInPieces(r, split, nil, in)
		skipped += fast.skipped
		skippedSplit += split.skipped
		for name, s := range map[string]*Screen{"one write": fast, "many writes": split} {
			// Snapshot first: it must emulate what is pending by itself.
			if want, got := slow.Snapshot(nil), s.Snapshot(nil); string(want) != string(got) {
				t.Fatalf("case %d %+v, %s, input %q: snapshots differ:\n%q\n%q", i, cfg, name, in, want, got)
			}
			if want, got := dump(slow, true), dump(s, true); want != got {
				t.Fatalf("case %d %+v, %s, input %q:\n%s", i, cfg, name, in, diff(want, got))
			}
		}
	}
	if skipped == 0 || skippedSplit == 0 {
		t.Fatalf("skipped %d bytes in one write, %d in many: the test tests nothing", skipped, skippedSplit)
	}
	t.Logf("skipped %d bytes in one write, %d in many", skipped, skippedSplit)
}

func TestSkipSameStateResized(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 2))
	skipped := 0
	for i := range 300 {
		cfg := Config{Rows: 1 + r.IntN(8), Cols: 1 + r.IntN(14), Scrollback: r.IntN(6) - 1}
		in := randomOutput(r, 5+r.IntN(60))
		slow, fast := emulated(cfg), New(cfg)
		writeInPieces(r, fast, slow, in)
		skipped += fast.skipped
		if want, got := dump(slow, true), dump(fast, true); want != got {
			t.Fatalf("case %d %+v, input %q:\n%s", i, cfg, in, diff(want, got))
		}
	}
	if skipped == 0 {
		t.Fatal("the skip never applied: the test tests nothing")
	}
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
		for _, size := range []int{len(in), 4096, 100, 1} {
			s := New(cfg)
			s.Write([]byte(tc.before))
			for p := in; len(p) > 0; p = p[min(size, len(p)):] {
				s.Write(p[:min(size, len(p))])
			}
			if got := s.skipped > 0; got != tc.skip {
				t.Errorf("%s, writes of %d bytes: skipped %d bytes, want skip %v", tc.name, size, s.skipped, tc.skip)
			}
		}
	}
}

func TestFollowShortcut(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 3))
	plain := pieces[:16] // text and the controls a plain run holds
	shortcuts := 0
	for i := range 3000 {
		s := New(Config{Rows: 1 + r.IntN(8), Cols: 1 + r.IntN(14)})
		s.modes.autowrap, s.graphic = r.IntN(4) != 0, r.IntN(4) == 0
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(plain[r.IntN(len(plain))])
		}
		p := []byte(b.String())
		if n, _ := skipRun(p); n != len(p) {
			t.Fatalf("%q is not a plain run", p)
		}
		c := cursor{x: r.IntN(s.cols), y: r.IntN(s.rows)}
		c.wrapNext = c.x == s.cols-1 && r.IntN(2) == 0
		last := rune(r.IntN(2) * 'q')
		wantC, wantL := s.followAll(p, c, last)
		gotC, gotL := s.follow(p, c, last)
		if gotC != wantC || gotL != wantL {
			t.Fatalf("case %d, %dx%d autowrap=%v graphic=%v, from %+v over %q: got %+v %q, want %+v %q",
				i, s.rows, s.cols, s.modes.autowrap, s.graphic, c, p, gotC, gotL, wantC, wantL)
		}
		if bytes.Contains(p, []byte{'\r'}) && c.y+bytes.Count(p, []byte{'\n'}) >= s.rows+2 {
			shortcuts++
		}
	}
	if shortcuts < 100 {
		t.Fatalf("the shortcut applied about %d times: the test tests little", shortcuts)
	}
}

func TestNextControl(t *testing.T) {
	t.Parallel()
	for n := range 40 {
		for at := range n + 1 {
			p := []byte(strings.Repeat("\x7f~ \xff\x80\x9f\xa0!", 5)[:n])
			if at < n {
				p[at] = byte(at % 0x20)
			}
			for from := range n + 1 {
				want := n
				if at >= from && at < n {
					want = at
				}
				if got := nextControl(p, from); got != want {
					t.Fatalf("nextControl(%q, %d) = %d, want %d", p, from, got, want)
				}
			}
		}
	}
}

func TestAfterNewlines(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 4))
	for range 200 {
		p := make([]byte, r.IntN(10_000))
		var at []int
		for i := range p {
			p[i] = 'x'
			if r.IntN(1+r.IntN(300)) == 0 {
				p[i] = '\n'
				at = append(at, i+1)
			}
		}
		for n := 1; n <= len(at); n += 1 + r.IntN(20) {
			if got := afterNewlines(p, n); got != at[n-1] {
				t.Fatalf("afterNewlines(%d bytes, %d) = %d, want %d", len(p), n, got, at[n-1])
			}
		}
	}
}
