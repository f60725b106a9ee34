package screen

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// features is one input per feature a snapshot must reproduce.
var features = []struct{ name, in string }{
	{"text", "hello\r\nworld"},
	{"scrollback", strings.Repeat("line of text\r\n", 40) + "last"},
	{"scrollback full", strings.Repeat("0123456789abcdefghijklmnop\r\n", 200)},
	{"wrapped lines", strings.Repeat("abcdefghij", 7) + "\r\n" + strings.Repeat("x", 20) + "y"},
	{"pending wrap", "\x1b[5;1H" + strings.Repeat("w", 20)},
	{"pending wrap wide", "\x1b[5;1H" + strings.Repeat("w", 18) + "日"},
	{"pending wrap no autowrap", strings.Repeat("w", 20) + "\x1b[?7l"},
	{"autowrap off", "\x1b[?7l" + strings.Repeat("z", 30)},
	{"16 colours", "\x1b[31mred\x1b[42mgreen\x1b[93;104mbright\x1b[39;49m plain"},
	{"256 colours", "\x1b[38;5;196m\x1b[48;5;21mx\x1b[38:5:100my"},
	{"truecolor", "\x1b[38;2;1;2;3m\x1b[48;2;250;128;0mx\x1b[38:2::9:8:7my\x1b[38:2:4:5:6mz"},
	{"attributes", "\x1b[1mb\x1b[2md\x1b[3mi\x1b[4mu\x1b[5mk\x1b[7mv\x1b[8mh\x1b[9ms\x1b[22;23;24;25;27;28;29mn"},
	{"long pen", "\x1b[1;2;3;4;5;7;8;9m\x1b[38;2;1;2;3m\x1b[48;2;4;5;6mx\r\n\x1b[m" + strings.Repeat("\r\n", 12) + "\x1b[1;2;3;4;5;7;8;9m\x1b[38;2;1;2;3m\x1b[48;2;4;5;6m"},
	{"underline styles", "\x1b[4:3mcurly\x1b[4:0mnone\x1b[21mdouble"},
	{"pen", "\x1b[1;3;35;48;5;200m"},
	{"erase with colour", "text\x1b[44m\x1b[2J\x1b[3;3Hx\x1b[K"},
	{"scroll region", "\x1b[3;8r\x1b[5;1Hin region"},
	{"scroll region scrolls", "\x1b[2;5r\x1b[5;1H" + strings.Repeat("r\n", 10)},
	{"origin mode", "\x1b[3;8r\x1b[?6h\x1b[2;4Ho"},
	{"insert mode", "abc\x1b[4h\x1b[1Gxy"},
	{"application cursor keys", "\x1b[?1h"},
	{"application keypad", "\x1b="},
	{"bracketed paste", "\x1b[?2004h"},
	{"mouse 1000", "\x1b[?1000h"},
	{"mouse 1002 sgr", "\x1b[?1002h\x1b[?1006h"},
	{"mouse 1003 urxvt", "\x1b[?1003h\x1b[?1015h"},
	{"mouse reset", "\x1b[?1003h\x1b[?1000l\x1b[?1006h"},
	{"focus", "\x1b[?1004h"},
	{"cursor hidden", "\x1b[?25l"},
	{"cursor shape", "\x1b[5 q"},
	{"title osc 0", "\x1b]0;my title\x07"},
	{"title osc 2 st", "\x1b]2;日本 title\x1b\\"},
	{"title long", "\x1b]2;" + strings.Repeat("t", 3000) + "\x07"},
	{"title control chars", "\x1b]2;a\x01b\u009cc\x07"},
	{"alternate buffer", "normal\x1b[?1049h\x1b[31malt screen\x1b[m\x1b[3;4H"},
	{"alternate buffer left", "normal\x1b[?1049hALT\x1b[?1049l after"},
	{"alternate 1047", "n\x1b[?1047ha\x1b[2;2H"},
	{"alternate saved cursor", "\x1b[3;3H\x1b[1m\x1b7\x1b[?1047h\x1b[5;5H\x1b7\x1b[?1047l"},
	{"saved cursor", "\x1b[4;7H\x1b[32m\x1b7\x1b[m\x1b[1;1H"},
	{"saved cursor graphic", "\x1b(0\x1b[2;2H\x1b7\x1b(B"},
	{"tab stops", "\x1b[3g\x1b[1;5H\x1bH\x1b[1;13H\x1bH\x1b[1;1H\ta\tb"},
	{"tabs cleared one", "\x1b[1;9H\x1b[0g\x1b[1;1H\tx"},
	{"wide characters", "日本語 and 😀 emoji"},
	{"wide at edge", strings.Repeat("a", 19) + "日"},
	{"wide overwritten", "日本\x1b[1;2Hx"},
	{"combining", "e\u0301 and a\u0308"},
	{"dec graphics", "\x1b(0lqqk\r\nx  x\r\nmqqj\x1b(B"},
	{"dec graphics active", "\x1b(0"},
	{"insert delete", "abcdef\x1b[1;2H\x1b[2P\x1b[3@\r\n\x1b[2L\x1b[1M\x1b[3X"},
	{"scroll up down", "1\r\n2\r\n3\x1b[2S\x1b[1T"},
	{"reverse index", "\x1b[1;1H\x1bMtop"},
	{"erase display", "aaaa\r\nbbbb\r\ncccc\x1b[2;2H\x1b[1J\x1b[3;3H\x1b[0J"},
	{"decaln", "\x1b#8"},
	{"soft reset", "x\x1b[?6h\x1b[4h\x1b[1m\x1b[!p"},
	{"rep", "x\x1b[5b"},
	{"ris", "junk\x1b[?1049h\x1bc"},
	{"clear scrollback", strings.Repeat("x\r\n", 30) + "\x1b[3J"},
	{"invalid utf8", "a\xffb\xe2\x82c\xf0\x9f"},
	{"queries ignored", "\x1b[c\x1b[>c\x1b[6n\x1b[?2004$p\x1b]10;?\x07\x1bP+q544e\x1b\\\x1b[14t"},
}

