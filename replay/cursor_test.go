package replay

import (
	"errors"
	"io"
	"slices"
	"testing"
)

// drain reads c until io.EOF and returns the batch sizes and every
// sequence delivered.
func drain(t *testing.T, c *Cursor) (batches []int, got []uint64) {
	t.Helper()
	for {
		evs, gap, err := c.Next(t.Context())
		if errors.Is(err, io.EOF) {
			return batches, got
		}
		if err != nil || gap != nil {
			t.Fatalf("next: gap %+v, err %v", gap, err)
		}
		batches = append(batches, len(evs))
		got = append(got, seqs(evs)...)
	}
}

func TestCursorBatches(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name        string
			evs         []Event
			after       uint64
			wantBatches []int
			memoryOnly  bool // a backed ring splits output (TestBackedSplitsLongOutput)
		}{
			{"by count", append(slices.Repeat([]Event{sized(1)}, 600), exitEvent(0)), 0, []int{256, 256, 89}, false},
			{"by bytes", append(slices.Repeat([]Event{sized(4096)}, 100), exitEvent(0)), 0, []int{64, 37}, false},
			{"oversized event alone", []Event{sized(1), sized(300 << 10), sized(1), exitEvent(0)}, 0, []int{1, 1, 2}, true},
			{"from the middle", append(slices.Repeat([]Event{sized(1)}, 10), exitEvent(0)), 4, []int{7}, false},
			{"only the exit", []Event{sized(1), exitEvent(0)}, 1, []int{1}, false},
			{"after the exit", []Event{sized(1), exitEvent(0)}, 2, nil, false},
			{"future of a closed ring", []Event{exitEvent(0)}, 5, nil, false},
		}
		for _, tt := range tests {
			if tt.memoryOnly && m.backed {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxBytes: 4 << 20}, tt.evs...)
				c := r.Cursor(tt.after)
				batches, got := drain(t, c)
				if !slices.Equal(batches, tt.wantBatches) {
					t.Errorf("batches %v, want %v", batches, tt.wantBatches)
				}
				last := uint64(len(tt.evs))
				if want := seqRange(tt.after+1, last); !slices.Equal(got, want) {
					t.Errorf("delivered %v, want %v", got, want)
				}
				if c.After() != max(tt.after, last) {
					t.Errorf("After %d, want %d", c.After(), max(tt.after, last))
				}
				if _, _, err := c.Next(t.Context()); !errors.Is(err, io.EOF) {
					t.Errorf("Next after the end: %v, want io.EOF", err)
				}
			})
		}
	})
}

func TestCursorBatchBelongsToCaller(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{}, sized(1), sized(2), exitEvent(0))
		c := r.Cursor(0)
		first, _, _ := c.Next(t.Context())
		kept := slices.Clone(first)
		first[0].Seq = 99 // the caller may scribble on its slice
		if again, _, _ := r.Cursor(0).Next(t.Context()); again[0].Seq != 1 {
			t.Errorf("a caller's change reached the ring: seq %d", again[0].Seq)
		}
		if _, _, err := c.Next(t.Context()); !errors.Is(err, io.EOF) {
			t.Errorf("Next: %v, want io.EOF", err)
		}
		if kept[2].Kind != KindExit {
			t.Errorf("batch %v does not end with the exit", seqs(kept))
		}
	})
}

func TestCursorGapThenEvents(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{MaxBytes: 10}, sized(4), sized(4), sized(4), sized(4), exitEvent(0))
		c := r.Cursor(0)
		_, gap, err := c.Next(t.Context())
		if err != nil || gap == nil || *gap != (Gap{From: 1, To: 3, Bytes: 8}) {
			t.Fatalf("gap %+v, err %v", gap, err)
		}
		if c.After() != 2 {
			t.Errorf("After %d, want 2", c.After())
		}
		if _, got := drain(t, c); !slices.Equal(got, []uint64{3, 4, 5}) {
			t.Errorf("after the gap: %v, want 3..5", got)
		}
	})
}
