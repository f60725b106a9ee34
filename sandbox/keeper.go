//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/internal/keeper"
	"golang.org/x/sys/unix"
)

// errDetached ends the wait of a process the launcher let go (Detach).
var errDetached = errors.New("sandbox: detached")

// keeperDialTimeout bounds how long NewLauncher waits for the keeper,
// started or not.
const keeperDialTimeout = 15 * time.Second

// ServeKeeper is the main loop of the keeper process of cfg.StateDir, the
// parent of every sandbox of the launchers that use it, which therefore
// outlive them: `termgate keeper` runs it, and Config.StartKeeper starts
// that, detached. It stops every process after cfg.OrphanGrace without a
// launcher (keeper.DefaultOrphanGrace when zero), as a cancel would
// (SIGTERM, cfg.KillGrace, SIGKILL), and it returns then, or once it has
// neither processes nor a launcher for a few seconds. Call it at most
// once per process.
func ServeKeeper(ctx context.Context, cfg Config) error {
	if cfg.StateDir == "" {
		return errors.New("sandbox: keeper: no state directory")
	}
	if cfg.OrphanGrace < 0 {
		return fmt.Errorf("sandbox: keeper: negative orphan grace %s", cfg.OrphanGrace)
	}
	return keeper.Serve(ctx, keeper.Config{Dir: cfg.StateDir, OrphanGrace: cfg.OrphanGrace, KillGrace: cfg.KillGrace, Logger: cfg.Logger})
}

// keeperState is what a launcher with a StateDir keeps of the keeper and
// of the processes it forked there, by Policy.Key.
type keeperState struct {
	client   *keeper.Client
	detached chan struct{} // closed by Detach
	once     sync.Once

	mu    sync.Mutex
	procs map[string]*Process
}

// dialKeeper connects to the keeper of dir, starting it when none listens.
func dialKeeper(dir string, start func() error) (*keeperState, error) {
	if start == nil {
		start = func() error { return errors.New("no keeper listens and Config.StartKeeper is nil") }
	}
	ctx, cancel := context.WithTimeout(context.Background(), keeperDialTimeout)
	defer cancel()
	c, err := keeper.Dial(ctx, dir, start)
	if err != nil {
		return nil, fmt.Errorf("%w: keeper at %s: %w", ErrUnavailable, dir, err)
	}
	return &keeperState{client: c, detached: make(chan struct{}), procs: map[string]*Process{}}, nil
}

// track registers proc with the keeper's processes; without a keeper it
// does nothing.
func (l *Launcher) track(proc *Process) {
	if l.keeper != nil {
		l.keeper.mu.Lock()
		l.keeper.procs[proc.policy.Key] = proc
		l.keeper.mu.Unlock()
	}
}

// forget drops a process whose exit is final, here and in the keeper,
// which then closes what it held. A keeper that is gone has nothing to drop.
func (l *Launcher) forget(p *Process) {
	if l.keeper == nil {
		return
	}
	l.keeper.mu.Lock()
	if l.keeper.procs[p.policy.Key] == p {
		delete(l.keeper.procs, p.policy.Key)
	}
	l.keeper.mu.Unlock()
	if err := l.keeper.client.Forget(p.policy.Key); err != nil && !errors.Is(err, keeper.ErrLost) {
		l.log.Warn("keeper: forget an execution", "key", p.policy.Key, "err", err)
	}
}

// executionDir is the state of execution key, under the StateDir, which
// the keeper removes with the execution when it stops it as an orphan.
func (l *Launcher) executionDir(key string) string {
	return filepath.Join(l.cfg.StateDir, "executions", key)
}

// keeperSpawner forks bwrap through the keeper: bwrap is the keeper's
// child, and outlives the launcher.
type keeperSpawner struct{ k *keeperState }

func (s keeperSpawner) spawn(ctx context.Context, req spawnRequest) (spawned, error) {
	// The client sends the descriptors without os.File.Fd: req.held, read
	// through the poller, stays non-blocking.
	pid, err := s.k.client.Spawn(ctx, keeper.SpawnRequest{
		Key: req.key, Path: req.path, Args: req.args, Env: []string{}, Dir: "/", Cred: req.cred,
		Files: req.files, Held: req.held, Cgroups: req.cgroups, Remove: req.remove, Meta: req.meta,
	})
	switch {
	case errors.Is(err, keeper.ErrExists):
		return nil, fmt.Errorf("%w: key %q is in use", ErrInvalidPolicy, req.key)
	case err != nil:
		return nil, fmt.Errorf("%w: start bwrap through the keeper: %w", ErrUnavailable, err)
	}
	return newKeeperChild(s.k, req.key, pid), nil
}

// keeperChild is bwrap as the keeper's child. A pidfd, opened while bwrap
// cannot have exited yet (blocked on its arguments) or, when adopted,
// while the keeper had not reaped it, keeps kill from reaching a reused pid.
type keeperChild struct {
	k    *keeperState
	key  string
	p    int
	exit <-chan unix.WaitStatus

	mu    sync.Mutex
	pidfd int // -1 once closed or when unavailable
}

func newKeeperChild(k *keeperState, key string, pid int) *keeperChild {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1
	}
	return &keeperChild{k: k, key: key, p: pid, exit: k.client.Exit(key), pidfd: fd}
}

func (c *keeperChild) pid() int { return c.p }

func (c *keeperChild) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pidfd >= 0 {
		unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
	}
}

// wait takes the status the keeper reaped. A channel closed without one
// means the keeper is gone, or the launcher detached.
func (c *keeperChild) wait() (unix.WaitStatus, bool, error) {
	var ws unix.WaitStatus
	var ok bool
	select {
	case ws, ok = <-c.exit:
	case <-c.k.detached:
		return 0, false, errDetached
	}
	c.mu.Lock()
	if c.pidfd >= 0 {
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	c.mu.Unlock()
	if !ok {
		select {
		case <-c.k.detached:
			return 0, false, errDetached
		default:
		}
		return 0, true, nil
	}
	return ws, false, nil
}
