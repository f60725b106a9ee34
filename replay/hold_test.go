package replay

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// holdStep is one action of a hold test, applied in order to the ring
// and the holds it created.
type holdStep struct {
	append Event  // appended when Kind is set
	hold   int    // 1 + the index of a new hold at holdAt, when > 0
	holdAt uint64 // the after of the new hold
	ack    int    // 1 + the index of the hold that acks ackSeq, when > 0
	ackSeq uint64
	free   int // 1 + the index of the hold to release, when > 0
	unpin  bool
}

func add(ev Event) holdStep            { return holdStep{append: ev} }
func addN(ev Event, n int) []holdStep  { return slices.Repeat([]holdStep{add(ev)}, n) }
func hold(after uint64) holdStep       { return holdStep{hold: 1, holdAt: after} }
func ack(h int, seq uint64) holdStep   { return holdStep{ack: h + 1, ackSeq: seq} }
func release(h int) holdStep           { return holdStep{free: h + 1} }
func steps(s ...[]holdStep) []holdStep { return slices.Concat(s...) }

// run applies steps to r and returns the holds created, failing the test
// on any error.
func run(t *testing.T, r *Ring, steps []holdStep) []*Hold {
	t.Helper()
	var holds []*Hold
	for _, s := range steps {
		applyStep(t, r, &holds, s)
	}
	return holds
}

