//go:build linux

package keeper

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestLeanCopiesGoWhenIdle: the forking thread holds the lean copy its
// spawns were forked from while it forks, and lets it go once idle for
// leanIdle, so that on a host whose mounts are private the copy keeps no
// filesystem busy that the host unmounted.
func TestLeanCopiesGoWhenIdle(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	if sp, _ := spawnCatFile(t, c, "lean", "/proc/self/mountinfo", SpawnRequest{Resolves: []string{"/usr/bin/cat", "/proc/self"}}); !sp.Lean {
		t.Fatal("the spawn was not forked from a lean mount namespace")
	}
	pid := ks.last().cmd.Process.Pid
	if n := mountNamespacesHeld(t, pid); n != 2 {
		t.Fatalf("after a lean spawn the forking thread holds %d mount namespaces, want the host's and the copy", n)
	}
	deadline := time.Now().Add(leanIdle + 5*time.Second)
	for mountNamespacesHeld(t, pid) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%v after the spawn the forking thread still holds the copy", leanIdle+5*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountNamespacesHeld returns the most descriptors of mount namespaces
// that one thread of process pid holds.
func mountNamespacesHeld(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, dir := range tasks {
		fds, _ := os.ReadDir(dir) // a thread may have ended
		n := 0
		for _, fd := range fds {
			if link, _ := os.Readlink(filepath.Join(dir, fd.Name())); strings.HasPrefix(link, "mnt:[") {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
