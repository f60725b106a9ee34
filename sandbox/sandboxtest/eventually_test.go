package sandboxtest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

func TestEventually(t *testing.T) {
	t.Parallel()
	t.Run("holds at once", func(t *testing.T) {
		t.Parallel()
		calls := 0
		if !sandboxtest.Eventually(t, time.Minute, func() bool { calls++; return true }) || calls != 1 {
			t.Errorf("a condition that holds: %d calls, want true after 1", calls)
		}
	})
	t.Run("comes true", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		if !sandboxtest.Eventually(t, time.Minute, func() bool { return calls.Add(1) == 5 }) {
			t.Errorf("a condition true on the 5th check was not seen (%d checks)", calls.Load())
		}
	})
	t.Run("never", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		if sandboxtest.Eventually(t, 50*time.Millisecond, func() bool { calls.Add(1); return false }) {
			t.Error("a condition that never holds was reported as holding")
		}
		if calls.Load() < 2 {
			t.Errorf("checked %d times in the timeout, want more than once", calls.Load())
		}
	})
}
