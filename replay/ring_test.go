package replay

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// out is an output event of stream s carrying data.
func out(s Stream, data string) Event {
	return Event{Kind: KindOutput, Stream: s, Data: []byte(data)}
}

// sized is an output event on stdout of n bytes without a newline.
func sized(n int) Event { return out(StreamStdout, strings.Repeat("x", n)) }

func exitEvent(code int) Event {
	return Event{Kind: KindExit, Exit: &ExitInfo{Code: code, Reason: "exited"}}
}

func seqs(evs []Event) []uint64 {
	s := make([]uint64, 0, len(evs))
	for _, ev := range evs {
		s = append(s, ev.Seq)
	}
	return s
}

func seqRange(from, to uint64) []uint64 {
	s := []uint64{}
	for q := from; q <= to; q++ {
		s = append(s, q)
	}
	return s
}

func TestKindAndStreamNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		got, want string
	}{
		{KindStarted.String(), "started"},
		{KindOutput.String(), "output"},
		{KindResize.String(), "resize"},
		{KindStdinClosed.String(), "stdin-closed"},
		{KindSignal.String(), "signal"},
		{KindExit.String(), "exit"},
		{Kind(0).String(), "kind(0)"},
		{KindNotice.String(), "notice"},
		{Kind(8).String(), "kind(8)"},
		{StreamPTY.String(), "pty"},
		{StreamStdout.String(), "stdout"},
		{StreamStderr.String(), "stderr"},
		{Stream(0).String(), "stream(0)"},
		{Stream(9).String(), "stream(9)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestAppendNumbersFromOne(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name string
			evs  []Event
		}{
			{"one", []Event{{Kind: KindStarted}}},
			{"every kind", []Event{
				{Kind: KindStarted, Rows: 24, Cols: 80},
				out(StreamPTY, "hello"),
				{Kind: KindResize, Rows: 50, Cols: 132},
				{Kind: KindStdinClosed},
				{Kind: KindSignal, Signal: 15},
				exitEvent(0),
			}},
			{"many outputs", slices.Repeat([]Event{out(StreamStdout, "a"), out(StreamStderr, "b")}, 50)},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.new(Config{})
				for i, ev := range tt.evs {
					seq, err := r.Append(ev)
					if err != nil || seq != uint64(i+1) {
						t.Fatalf("append %d: seq %d, err %v; want seq %d", i, seq, err, i+1)
					}
				}
				got, gap := r.Read(nil, 0, 0, 0)
				if gap != nil || !slices.Equal(seqs(got), seqRange(1, uint64(len(tt.evs)))) {
					t.Fatalf("read: seqs %v, gap %+v", seqs(got), gap)
				}
				for i, ev := range got {
					if ev.Kind != tt.evs[i].Kind {
						t.Errorf("seq %d: kind %s, want %s", ev.Seq, ev.Kind, tt.evs[i].Kind)
					}
				}
			})
		}
	})
}

func TestAppendOffsetsPerStream(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name        string
			evs         []Event
			wantOffsets []uint64 // per event, 0 for non-output
		}{
			{"one stream", []Event{out(StreamPTY, "ab"), out(StreamPTY, "cde"), out(StreamPTY, "f")},
				[]uint64{0, 2, 5}},
			{"streams count apart", []Event{
				out(StreamStdout, "1234"), out(StreamStderr, "12"), out(StreamStdout, "5"),
				out(StreamStderr, "345"), out(StreamPTY, "x"), out(StreamStdout, "6"),
			}, []uint64{0, 0, 4, 2, 0, 5}},
			{"caller offset ignored", []Event{
				{Kind: KindOutput, Stream: StreamStdout, Data: []byte("ab"), Offset: 99},
				{Kind: KindOutput, Stream: StreamStdout, Data: []byte("c"), Offset: 7},
				{Kind: KindSignal, Signal: 2, Offset: 5},
			}, []uint64{0, 2, 0}},
			{"other kinds do not count", []Event{
				{Kind: KindStarted}, out(StreamStdout, "abc"), {Kind: KindStdinClosed}, out(StreamStdout, "d"),
			}, []uint64{0, 0, 0, 3}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got, _ := m.filled(t, Config{}, tt.evs...).Read(nil, 0, 0, 0)
				for i, ev := range got {
					if ev.Offset != tt.wantOffsets[i] {
						t.Errorf("seq %d: offset %d, want %d", ev.Seq, ev.Offset, tt.wantOffsets[i])
					}
				}
			})
		}
	})
}

