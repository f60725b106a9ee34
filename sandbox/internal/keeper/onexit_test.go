package keeper

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOnExit: a call runs once with the status, or with ok false for an
// unknown key; a cancelled call never runs, and cancel reports whether
// it stopped one.
func TestOnExit(t *testing.T) {
	t.Parallel()
	c := &Client{exits: map[string]*exitState{"run": {}}, lost: make(chan struct{})}
	type result struct {
		ws unix.WaitStatus
		ok bool
	}
	calls := make(chan result, 8)
	fn := func(ws unix.WaitStatus, ok bool) { calls <- result{ws, ok} }
	want := func(what string, r result) {
		t.Helper()
		select {
		case got := <-calls:
			if got != r {
				t.Errorf("%s: called with %+v, want %+v", what, got, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not called", what)
		}
	}

	c.OnExit("run", fn)
	stopped := c.OnExit("run", fn)
	if !stopped() || stopped() {
		t.Error("cancel of a waiting call: want true once, then false")
	}
	c.recordExit("run", 7<<8)
	c.recordExit("run", 9<<8) // only the first status counts
	want("waiting", result{7 << 8, true})
	late := c.OnExit("run", fn)
	want("after the exit", result{7 << 8, true})
	if late() {
		t.Error("cancel of a call that ran reported true")
	}
	c.OnExit("unknown", fn)
	want("unknown key", result{0, false})
	select {
	case r := <-calls:
		t.Errorf("an extra call: %+v (the cancelled one, or a second status)", r)
	case <-time.After(50 * time.Millisecond):
	}
}
