package session_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestResizeBurstsCoalesce: a burst of resizes, 1000x1000 and 2x2 in
// turn, reaches the terminal and the ring as its first size at once and
// its last size ResizeCoalesce later, not as a thousand; a resize after
// the burst applies at once, and one to the size the terminal has adds
// nothing.
func TestResizeBurstsCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
		s := newFake(t, l, Config{})
		sp := spec("bash")
		sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		info, _ := s.Start(t.Context(), "o", "t", sp)
		const n = 1000
		for i := range n {
			side := 1000
			if i%2 == 1 {
				side = 2
			}
			if err := s.Resize("o", info.ID, side, side); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Resize("o", info.ID, 33, 77); err != nil { // the last of the burst
			t.Fatal(err)
		}
		time.Sleep(ResizeCoalesce)
		synctest.Wait()
		time.Sleep(2 * ResizeCoalesce) // the window the last one opened closes with nothing kept
		if err := s.Resize("o", info.ID, 40, 100); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ResizeCoalesce)
		if err := s.Resize("o", info.ID, 40, 100); err != nil {
			t.Fatal(err)
		}
		s.Cancel("o", info.ID)
		sub, _, _ := s.Attach("o", info.ID, 0)
		_, evs := drain(t, sub)
		var sizes []string
		for _, ev := range evs {
			if ev.Kind == replay.KindResize {
				sizes = append(sizes, fmt.Sprintf("%dx%d", ev.Rows, ev.Cols))
			}
		}
		if got, want := fmt.Sprint(sizes), "[1000x1000 33x77 40x100]"; got != want {
			t.Errorf("%d resizes in a burst, then one, then the same again: resize events %s, want %s", n+1, got, want)
		}
		if got, want := fmt.Sprint(l.Procs()[0].Sizes()), "[{1000 1000} {33 77} {40 100}]"; got != want {
			t.Errorf("the terminal was set to %s, want %s", got, want)
		}
	})
}
