package sandboxtest_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

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
