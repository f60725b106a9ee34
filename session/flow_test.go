package session_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// flood is a script that writes n chunks of size bytes of stdout,
// counting in *wrote the chunks it began to write: the one whose Write
// waits for room is counted.
func flood(n, size int, wrote *atomic.Int64) func(p *sessiontest.Proc) sandbox.Exit {
	return func(p *sessiontest.Proc) sandbox.Exit {
		b := bytes.Repeat([]byte("x"), size)
		for range n {
			wrote.Add(1)
			p.Stdio.Stdout.Write(b)
		}
		return sandbox.Exit{Exact: true}
	}
}

// readAll reads sub to its end, acking every batch when ack is set, and
// returns the output bytes and the gaps' bytes.
func readAll(t *testing.T, ctx context.Context, sub *Subscription, ack bool) (out, lost uint64) {
	t.Helper()
	for range 1 << 20 {
		evs, gap, err := sub.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, lost
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if gap != nil {
			lost += gap.Bytes
		}
		for _, ev := range evs {
			out += uint64(len(ev.Data))
		}
		if ack && sub.After() > 0 {
			if err := sub.Ack(sub.After()); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	t.Fatal("no end")
	return
}

func ringSpec(maxBytes int) Spec {
	sp := untimed("x")
	sp.Ring = replay.Config{MaxBytes: maxBytes}
	return sp
}

// TestAckingWriterLosesNothing: an acknowledging writer receives all of
// 16 MiB through a 64 KiB ring, and the ring never holds much more than
// its bound.
func TestAckingWriterLosesNothing(t *testing.T) {
	t.Parallel()
	var wrote atomic.Int64
	s := newFake(t, &sessiontest.Launcher{Script: flood(4096, 4096, &wrote)}, Config{})
	info, err := s.Start(t.Context(), "o", "acked", ringSpec(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	sub, _, err := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, lost := readAll(t, ctx, sub, true)
	if out != 16<<20 || lost != 0 {
		t.Fatalf("got %d bytes and lost %d, want %d and 0", out, lost, 16<<20)
	}
	if st := RingStats(s, "o", info.ID); st.EvictedBytes != 0 && st.ForcedBytes != 0 {
		t.Fatalf("held output was evicted: %+v", st)
	}
}

// TestStalledWriterHoldsTheProgram: a writer that acknowledges nothing
// stops the program once the ring is full, with memory flat; its acks
// let the program go on.
func TestStalledWriterHoldsTheProgram(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{})
		info, _ := s.Start(t.Context(), "o", "stalled", ringSpec(16<<10))
		sub, _, err := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := wrote.Load(); n != 4 {
			t.Fatalf("the program wrote %d chunks into a 16 KiB ring nobody acked, want 4", n)
		}
		if st := RingStats(s, "o", info.ID); st.Bytes != 16<<10 || st.HeldBytes != 16<<10 {
			t.Fatalf("ring %+v, want 16 KiB held", st)
		}
		out, lost := readAll(t, t.Context(), sub, true)
		if out != 64*4096 || lost != 0 {
			t.Fatalf("got %d, lost %d", out, lost)
		}
	})
}

// TestHoldWindow: output waits for the first writer, and for a writer who
// left, for the hold window; after it the program runs free and a later
// reader's gap says the hold expired.
func TestHoldWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{DefaultHold: 10 * time.Minute})
		info, _ := s.Start(t.Context(), "o", "parked", ringSpec(16<<10))
		time.Sleep(9 * time.Minute)
		synctest.Wait()
		if n := wrote.Load(); n != 4 {
			t.Fatalf("before the hold expired the program wrote %d chunks, want 4", n)
		}
		// A writer comes and goes, having read only the started event.
		sub, _, _ := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
		sub.Ack(1)
		sub.Close()
		time.Sleep(9 * time.Minute) // the window started again when it left
		synctest.Wait()
		if n := wrote.Load(); n != 4 {
			t.Fatalf("within the writer's hold the program wrote %d chunks, want 4", n)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := wrote.Load(); n != 64 {
			t.Fatalf("after the hold expired the program wrote %d chunks, want all 64", n)
		}
		late, _, _ := s.Subscribe("o", info.ID, AttachOptions{After: 1, Seen: new(uint64), Writer: true, Ack: true})
		defer late.Close()
		_, gap, err := late.Next(t.Context())
		if err != nil || gap == nil || gap.Bytes != 64*4096-16<<10 || late.LossCause() != LossHoldExpired {
			t.Fatalf("gap %+v (%v), cause %s; want %d bytes, hold_expired", gap, err, late.LossCause(), 64*4096-16<<10)
		}
	})
}

// TestViewersNeverHold: read-only readers and writers that do not
// acknowledge (clients of the protocol before acks) never slow the
// program; the old-style writer releases the parked hold.
func TestViewersNeverHold(t *testing.T) {
	for _, o := range []AttachOptions{{Writer: true}, {Ack: true}} {
		synctest.Test(t, func(t *testing.T) {
			var wrote atomic.Int64
			s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{})
			info, _ := s.Start(t.Context(), "o", "viewed", ringSpec(16<<10))
			sub, _, _ := s.Subscribe("o", info.ID, o)
			defer sub.Close()
			synctest.Wait()
			want := int64(64)
			if !o.Writer {
				want = 4 // a read-only acker leaves the parked hold in place
			}
			if n := wrote.Load(); n != want {
				t.Fatalf("%+v: the program wrote %d chunks, want %d", o, n, want)
			}
			if sub.Holds() {
				t.Fatalf("%+v holds output", o)
			}
		})
	}
}

