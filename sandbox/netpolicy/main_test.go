package netpolicy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the test DNS
// and TCP servers end with their tests, and a Dial leaves nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