// TestHoldRetention checks what the ring keeps under holds: nothing after
// the lowest acknowledged sequence goes, by bytes or by events, until the
// hard ceiling at twice the bounds; once acked, released or unpinned, the
// next append brings the ring back within its bounds.
func TestHoldRetention(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name      string
			cfg       Config
			steps     []holdStep
			wantFirst uint64
			wantStats Stats
			wantFull  bool
		}{
			{"no eviction by bytes", Config{MaxBytes: 10}, steps([]holdStep{hold(0)}, addN(sized(4), 4)),
				1, Stats{Bytes: 16, Events: 4, Appended: 4, OutputBytes: 16, HeldBytes: 16, Holds: 1}, true},
			{"no eviction by events", Config{MaxEvents: 3}, steps([]holdStep{hold(0)}, addN(sized(1), 5)),
				1, Stats{Bytes: 5, Events: 5, Appended: 5, OutputBytes: 5, HeldBytes: 5, Holds: 1}, true},
			{"acked events go", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(4), 2), []holdStep{ack(0, 1)}, addN(sized(4), 2)),
				2, Stats{Bytes: 12, Events: 3, Appended: 4, OutputBytes: 16, EvictedBytes: 4, HeldBytes: 12, Holds: 1}, true},
			{"below the bounds", Config{MaxBytes: 10, MaxEvents: 3}, steps([]holdStep{hold(0)}, addN(sized(4), 2)),
				1, Stats{Bytes: 8, Events: 2, Appended: 2, OutputBytes: 8, HeldBytes: 8, Holds: 1}, false},
			{"control events count", Config{MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(Event{Kind: KindResize, Rows: 1, Cols: 1}, 3)),
				1, Stats{Events: 3, Appended: 3, Holds: 1}, true},
			{"the lower of two holds wins", Config{MaxBytes: 10},
				steps([]holdStep{hold(0), hold(0)}, addN(sized(4), 4), []holdStep{ack(0, 3), ack(1, 1)}, addN(sized(4), 1)),
				2, Stats{Bytes: 16, Events: 4, Appended: 5, OutputBytes: 20, EvictedBytes: 4, HeldBytes: 16, Holds: 2}, true},
			{"a hold from the middle", Config{MaxBytes: 10}, steps(addN(sized(4), 2), []holdStep{hold(1)}, addN(sized(4), 2)),
				2, Stats{Bytes: 12, Events: 3, Appended: 4, OutputBytes: 16, EvictedBytes: 4, HeldBytes: 12, Holds: 1}, true},
			{"a hold beyond the newest holds what follows", Config{MaxBytes: 10},
				steps(addN(sized(4), 2), []holdStep{hold(9)}, addN(sized(4), 2)),
				3, Stats{Bytes: 8, Events: 2, Appended: 4, OutputBytes: 16, EvictedBytes: 8, HeldBytes: 8, Holds: 1}, false},
			{"a hold at an evicted after holds from the oldest", Config{MaxBytes: 8},
				steps(addN(sized(4), 4), []holdStep{hold(1)}, addN(sized(4), 2)),
				3, Stats{Bytes: 16, Events: 4, Appended: 6, OutputBytes: 24, EvictedBytes: 8, HeldBytes: 16, Holds: 1}, true},
			{"released", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{release(0)}, addN(sized(4), 1)),
				4, Stats{Bytes: 8, Events: 2, Appended: 5, OutputBytes: 20, EvictedBytes: 12}, false},
			{"released twice", Config{MaxBytes: 10},
				steps([]holdStep{hold(0), hold(0)}, addN(sized(4), 4), []holdStep{release(0), release(0)}, addN(sized(4), 1)),
				1, Stats{Bytes: 20, Events: 5, Appended: 5, OutputBytes: 20, HeldBytes: 20, Holds: 1}, true},
			{"unpinned", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{{unpin: true}}, addN(sized(4), 1)),
				4, Stats{Bytes: 8, Events: 2, Appended: 5, OutputBytes: 20, EvictedBytes: 12, Holds: 1}, false},
			{"a hold after Unpin is powerless", Config{MaxBytes: 10},
				steps([]holdStep{{unpin: true}, hold(0)}, addN(sized(4), 4)),
				3, Stats{Bytes: 8, Events: 2, Appended: 4, OutputBytes: 16, EvictedBytes: 8, Holds: 1}, false},
			{"acked back to the event bound", Config{MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(sized(1), 4), []holdStep{ack(0, 4)}, addN(sized(1), 1)),
				4, Stats{Bytes: 2, Events: 2, Appended: 5, OutputBytes: 5, EvictedBytes: 3, HeldBytes: 1, Holds: 1}, false},
			{"released back to the event bound", Config{MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(sized(1), 4), []holdStep{release(0)}, addN(sized(1), 1)),
				4, Stats{Bytes: 2, Events: 2, Appended: 5, OutputBytes: 5, EvictedBytes: 3}, false},
			{"an acked oldest event goes by events", Config{MaxEvents: 1},
				steps([]holdStep{hold(0)}, addN(sized(1), 1), []holdStep{ack(0, 1)}, addN(sized(1), 1)),
				2, Stats{Bytes: 1, Events: 1, Appended: 2, OutputBytes: 2, EvictedBytes: 1, HeldBytes: 1, Holds: 1}, true},
			{"the exit event is kept", Config{MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(sized(1), 2), []holdStep{add(exitEvent(0))}),
				1, Stats{Bytes: 2, Events: 3, Appended: 3, OutputBytes: 2, HeldBytes: 2, Holds: 1}, false},

			// The hard ceiling: beyond twice a bound, held events go anyway.
			{"ceiling by bytes", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(4), 6)),
				2, Stats{Bytes: 20, Events: 5, Appended: 6, OutputBytes: 24, EvictedBytes: 4, HeldBytes: 20, Holds: 1, ForcedBytes: 4}, true},
			{"ceiling by events", Config{MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(sized(1), 6)),
				3, Stats{Bytes: 4, Events: 4, Appended: 6, OutputBytes: 6, EvictedBytes: 2, HeldBytes: 4, Holds: 1, ForcedBytes: 2}, true},
			{"twice the events is not beyond", Config{MaxBytes: 10, MaxEvents: 2},
				steps([]holdStep{hold(0)}, addN(sized(1), 4), addN(sized(5), 2)),
				3, Stats{Bytes: 12, Events: 4, Appended: 6, OutputBytes: 14, EvictedBytes: 2, HeldBytes: 12, Holds: 1, ForcedBytes: 2}, true},
			{"twice the bytes is not beyond", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(5), 4)),
				1, Stats{Bytes: 20, Events: 4, Appended: 4, OutputBytes: 20, HeldBytes: 20, Holds: 1}, true},
			{"an oversized event stays alone", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(3), 2), addN(sized(25), 1)),
				3, Stats{Bytes: 25, Events: 1, Appended: 3, OutputBytes: 31, EvictedBytes: 6, HeldBytes: 25, Holds: 1, ForcedBytes: 6}, true},
			{"acked events go first, then forced", Config{MaxBytes: 10},
				steps([]holdStep{hold(0)}, addN(sized(4), 2), []holdStep{ack(0, 1)}, addN(sized(8), 3)),
				4, Stats{Bytes: 16, Events: 2, Appended: 5, OutputBytes: 32, EvictedBytes: 16, HeldBytes: 16, Holds: 1, ForcedBytes: 12}, true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.new(tt.cfg)
				run(t, r, tt.steps)
				if st := r.Stats(); st != tt.wantStats {
					t.Errorf("stats %+v,\nwant  %+v", st, tt.wantStats)
				}
				wantLast := tt.wantStats.Appended
				if first, last := r.Bounds(); first != tt.wantFirst || last != wantLast {
					t.Errorf("bounds %d..%d, want %d..%d", first, last, tt.wantFirst, wantLast)
				}
				if r.Full() != tt.wantFull {
					t.Errorf("Full %v, want %v", r.Full(), tt.wantFull)
				}
			})
		}
	})
}

