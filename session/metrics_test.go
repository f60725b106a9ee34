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
// counts under its kind.
func TestStatsRefusals(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped},
		Config{MaxRunning: 3, MaxRunningPerOwner: 2, MaxRetainedPerOwner: 2, MaxRetained: 4, InputBuffer: 4})
	start := func(owner, id string) error {
		_, err := s.Start(t.Context(), owner, id, untimed("fake"))
		return err
	}
	for _, st := range []struct {
		owner, id string
		want      error
	}{
		{"a", "1", nil}, {"a", "2", nil}, {"a", "3", ErrCapacity}, // tenant_running: a runs 2
		{"b", "1", nil}, {"c", "1", ErrCapacity}, // max_running: 3 run
	} {
		if err := start(st.owner, st.id); !errors.Is(err, st.want) {
			t.Fatalf("start %s/%s: %v, want %v", st.owner, st.id, err, st.want)
		}
	}
	if _, err := s.Input("a", "1", 0, []byte("12345")); !errors.Is(err, ErrInputFull) {
		t.Fatalf("input beyond the buffer: %v", err)
	}
	got := s.Stats().Refused
	want := map[string]uint64{RefusedTenantRunning: 1, RefusedMaxRunning: 1, RefusedInputFull: 1}
	for _, k := range RefusedKinds {
		if got[k] != want[k] {
			t.Errorf("refused %s: %d, want %d (all %v)", k, got[k], want[k], got)
		}
	}
	if len(got) != len(RefusedKinds) {
		t.Errorf("refused %v: want every kind, no other", got)
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
