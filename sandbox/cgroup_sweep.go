//go:build linux

package sandbox

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
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrCgroupsInUse reports that another live termgate instance holds the
// cgroup parent: its executions' groups are not left-overs, so nothing is
// swept. Give each instance its own Config.CgroupParent.
var ErrCgroupsInUse = errors.New("sandbox: another termgate instance uses the cgroup parent")

// ErrSweepAfterStart reports a sweep asked for after the launcher started
// an execution, whose groups a sweep would take for left-overs.
var ErrSweepAfterStart = errors.New("sandbox: cgroups can be swept only before the first start")

// Bounds of a sweep: the directories it walks and the time its removals
// may take, so a pathological tree turns into an error, never a hang.
const (
	cgroupSweepMax    = 1 << 16
	cgroupSweepBudget = 10 * time.Second
	cgroupLockBudget  = 5 * time.Second
)

// CgroupSweep says what SweepCgroups found left by a previous instance.
type CgroupSweep struct {
	// Removed lists the directories removed, deepest first, in every
	// hierarchy.
	Removed []string
	// Killed counts the processes that still ran in them.
	Killed int
}

// SweepCgroups removes what a previous instance left under the cgroup
// parent (Config.CgroupParent) in every hierarchy: it kills what still
// runs there, then removes the directories, deepest first, logging each
// one. The parent itself, the hierarchies' roots and anything outside the
// parent are never touched.
//
// Call it once at startup, before the first Start: afterwards it fails
// with ErrSweepAfterStart, and a Start that comes during a sweep waits
// for it. While another live launcher (in any process) holds the same
// parent, it fails with ErrCgroupsInUse and removes nothing. A partial
// sweep returns what it removed along with the error.
func (l *Launcher) SweepCgroups() (CgroupSweep, error) {
	l.cgGuard.mu.Lock()
	defer l.cgGuard.mu.Unlock()
	if l.cgGuard.started {
		return CgroupSweep{}, ErrSweepAfterStart
	}
	if err := l.cgLock.exclusive(); err != nil {
		return CgroupSweep{}, err
	}
	res, err := l.cgroups.sweep(l.cgLock.dirs, l.log)
	return res, errors.Join(err, l.cgLock.shared())
}

// cgroupGuard orders a sweep before every start: once an execution asked
// for its group, the sweep refuses; a start waits for a sweep under way.
type cgroupGuard struct {
	mu      sync.Mutex
	started bool
}

// markStarted records that the launcher makes groups from now on.
func (g *cgroupGuard) markStarted() {
	g.mu.Lock()
	g.started = true
	g.mu.Unlock()
}

// cgroupLock is a launcher's shared flock on its cgroup parent in every
// hierarchy, held from NewLauncher to Close. A sweep needs it exclusive,
// so no instance sweeps the groups of a live one; the kernel drops it
// when the process dies, however it dies. Descriptors are close-on-exec,
// so no sandbox inherits it.
type cgroupLock struct {
	dirs  []string // each hierarchy's parent directory
	files []*os.File
}

// lockParents makes the parent in every hierarchy and locks it shared. A
// hierarchy whose parent cannot be made (no root) is left out: nothing is
// ever created or swept there. Another instance sweeping for longer than
// cgroupLockBudget is an error.
func (h *cgroupHost) lockParents() (*cgroupLock, error) {
	lk := &cgroupLock{}
	for _, hier := range h.hierarchies() {
		chain, err := cgroupEnsure(hier, h.parent)
		if err != nil {
			continue
		}
		f, err := os.Open(chain[0])
		if err != nil {
			continue
		}
		if err := cgroupFlock(f, unix.LOCK_SH); err != nil {
			f.Close()
			lk.close()
			return nil, fmt.Errorf("lock cgroup parent %s: %w", chain[0], err)
		}
		lk.dirs = append(lk.dirs, chain[0])
		lk.files = append(lk.files, f)
	}
	return lk, nil
}

// exclusive turns the shared lock exclusive in every hierarchy, or, when
// another instance holds one, returns to shared and fails.
func (lk *cgroupLock) exclusive() error {
	for i, f := range lk.files {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			continue
		}
		// A failed conversion has dropped the shared lock: take it back.
		err = fmt.Errorf("%w (%s: %w)", ErrCgroupsInUse, lk.dirs[i], err)
		return errors.Join(err, lk.shared())
	}
	return nil
}

// shared returns every lock to shared.
func (lk *cgroupLock) shared() error {
	var errs []error
	for i, f := range lk.files {
		if err := cgroupFlock(f, unix.LOCK_SH); err != nil {
			errs = append(errs, fmt.Errorf("lock cgroup parent %s: %w", lk.dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// close drops every lock; a launcher that never locked has none.
func (lk *cgroupLock) close() {
	if lk == nil {
		return
	}
	for _, f := range lk.files {
		f.Close()
	}
	lk.files, lk.dirs = nil, nil
}

// cgroupFlock takes lock how on f, retrying for a bounded time while
// another instance holds it exclusive (a sweep under way).
func cgroupFlock(f *os.File, how int) error {
	deadline := time.Now().Add(cgroupLockBudget)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline):
			return fmt.Errorf("%w: %w", ErrCgroupsInUse, err)
		}
		time.Sleep(cgroupPollInterval)
	}
}

// sweep kills every process found below parents and removes every
// directory there, deepest first. The caller holds the parents exclusive.
func (h *cgroupHost) sweep(parents []string, log *slog.Logger) (CgroupSweep, error) {
	var dirs []string
	for _, top := range parents {
		found, err := cgroupTree(top, cgroupSweepMax-len(dirs))
		if err != nil {
			return CgroupSweep{}, err
		}
		dirs = append(dirs, found...)
	}
	var res CgroupSweep
	if len(dirs) == 0 {
		return res, nil
	}
	killErr := cgroupKillStale(dirs, &res, log)
	slices.SortStableFunc(dirs, func(a, b string) int {
		return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/"))
	})
	deadline := time.Now().Add(cgroupSweepBudget)
	var errs []error
	for _, dir := range dirs {
		if err := cgroupRmdir(dir, deadline); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed = append(res.Removed, dir)
		log.Info("removed a cgroup left by a previous instance", "dir", dir)
	}
	return res, errors.Join(killErr, errors.Join(errs...))
}

// cgroupKillStale kills what runs in dirs: cgroup.kill where the cgroup2
// tree offers it, then signals to whatever v1 groups still list.
func cgroupKillStale(dirs []string, res *CgroupSweep, log *slog.Logger) error {
	stale := &execCgroup{name: "left by a previous instance", dirs: dirs}
	res.Killed = len(stale.pids())
	if res.Killed == 0 {
		return nil
	}
	for _, dir := range dirs {
		_ = cgroupWriteIfExists(dir, "cgroup.kill", "1") // killEach covers a failure
	}
	log.Warn("killing processes left in cgroups by a previous instance", "count", res.Killed)
	return stale.killEach()
}

// cgroupTree lists the directories below top (not top itself), at most
// max of them. A missing top holds nothing.
func cgroupTree(top string, max int) ([]string, error) {
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
			return fmt.Errorf("cgroup: sweep %s: more than %d directories", top, cgroupSweepMax)
		}
		dirs = append(dirs, path)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return dirs, err
}