// TestHoldAck checks Ack and Acked: forward only, never beyond the newest
// event, and nothing after Release.
func TestHoldAck(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name      string
			at        uint64 // the hold's after; the ring holds events 3..5
			acks      []uint64
			wantErr   error // of the last ack
			wantAcked uint64
		}{
			{"created at a retained event", 3, nil, nil, 3},
			{"created at zero", 0, nil, nil, 2},
			{"created at an evicted event", 1, nil, nil, 2},
			{"created beyond the newest", 9, nil, nil, 5},
			{"forward", 0, []uint64{3, 4}, nil, 4},
			{"to the newest", 0, []uint64{5}, nil, 5},
			{"backwards is a no-op", 0, []uint64{4, 3}, nil, 4},
			{"again is a no-op", 0, []uint64{4, 4}, nil, 4},
			{"to an evicted event is a no-op", 4, []uint64{1}, nil, 4},
			{"ahead", 0, []uint64{3, 6}, ErrAckAhead, 3},
			{"far ahead", 0, []uint64{1 << 40}, ErrAckAhead, 2},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxEvents: 3}, sized(1), sized(1), sized(1), sized(1), sized(1))
				h := r.Hold(tt.at)
				var err error
				for _, seq := range tt.acks {
					err = h.Ack(seq)
				}
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Errorf("Ack: %v, want %v", err, tt.wantErr)
				}
				if h.Acked() != tt.wantAcked {
					t.Errorf("Acked %d, want %d", h.Acked(), tt.wantAcked)
				}
			})
		}
	})
}

func TestHoldReleased(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.filled(t, Config{MaxEvents: 2}, sized(1), sized(1))
		h := r.Hold(0)
		h.Release()
		h.Release()
		if err := h.Ack(2); err != nil {
			t.Errorf("Ack after Release: %v", err)
		}
		if err := h.Ack(3); !errors.Is(err, ErrAckAhead) {
			t.Errorf("Ack ahead after Release: %v, want ErrAckAhead", err)
		}
		if h.Acked() != 0 {
			t.Errorf("a released hold acked %d", h.Acked())
		}
		if st := r.Stats(); st.Holds != 0 || st.HeldBytes != 0 {
			t.Errorf("stats after Release %+v", st)
		}
		r.AppendOutput(StreamPTY, []byte("x"))
		if first, _ := r.Bounds(); first != 2 {
			t.Errorf("a released hold kept event 1")
		}
	})
}

// waitRoomAsync starts WaitRoom in a goroutine of the current bubble and
// returns a channel with its result.
func waitRoomAsync(ctx context.Context, r *Ring) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.WaitRoom(ctx) }()
	return done
}

// result returns what the call behind done returned, once every
// goroutine of the bubble is blocked, and whether it returned.
func result(done <-chan error) (err error, returned bool) {
	synctest.Wait()
	select {
	case err := <-done:
		return err, true
	default:
		return nil, false
	}
}

// TestWaitRoomReturnsAtOnce covers rings a writer need not wait for.
func TestWaitRoomReturnsAtOnce(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		cfg := Config{MaxBytes: 10, MaxEvents: 4}
		tests := []struct {
			name  string
			steps []holdStep
		}{
			{"empty", nil},
			{"no holds, beyond the bounds", addN(sized(4), 8)},
			{"held below the bytes", steps([]holdStep{hold(0)}, addN(sized(3), 3))},
			{"held below the events", steps([]holdStep{hold(0)}, addN(Event{Kind: KindStdinClosed}, 3))},
			{"acked", steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{ack(0, 4)})},
			{"released", steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{release(0)})},
			{"unpinned", steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{{unpin: true}})},
			{"closed", steps([]holdStep{hold(0)}, addN(sized(4), 4), []holdStep{add(exitEvent(0))})},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					r := m.new(cfg)
					run(t, r, tt.steps)
					if r.Full() {
						t.Error("Full")
					}
					if err, returned := result(waitRoomAsync(t.Context(), r)); !returned || err != nil {
						t.Errorf("WaitRoom: returned %v, err %v", returned, err)
					}
				})
			})
		}
	})
}

