package replay

import (
	"errors"
	"io"
	"testing"
)

// TestCursorNotify: an armed cursor's callback runs once, on the
// appending goroutine once the ring's lock is released (it may read the
// ring), for every way an event is appended.
func TestCursorNotify(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name   string
			append func(*Ring) error
		}{
			{"output", func(r *Ring) error { _, err := r.AppendOutput(StreamStdout, []byte("x")); return err }},
			{"event", func(r *Ring) error { _, err := r.Append(Event{Kind: KindResize, Rows: 2, Cols: 3}); return err }},
			{"exit", func(r *Ring) error { _, err := r.Append(exitEvent(0)); return err }},
			{"commit", func(r *Ring) error {
				if _, err := r.Reserve(StreamStdout, 8); err != nil {
					return err
				}
				p, err := r.Extend(1)
				if err != nil {
					return err
				}
				copy(p, "x")
				_, err = r.Commit(StreamStdout, 1)
				return err
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{}, Event{Kind: KindStarted})
				c := r.Cursor(1)
				calls := 0
				var last uint64
				if !c.Notify(func() { calls++; _, last = r.Bounds() }) {
					t.Fatal("Notify: ready with nothing after the cursor")
				}
				if err := tt.append(r); err != nil {
					t.Fatal(err)
				}
				if calls != 1 || last != 2 {
					t.Fatalf("after an append: %d calls, saw last %d; want 1 call seeing 2", calls, last)
				}
				if tt.name != "exit" {
					if err := tt.append(r); err != nil {
						t.Fatal(err)
					}
				}
				if calls != 1 {
					t.Fatalf("%d calls for one Notify", calls)
				}
			})
		}
	})
}

// TestCursorNotifyReady: Notify arms nothing when the cursor need not
// wait, and StopNotify disarms.
func TestCursorNotifyReady(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		called := func() { t.Error("callback called") }
		r := m.filled(t, Config{}, Event{Kind: KindStarted}, sized(1))
		if r.Cursor(1).Notify(called) {
			t.Error("Notify armed a cursor with an event after it")
		}
		c := r.Cursor(2)
		if !c.Notify(called) {
			t.Fatal("Notify: ready at the newest event")
		}
		c.StopNotify()
		c.StopNotify() // twice is harmless
		r.Append(exitEvent(0))
		if r.Cursor(3).Notify(called) {
			t.Error("Notify armed a cursor of a closed ring")
		}
	})
}

// TestCursorTryNext: TryNext returns what Next would without waiting,
// and not ok when Next would wait.
func TestCursorTryNext(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{}, Event{Kind: KindStarted})
		c := r.Cursor(1)
		if evs, gap, ok, err := c.TryNext(); ok || evs != nil || gap != nil || err != nil {
			t.Fatalf("TryNext with nothing new = %v, %v, %v, %v", evs, gap, ok, err)
		}
		r.Append(sized(3))
		r.Append(exitEvent(0))
		evs, _, ok, err := c.TryNext()
		if !ok || err != nil || len(evs) != 2 || evs[0].Seq != 2 {
			t.Fatalf("TryNext = %v, %v, %v; want events 2 and 3", evs, ok, err)
		}
		if _, _, ok, err := c.TryNext(); !ok || !errors.Is(err, io.EOF) {
			t.Fatalf("TryNext after the exit = %v, %v; want io.EOF", ok, err)
		}
	})
}
