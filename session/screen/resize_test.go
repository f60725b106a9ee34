package screen

import (
	"math/rand/v2"
	"testing"
)

// TestLazyLinesSameState: lines hold only the cells drawn on, and resizes
// neither pad nor allocate the rest; a screen that works so ends in the
// state, and gives the snapshot, of one whose every line is kept full
// width after each write and resize, on random output written in random
// pieces between random resizes, bigger and smaller.
func TestLazyLinesSameState(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		cfg := Config{Rows: 1 + r.IntN(10), Cols: 1 + r.IntN(16), Scrollback: r.IntN(12)}
		lazy, eager := New(cfg), New(cfg)
		in := randomOutput(r, 200)
		for i := 0; i < len(in); {
			k := min(1+r.IntN(64), len(in)-i)
			lazy.Write(in[i : i+k])
			eager.Write(in[i : i+k])
			if r.IntN(6) == 0 {
				rows, cols := 1+r.IntN(12), 1+r.IntN(20)
				lazy.Resize(rows, cols)
				eager.Resize(rows, cols)
			}
			fillLines(eager)
			i += k
		}
		if want, got := dump(eager, true), dump(lazy, true); got != want {
			t.Fatalf("seed %d: %s", seed, diff(want, got))
		}
		if want, got := string(eager.Snapshot(nil)), string(lazy.Snapshot(nil)); got != want {
			t.Fatalf("seed %d: snapshot\n%q\nwant\n%q", seed, got, want)
		}
	}
}

// fillLines makes every line of s full width, as if lines were never
// short.
func fillLines(s *Screen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emulatePending()
	for _, b := range []*buffer{s.normal, s.alt} {
		if b == nil {
			continue
		}
		for i := range b.lines {
			b.lines[i].full(s.cols)
		}
	}
}

// TestResizeCostsWhatChanges: growing a blank screen to the largest size
// allocates no cells, and shrinking it back lets go of what it drew on.
func TestResizeCostsWhatChanges(t *testing.T) { // not parallel: AllocsPerRun
	s := New(Config{Rows: 2, Cols: 2})
	s.Write([]byte("ab"))
	allocs := testing.AllocsPerRun(20, func() {
		s.Resize(MaxRows, MaxCols)
		s.Resize(2, 2)
	})
	if allocs > 4 {
		t.Fatalf("%v allocations for a grow to %dx%d and back", allocs, MaxRows, MaxCols)
	}
	s.Resize(MaxRows, MaxCols)
	s.Write([]byte("\x1b[1000;1000Hz"))
	s.Resize(2, 2)
	if n := len(s.normal.lines); n != 2 || cap(s.normal.lines[1].cells) > 2*2+minLineCap {
		t.Fatalf("after a shrink to 2x2: %d lines, the cursor's line keeps %d cells", n, cap(s.normal.lines[1].cells))
	}
	if mem := s.MemoryBytes(); mem > 64<<10 {
		t.Fatalf("2x2 screen holds %d bytes", mem)
	}
}
