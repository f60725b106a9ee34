//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"sync"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
)

// ErrUnenforceable reports a requested ceiling that this host cannot
// apply. It is an error, not a warning: an execution must not run without
// a ceiling it asked for.
var ErrUnenforceable = errors.New("sandbox: ceiling cannot be enforced on this host")

// ErrCgroupsInUse reports that another live termgate instance holds the
// cgroup parent: its executions' groups are not left-overs, so nothing is
// swept. Give each instance its own Config.CgroupParent.
var ErrCgroupsInUse = errors.New("sandbox: another termgate instance uses the cgroup parent")

// ErrSweepBeforeAdopt reports a sweep asked for, with a StateDir, before
// Adopt: the keeper's processes would be taken for left-overs.
var ErrSweepBeforeAdopt = errors.New("sandbox: with a state directory, cgroups can be swept only after Adopt")

// ErrSweepAfterStart reports a sweep asked for after the launcher started
// an execution, whose groups a sweep would take for left-overs.
var ErrSweepAfterStart = errors.New("sandbox: cgroups can be swept only before the first start")

// CgroupInfo says what the host can enforce through cgroups; verify prints it.
type CgroupInfo = cgroup.Info

// CgroupSweep says what SweepCgroups found left by a previous instance.
type CgroupSweep = cgroup.SweepResult

// SweepCgroups removes what a previous instance left under the cgroup
// parent (Config.CgroupParent) in every hierarchy: it kills what still
// runs there, then removes the directories, deepest first, logging each
// one. The parent itself, the hierarchies' roots and anything outside the
// parent are never touched.
//
// Call it once at startup, before the first Start: afterwards it fails
// with ErrSweepAfterStart. With a StateDir, call it after Adopt (before,
// it fails with ErrSweepBeforeAdopt): the adopted processes' cgroups, and
// their tenants' directories above them, are never swept, and a Start that comes during a sweep waits
// for it. While another live launcher (in any process) holds the same
// parent, it fails with ErrCgroupsInUse and removes nothing. A partial
// sweep returns what it removed along with the error.
func (l *Launcher) SweepCgroups() (CgroupSweep, error) {
	l.cgGuard.mu.Lock()
	defer l.cgGuard.mu.Unlock()
	if l.cgGuard.started {
		return CgroupSweep{}, ErrSweepAfterStart
	}
	if l.keeper != nil && !l.cgGuard.adopted {
		return CgroupSweep{}, ErrSweepBeforeAdopt
	}
	if err := l.cgLock.Exclusive(); err != nil {
		return CgroupSweep{}, fromCgroup(err)
	}
	res, err := l.cgroups.Sweep(l.cgLock, l.cgGuard.kept, l.log)
	return res, fromCgroup(errors.Join(err, l.cgLock.Shared()))
}

// cgroupGuard orders a sweep before every start and after the adoption:
// once an execution asked for its group, the sweep refuses; a start waits
// for a sweep under way; the adopted processes' groups are kept.
type cgroupGuard struct {
	mu      sync.Mutex
	started bool
	adopted bool
	kept    []string // the adopted processes' cgroup directories
}

// markAdopted records that Adopt ran: the sweep may go on, sparing kept.
func (g *cgroupGuard) markAdopted() {
	g.mu.Lock()
	g.adopted = true
	g.mu.Unlock()
}

// keep spares an adopted process's cgroup directories from the sweep.
func (g *cgroupGuard) keep(dirs []string) {
	g.mu.Lock()
	g.kept = append(g.kept, dirs...)
	g.mu.Unlock()
}

// markStarted records that the launcher makes groups from now on.
func (g *cgroupGuard) markStarted() {
	g.mu.Lock()
	g.started = true
	g.mu.Unlock()
}

// tenantLimits turns Config.TenantLimits into the ceilings of a tenant's
// cgroup. Only cgroup ceilings can bound a tenant as a whole: an rlimit
// is per process, so asking for one here is an error, not a no-op.
func tenantLimits(l Limits) (cgroup.Limits, error) {
	lim := cgroup.Limits{MemoryBytes: l.Memory, Pids: l.Pids, CPUWeight: l.CPUWeight}
	switch {
	case l.CPUSeconds != 0 || l.AddressSpace != 0 || l.FileSize != 0 || l.OpenFiles != 0:
		return lim, errors.New("only memory, pids and cpu weight apply to a tenant")
	case l.Memory < 0 || l.Memory != 0 && l.Memory < minMemory:
		return lim, fmt.Errorf("memory %d is below the minimum %d", l.Memory, minMemory)
	case l.Pids < 0 || l.Pids != 0 && l.Pids < minPids:
		return lim, fmt.Errorf("pids %d is below the minimum %d", l.Pids, minPids)
	}
	return lim, lim.Validate()
}

// fromCgroup gives an error of the cgroup package the sentinel of this
// package that callers test for (ErrUnenforceable, ErrCgroupsInUse). Its
// text stays as it is: it names what could not be done, and clients may
// see it.
func fromCgroup(err error) error {
	switch {
	case errors.Is(err, cgroup.ErrUnenforceable):
		return sentinelError{err, ErrUnenforceable}
	case errors.Is(err, cgroup.ErrInUse):
		return sentinelError{err, ErrCgroupsInUse}
	}
	return err
}

// sentinelError is err, which errors.Is also finds to be is.
type sentinelError struct{ err, is error }

func (e sentinelError) Error() string   { return e.err.Error() }
func (e sentinelError) Unwrap() []error { return []error{e.err, e.is} }

// aheadCgroup is an execution's cgroup being made while the rest of its
// start is prepared (Launcher.cgroupAhead).
type aheadCgroup struct {
	done chan struct{}
	cg   *cgroup.Group
	err  error
}

// cgroupAhead starts making p's cgroup. Its directories are the slowest
// part of a start before the fork (a v1 memory group alone takes the
// kernel about 0.1 ms), and nothing the start prepares meanwhile (the
// plan, its descriptors, the terminal) depends on them. The caller owns
// the goroutine: it ends every start with take or drop, which wait for it.
func (l *Launcher) cgroupAhead(p Policy) *aheadCgroup {
	a := &aheadCgroup{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.cg, a.err = l.newCgroup(p)
	}()
	return a
}

// take returns the cgroup once made.
func (a *aheadCgroup) take() (*cgroup.Group, error) {
	<-a.done
	return a.cg, a.err
}

// drop removes the cgroup of a start that failed before taking it.
func (a *aheadCgroup) drop() {
	<-a.done
	removeCgroup(a.cg)
}

// removeCgroup removes cg, if the execution has one, after a failed start.
func removeCgroup(cg *cgroup.Group) {
	if cg != nil {
		cg.Remove()
	}
}
