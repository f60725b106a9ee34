package session_test

import (
	"bytes"
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
// final screen stays.
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
	if s.ScreenReserved() == 0 {
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
		if s.ScreenReserved() == 0 {
			break
		}
		sleepABit()
	}
	if n := s.ScreenReserved(); n != 0 {
		t.Fatalf("%d bytes still reserved once every execution ended", n)
	}
	if snap := snapshotOf("modest", small); snap == nil || !bytes.Contains(snap.Data, []byte("xxx")) {
		t.Fatal("no final screen once the execution ended")
	}
}

func mustBoundsOf(t *testing.T, s *Supervisor, owner, id string) (uint64, uint64) {
	t.Helper()
	info := mustGet(t, s, owner, id)
	return info.FirstSeq, info.LastSeq
}

// sleepABit is the pause of the polls above: 1000 of them are 10 s.
func sleepABit() { time.Sleep(10 * time.Millisecond) }
