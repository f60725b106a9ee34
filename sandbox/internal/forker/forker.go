//go:build linux

// Package forker runs forks on one goroutine locked to its OS thread.
//
// Pdeathsig and bwrap's --die-with-parent fire when the OS thread that
// forked a child exits, not the process: a child forked from a goroutine
// locked to a thread that later exits dies with that thread. A Forker's
// thread therefore never exits. It runs jobs (Do) while there are some
// and for Config.Idle after, then unlocks the thread, which the runtime
// keeps and may reuse. A thread that is no longer like the runtime's
// others stays locked for good instead, parked until the next job: one
// that forked from a lean mount namespace (its root and working
// directory are its own since), one that could not leave the cgroup v1
// directories it entered (v1thread.Thread.Stranded), and one that
// Config.Setup changed. The thread is never the process's main one:
// /proc/<pid>/fd shows the main thread's descriptor table, which must
// stay the process's.
//
// A job finds the thread's Thread: Fork has a child born in cgroup v1
// directories the thread enters alone before the fork (package
// v1thread), Lean forks from a copy of the mount namespace that keeps
// only the mounts the child resolves (package mountns). Once idle, a
// parked thread lets its lean copies go, so that on a host whose mounts
// are private none keeps busy a filesystem the host unmounted since.
//
// The sandbox's launcher forks its own bwraps on a Forker that ends once
// idle; the keeper forks every child on one it sets up at its start,
// which is kept for good.
//
// The package imports nothing of termgate but the leaf packages
// cgroup/v1thread and mountns.
package forker

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/mountns"
)

// Config configures a Forker.
type Config struct {
	// Mover enters and leaves cgroup v1 directories for the thread; it
	// is called on the thread each time the forker starts (nil:
	// v1thread.Load). Without one the thread enters nothing, and
	// Thread.Fork reports no directory entered.
	Mover func() (v1thread.Mover, error)
	// Lean has the thread fork from lean mount namespaces (Thread.Lean).
	Lean bool
	// Idle is how long the thread waits for a job before it stops (or,
	// kept, lets its lean copies go).
	Idle time.Duration
	// Setup, when set, runs first on the thread, before it prepares
	// anything else; the thread is then kept for good, as Setup may
	// change it (the keeper gives it a descriptor table of its own).
	Setup func()
}

// Forker runs jobs on its one locked thread. Its methods are safe for
// concurrent use; jobs run one at a time.
type Forker struct {
	cfg Config

	mu      sync.Mutex
	pending int  // jobs sent or about to be
	running bool // the goroutine runs
	jobs    chan func(*Thread)
	th      Thread // what the thread keeps between starts
}

// New returns a Forker; its thread starts with the first job.
func New(cfg Config) *Forker {
	if cfg.Mover == nil {
		cfg.Mover = func() (v1thread.Mover, error) { return v1thread.Load() }
	}
	return &Forker{cfg: cfg, jobs: make(chan func(*Thread))}
}

// Do runs job on the forker's thread and returns when it is done.
func (f *Forker) Do(job func(*Thread)) {
	done := make(chan struct{})
	f.mu.Lock()
	f.pending++
	if !f.running {
		f.running = true
		go lockedOffMain(f.loop)
	}
	f.mu.Unlock()
	f.jobs <- func(t *Thread) { defer close(done); job(t) }
	<-done
}

// Running reports whether the forker's goroutine runs, holding its
// thread.
func (f *Forker) Running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// LeanCopies reports how many lean mount namespaces the thread holds;
// ask it of a parked forker.
func (f *Forker) LeanCopies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.th.ns == nil {
		return 0
	}
	return f.th.ns.Copies()
}

// loop serves jobs on the locked thread until Idle passed without one
// and the thread may go back to the runtime.
func (f *Forker) loop() {
	t := f.prepare()
	timer := time.NewTimer(f.cfg.Idle)
	defer timer.Stop()
	for {
		select {
		case job := <-f.jobs:
			job(t)
			f.mu.Lock()
			f.pending--
			f.mu.Unlock()
			timer.Reset(f.cfg.Idle)
		case <-timer.C:
			if f.idle(t) {
				runtime.UnlockOSThread() // home again: the runtime may reuse it
				return
			}
		}
	}
}

// prepare readies the thread for forks: Setup on its first start, the
// lean mount namespaces and the cgroup v1 mover on it.
func (f *Forker) prepare() *Thread {
	t := &f.th
	if f.cfg.Setup != nil && !t.kept {
		f.cfg.Setup()
		t.kept = true
	}
	if f.cfg.Lean && t.ns == nil && t.nsErr == nil {
		t.ns, t.nsErr = mountns.NewThread() // nil: every fork from the thread's namespace
	}
	if m, err := f.cfg.Mover(); err == nil {
		t.v1 = v1thread.NewThread(m)
	} else {
		t.v1 = v1thread.NewThread(nil) // enters nothing: every directory is moved into
	}
	return t
}

// idle handles Idle without a job: it reports whether the goroutine
// ends, handing its thread back; a thread that must stay locks lets its
// lean copies go and parks until the next job.
func (f *Forker) idle(t *Thread) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.pending > 0:
		return false // a job is on its way
	case t.kept || t.pinned || t.v1.Stranded():
		if t.ns != nil {
			t.ns.Release() // under mu, for LeanCopies
		}
		return false
	}
	f.running = false
	return true
}

// lockedOffMain runs f on a goroutine locked to an OS thread other than
// the process's main one; f unlocks it, if ever.
func lockedOffMain(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	// Held by this goroutine, the main thread cannot take the other one.
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		f()
	}()
	<-locked
	runtime.UnlockOSThread()
}
