//go:build linux

package v1thread

import (
	"errors"
	"fmt"
)

// ErrStranded reports a forking thread that entered an execution's
// directories and could not leave them: it forks nothing until it left.
var ErrStranded = errors.New("v1thread: the forking thread is stuck in a cgroup")

// Mover moves the calling thread into directories and back (Homes).
type Mover interface {
	Enter(dirs []string) []string
	Return(entered []string) error
}

// returnTries bounds the attempts to move the thread back after a fork;
// a move of the thread alone takes microseconds.
const returnTries = 3

// Thread forks children born in cgroup v1 directories. It belongs to
// one OS thread, locked for good: --die-with-parent and Pdeathsig fire
// when the thread that forked a child exits, so that thread must never
// exit while a child lives, and a thread that could not leave an
// execution's directories is not simply ended. It is not safe for
// concurrent use.
type Thread struct {
	mover Mover // nil: nothing is entered
	// stranded lists directories the thread entered and could not
	// leave. While it is not empty the thread forks nothing: a child
	// would be born in another execution's groups, which would count
	// the thread (pids, memory, cpu) and could not be removed.
	stranded []string
}

// NewThread returns the Thread of the calling thread, entering through
// m; a nil m enters nothing.
func NewThread(m Mover) *Thread { return &Thread{mover: m} }

// Fork enters those of dirs it can, calls start (which forks one child
// and returns how to kill it), and leaves them again: the child is born
// in the directories returned, with no move. A start that fails while
// inside (a ceiling the thread filled, such as a tenant's pids at its
// edge) is tried once more from home, entering nothing. When the thread
// cannot leave, the child is killed and Fork fails with ErrStranded, as
// does every later Fork until a try to leave succeeds.
func (t *Thread) Fork(dirs []string, start func() (kill func(), err error)) ([]string, error) {
	if len(t.stranded) > 0 {
		if err := t.mover.Return(t.stranded); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStranded, err)
		}
		t.stranded = nil
	}
	var entered []string
	if t.mover != nil && len(dirs) > 0 {
		entered = t.mover.Enter(dirs)
	}
	kill, err := start()
	if len(entered) == 0 {
		return nil, err
	}
	var back error
	for range returnTries {
		if back = t.mover.Return(entered); back == nil {
			break
		}
	}
	if back != nil {
		t.stranded = entered
		if err == nil {
			kill()
		}
		return nil, fmt.Errorf("%w: after a fork: %w", ErrStranded, back)
	}
	if err != nil {
		_, err = start()
		return nil, err
	}
	return entered, nil
}

// Stranded reports whether the thread sits in directories it could not
// leave; it must then stay locked, and forks nothing until it left.
func (t *Thread) Stranded() bool { return len(t.stranded) > 0 }
