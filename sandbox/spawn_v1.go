//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/mountns"
)

// launcherForker forks the launcher's own bwraps that are to be born in
// cgroup v1 directories or may start from a lean mount namespace.
var launcherForker = &v1Forker{
	mover: func() (v1thread.Mover, error) { return v1thread.Load() },
	idle:  100 * time.Millisecond,
	lean:  true,
}

// v1Forker runs forks on one goroutine locked to its thread, which
// enters the execution's v1 directories before each fork and leaves
// them after (v1thread.Thread). It runs while there is work and for idle
// after: it then unlocks its thread, which the runtime keeps (children
// forked on it die when it exits). A thread that could not leave an
// execution's directories stays locked for good, forking nothing; the
// spawns fall back to a fork on their own thread and a move. With lean,
// the thread forks the spawns that list what they resolve from lean
// mount namespaces (mountns); a thread that did stays locked for good,
// as its root and working directory are no longer shared.
type v1Forker struct {
	mover func() (v1thread.Mover, error) // the calling thread's, called on the locked thread
	idle  time.Duration
	lean  bool
	ns    *mountns.Thread // the thread's, once locked: nil where it cannot be
	// pinned: the thread forked from a lean namespace, so it is no
	// longer like the runtime's others.
	pinned bool

	mu      sync.Mutex
	pending int  // jobs sent or about to be
	running bool // the goroutine runs
	jobs    chan func(*v1thread.Thread)
}

// spawn forks req's bwrap on the forker's thread, born in those of
// req.enter it could enter.
func (f *v1Forker) spawn(req spawnRequest) (spawned, error) {
	var child execChild
	var entered []string
	var err error
	f.do(func(t *v1thread.Thread) {
		entered, err = t.Fork(req.enter, func() (func(), error) {
			var serr error
			child, serr = startPlaced(req, f.from)
			c := child
			return func() { c.proc.Kill(); c.proc.Wait() }, serr
		})
	})
	switch {
	case errors.Is(err, v1thread.ErrStranded):
		// Never from a thread inside an execution's groups: from the
		// caller's, moved into every v1 directory.
		return startPlaced(req, fromHost)
	case err != nil:
		return nil, err
	}
	child.placed = append(child.placed, entered...)
	return child, nil
}

// from forks from a lean mount namespace that keeps what resolves needs,
// when it lists anything and the thread can, else from the host's.
func (f *v1Forker) from(resolves []string, fork func() error) error {
	if f.ns == nil || len(resolves) == 0 {
		return fork()
	}
	f.pinned = true
	_, err := f.ns.Fork(resolves, fork)
	if errors.Is(err, mountns.ErrStuck) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// do runs job on the forker's thread and returns when it is done.
func (f *v1Forker) do(job func(*v1thread.Thread)) {
	done := make(chan struct{})
	f.mu.Lock()
	f.pending++
	if !f.running {
		f.running = true
		if f.jobs == nil {
			f.jobs = make(chan func(*v1thread.Thread))
		}
		go f.loop(f.jobs)
	}
	f.mu.Unlock()
	f.jobs <- func(t *v1thread.Thread) { defer close(done); job(t) }
	<-done
}

// loop serves jobs on a locked thread until idle passed without one.
func (f *v1Forker) loop(jobs <-chan func(*v1thread.Thread)) {
	runtime.LockOSThread()
	if f.lean && f.ns == nil {
		f.ns, _ = mountns.NewThread() // nil: every fork from the host's namespace
	}
	var t *v1thread.Thread
	if m, err := f.mover(); err == nil {
		t = v1thread.NewThread(m)
	} else {
		t = v1thread.NewThread(nil) // enters nothing: every directory is moved into
	}
	timer := time.NewTimer(f.idle)
	defer timer.Stop()
	for {
		select {
		case job := <-jobs:
			job(t)
			f.mu.Lock()
			f.pending--
			f.mu.Unlock()
			timer.Reset(f.idle)
		case <-timer.C:
			f.mu.Lock()
			if f.pending > 0 {
				f.mu.Unlock()
				timer.Reset(f.idle)
				continue
			}
			if t.Stranded() || f.pinned {
				if f.ns != nil {
					f.ns.Release() // under mu, for TestForkerLean to look
				}
				f.mu.Unlock()
				continue // parked, locked, until the next job
			}
			f.running = false
			f.mu.Unlock()
			runtime.UnlockOSThread() // home again: the runtime may reuse it
			return
		}
	}
}