// TestWaitRoomBlocksUntilRoom fills a ring with held output and checks
// that WaitRoom blocks exactly until a change makes room.
func TestWaitRoomBlocksUntilRoom(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name    string
			holds   int        // holds at 0, created first
			fill    []holdStep // appends that fill the ring
			noRoom  []holdStep // each leaves the ring full
			room    func(r *Ring, holds []*Hold, cancel context.CancelCauseFunc)
			wantErr error
		}{
			{"ack by bytes", 1, addN(sized(4), 4), []holdStep{ack(0, 1), hold(1)},
				func(_ *Ring, h []*Hold, _ context.CancelCauseFunc) { h[0].Ack(2); h[1].Ack(3) }, nil},
			{"ack by bytes, one hold", 1, addN(sized(4), 4), []holdStep{ack(0, 1)},
				func(_ *Ring, h []*Hold, _ context.CancelCauseFunc) { h[0].Ack(2) }, nil},
			{"ack by events", 1, addN(sized(1), 4), []holdStep{ack(0, 0), add(Event{Kind: KindResize, Rows: 1, Cols: 1})},
				func(_ *Ring, h []*Hold, _ context.CancelCauseFunc) { h[0].Ack(2) }, nil},
			{"release", 1, addN(sized(4), 3), []holdStep{ack(0, 0)},
				func(_ *Ring, h []*Hold, _ context.CancelCauseFunc) { h[0].Release() }, nil},
			{"the lower hold's ack", 2, addN(sized(4), 3), []holdStep{ack(0, 3), release(0)},
				func(_ *Ring, h []*Hold, _ context.CancelCauseFunc) { h[1].Ack(1) }, nil},
			{"unpin", 1, addN(sized(4), 3), nil,
				func(r *Ring, _ []*Hold, _ context.CancelCauseFunc) { r.Unpin() }, nil},
			{"exit", 1, addN(sized(4), 3), []holdStep{add(Event{Kind: KindSignal, Signal: 15})},
				func(r *Ring, _ []*Hold, _ context.CancelCauseFunc) { r.Append(exitEvent(-1)) }, nil},
			{"the ceiling evicts below the bounds", 1, addN(sized(30), 1), nil,
				func(r *Ring, _ []*Hold, _ context.CancelCauseFunc) { r.Append(sized(1)) }, nil},
			{"context done", 1, addN(sized(4), 3), nil,
				func(_ *Ring, _ []*Hold, cancel context.CancelCauseFunc) { cancel(errStopped) }, errStopped},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					r := m.new(Config{MaxBytes: 10, MaxEvents: 4})
					var holds []*Hold
					for range tt.holds {
						holds = append(holds, r.Hold(0))
					}
					ctx, cancel := context.WithCancelCause(t.Context())
					defer cancel(nil)
					for _, s := range tt.fill {
						r.Append(s.append)
					}
					done := waitRoomAsync(ctx, r)
					if !blocked(done) || !r.Full() {
						t.Fatalf("WaitRoom returned on a full ring (stats %+v)", r.Stats())
					}
					for _, s := range tt.noRoom {
						applyStep(t, r, &holds, s)
						if !blocked(done) || !r.Full() {
							t.Fatalf("WaitRoom returned after %+v (stats %+v)", s, r.Stats())
						}
					}
					tt.room(r, holds, cancel)
					err, returned := result(done)
					if !returned {
						t.Fatalf("WaitRoom still blocked (stats %+v)", r.Stats())
					}
					if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
						t.Errorf("WaitRoom: %v, want %v", err, tt.wantErr)
					}
					if tt.wantErr == nil && r.Full() {
						t.Errorf("Full after WaitRoom returned (stats %+v)", r.Stats())
					}
				})
			})
		}
	})
}

