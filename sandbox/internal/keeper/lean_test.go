//go:build linux

package keeper

import (
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestSpawnLean: a spawn that lists what it resolves is forked from a
// lean mount namespace, without /sys, and its reply says so; one that
// does not is forked from the keeper's, with /sys.
func TestSpawnLean(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedSysMounted(t)
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	sp, out := spawnCatFile(t, c, "lean", "/proc/self/mountinfo", SpawnRequest{Resolves: []string{"/usr/bin/cat", "/proc/self"}})
	if !sp.Lean || strings.Contains(out, " /sys ") || !strings.Contains(out, " /proc ") {
		t.Errorf("a lean spawn: Lean %v, its mounts:\n%s", sp.Lean, out)
	}
	sp, out = spawnCatFile(t, c, "host", "/proc/self/mountinfo", SpawnRequest{})
	if sp.Lean || !strings.Contains(out, " /sys ") {
		t.Errorf("a spawn that is not lean: Lean %v, its mounts:\n%s", sp.Lean, out)
	}
}
