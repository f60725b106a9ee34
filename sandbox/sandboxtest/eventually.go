package sandboxtest

import (
	"testing"
	"time"
)

// maxPollInterval bounds the pause between two checks of Eventually.
const maxPollInterval = 10 * time.Millisecond

// Eventually checks cond until it holds or timeout passes, and reports
// whether it held. The caller reports a failure, with the state it saw:
//
//	if !sandboxtest.Eventually(t, 20*time.Second, done) {
//		t.Fatalf("never done: %v", state())
//	}
//
// The pauses start at a millisecond and grow to 10ms, so a condition that
// comes true quickly is seen quickly. The last check starts after the
// timeout, so a test descheduled on a loaded machine still gets one.
// Timeouts are generous bounds, not assertions on speed; cond runs on the
// test's goroutine and may call t.Fatal.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, maxPollInterval) {
		last := time.Now().After(deadline)
		if cond() {
			return true
		}
		if last {
			return false
		}
		time.Sleep(pause)
	}
}