// cfgSmall is the size the feature tests use: small, so scrollback fills.
var cfgSmall = Config{Rows: 10, Cols: 20, Scrollback: 50}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	blank := dump(New(cfgSmall), false)
	for _, tc := range features {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(cfgSmall)
			s.Write([]byte(tc.in))
			want := dump(s, false)
			if want == blank && tc.name != "ris" && tc.name != "queries ignored" {
				t.Fatalf("input changed nothing: the case tests nothing")
			}
			got := dump(roundTrip(t, s, cfgSmall), false)
			if got != want {
				t.Fatalf("snapshot %q\n%s", s.Snapshot(nil), diff(want, got))
			}
		})
	}
}

func TestSplitWritesSameState(t *testing.T) {
	t.Parallel()
	var all strings.Builder
	for _, tc := range features {
		all.WriteString(tc.in)
	}
	in := []byte(all.String())
	whole := New(cfgSmall)
	whole.Write(in)
	want := dump(whole, true)
	t.Run("byte by byte", func(t *testing.T) {
		s := New(cfgSmall)
		for i := range in {
			s.Write(in[i : i+1])
		}
		if got := dump(s, true); got != want {
			t.Fatal(diff(want, got))
		}
	})
	for i := 0; i <= len(in); i += 1 + i/4096 {
		s := New(cfgSmall)
		s.Write(in[:i])
		s.Write(in[i:])
		if got := dump(s, true); got != want {
			t.Fatalf("split at %d: %s", i, diff(want, got))
		}
	}
}

