//go:build linux

package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestOnExitReportsWhatWaitReturns: the callback sees the exit Wait
// returns, once all output was delivered; registered after the end, it
// is called before OnExit returns.
func TestOnExitReportsWhatWaitReturns(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	var out sandboxtest.SyncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	proc, err := l.Start(ctx, Policy{Command: sh("seq 1 20000; exit 3"), Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		exit Exit
		out  int
	}
	got := make(chan seen, 2)
	proc.OnExit(func(e Exit) { got <- seen{e, out.Len()} })
	var first seen
	select {
	case first = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit reported in 30 s")
	}
	if want := len(seqOutput(20000)); first.exit.Code != 3 || first.out != want {
		t.Errorf("reported %s with %d output bytes, want code 3 after %d", first.exit, first.out, want)
	}
	if w := proc.Wait(); w != first.exit {
		t.Errorf("Wait returned %+v, OnExit reported %+v", w, first.exit)
	}
	proc.OnExit(func(e Exit) { got <- seen{e, out.Len()} })
	select {
	case late := <-got:
		if late.exit != first.exit {
			t.Errorf("a late OnExit reported %+v, want %+v", late.exit, first.exit)
		}
	default:
		t.Error("OnExit after the end did not call back before returning")
	}
}
