//go:build linux

package forker

import (
	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/mountns"
)

// Thread is the forker's thread as its jobs see it. Only a job may use
// it, on the thread.
type Thread struct {
	v1    *v1thread.Thread
	ns    *mountns.Thread // nil: no lean forks, nsErr says why
	nsErr error
	// pinned: the thread forked from a lean namespace, so its root and
	// working directory are no longer the runtime's others'.
	pinned bool
	kept   bool // Config.Setup ran on it
}

// Fork enters those of dirs it can, calls start (which forks one child
// and returns how to kill it), and leaves them again; the child is born
// in the directories returned. A thread that cannot leave kills the
// child and fails with v1thread.ErrStranded, as it does every later Fork
// until it left (see v1thread.Thread.Fork).
func (t *Thread) Fork(dirs []string, start func() (kill func(), err error)) ([]string, error) {
	return t.v1.Fork(dirs, start)
}

// Lean runs fork from a lean mount namespace that keeps what resolves
// needs, when it lists anything and the thread can make one, else from
// the thread's own namespace; it reports which. Its errors are fork's or
// mountns's (mountns.ErrStuck: the thread could not return to the host's
// namespace).
func (t *Thread) Lean(resolves []string, fork func() error) (bool, error) {
	if t.ns == nil || len(resolves) == 0 {
		return false, fork()
	}
	t.pinned = true
	return t.ns.Fork(resolves, fork)
}

// LeanErr says why the thread forks from its own mount namespace alone;
// nil when it can make lean ones, or was not asked to (Config.Lean).
func (t *Thread) LeanErr() error { return t.nsErr }
