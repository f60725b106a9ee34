//go:build linux

package sandbox

import (
	"os/exec"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The cgroup helpers of the tests that run real sandboxes; those that make
// and remove cgroups are in sandboxtest.

// cgroupRequire skips (or fails in CI) when the host lacks a feature.
func cgroupRequire(t testing.TB, have bool, what string, info CgroupInfo) {
	t.Helper()
	if !have {
		sandboxtest.Unavailable(t, "host cgroups (%+v) cannot enforce %s", info, what)
	}
}

// cgroupWait waits for cmd for at most d; on timeout it kills the process
// so the waiting goroutine, owned here, always ends before we return.
func cgroupWait(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after %v", cmd.Args, d)
		return nil
	}
}
