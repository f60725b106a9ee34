package netpolicy

import (
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestMain checks that no test leaves a goroutine behind: the test DNS
// and TCP servers end with their tests, and a Dial leaves nothing
// running. The sandboxes' launcher is closed first; its forking thread
// stays on purpose.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.After(releaseLauncher), sandboxtest.Ignore(sandboxtest.Forker))
}
