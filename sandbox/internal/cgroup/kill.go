//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds for the waits in kill and remove: a stuck cgroup must turn into an
// error, never a hang.
const (
	removeBudget = 2 * time.Second
	retryMax     = 200 * time.Millisecond
	freezePolls  = 100
	signalRounds = 50
	pollInterval = 10 * time.Millisecond
)

// Kill SIGKILLs every process in the group, by the most atomic means the
// host has. It is idempotent, and a no-op once remove has succeeded.
func (c *Group) Kill() error {
	if c.removed.Load() {
		return nil
	}
	if c.canKill {
		return c.killUnified()
	}
	if c.freezer != "" {
		frozen, err := c.killFrozen()
		if err == nil && frozen {
			return nil
		}
		if sweepErr := c.killEach(); sweepErr != nil {
			return errors.Join(err, sweepErr)
		}
		return nil
	}
	return c.killEach()
}

// killUnified uses cgroup.kill, which the kernel applies to the group and
// to anything forked meanwhile. A group already gone has nothing to kill.
func (c *Group) killUnified() error {
	err := writeFile(c.unified, "cgroup.kill", "1")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// killFrozen freezes the group so nothing can fork, signals every member
// and thaws it so the signals are delivered. It reports false when the
// freeze did not settle in time, and kill then sweeps with killEach.
func (c *Group) killFrozen() (bool, error) {
	if err := writeFile(c.freezer, "freezer.state", "FROZEN"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		return false, err
	}
	frozen := waitFrozen(c.freezer)
	signalAll(readPids(c.freezer))
	if err := writeFile(c.freezer, "freezer.state", "THAWED"); err != nil {
		return false, err
	}
	return frozen, nil
}

// waitFrozen polls until the v1 freezer settles, for a bounded time:
// freezing is asynchronous and a task in uninterruptible sleep delays it.
func waitFrozen(dir string) bool {
	for range freezePolls {
		data, err := readControl(filepath.Join(dir, "freezer.state"))
		if err != nil || strings.TrimSpace(string(data)) == "FROZEN" {
			return err == nil
		}
		time.Sleep(pollInterval)
	}
	return false
}

// killEach is the last resort: signal the listed processes until the group
// is empty, a bounded number of times, since members may fork in between.
// A pid can be reused between listing and signalling; the window is the
// few microseconds after a member exits, which cgroup.kill and the freezer
// avoid and this fallback cannot.
func (c *Group) killEach() error {
	for range signalRounds {
		pids := c.Pids()
		if len(pids) == 0 {
			return nil
		}
		signalAll(pids)
		time.Sleep(pollInterval)
	}
	if left := c.Pids(); len(left) > 0 {
		return fmt.Errorf("cgroup: kill %s: %d processes survive", c.name, len(left))
	}
	return nil
}

// signalAll sends SIGKILL to each pid; one that already exited is fine.
func signalAll(pids []int) {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// Remove kills the group, deletes its directories, leaving the shared
// termgate parents, and drops its tenant's hold (once, even when a
// directory could not be removed). It is idempotent.
func (c *Group) Remove() error {
	if c.removed.Load() {
		return nil
	}
	killErr := c.Kill()
	err := c.rmdirAll()
	var releaseErr error
	if c.release != nil && c.released.CompareAndSwap(false, true) {
		releaseErr = c.release()
	}
	if err != nil {
		return errors.Join(killErr, err, releaseErr)
	}
	c.removed.Store(true)
	return releaseErr
}

// rmdirAll removes every directory, newest first, within one shared budget.
func (c *Group) rmdirAll() error {
	deadline := time.Now().Add(removeBudget)
	var errs []error
	for _, dir := range slices.Backward(c.dirs) {
		errs = append(errs, rmdir(dir, deadline))
	}
	return errors.Join(errs...)
}

// rmdir retries while the kernel still counts killed tasks as members
// (EBUSY), backing off until deadline. A missing directory is success.
func rmdir(dir string, deadline time.Time) error {
	delay := 5 * time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		time.Sleep(delay)
		delay = min(delay*2, retryMax)
	}
}
