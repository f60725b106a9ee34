//go:build linux

package procevents

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no watcher's reader outlived the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
