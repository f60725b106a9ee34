package session_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestScreenMemoryBudget: an emulator that would take its owner over the
// screen memory budget is never made, and its readers behind the ring get
// a gap; another owner's terminal still gets its snapshot; and once the
// executions ended, their emulators' memory is given back while the
// final screen stays, counted at its size.
func TestScreenMemoryBudget(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		for range 64 {
			p.Stdio.Stdout.Write(append(bytes.Repeat([]byte{'x'}, 1000), "\r\n"...))
		}
		<-release
		return sandbox.Exit{Exact: true}
	}}
	s := newFake(t, l, Config{MaxScreenMemoryPerOwner: 4 << 20})
	start := func(owner string, rows, cols uint16) string {
		sp := ringSpec(16 << 10)
		sp.Live = true
		sp.Policy.TTY = &sandbox.WindowSize{Rows: rows, Cols: cols}
		info, err := s.Start(t.Context(), owner, "t", sp)
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	big, small := start("greedy", 1000, 1000), start("modest", 24, 80)
	snapshotOf := func(owner, id string) *Snapshot {
		t.Helper()
		for range 1000 { // until the output was evicted
			if first, _ := mustBoundsOf(t, s, owner, id); first > 1 {
				break
			}
			sleepABit()
		}
		sub, _, err := s.Subscribe(owner, id, AttachOptions{Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		return sub.Snapshot()
	}
	if snap := snapshotOf("greedy", big); snap != nil {
		t.Fatalf("a 1000x1000 emulator over a 4 MiB budget made a snapshot of %d bytes", len(snap.Data))
	}
	if snap := snapshotOf("modest", small); snap == nil {
		t.Fatal("another owner's terminal got no snapshot")
	}
	running := s.ScreenReserved()
	if running == 0 {
		t.Fatal("a running emulator reserved nothing")
	}
	close(release)
	for _, k := range [][2]string{{"greedy", big}, {"modest", small}} {
		for range 1000 {
			if info, _ := s.Get(k[0], k[1]); info.Result != nil {
				break
			}
			sleepABit()
		}
	}
	for range 1000 {
		if s.ScreenReserved() < running {
			break
		}
		sleepABit()
	}
	snap := snapshotOf("modest", small)
	if snap == nil || !bytes.Contains(snap.Data, []byte("xxx")) {
		t.Fatal("no final screen once the execution ended")
	}
	if n := s.ScreenReserved(); n != len(snap.Data) {
		t.Fatalf("%d bytes reserved once every execution ended, want the final screen's %d", n, len(snap.Data))
	}
}

func mustBoundsOf(t *testing.T, s *Supervisor, owner, id string) (uint64, uint64) {
	t.Helper()
	info := mustGet(t, s, owner, id)
	return info.FirstSeq, info.LastSeq
}

// sleepABit is the pause of the polls above: 1000 of them are 10 s.
func sleepABit() { time.Sleep(10 * time.Millisecond) }

// TestFinalScreensCountUntilRemoved: an ended terminal's final snapshot
// stays counted against its owner's screen memory until the execution is
// removed, so that retained results cannot hold more screens than the
// budget; one that does not fit is not kept, and its readers get a gap.
func TestFinalScreensCountUntilRemoved(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		for i := range 200 { // colours in every cell: a large snapshot
			for j := range 80 {
				fmt.Fprintf(p.Stdio.Stdout, "\x1b[38;2;%d;%d;1mx", i, j)
			}
			p.Stdio.Stdout.Write([]byte("\r\n"))
		}
		return sandbox.Exit{Exact: true}
	}}
	s := newFake(t, l, Config{MaxScreenMemoryPerOwner: 2 << 20})
	run := func(owner, id string, retention time.Duration) {
		t.Helper()
		sp := ringSpec(16 << 10)
		sp.Live = true
		sp.Retention = retention
		sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		if _, err := s.Start(t.Context(), owner, id, sp); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			if info, _ := s.Get(owner, id); info.Result != nil {
				return
			}
			sleepABit()
		}
		t.Fatalf("%s did not end", id)
	}
	// The emulator's reservation (1.3 MB at 24x80) is given back just
	// after the result is set; until then the total is above what stays.
	settled := func(base int) int {
		for range 1000 {
			if n := s.ScreenReserved(); n > base && n-base < 1<<20 {
				return n
			}
			sleepABit()
		}
		return s.ScreenReserved()
	}
	run("acme", "first", time.Hour)
	kept := settled(0)
	if kept == 0 || kept > 1<<20 {
		t.Fatalf("%d bytes reserved for an ended terminal's final screen, want its snapshot's size", kept)
	}
	for i := range 2 * (2 << 20) / kept {
		run("acme", fmt.Sprint("more", i), time.Hour)
		if n := s.ScreenReserved(); n > 2<<20 {
			t.Fatalf("%d bytes of final screens kept, over the owner's budget of %d", n, 2<<20)
		}
	}
	before := s.ScreenReserved()
	run("other", "brief", time.Second)
	if n := settled(before); n == before || n-before > 1<<20 {
		t.Fatalf("another owner's final screen counted as %d bytes", n-before)
	}
	for range 1000 {
		if _, err := s.Get("other", "brief"); err != nil {
			break
		}
		sleepABit()
	}
	if n := s.ScreenReserved(); n != before {
		t.Fatalf("%d bytes reserved once the other owner's execution was removed, want %d as before it", n, before)
	}
}
