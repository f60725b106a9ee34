//go:build linux

package procevents

import (
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestMain checks that no watcher's reader outlived the tests.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
