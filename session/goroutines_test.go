package session_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// idleGoroutines starts n executions of sp that stay idle and returns how
// many goroutines each adds, once at most perExecution each remain or
// three seconds passed. A first execution started before the count
// starts whatever the launcher starts once. Not parallel: it counts the
// whole process's goroutines.
func idleGoroutines(t *testing.T, s *Supervisor, sp Spec, n int, perExecution float64) float64 {
	t.Helper()
	if _, err := s.Start(t.Context(), "tenant", "warm-up", sp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := range n {
		if _, err := s.Start(t.Context(), "tenant", fmt.Sprint("idle-", i), sp); err != nil {
			t.Fatal(err)
		}
	}
	per := func() float64 { return float64(runtime.NumGoroutine()-before) / float64(n) }
	for deadline := time.Now().Add(3 * time.Second); per() > perExecution && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return per()
}

// TestIdleExecutionHasNoGoroutineOfTheSupervisor: an idle execution on
// the fake launcher runs its script's goroutine and none of the
// supervisor's: the end is reported (OnExit), not waited for.
func TestIdleExecutionHasNoGoroutineOfTheSupervisor(t *testing.T) {
	s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{})
	if per := idleGoroutines(t, s, spec("idle"), 50, 1); per > 1 {
		t.Errorf("%.2f goroutines per idle execution, want 1 (the script's)", per)
	}
}

// TestIdlePTYExecutionGoroutines: an idle PTY execution in the real
// sandbox holds two goroutines, the sandbox's supervise and its output
// copier; the supervisor holds none.
func TestIdlePTYExecutionGoroutines(t *testing.T) {
	s := realSupervisor(t)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh"}, Workspace: sandboxtest.Dir(t),
		TTY: &sandbox.WindowSize{Rows: 24, Cols: 80}}}
	if per := idleGoroutines(t, s, sp, 20, 2); per > 2 {
		t.Errorf("%.2f goroutines per idle PTY execution, want 2 (supervise and the output copier)", per)
	}
}
