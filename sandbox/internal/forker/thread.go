//go:build linux

package forker

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

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
	// netStuck: the thread entered a network namespace (InNetNS) and
	// could not return; it forks nothing more.
	netStuck error
}

// ErrNetNSStuck reports a thread that entered a network namespace for a
// fork and could not return to its own: it forks nothing more, since a
// child would be born in that namespace.
var ErrNetNSStuck = errors.New("forker: the thread could not return to its network namespace")

// InNetNS calls fork with the thread in the network namespace netns (an
// nsfs descriptor), so that the child is born there, then returns the
// thread to its own; netns -1 calls fork where the thread is. A thread
// that cannot return fails this call and every later one with
// ErrNetNSStuck (the child forked stays), and is kept locked for good.
// Entering needs CAP_SYS_ADMIN.
func (t *Thread) InNetNS(netns int, fork func() error) error {
	if t.netStuck != nil {
		return t.netStuck
	}
	if netns < 0 {
		return fork()
	}
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("forker: the thread's network namespace: %w", err)
	}
	defer unix.Close(own)
	if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("forker: enter the network namespace: %w", err)
	}
	err = fork()
	if rerr := unix.Setns(own, unix.CLONE_NEWNET); rerr != nil {
		t.pinned = true
		t.netStuck = fmt.Errorf("%w: %w", ErrNetNSStuck, rerr)
		return errors.Join(err, t.netStuck)
	}
	return err
}

// Fork enters those of dirs it can, calls start (which forks one child
// and returns how to kill it), and leaves them again; the child is born
// in the directories returned. A thread that cannot leave kills the
// child and fails with v1thread.ErrStranded, as it does every later Fork
// until it left (see v1thread.Thread.Fork).
func (t *Thread) Fork(dirs []string, start func() (kill func(), err error)) ([]string, error) {
	if t.netStuck != nil {
		return nil, t.netStuck
	}
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