func TestAppendCopiesCallerMemory(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.new(Config{})
		buf := []byte("first")
		exit := &ExitInfo{Code: 3, Reason: "exited"}
		r.AppendOutput(StreamPTY, buf)
		r.Append(Event{Kind: KindOutput, Stream: StreamPTY, Data: buf})
		r.Append(Event{Kind: KindExit, Exit: exit})
		copy(buf, "XXXXX")
		exit.Code = 99
		got, _ := r.Read(nil, 0, 0, 0)
		if string(got[0].Data) != "first" || string(got[1].Data) != "first" {
			t.Errorf("data changed with the caller's buffer: %q %q", got[0].Data, got[1].Data)
		}
		if got[2].Exit.Code != 3 {
			t.Errorf("exit code changed with the caller's struct: %d", got[2].Exit.Code)
		}
	})
}

func TestAppendStampsTime(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		given := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		before := time.Now()
		r := m.filled(t, Config{}, out(StreamPTY, "a"), Event{Kind: KindStdinClosed, Time: given}, out(StreamPTY, "b"))
		got, _ := r.Read(nil, 0, 0, 0)
		if got[0].Time.Before(before) || got[2].Time.Before(got[0].Time) {
			t.Errorf("stamped times %v, %v not after %v and in order", got[0].Time, got[2].Time, before)
		}
		if !got[1].Time.Equal(given) {
			t.Errorf("caller's time %v replaced by %v", given, got[1].Time)
		}
	})
}

func TestAppendInvalid(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		exit := &ExitInfo{}
		tests := []struct {
			name string
			ev   Event
		}{
			{"zero event", Event{}},
			{"unknown kind", Event{Kind: KindNotice + 1}},
			{"sequence set", Event{Kind: KindStdinClosed, Seq: 1}},
			{"output without stream", Event{Kind: KindOutput, Data: []byte("x")}},
			{"output with unknown stream", Event{Kind: KindOutput, Stream: StreamStderr + 1, Data: []byte("x")}},
			{"output without data", Event{Kind: KindOutput, Stream: StreamPTY}},
			{"output with empty data", Event{Kind: KindOutput, Stream: StreamPTY, Data: []byte{}}},
			{"output with rows", Event{Kind: KindOutput, Stream: StreamPTY, Data: []byte("x"), Rows: 1, Cols: 1}},
			{"output with exit", Event{Kind: KindOutput, Stream: StreamPTY, Data: []byte("x"), Exit: exit}},
			{"started with stream", Event{Kind: KindStarted, Stream: StreamPTY}},
			{"started with rows only", Event{Kind: KindStarted, Rows: 24}},
			{"started with cols only", Event{Kind: KindStarted, Cols: 80}},
			{"resize without rows", Event{Kind: KindResize, Cols: 80}},
			{"resize without cols", Event{Kind: KindResize, Rows: 24}},
			{"resize with data", Event{Kind: KindResize, Rows: 24, Cols: 80, Data: []byte("x")}},
			{"stdin closed with signal", Event{Kind: KindStdinClosed, Signal: 9}},
			{"stdin closed with rows", Event{Kind: KindStdinClosed, Rows: 1, Cols: 1}},
			{"signal without number", Event{Kind: KindSignal}},
			{"signal negative", Event{Kind: KindSignal, Signal: -1}},
			{"signal with exit", Event{Kind: KindSignal, Signal: 9, Exit: exit}},
			{"exit without info", Event{Kind: KindExit}},
			{"exit with signal field", Event{Kind: KindExit, Exit: exit, Signal: 9}},
			{"exit with data", Event{Kind: KindExit, Exit: exit, Data: []byte("x")}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.new(Config{})
				if seq, err := r.Append(tt.ev); !errors.Is(err, ErrInvalid) || seq != 0 {
					t.Errorf("Append: seq %d, err %v; want 0, ErrInvalid", seq, err)
				}
				if st := r.Stats(); st != (Stats{}) || r.Closed() {
					t.Errorf("rejected event changed the ring: %+v, closed %v", st, r.Closed())
				}
			})
		}
	})
}

func TestAppendOutputInvalid(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name string
			s    Stream
			p    []byte
		}{
			{"zero stream", 0, []byte("x")},
			{"unknown stream", 4, []byte("x")},
			{"nil data", StreamPTY, nil},
			{"empty data", StreamPTY, []byte{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.new(Config{})
				if _, err := r.AppendOutput(tt.s, tt.p); !errors.Is(err, ErrInvalid) {
					t.Errorf("AppendOutput: %v, want ErrInvalid", err)
				}
			})
		}
	})
}

