//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/forker"
	"github.com/termgate/termgate/sandbox/internal/mountns"
)

// launcherForker forks the launcher's own bwraps that are to be born in
// cgroup v1 directories or may start from a lean mount namespace. Its
// thread runs while there is work and 100ms after; one that forked from
// a lean namespace, or could not leave an execution's directories, stays
// locked for good (package forker).
var launcherForker = forker.New(forker.Config{Idle: 100 * time.Millisecond, Lean: true})

// spawnOn forks req's bwrap on f's thread, born in those of req.enter it
// could enter, in req.netns when set. Where the thread could not leave
// an earlier execution's directories, bwrap is forked on the caller's
// thread instead, and moved into every v1 directory; one with a network
// namespace to be born in then fails, since only a locked thread may
// enter one.
func spawnOn(f *forker.Forker, req spawnRequest) (spawned, error) {
	var child execChild
	var entered []string
	var err error
	f.Do(func(t *forker.Thread) {
		entered, err = t.Fork(req.enter, func() (func(), error) {
			var serr error
			child, serr = startPlaced(req, inNetNS(t, req.netns, leanFrom(t)))
			c := child
			return func() { c.proc.Kill(); c.proc.Wait() }, serr
		})
	})
	switch {
	case errors.Is(err, v1thread.ErrStranded) && req.netns != nil:
		return nil, fmt.Errorf("%w: start bwrap in its network namespace: %w", ErrUnavailable, err)
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

// inNetNS has from fork with t in the network namespace netns, when set.
func inNetNS(t *forker.Thread, netns *os.File, from forkFrom) forkFrom {
	if netns == nil {
		return from
	}
	return func(resolves []string, fork func() error) error {
		err := from(resolves, func() error { return t.InNetNS(int(netns.Fd()), fork) })
		if errors.Is(err, forker.ErrNetNSStuck) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
}

// leanFrom forks from a lean mount namespace of t's that keeps what
// resolves needs, when it lists anything and t can, else from the
// host's.
func leanFrom(t *forker.Thread) forkFrom {
	return func(resolves []string, fork func() error) error {
		_, err := t.Lean(resolves, fork)
		if errors.Is(err, mountns.ErrStuck) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
}
