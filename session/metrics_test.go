package session_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestStatsRefusals: each supervisor limit a start or an input runs into
// counts under its kind, and only there.
func TestStatsRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind   string
		cfg    Config
		owners string // one start per letter; the last is refused
	}{
		{RefusedMaxRunning, Config{MaxRunning: 2}, "abc"},
		{RefusedTenantRunning, Config{MaxRunningPerOwner: 2}, "aaa"},
		{RefusedTenantRetained, Config{MaxRunningPerOwner: 5, MaxRetainedPerOwner: 2}, "aaa"},
		{RefusedRetained, Config{MaxRetained: 2}, "abc"},
		{RefusedInputFull, Config{InputBuffer: 4}, "a"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, tc.cfg)
			for i, o := range tc.owners {
				_, err := s.Start(t.Context(), string(o), fmt.Sprint(i), untimed("fake"))
				if last := i == len(tc.owners)-1 && tc.kind != RefusedInputFull; last != errors.Is(err, ErrCapacity) {
					t.Fatalf("start %d of %c: %v", i, o, err)
				}
			}
			if tc.kind == RefusedInputFull {
				if _, err := s.Input("a", "0", 0, []byte("12345")); !errors.Is(err, ErrInputFull) {
					t.Fatalf("input beyond the buffer: %v", err)
				}
			}
			got := s.Stats().Refused
			for _, k := range RefusedKinds {
				if want := map[bool]uint64{true: 1}[k == tc.kind]; got[k] != want {
					t.Errorf("refused %s: %d, want %d (all %v)", k, got[k], want, got)
				}
			}
			if len(got) != len(RefusedKinds) {
				t.Errorf("refused %v: want every kind, no other", got)
			}
		})
	}
}

// TestStatsByTenantBounded: whatever the number of owners, ByTenant names
// at most TenantSeries of them, the first ones, and counts the rest as
// TenantOther; a start that never ran is not counted.
func TestStatsByTenantBounded(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newFake(t, l, Config{MaxRunning: 1000})
	const owners = TenantSeries + 50
	for i := range owners {
		for j := range 2 {
			if _, err := s.Start(t.Context(), fmt.Sprint("o", i), fmt.Sprint(j), untimed("fake")); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Err = fmt.Errorf("%w: refused", sandbox.ErrInvalidPolicy)
	if _, err := s.Start(t.Context(), "o0", "refused", untimed("fake")); err == nil {
		t.Fatal("a start the launcher refuses succeeded")
	}
	by := s.Stats().ByTenant
	if len(by) != TenantSeries+1 {
		t.Fatalf("%d tenant entries, want %d", len(by), TenantSeries+1)
	}
	if o := by[TenantOther]; o.Running != 100 || o.Started != 100 {
		t.Errorf("others: %+v, want 100 running and started", o)
	}
	if o := by["o0"]; o.Running != 2 || o.Started != 2 {
		t.Errorf("o0: %+v, want 2 running and started", o)
	}
	if _, ok := by[fmt.Sprint("o", TenantSeries)]; ok {
		t.Errorf("owner %d named: only the first %d are", TenantSeries, TenantSeries)
	}
}