func TestExitIsLast(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name  string
			after func(*Ring) (uint64, error)
		}{
			{"output", func(r *Ring) (uint64, error) { return r.Append(out(StreamPTY, "late")) }},
			{"append output", func(r *Ring) (uint64, error) { return r.AppendOutput(StreamPTY, []byte("late")) }},
			{"resize", func(r *Ring) (uint64, error) { return r.Append(Event{Kind: KindResize, Rows: 1, Cols: 1}) }},
			{"signal", func(r *Ring) (uint64, error) { return r.Append(Event{Kind: KindSignal, Signal: 9}) }},
			{"second exit", func(r *Ring) (uint64, error) { return r.Append(exitEvent(1)) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{}, Event{Kind: KindStarted}, out(StreamPTY, "x"))
				if r.Closed() {
					t.Fatal("closed before the exit event")
				}
				if seq, err := r.Append(exitEvent(0)); err != nil || seq != 3 {
					t.Fatalf("exit: seq %d, err %v", seq, err)
				}
				if seq, err := tt.after(r); !errors.Is(err, ErrClosed) || seq != 0 {
					t.Errorf("after exit: seq %d, err %v; want 0, ErrClosed", seq, err)
				}
				if first, last := r.Bounds(); !r.Closed() || first != 1 || last != 3 {
					t.Errorf("closed %v, bounds %d..%d; want true, 1..3", r.Closed(), first, last)
				}
				got, _ := r.Read(nil, 0, 0, 0)
				if final := got[len(got)-1]; final.Kind != KindExit || final.Exit.Code != 0 {
					t.Errorf("last event %+v, want the first exit", final)
				}
			})
		}
	})
}

func TestEviction(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name      string
			cfg       Config
			evs       []Event
			wantFirst uint64
			wantStats Stats
		}{
			{"within bounds", Config{MaxBytes: 12}, []Event{sized(4), sized(4), sized(4)},
				1, Stats{Bytes: 12, Events: 3, Appended: 3, OutputBytes: 12}},
			{"by bytes", Config{MaxBytes: 10}, []Event{sized(4), sized(4), sized(4)},
				2, Stats{Bytes: 8, Events: 2, Appended: 3, OutputBytes: 12, EvictedBytes: 4}},
			{"by count without newlines", Config{MaxEvents: 3}, slices.Repeat([]Event{sized(1)}, 10),
				8, Stats{Bytes: 3, Events: 3, Appended: 10, OutputBytes: 10, EvictedBytes: 7}},
			{"long lines", Config{MaxBytes: 1000, MaxEvents: 100}, slices.Repeat([]Event{sized(100)}, 50),
				41, Stats{Bytes: 1000, Events: 10, Appended: 50, OutputBytes: 5000, EvictedBytes: 4000}},
			{"oversized event stays alone", Config{MaxBytes: 10}, []Event{sized(3), sized(3), sized(25)},
				3, Stats{Bytes: 25, Events: 1, Appended: 3, OutputBytes: 31, EvictedBytes: 6}},
			{"oversized event evicted by the next", Config{MaxBytes: 10}, []Event{sized(3), sized(25), sized(1)},
				3, Stats{Bytes: 1, Events: 1, Appended: 3, OutputBytes: 29, EvictedBytes: 28}},
			{"other kinds count as events", Config{MaxEvents: 2},
				[]Event{{Kind: KindStarted}, {Kind: KindResize, Rows: 1, Cols: 2}, {Kind: KindSignal, Signal: 1}},
				2, Stats{Events: 2, Appended: 3}},
			{"other kinds survive byte eviction", Config{MaxBytes: 4},
				[]Event{sized(4), {Kind: KindStdinClosed}, sized(4)},
				2, Stats{Bytes: 4, Events: 2, Appended: 3, OutputBytes: 8, EvictedBytes: 4}},
			{"one event", Config{MaxEvents: 1}, []Event{sized(2), sized(3), exitEvent(0)},
				3, Stats{Events: 1, Appended: 3, OutputBytes: 5, EvictedBytes: 5}},
			{"default count", Config{}, slices.Repeat([]Event{sized(1)}, 5000),
				5000 - DefaultMaxEvents + 1, Stats{Bytes: DefaultMaxEvents, Events: DefaultMaxEvents,
					Appended: 5000, OutputBytes: 5000, EvictedBytes: 5000 - DefaultMaxEvents}},
			{"default bytes", Config{}, slices.Repeat([]Event{sized(4096)}, 512),
				257, Stats{Bytes: 1 << 20, Events: 256, Appended: 512, OutputBytes: 2 << 20, EvictedBytes: 1 << 20}},
			{"negative takes defaults", Config{MaxBytes: -1, MaxEvents: -1}, slices.Repeat([]Event{sized(1)}, 5000),
				5000 - DefaultMaxEvents + 1, Stats{Bytes: DefaultMaxEvents, Events: DefaultMaxEvents,
					Appended: 5000, OutputBytes: 5000, EvictedBytes: 5000 - DefaultMaxEvents}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, tt.cfg, tt.evs...)
				if st := r.Stats(); st != tt.wantStats {
					t.Errorf("stats %+v, want %+v", st, tt.wantStats)
				}
				wantLast := uint64(len(tt.evs))
				if first, last := r.Bounds(); first != tt.wantFirst || last != wantLast {
					t.Errorf("bounds %d..%d, want %d..%d", first, last, tt.wantFirst, wantLast)
				}
				got, gap := r.Read(nil, tt.wantFirst-1, 0, 0)
				if gap != nil || !slices.Equal(seqs(got), seqRange(tt.wantFirst, wantLast)) {
					t.Errorf("read: seqs %v, gap %+v", seqs(got), gap)
				}
			})
		}
	})
}

