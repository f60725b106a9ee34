package screen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// colourLines is n lines of cols cells, each in a truecolor of its own.
func colourLines(n, cols int) []byte {
	var b strings.Builder
	for i := range n {
		for x := range cols {
			fmt.Fprintf(&b, "\x1b[38;2;%d;%d;%dm%c", i%256, x%256, (i+x)%256, 'a'+(i+x)%26)
		}
		b.WriteString("\x1b[m\r\n")
	}
	return []byte(b.String())
}

// TestScrollbackBytesBound: the scrollback keeps at most ScrollbackBytes
// of encoded lines, dropping the oldest; what it keeps is still the
// newest lines, in order, and a snapshot reproduces them.
func TestScrollbackBytesBound(t *testing.T) {
	t.Parallel()
	cfg := Config{Rows: 10, Cols: 40, Scrollback: 500, ScrollbackBytes: 64 << 10}
	s := New(cfg)
	all := New(Config{Rows: 10, Cols: 40, Scrollback: 500})
	for range 3 { // in pieces: the bound holds across writes and wraps of the ring
		out := colourLines(400, 40)
		s.Write(out)
		all.Write(out)
	}
	settle(s)
	if s.sb.bytes > cfg.ScrollbackBytes || s.sb.n == 0 || s.sb.n >= 500 {
		t.Fatalf("%d lines in %d bytes; want some, within %d bytes", s.sb.n, s.sb.bytes, cfg.ScrollbackBytes)
	}
	settle(all)
	for i := range s.sb.n {
		got, want := s.sb.at(i), all.sb.at(all.sb.n-s.sb.n+i)
		if string(got.data) != string(want.data) {
			t.Fatalf("line %d of %d: %q, want %q", i, s.sb.n, got.data, want.data)
		}
	}
	if g, w := dump(roundTrip(t, s, cfg), false), dump(s, false); g != w {
		t.Fatalf("round trip:\n%s", diff(g, w))
	}
	if m, b := s.MemoryBytes(), MemoryBound(cfg); m > b {
		t.Fatalf("MemoryBytes %d over MemoryBound %d", m, b)
	}
}

// TestSnapshotMax: a snapshot within a limit keeps the newest scrollback
// lines that fit, and restores the same screen; one whose screen alone
// does not fit is refused.
func TestSnapshotMax(t *testing.T) {
	t.Parallel()
	s := New(Config{Rows: 24, Cols: 80})
	s.Write(colourLines(2000, 80))
	s.Write([]byte("\x1b[?1049h\x1b[5;5Hon the alternate screen\x1b]2;title\x07"))
	full := s.Snapshot(nil)
	jsonish := func(b []byte) int { return len(b) + 5*strings.Count(string(b), "\x1b") }
	for _, limit := range []int{len(full) / 2, 200 << 10, 100 << 10} {
		snap, ok := s.SnapshotMax(nil, limit, jsonish)
		if !ok || jsonish(snap) > limit || len(snap) >= len(full) {
			t.Fatalf("limit %d: ok %v, %d bytes costing %d (the whole one %d)", limit, ok, len(snap), jsonish(snap), len(full))
		}
		f := New(Config{Rows: 24, Cols: 80, Scrollback: -1})
		f.Write(snap)
		want := New(Config{Rows: 24, Cols: 80, Scrollback: -1})
		want.Write(full)
		if g, w := dump(f, false), dump(want, false); g != w {
			t.Fatalf("limit %d:\n%s", limit, diff(g, w))
		}
	}
	if snap, ok := s.SnapshotMax(nil, 1000, nil); ok || len(snap) != 0 {
		t.Fatalf("a screen over the limit: ok %v, %d bytes", ok, len(snap))
	}
	if snap, ok := s.SnapshotMax(nil, 1<<30, nil); !ok || string(snap) != string(full) {
		t.Fatal("under a limit it does not reach, not the whole snapshot")
	}
}

// TestMemoryWithinMemoryBound: whatever a program writes, a Screen holds no more than
// MemoryBound says.
func TestMemoryWithinMemoryBound(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Rows: 24, Cols: 80},
		{Rows: 50, Cols: 200, Scrollback: 3000, ScrollbackBytes: 256 << 10},
		{Rows: 100, Cols: 300, Scrollback: -1},
	} {
		s := New(cfg)
		r := rand.New(rand.NewPCG(1, 2))
		for range 20 {
			s.Write(colourLines(1+r.IntN(200), 1+r.IntN(cfg.Cols*2)))
			s.Write([]byte(strings.Repeat("plain text without colours\r\n", r.IntN(3000))))
			if r.IntN(3) == 0 {
				s.Write([]byte("\x1b[?1049h"))
			}
			if m, b := s.MemoryBytes(), MemoryBound(cfg); m > b {
				t.Fatalf("%+v: MemoryBytes %d over MemoryBound %d", cfg, m, b)
			}
		}
	}
}