// applyStep applies one step as run does, keeping new holds in holds.
func applyStep(t *testing.T, r *Ring, holds *[]*Hold, s holdStep) {
	t.Helper()
	var err error
	switch {
	case s.append.Kind != 0:
		_, err = r.Append(s.append)
	case s.hold > 0:
		*holds = append(*holds, r.Hold(s.holdAt))
	case s.ack > 0:
		err = (*holds)[s.ack-1].Ack(s.ackSeq)
	case s.free > 0:
		(*holds)[s.free-1].Release()
	case s.unpin:
		r.Unpin()
	}
	if err != nil {
		t.Fatalf("%+v: %v", s, err)
	}
}

// TestCursorSeenGap checks the Bytes of gaps: exact for a reader that
// says what it counted (CursorSeen) or whose position is retained, an
// upper bound marked Inexact only for Read or Cursor at an evicted after.
func TestCursorSeenGap(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		// Events 1..5 of 1..5 bytes; MaxEvents 3 keeps 3..5: 3 bytes evicted.
		setup := []Event{sized(1), sized(2), sized(3), sized(4), sized(5)}
		tests := []struct {
			name   string
			cursor func(r *Ring) *Cursor // nil: Read after after
			after  uint64
			rest   []Event // appended before the first Next
			want   *Gap
			events []uint64 // when no gap
		}{
			{"Read from the start", nil, 0, nil, &Gap{From: 1, To: 3, Bytes: 3}, nil},
			{"Read at an evicted after", nil, 1, nil, &Gap{From: 2, To: 3, Bytes: 3, Inexact: true}, nil},
			{"Read just before the oldest", nil, 2, nil, nil, []uint64{3, 4, 5}},
			{"Cursor from the start", cur(0), 0, nil, &Gap{From: 1, To: 3, Bytes: 3}, nil},
			{"Cursor at an evicted after", cur(1), 1, nil, &Gap{From: 2, To: 3, Bytes: 3, Inexact: true}, nil},
			{"CursorSeen at an evicted after", curSeen(1, 1), 1, nil, &Gap{From: 2, To: 3, Bytes: 2}, nil},
			{"CursorSeen beyond the evicted output", curSeen(1, 99), 1, nil, &Gap{From: 2, To: 3, Bytes: 0}, nil},
			{"CursorSeen at zero", curSeen(0, 7), 0, nil, &Gap{From: 1, To: 3, Bytes: 3}, nil},
			{"CursorSeen at a retained after", curSeen(3, 0), 3, nil, nil, []uint64{4, 5}},
			// Where the ring knows the count, a wrong seen changes nothing.
			{"the ring's own count wins", curSeen(2, 999), 2,
				[]Event{sized(6), sized(7), sized(8)}, &Gap{From: 3, To: 6, Bytes: 12}, nil},
			{"a reader that counted resumes exactly", curSeen(2, 3), 2,
				[]Event{sized(6), sized(7), sized(8)}, &Gap{From: 3, To: 6, Bytes: 12}, nil},
			{"a reader that did not count over-counts", cur(2), 2,
				[]Event{sized(6), sized(7), sized(8)}, &Gap{From: 3, To: 6, Bytes: 12}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxEvents: 3}, setup...)
				var c *Cursor
				if tt.cursor != nil {
					c = tt.cursor(r)
				}
				for _, ev := range tt.rest {
					r.Append(ev)
				}
				var got []Event
				var gap *Gap
				if c == nil {
					got, gap = r.Read(nil, tt.after, 0, 0)
				} else {
					var err error
					if got, gap, err = c.Next(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				if !equalGap(gap, tt.want) || !slices.Equal(seqs(got), tt.events) {
					t.Errorf("gap %+v, seqs %v; want %+v, %v", gap, seqs(got), tt.want, tt.events)
				}
			})
		}
	})
}

func cur(after uint64) func(*Ring) *Cursor { return func(r *Ring) *Cursor { return r.Cursor(after) } }

func curSeen(after, seen uint64) func(*Ring) *Cursor {
	return func(r *Ring) *Cursor { return r.CursorSeen(after, seen) }
}