func TestBoundsAndStats(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name                string
			evs                 []Event
			wantFirst, wantLast uint64
			wantStats           Stats
		}{
			{"empty", nil, 0, 0, Stats{}},
			{"started only", []Event{{Kind: KindStarted}}, 1, 1, Stats{Events: 1, Appended: 1}},
			{"mixed", []Event{{Kind: KindStarted}, out(StreamStdout, "abc"), out(StreamStderr, "de"), exitEvent(0)},
				1, 4, Stats{Bytes: 5, Events: 4, Appended: 4, OutputBytes: 5}},
			{"evicted", []Event{sized(6), sized(6), sized(6), sized(6)},
				3, 4, Stats{Bytes: 12, Events: 2, Appended: 4, OutputBytes: 24, EvictedBytes: 12}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxBytes: 15}, tt.evs...)
				if first, last := r.Bounds(); first != tt.wantFirst || last != tt.wantLast {
					t.Errorf("bounds %d..%d, want %d..%d", first, last, tt.wantFirst, tt.wantLast)
				}
				if st := r.Stats(); st != tt.wantStats {
					t.Errorf("stats %+v, want %+v", st, tt.wantStats)
				}
			})
		}
	})
}

func TestReadLimits(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{}, sized(10), sized(20), sized(30), sized(40), Event{Kind: KindResize, Rows: 1, Cols: 1})
		tests := []struct {
			name          string
			after         uint64
			max, maxBytes int
			want          []uint64
		}{
			{"no limits", 0, 0, 0, []uint64{1, 2, 3, 4, 5}},
			{"negative limits", 0, -1, -1, []uint64{1, 2, 3, 4, 5}},
			{"max", 0, 2, 0, []uint64{1, 2}},
			{"max larger than available", 3, 10, 0, []uint64{4, 5}},
			{"bytes fit exactly", 0, 0, 30, []uint64{1, 2}},
			{"bytes one short", 0, 0, 29, []uint64{1}},
			{"at least one event", 0, 0, 5, []uint64{1}},
			{"at least one event later", 2, 0, 5, []uint64{3}},
			{"empty event fits after full budget", 3, 0, 40, []uint64{4, 5}},
			{"max and bytes", 0, 3, 100, []uint64{1, 2, 3}},
			{"bytes before max", 0, 4, 60, []uint64{1, 2, 3}},
			{"last", 4, 0, 0, []uint64{5}},
			{"nothing newer", 5, 0, 0, []uint64{}},
			{"after from the future", 50, 0, 0, []uint64{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				dst := make([]Event, 3) // Read appends to dst[:0]
				got, gap := r.Read(dst, tt.after, tt.max, tt.maxBytes)
				if gap != nil || !slices.Equal(seqs(got), tt.want) {
					t.Errorf("read: seqs %v, gap %+v; want %v", seqs(got), gap, tt.want)
				}
			})
		}
	})
}

func TestReadReusesDst(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{}, sized(1), sized(2))
		dst := make([]Event, 0, 8)
		got, _ := r.Read(dst, 0, 0, 0)
		if &got[0] != &dst[:1][0] {
			t.Error("Read allocated although dst had room")
		}
		if !bytes.Equal(got[1].Data, []byte("xx")) {
			t.Errorf("data %q", got[1].Data)
		}
	})
}