func TestEmulation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		check    func(s *Screen) string
	}{
		{"wide takes two cells", "日x", func(s *Screen) string {
			l := s.normal.lines[0].cells
			return fmt.Sprintf("%c%d %d %c %d", l[0].r, l[0].kind, l[1].kind, l[2].r, s.cur.x)
		}},
		{"emoji takes two cells", "😀", func(s *Screen) string { return fmt.Sprint(s.cur.x) }},
		{"split utf8", "\xe6\x97", func(s *Screen) string { return fmt.Sprint(s.p.u8n) }},
		{"sgr", "\x1b[1;4;38;2;1;2;3;48;5;9m", func(s *Screen) string { return fmt.Sprintf("%x %x %x", s.pen.fg, s.pen.bg, s.pen.attr) }},
		{"pending wrap", strings.Repeat("a", 20), func(s *Screen) string { return fmt.Sprintf("%+v", s.cur) }},
		{"title", "\x1b]0;hi\x1b\\", func(s *Screen) string { return s.Title() }},
		{"region", "\x1b[2;4r", func(s *Screen) string { return fmt.Sprint(s.top, s.bot) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(cfgSmall)
			s.Write([]byte(tc.in))
			settle(s)
			got := tc.check(s)
			want := map[string]string{
				"wide takes two cells": "日1 2 x 3", "emoji takes two cells": "2", "split utf8": "2",
				"sgr": "2010203 1000009 9", "pending wrap": "{x:19 y:0 wrapNext:true}", "title": "hi", "region": "1 3",
			}[tc.name]
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

func TestResize(t *testing.T) {
	t.Parallel()
	s := New(cfgSmall)
	for i := range 15 {
		fmt.Fprintf(writer{s}, "line %d %s\r\n", i, strings.Repeat("#", 15))
	}
	s.Resize(5, 10)
	if r, c := s.Size(); r != 5 || c != 10 {
		t.Fatalf("size %dx%d", r, c)
	}
	if s.cur.y != 4 {
		t.Fatalf("cursor line %d, want the last", s.cur.y)
	}
	got := dump(roundTrip(t, s, cfgSmall), false)
	if want := dump(s, false); got != want {
		t.Fatal(diff(want, got))
	}
	s.Resize(30, 40)
	got = dump(roundTrip(t, s, cfgSmall), false)
	if want := dump(s, false); got != want {
		t.Fatal(diff(want, got))
	}
}

// writer lets fmt write to a Screen.
type writer struct{ s *Screen }

func (w writer) Write(p []byte) (int, error) { w.s.Write(p); return len(p), nil }

func TestConfigBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg            Config
		rows, cols, sb int
	}{
		{Config{}, DefaultRows, DefaultCols, DefaultScrollback},
		{Config{Rows: -1, Cols: -5, Scrollback: -1}, DefaultRows, DefaultCols, 0},
		{Config{Rows: 1 << 20, Cols: 1 << 20, Scrollback: 1 << 30}, MaxRows, MaxCols, MaxScrollback},
	} {
		s := New(tc.cfg)
		if r, c := s.Size(); r != tc.rows || c != tc.cols || s.sb.max != tc.sb {
			t.Errorf("%+v: %dx%d scrollback %d", tc.cfg, r, c, s.sb.max)
		}
	}
}

func TestMemoryBound(t *testing.T) {
	t.Parallel()
	cfg := Config{Rows: 24, Cols: 80, Scrollback: 500}
	s := New(cfg)
	line := []byte("\x1b[31m" + strings.Repeat("x", 70) + "\x1b[m\r\n")
	for range 20_000 {
		s.Write(line)
	}
	s.Write([]byte("\x1b[?1049h"))
	if s.sb.n != cfg.Scrollback {
		t.Fatalf("scrollback holds %d lines, want %d", s.sb.n, cfg.Scrollback)
	}
	// Bound: two buffers of cells plus scrollback lines of at most
	// 1024 bytes each (a longer line's buffer is not kept) plus overhead.
	bound := 2*cfg.Rows*(cfg.Cols*cellBytes+64) + cfg.Scrollback*(1024+64) + 4096
	if m := s.MemoryBytes(); m > bound || m < cfg.Scrollback*70 {
		t.Fatalf("MemoryBytes %d, want between %d and %d", m, cfg.Scrollback*70, bound)
	}
	snap := s.Snapshot(nil)
	if bytes.Count(snap, []byte("\r\n")) < cfg.Scrollback {
		t.Fatalf("snapshot has %d lines", bytes.Count(snap, []byte("\r\n")))
	}
}

func TestPendingBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, text string }{
		{"lines", strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", 2) + "\r\n"},
		{"one long line", "no newline "},
		{"wide lines", strings.Repeat("日本語", 20) + "\r\n"},
		{"newlines", "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{Rows: 24, Cols: 80, Scrollback: 1000})
			limit := s.maxPending()
			in := []byte(strings.Repeat(tc.text, 1_000_000/len(tc.text)))
			for i := 0; len(in) > 0; i++ {
				n := min(len(in), []int{1000, 7, 1000, 250_000}[i%4])
				s.Write(in[:n])
				in = in[n:]
				if cap(s.pend) > limit {
					t.Fatalf("pending run holds %d bytes (%d newlines), the bound is %d", cap(s.pend), s.pendNL, limit)
				}
			}
			if tc.name == "lines" && (s.skipped == 0 || len(s.pend) < 1000*len(tc.text)) {
				t.Fatalf("skipped %d bytes, %d pending: the skip did not work across writes", s.skipped, len(s.pend))
			}
			if m := s.MemoryBytes(); m < cap(s.pend) {
				t.Fatalf("MemoryBytes %d does not count the pending %d bytes", m, cap(s.pend))
			}
			s.Write([]byte("\x1b[m"))
			if len(s.pend) != 0 || cap(s.pend) > maxIdlePending {
				t.Fatalf("after an escape, %d bytes pending in a buffer of %d", len(s.pend), cap(s.pend))
			}
		})
	}
}

func TestNoQueriesCheckerCatches(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"\x1b[c", "\x1b[>c", "\x1b[6n", "\x1b[?2004$p", "\x1b]10;?\x1b\\", "\x1bP$qm\x1b\\", "\x1b[14t", "\x1bZ"} {
		if checkNoQueries([]byte("ok"+q)) == nil {
			t.Errorf("%q passed the check", q)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := New(cfgSmall)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			fmt.Fprintf(writer{s}, "\x1b[3%dmline %d\r\n", i%8, i)
		}
	}()
	for range 50 {
		if snap := s.Snapshot(nil); len(snap) == 0 {
			t.Fatal("empty snapshot")
		}
		_ = s.MemoryBytes()
	}
	<-done
}