// TestHeldReaderLosesNothing runs a writer that respects holds (WaitRoom
// before each append) against an acknowledging reader that holds the
// ring: megabytes pass through a 64 KiB ring with no gap, every byte
// arrives exactly once, and the ring never retains more than MaxBytes
// plus one append.
func TestHeldReaderLosesNothing(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		const appends = 2000 // about 6 MiB of output
		cfg := Config{MaxBytes: 64 << 10, MaxEvents: 256}
		r := m.new(cfg)
		h := r.Hold(0)
		c := r.Cursor(0)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		var waits int
		wg.Go(func() { waits = writeHeld(ctx, t, r, appends) })
		read := readHeld(ctx, t, c, h)
		wg.Wait()
		st := r.Stats()
		if read != st.OutputBytes || st.ForcedBytes != 0 {
			t.Errorf("read %d bytes; stats %+v", read, st)
		}
		if st.OutputBytes < 4<<20 {
			t.Errorf("only %d bytes written", st.OutputBytes)
		}
		t.Logf("%d bytes through a %d byte ring; the writer found it full %d times", read, cfg.MaxBytes, waits)
	})
}

// writeHeld appends n outputs of up to 8 KiB on two streams and some
// resizes, each after WaitRoom, then the exit. It checks the ring's
// memory after every append and returns how often the ring was full.
func writeHeld(ctx context.Context, t *testing.T, r *Ring, n int) (waits int) {
	var offsets [StreamStderr + 1]uint64
	buf := make([]byte, 8<<10)
	for i := range n {
		if r.Full() {
			waits++
		}
		if err := r.WaitRoom(ctx); err != nil {
			t.Errorf("append %d: WaitRoom: %v", i, err)
			return waits
		}
		if i%50 == 0 {
			r.Append(Event{Kind: KindResize, Rows: 24, Cols: uint16(80 + i%7)})
			continue
		}
		s := StreamStdout + Stream(i%2)
		p := buf[:1+(i*2731)%len(buf)]
		for k := range p {
			p[k] = pattern(s, offsets[s]+uint64(k))
		}
		if _, err := r.AppendOutput(s, p); err != nil {
			t.Errorf("append %d: %v", i, err)
			return waits
		}
		offsets[s] += uint64(len(p))
		if st := r.Stats(); st.Bytes >= r.maxBytes+len(p) {
			t.Errorf("append %d of %d bytes: the ring retains %d", i, len(p), st.Bytes)
		}
	}
	if _, err := r.Append(exitEvent(0)); err != nil {
		t.Errorf("exit: %v", err)
	}
	return waits
}

// readHeld reads c to the end, checking every byte and acking every
// batch on h, and returns the output bytes read. A gap is an error.
func readHeld(ctx context.Context, t *testing.T, c *Cursor, h *Hold) uint64 {
	defer h.Release()
	var sc streamCheck
	var last uint64
	for {
		evs, gap, err := c.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return sc.seen
		case err != nil || gap != nil:
			t.Errorf("after seq %d: gap %+v, err %v", last, gap, err)
			return sc.seen
		}
		for i := range evs {
			ev := &evs[i]
			if ev.Seq != last+1 {
				t.Errorf("seq %d after %d", ev.Seq, last)
				return sc.seen
			}
			last = ev.Seq
			if ev.Kind != KindOutput {
				continue
			}
			if err := sc.output(ev); err != nil {
				t.Errorf("seq %d, %s at %d: %v", ev.Seq, ev.Stream, ev.Offset, err)
				return sc.seen
			}
		}
		if err := h.Ack(last); err != nil {
			t.Errorf("ack %d: %v", last, err)
		}
	}
}

// TestOnEvict: the hook sees every evicted event, oldest first, with its
// data, and nothing that is still retained.
func TestOnEvict(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.new(Config{MaxBytes: 8})
		var seen []uint64
		var data []byte
		r.OnEvict(func(ev Event) {
			seen = append(seen, ev.Seq)
			data = append(data, ev.Data...)
		})
		for _, p := range []string{"abcd", "efgh", "ijkl", "mnop"} {
			if _, err := r.AppendOutput(StreamPTY, []byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		first, _ := r.Bounds()
		if !slices.Equal(seen, []uint64{1, 2}) || string(data) != "abcdefgh" || first != 3 {
			t.Fatalf("evicted %v with %q, first retained %d; want [1 2], abcdefgh, 3", seen, data, first)
		}
		if n, ok := r.OutputThrough(2); !ok || n != 8 {
			t.Fatalf("OutputThrough(2) = %d, %v; want 8, true", n, ok)
		}
	})
}