// TestGap checks the gap fields for Read and for cursors, which know how
// much output came before their position and so report exact Bytes.
func TestGap(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		// Events 1..5 of 1..5 bytes; MaxEvents 3 keeps 3..5, so 3 bytes evicted.
		setup := []Event{sized(1), sized(2), sized(3), sized(4), sized(5)}
		tests := []struct {
			name   string
			after  uint64
			want   *Gap
			events []uint64 // when no gap
		}{
			{"from the start: exact", 0, &Gap{From: 1, To: 3, Bytes: 3}, nil},
			{"evicted position: all evicted output", 1, &Gap{From: 2, To: 3, Bytes: 3, Inexact: true}, nil},
			{"just before the first", 2, nil, []uint64{3, 4, 5}},
			{"retained", 4, nil, []uint64{5}},
			{"caught up", 5, nil, []uint64{}},
			{"future", 8, nil, []uint64{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxEvents: 3}, setup...)
				got, gap := r.Read(nil, tt.after, 0, 0)
				if !equalGap(gap, tt.want) || !slices.Equal(seqs(got), tt.events) {
					t.Errorf("Read: gap %+v, seqs %v; want %+v, %v", gap, seqs(got), tt.want, tt.events)
				}
			})
		}
	})
}

func equalGap(a, b *Gap) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// TestCursorGap checks that a cursor's gaps are exact once it knows its
// position, and an upper bound before.
func TestCursorGap(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name   string
			before []Event // appended before the cursor is created
			after  uint64  // the cursor's start
			reads  int     // events the cursor reads before the rest is appended
			rest   []Event
			want   Gap
		}{
			{"reader fell behind", []Event{sized(1), sized(2)}, 0, 2,
				[]Event{sized(3), sized(4), sized(5), sized(6)}, Gap{From: 3, To: 4, Bytes: 3}},
			{"started at a retained event", []Event{sized(1), sized(2), sized(3), sized(4), sized(5)}, 3, 0,
				[]Event{sized(6), sized(7), sized(8)}, Gap{From: 4, To: 6, Bytes: 9}},
			{"started near the end", []Event{sized(1), sized(2), sized(3), sized(4), sized(5)}, 4, 0,
				[]Event{sized(6), sized(7), sized(8)}, Gap{From: 5, To: 6, Bytes: 5}},
			{"started at zero", []Event{sized(1), sized(2), sized(3), sized(4)}, 0, 0,
				nil, Gap{From: 1, To: 2, Bytes: 1}},
			{"non-output events in the gap", []Event{sized(1)}, 0, 1,
				[]Event{{Kind: KindStdinClosed}, sized(2), {Kind: KindSignal, Signal: 1}, sized(3), sized(4)},
				Gap{From: 2, To: 4, Bytes: 2}},
			// A cursor that starts where the ring has no record cannot know the
			// output before its position: its first gap counts all evicted output.
			{"started in the future: upper bound", nil, 2, 0,
				[]Event{sized(1), sized(2), sized(3), sized(4), sized(5), sized(6)}, Gap{From: 3, To: 4, Bytes: 6}},
			{"started at an evicted event: upper bound", []Event{sized(1), sized(2), sized(3), sized(4), sized(5)}, 1, 0,
				nil, Gap{From: 2, To: 3, Bytes: 3, Inexact: true}},
			{"started just before the first retained", []Event{sized(1), sized(2), sized(3), sized(4)}, 1, 0,
				[]Event{sized(5), sized(6)}, Gap{From: 2, To: 4, Bytes: 5}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxEvents: 3}, tt.before...)
				c := r.Cursor(tt.after)
				for read := 0; read < tt.reads; {
					evs, gap, err := c.Next(t.Context())
					if err != nil || gap != nil {
						t.Fatalf("next: gap %+v, err %v", gap, err)
					}
					read += len(evs)
				}
				for _, ev := range tt.rest {
					r.Append(ev)
				}
				evs, gap, err := c.Next(t.Context())
				if err != nil || gap == nil || *gap != tt.want {
					t.Fatalf("next: events %v, gap %+v, err %v; want gap %+v", seqs(evs), gap, err, tt.want)
				}
				if c.After() != tt.want.To-1 {
					t.Errorf("after the gap the cursor is at %d, want %d", c.After(), tt.want.To-1)
				}
				if evs, _, _ := c.Next(t.Context()); len(evs) == 0 || evs[0].Seq != tt.want.To {
					t.Errorf("after the gap: %v, want events from %d", seqs(evs), tt.want.To)
				}
			})
		}
	})
}