// TestCancelUnpins: a cancel ends holding, so a program whose output
// nobody acknowledges still ends.
func TestCancelUnpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{})
		info, _ := s.Start(t.Context(), "o", "cancelled", ringSpec(16<<10))
		sub, _, _ := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
		defer sub.Close()
		synctest.Wait()
		if err := s.Cancel("o", info.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := wrote.Load(); n != 64 {
			t.Fatalf("after cancel the program wrote %d chunks, want 64", n)
		}
		for range 100 {
			if _, gap, err := sub.Next(t.Context()); err != nil || gap != nil {
				if gap != nil && sub.LossCause() != LossStopped {
					t.Fatalf("cause %s, want stopped", sub.LossCause())
				}
				break
			}
		}
	})
}

// TestLiveNeverHolds: a Live execution never waits, even for an
// acknowledging writer.
func TestLiveNeverHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{})
		sp := ringSpec(16 << 10)
		sp.Live = true
		info, _ := s.Start(t.Context(), "o", "live", sp)
		sub, _, _ := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
		defer sub.Close()
		synctest.Wait()
		if n := wrote.Load(); n != 64 || sub.Holds() {
			t.Fatalf("wrote %d chunks (holds %v), want 64 and no hold", n, sub.Holds())
		}
		if _, gap, _ := sub.Next(t.Context()); gap == nil || sub.LossCause() != LossLive {
			t.Fatalf("gap %+v cause %s, want live", gap, sub.LossCause())
		}
	})
}

// TestSubscribePosition: an after beyond the newest event is refused; one
// of another incarnation restarts from 0; seen makes a gap exact.
func TestSubscribePosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(8, 4096, &wrote)}, Config{})
		sp := ringSpec(8 << 10)
		sp.Live = true
		info, _ := s.Start(t.Context(), "o", "pos", sp)
		synctest.Wait()
		info = mustGet(t, s, "o", info.ID)
		if _, _, err := s.Subscribe("o", info.ID, AttachOptions{After: info.LastSeq + 1}); !errors.Is(err, ErrAfter) {
			t.Fatalf("after beyond the newest: %v", err)
		}
		sub, _, err := s.Subscribe("o", info.ID, AttachOptions{After: info.LastSeq + 1, Incarnation: "another"})
		if err != nil || sub.After() != 0 {
			t.Fatalf("another incarnation: after %d, %v; want 0", sub.After(), err)
		}
		// The reader had seq 2 (started, then 4096 bytes): it lost 4 chunks.
		seen := uint64(4096)
		exact, _, _ := s.Subscribe("o", info.ID, AttachOptions{After: 2, Seen: &seen, Incarnation: info.Incarnation})
		if _, gap, _ := exact.Next(t.Context()); gap == nil || gap.Bytes != 5*4096 || gap.Inexact {
			t.Fatalf("gap %+v, want exactly %d bytes", gap, 5*4096)
		}
		guess, _, _ := s.Subscribe("o", info.ID, AttachOptions{After: 2})
		if _, gap, _ := guess.Next(t.Context()); gap == nil || !gap.Inexact {
			t.Fatalf("gap %+v without seen: want inexact", gap)
		}
	})
}

// TestAckPoll: a poller's after acknowledges the parked hold and restarts
// its window.
func TestAckPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(8, 4096, &wrote)}, Config{})
		info, _ := s.Start(t.Context(), "o", "polled", ringSpec(8<<10))
		synctest.Wait()
		if n := wrote.Load(); n != 2 {
			t.Fatalf("wrote %d, want 2", n)
		}
		if err := s.AckPoll("o", info.ID, 3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := wrote.Load(); n != 4 {
			t.Fatalf("after the poll acked 2 chunks the program wrote %d, want 4", n)
		}
		if err := s.AckPoll("o", info.ID, 1000); !errors.Is(err, ErrAfter) {
			t.Fatalf("ack beyond: %v", err)
		}
	})
}

// TestOldWriterKeepsItFree: while a writer that does not acknowledge is
// attached, an acknowledging writer leaving parks nothing: the old client
// is served free running, as before acknowledgements.
func TestOldWriterKeepsItFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote atomic.Int64
		s := newFake(t, &sessiontest.Launcher{Script: flood(64, 4096, &wrote)}, Config{})
		info, _ := s.Start(t.Context(), "o", "mixed", ringSpec(16<<10))
		acker, _, _ := s.Subscribe("o", info.ID, AttachOptions{Writer: true, Ack: true})
		old, _, _ := s.Subscribe("o", info.ID, AttachOptions{Writer: true})
		defer old.Close()
		synctest.Wait()
		if n := wrote.Load(); n != 4 {
			t.Fatalf("with an acknowledging writer the program wrote %d chunks, want 4", n)
		}
		acker.Close()
		synctest.Wait()
		if n := wrote.Load(); n != 64 {
			t.Fatalf("with only the old writer left the program wrote %d chunks, want 64", n)
		}
	})
}
