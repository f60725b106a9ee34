package gatewaytest

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds or timeout passes, and reports
// whether it held. The caller reports a failure, with the state it saw:
//
//	if !gatewaytest.Eventually(t, 20*time.Second, done) {
//		t.Fatalf("never done: %v", state())
//	}
//
// Timeouts are generous bounds for a loaded machine, not assertions on
// speed.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
