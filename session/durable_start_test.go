package session_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestStartStorageHoldsUpNoOtherStart: while one start is making its
// execution (its files in the state directory), another key's start, a
// Get and Stats go through. Making the execution under the supervisor's
// lock serialised every start's storage.
func TestStartStorageHoldsUpNoOtherStart(t *testing.T) {
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newDurable(t, l, filepath.Join(t.TempDir(), "state"))
	defer s.Close(context.Background())
	inSlow, release := make(chan struct{}), make(chan struct{})
	defer SetMakeHook(func(_, id string) {
		if id == "slow" {
			close(inSlow)
			<-release
		}
	})()
	slow := make(chan error, 1)
	go func() {
		_, err := s.Start(context.Background(), "t", "slow", untimed("fake"))
		slow <- err
	}()
	<-inSlow
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := s.Start(ctx, "t", "fast", untimed("fake"))
	close(release)
	if err != nil {
		t.Fatalf("a start while another made its storage: %v", err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the slow start: %v", err)
	}
	if st := s.Stats(); st.Running != 2 || st.StartedTotal != 2 {
		t.Fatalf("stats %+v, want 2 running, 2 started", st)
	}
}

// TestConcurrentIdempotentStarts: starts of one key with one spec at
// the same time launch one process and all answer it; a start with
// another spec meanwhile is a conflict.
func TestConcurrentIdempotentStarts(t *testing.T) {
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newDurable(t, l, filepath.Join(t.TempDir(), "state"))
	defer s.Close(context.Background())
	entered, release := make(chan struct{}), make(chan struct{})
	defer SetMakeHook(func(_, id string) {
		close(entered)
		<-release
	})()
	const n = 8
	var wg sync.WaitGroup
	infos := make([]Info, n)
	errs := make([]error, n)
	wg.Go(func() { infos[0], errs[0] = s.Start(t.Context(), "t", "once", untimed("fake")) })
	<-entered // the first start is making the execution: the others find it under way
	for i := 1; i < n; i++ {
		wg.Go(func() { infos[i], errs[i] = s.Start(t.Context(), "t", "once", untimed("fake")) })
	}
	_, conflict := s.Start(t.Context(), "t", "once", untimed("other"))
	close(release)
	wg.Wait()
	if !errors.Is(conflict, ErrConflict) {
		t.Fatalf("another spec while the first start is under way: %v, want ErrConflict", conflict)
	}
	for i := range n {
		if errs[i] != nil || infos[i].ID != "once" || infos[i].Started != infos[0].Started {
			t.Fatalf("start %d: %+v, %v; want the first start's execution", i, infos[i], errs[i])
		}
	}
	if got := len(l.Procs()); got != 1 {
		t.Fatalf("%d processes launched, want 1", got)
	}
	if st := s.Stats(); st.Running != 1 || st.StartedTotal != 1 {
		t.Fatalf("stats %+v, want 1 running, 1 started", st)
	}
	if _, err := s.Start(t.Context(), "t", "once", untimed("fake")); err != nil {
		t.Fatalf("a start once it is made: %v", err)
	}
}
