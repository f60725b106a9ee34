package session_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// recorder is a fake emulator: its snapshot is everything it was fed,
// resizes written as R<rows>x<cols>.
type recorder struct {
	mu         sync.Mutex
	rows, cols int
	fed        bytes.Buffer
}

func (r *recorder) Write(p []byte) { r.mu.Lock(); r.fed.Write(p); r.mu.Unlock() }
func (r *recorder) Resize(rows, cols int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows, r.cols = rows, cols
	fmt.Fprintf(&r.fed, "R%dx%d", rows, cols)
}
func (r *recorder) Snapshot(dst []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(dst, r.fed.Bytes()...)
}
func (r *recorder) SnapshotMax(dst []byte, limit int, cost func([]byte) int) ([]byte, bool) {
	snap := r.Snapshot(dst)
	if cost(snap[len(dst):]) > limit {
		return dst, false
	}
	return snap, true
}
func (r *recorder) Size() (int, int) { return r.rows, r.cols }

// TestSnapshotStandsInForEvictedHistory: a reader whose history was
// evicted gets the emulator's state after the newest evicted event, then
// exactly the events after it; the emulator saw every evicted event in
// order, resizes included. A reader that asks for none, or whose history
// is retained, gets none.
func TestSnapshotStandsInForEvictedHistory(t *testing.T) {
	restore := SetNewTerminal(func(rows, cols, _ int) Terminal { return &recorder{rows: rows, cols: cols} })
	defer restore()
	synctest.Test(t, func(t *testing.T) {
		resized := make(chan struct{})
		var want bytes.Buffer
		l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
			for i := range 64 {
				b := []byte(fmt.Sprintf("%03d:%s|", i, bytes.Repeat([]byte{'a' + byte(i%26)}, 250)))
				p.Stdio.Stdout.Write(b)
				if i == 10 {
					<-resized
				}
			}
			return sandbox.Exit{Exact: true}
		}}
		s := newFake(t, l, Config{})
		sp := ringSpec(4 << 10)
		sp.Live = true
		sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		info, err := s.Start(t.Context(), "o", "tui", sp)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := s.Resize("o", info.ID, 30, 100); err != nil {
			t.Fatal(err)
		}
		close(resized)
		synctest.Wait()
		for i := range 64 {
			want.WriteString(fmt.Sprintf("%03d:%s|", i, bytes.Repeat([]byte{'a' + byte(i%26)}, 250)))
			if i == 10 {
				want.WriteString("R30x100")
			}
		}

		sub, _, err := s.Subscribe("o", info.ID, AttachOptions{Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		snap := sub.Snapshot()
		if snap == nil || snap.Seq == 0 || snap.From != 1 || snap.To != snap.Seq+1 || snap.Rows != 30 || snap.Cols != 100 {
			t.Fatalf("snapshot %+v; want one after the evicted history at 30x100", snap)
		}
		got := append([]byte(nil), snap.Data...)
		for range 1000 {
			evs, gap, err := sub.Next(t.Context())
			if err != nil || gap != nil {
				break
			}
			for _, ev := range evs {
				if ev.Seq <= snap.Seq {
					t.Fatalf("event %d at or before the snapshot's %d", ev.Seq, snap.Seq)
				}
				switch ev.Kind {
				case replay.KindOutput:
					got = append(got, ev.Data...)
				case replay.KindResize:
					got = fmt.Appendf(got, "R%dx%d", ev.Rows, ev.Cols)
				}
			}
		}
		// The started event was evicted too, so the snapshot's seen is
		// exactly the output bytes in it.
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("snapshot + events: %d bytes, want %d", len(got), want.Len())
		}
		if uint64(len(snap.Data)-len("R30x100")) != snap.Seen && uint64(len(snap.Data)) != snap.Seen {
			t.Fatalf("seen %d for %d bytes of snapshot", snap.Seen, len(snap.Data))
		}

		plain, _, _ := s.Subscribe("o", info.ID, AttachOptions{})
		defer plain.Close()
		if plain.Snapshot() != nil {
			t.Fatal("a reader that did not ask got a snapshot")
		}
		_, last := mustBounds(t, s, info.ID)
		recent, _, _ := s.Subscribe("o", info.ID, AttachOptions{After: last, Snapshot: true})
		defer recent.Close()
		if recent.Snapshot() != nil {
			t.Fatal("a reader with all its history retained got a snapshot")
		}
	})
}

func mustBounds(t *testing.T, s *Supervisor, id string) (uint64, uint64) {
	t.Helper()
	info := mustGet(t, s, "o", id)
	return info.FirstSeq, info.LastSeq
}

// TestEmulatorFedAtEachEviction: the emulator is fed what the ring evicts
// as the ring evicts it (it skips scrolled-away text across writes), so
// no evicted output waits in memory for a batch.
func TestEmulatorFedAtEachEviction(t *testing.T) {
	var term *recorder
	restore := SetNewTerminal(func(rows, cols, _ int) Terminal {
		term = &recorder{rows: rows, cols: cols}
		return term
	})
	defer restore()
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
			for i := range 64 {
				p.Stdio.Stdout.Write(fmt.Appendf(nil, "%03d:%s\r\n", i, bytes.Repeat([]byte{'x'}, 250)))
			}
			<-done
			return sandbox.Exit{Exact: true}
		}}
		s := newFake(t, l, Config{})
		sp := ringSpec(4 << 10)
		sp.Live = true
		sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		info, err := s.Start(t.Context(), "o", "fed", sp)
		if err != nil {
			t.Fatal(err)
		}
		defer close(done)
		synctest.Wait()
		evicted := RingStats(s, "o", info.ID).EvictedBytes
		if evicted == 0 {
			t.Fatal("nothing was evicted: the test tests nothing")
		}
		fed := 0
		if term != nil {
			term.mu.Lock()
			fed = term.fed.Len()
			term.mu.Unlock()
		}
		if uint64(fed) != evicted {
			t.Fatalf("the emulator was fed %d bytes of the %d evicted", fed, evicted)
		}
	})
}
