//go:build linux

package keeper

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of stopping: a stuck child or cgroup turns into a logged error,
// never a keeper that does not exit.
const (
	cgroupRoot   = "/sys/fs/cgroup"
	reapBudget   = 5 * time.Second // after SIGKILL, for the children to be reaped
	rmdirBudget  = 2 * time.Second // per cgroup directory, while killed tasks leave it
	stopInterval = 10 * time.Millisecond
)

// stopAll stops every child as a cancel would: SIGTERM to the child's
// session and to everything in its cgroups, KillGrace for them to go,
// then SIGKILL, reaping, removal of the cgroups and of the Remove paths.
func (k *keeper) stopAll(reason string) {
	k.mu.Lock()
	var list []*child
	for _, key := range k.order {
		if ch := k.children[key]; ch.pid != 0 {
			list = append(list, ch)
		}
	}
	k.mu.Unlock()
	if len(list) > 0 {
		k.log.Info("stopping children", "reason", reason, "children", len(list))
	}
	k.signalAll(list, unix.SIGTERM)
	if !k.settled(list, k.cfg.KillGrace) {
		k.signalAll(list, unix.SIGKILL)
		if !k.settled(list, reapBudget) {
			k.log.Error("children still running after SIGKILL", "budget", reapBudget.String())
		}
	}
	for _, ch := range list {
		k.cleanUp(ch)
	}
	reaped := make(chan struct{})
	go func() { k.reaps.Wait(); close(reaped) }()
	select {
	case <-reaped:
	case <-time.After(reapBudget):
		k.log.Error("children not reaped", "budget", reapBudget.String())
	}
}

// signalAll sends sig to each running child's session and to every
// process in its cgroups; SIGKILL uses cgroup.kill where the kernel has it.
// A supervised child's SIGTERM goes past it and its own children to the
// processes they run (SpawnRequest.Supervised).
func (k *keeper) signalAll(list []*child, sig unix.Signal) {
	for _, ch := range list {
		k.mu.Lock()
		alive := !ch.exited // a zombie keeps its pid, and so its session id
		if alive && (sig == unix.SIGKILL || !ch.super) {
			unix.Kill(-ch.pid, sig)
		}
		k.mu.Unlock()
		if alive {
			k.log.Info("signalled", "key", ch.key, "pid", ch.pid, "signal", sig.String())
		}
		var spare map[int]bool
		if ch.super {
			spare = supervisors(ch.pid)
		}
		for _, cg := range ch.cgroups {
			if n := signalCgroupSparing(cg, sig, spare); n > 0 {
				k.log.Info("signalled cgroup", "key", ch.key, "cgroup", cg, "signal", sig.String(), "processes", n)
			}
		}
	}
}

// supervisors returns pid and its children.
func supervisors(pid int) map[int]bool {
	spare := map[int]bool{pid: true}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			spare[n] = true
		}
	}
	return spare
}

// settled waits up to budget for every child to be reaped and its
// cgroups to be empty.
func (k *keeper) settled(list []*child, budget time.Duration) bool {
	deadline := time.Now().Add(budget)
	for _, ch := range list {
		select {
		case <-ch.reaped:
		case <-time.After(time.Until(deadline)):
			return false
		}
		for _, cg := range ch.cgroups {
			for len(members(cg)) > 0 {
				if time.Now().After(deadline) {
					return false
				}
				time.Sleep(stopInterval)
			}
		}
	}
	return true
}

// cleanUp removes the child's cgroups (deepest first) and its Remove
// paths, and closes what the keeper held for it.
func (k *keeper) cleanUp(ch *child) {
	for _, cg := range ch.cgroups {
		if err := removeCgroup(cg); err != nil {
			k.log.Error("remove cgroup", "key", ch.key, "cgroup", cg, "err", err)
		} else {
			k.log.Info("removed cgroup", "key", ch.key, "cgroup", cg)
		}
	}
	for _, p := range ch.remove {
		if err := k.removePath(p); err != nil {
			k.log.Error("remove path", "key", ch.key, "path", p, "err", err)
		} else {
			k.log.Info("removed path", "key", ch.key, "path", p)
		}
	}
	k.mu.Lock()
	closeFds(ch.held)
	ch.held = nil
	k.mu.Unlock()
}

// removePath removes p and what is below it, once p's parent still
// resolves to a directory below Dir (no link leads elsewhere).
func (k *keeper) removePath(p string) error {
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if parent != k.cfg.Dir && !below(k.cfg.Dir, parent) {
		return errors.New("its parent resolves to " + parent + ", outside " + k.cfg.Dir)
	}
	return os.RemoveAll(filepath.Join(parent, filepath.Base(p)))
}

// cgroupDirs lists dir and the directories below it, deepest first.
func cgroupDirs(dir string) []string {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs)
	return dirs
}

// members lists the pids in dir and below.
func members(dir string) []int {
	var pids []int
	for _, d := range cgroupDirs(dir) {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// signalCgroup signals every process in dir and below and returns how
// many it found. SIGKILL goes through cgroup.kill where present, which
// also catches processes forked meanwhile.
func signalCgroup(dir string, sig unix.Signal) int { return signalCgroupSparing(dir, sig, nil) }

func signalCgroupSparing(dir string, sig unix.Signal, spare map[int]bool) int {
	pids := members(dir)
	if sig == unix.SIGKILL {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return len(pids)
		}
	}
	for _, pid := range pids {
		if !spare[pid] || sig == unix.SIGKILL {
			unix.Kill(pid, sig)
		}
	}
	return len(pids)
}

// removeCgroup removes dir and what is below it, deepest first, killing
// stragglers and retrying while killed tasks still count as members.
func removeCgroup(dir string) error {
	for _, d := range cgroupDirs(dir) {
		deadline := time.Now().Add(rmdirBudget)
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return &fs.PathError{Op: "rmdir", Path: d, Err: err}
			}
			signalCgroup(d, unix.SIGKILL)
			time.Sleep(stopInterval)
		}
	}
	return nil
}
