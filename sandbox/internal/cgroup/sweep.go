//go:build linux

package cgroup

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInUse reports that another live termgate instance holds the
// cgroup parent: its executions' groups are not left-overs, so nothing is
// swept. Each instance needs a parent of its own.
var ErrInUse = errors.New("cgroup: another termgate instance uses the cgroup parent")

// Bounds of a sweep: the directories it walks and the time its removals
// may take, so a pathological tree turns into an error, never a hang.
const (
	sweepMax    = 1 << 16
	sweepBudget = 10 * time.Second
	lockBudget  = 5 * time.Second
)

// SweepResult says what Host.Sweep found left by a previous instance.
type SweepResult struct {
	// Removed lists the directories removed, deepest first, in every
	// hierarchy.
	Removed []string
	// Killed counts the processes that still ran in them.
	Killed int
}

// Lock is a launcher's shared flock on its cgroup parent in every
// hierarchy, held from LockParents to Close. A sweep needs it exclusive,
// so no instance sweeps the groups of a live one; the kernel drops it
// when the process dies, however it dies. Descriptors are close-on-exec,
// so no sandbox inherits it.
type Lock struct {
	dirs  []string // each hierarchy's parent directory
	files []*os.File
}

// LockParents makes the parent in every hierarchy and locks it shared. A
// hierarchy whose parent cannot be made (no root) is left out: nothing is
// ever created or swept there. Another instance sweeping for longer than
// lockBudget is an error.
func (h *Host) LockParents() (*Lock, error) {
	lk := &Lock{}
	for _, hier := range h.hierarchies() {
		chain, err := ensure(hier, h.parent)
		if err != nil {
			continue
		}
		f, err := os.Open(chain[0])
		if err != nil {
			continue
		}
		if err := flock(f, unix.LOCK_SH); err != nil {
			f.Close()
			lk.Close()
			return nil, fmt.Errorf("lock cgroup parent %s: %w", chain[0], err)
		}
		lk.dirs = append(lk.dirs, chain[0])
		lk.files = append(lk.files, f)
	}
	return lk, nil
}

// Exclusive turns the shared lock exclusive in every hierarchy, or, when
// another instance holds one, returns to shared and fails.
func (lk *Lock) Exclusive() error {
	for i, f := range lk.files {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			continue
		}
		// A failed conversion has dropped the shared lock: take it back.
		err = fmt.Errorf("%w (%s: %w)", ErrInUse, lk.dirs[i], err)
		return errors.Join(err, lk.Shared())
	}
	return nil
}

// Shared returns every lock to shared.
func (lk *Lock) Shared() error {
	var errs []error
	for i, f := range lk.files {
		if err := flock(f, unix.LOCK_SH); err != nil {
			errs = append(errs, fmt.Errorf("lock cgroup parent %s: %w", lk.dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Close drops every lock; a launcher that never locked has none.
func (lk *Lock) Close() {
	if lk == nil {
		return
	}
	for _, f := range lk.files {
		f.Close()
	}
	lk.files, lk.dirs = nil, nil
}

// flock takes lock how on f, retrying for a bounded time while
// another instance holds it exclusive (a sweep under way).
func flock(f *os.File, how int) error {
	deadline := time.Now().Add(lockBudget)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline):
			return fmt.Errorf("%w: %w", ErrInUse, err)
		}
		time.Sleep(pollInterval)
	}
}

// Sweep kills every process found below the parents lk holds and removes
// every directory there, deepest first, logging each one, except the
// directories in keep (groups of executions this instance adopted), what
// is below them and their ancestors. The caller has made lk exclusive, so
// no live instance's groups are among them. A partial sweep returns what
// it removed along with the error.
func (h *Host) Sweep(lk *Lock, keep []string, log *slog.Logger) (SweepResult, error) {
	var dirs []string
	for _, top := range lk.dirs {
		found, err := listTree(top, sweepMax-len(dirs))
		if err != nil {
			return SweepResult{}, err
		}
		dirs = append(dirs, found...)
	}
	dirs = slices.DeleteFunc(dirs, func(dir string) bool { return kept(dir, keep) })
	var res SweepResult
	if len(dirs) == 0 {
		return res, nil
	}
	killErr := killStale(dirs, &res, log)
	slices.SortStableFunc(dirs, func(a, b string) int {
		return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/"))
	})
	deadline := time.Now().Add(sweepBudget)
	var errs []error
	for _, dir := range dirs {
		if err := rmdir(dir, deadline); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed = append(res.Removed, dir)
		log.Info("removed a cgroup left by a previous instance", "dir", dir)
	}
	return res, errors.Join(killErr, errors.Join(errs...))
}

// kept reports whether dir is one of keep, below one or above one.
func kept(dir string, keep []string) bool {
	for _, k := range keep {
		k = filepath.Clean(k)
		if dir == k || strings.HasPrefix(dir, k+"/") || strings.HasPrefix(k, dir+"/") {
			return true
		}
	}
	return false
}

// killStale kills what runs in dirs: cgroup.kill where the cgroup2
// tree offers it, then signals to whatever v1 groups still list.
func killStale(dirs []string, res *SweepResult, log *slog.Logger) error {
	stale := &Group{name: "left by a previous instance", dirs: dirs}
	res.Killed = len(stale.Pids())
	if res.Killed == 0 {
		return nil
	}
	for _, dir := range dirs {
		_ = writeIfExists(dir, "cgroup.kill", "1") // killEach covers a failure
	}
	log.Warn("killing processes left in cgroups by a previous instance", "count", res.Killed)
	return stale.killEach()
}

// listTree lists the directories below top (not top itself), at most
// max of them. A missing top holds nothing.
func listTree(top string, max int) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && path != top && errors.Is(err, fs.ErrNotExist):
			return nil // removed meanwhile
		case err != nil:
			return err
		case !d.IsDir() || path == top:
			return nil
		case len(dirs) >= max:
			return fmt.Errorf("cgroup: sweep %s: more than %d directories", top, sweepMax)
		}
		dirs = append(dirs, path)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return dirs, err
}
