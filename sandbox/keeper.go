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

// What a spawn of the largest valid policy asks of the keeper. The
// keeper's limits are set from these figures with room to spare; the
// arrays below stop compiling when the limits fall short of them.
const (
	// bwrapOwnArgs are bwrap's arguments besides the command's: its
	// name, --args and the descriptor, "--" and the init.
	bwrapOwnArgs = 5
	// maxSpawnFiles are bwrap's descriptors: stdio, the init's control
	// socket and the --args pipe (firstFileFD of them), the workspace and
	// every bind, the init and the seccomp program, the data files
	// (passwd, group, hostname, hosts, resolv.conf) and the copied /etc
	// files.
	maxSpawnFiles = firstFileFD + 1 + maxBinds + 2 + 5 + len(etcEntries)
	// maxSpawnHeld are the parent ends the keeper holds (pipes: stdin,
	// stdout, stderr, the init's control socket).
	maxSpawnHeld = 4
)

var (
	_ [keeper.MaxFiles - maxSpawnFiles - maxSpawnHeld - 1]struct{} // and the arguments' own descriptor
	_ [keeper.MaxArgs - maxArgs - bwrapOwnArgs]struct{}
	_ [keeper.MaxArgBytes - maxArgBytes - maxPathBytes - 64]struct{} // bwrap's own: the init's path, a few words
)

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
	dir      string
	start    func() error
	detached chan struct{} // closed by Detach
	once     sync.Once

	cmu    sync.Mutex
	client *keeper.Client // the current keeper's; replaced once it is lost

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
	return &keeperState{dir: dir, start: start, client: c, detached: make(chan struct{}), procs: map[string]*Process{}}, nil
}

// conn returns the current keeper's client.
func (k *keeperState) conn() *keeper.Client {
	k.cmu.Lock()
	defer k.cmu.Unlock()
	return k.client
}

// forNew returns the client new processes start on. Once the keeper was
// lost (it died, and its processes with it), it starts and dials a new
// one: the processes of the old stay lost, new ones start on the new.
func (k *keeperState) forNew(ctx context.Context) (*keeper.Client, error) {
	k.cmu.Lock()
	defer k.cmu.Unlock()
	select {
	case <-k.client.Lost():
	default:
		return k.client, nil
	}
	select {
	case <-k.detached:
		return k.client, nil // let go: the next launcher dials its own
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, keeperDialTimeout)
	defer cancel()
	c, err := keeper.Dial(ctx, k.dir, k.start)
	if err != nil {
		return nil, fmt.Errorf("keeper at %s: %w", k.dir, err)
	}
	k.client = c
	return c, nil
}

// keeperOf returns the client of the keeper p runs on.
func (l *Launcher) keeperOf(p *Process) *keeper.Client {
	if c, ok := p.child.(*keeperChild); ok {
		return c.c
	}
	return l.keeper.conn()
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

// forget drops a process that never reached its caller (its start
// failed), here and in the keeper, which then closes what it held. A
// keeper that is gone has nothing to drop.
func (l *Launcher) forget(p *Process) {
	if l.keeper == nil {
		return
	}
	l.untrack(p)
	if err := l.keeperOf(p).Forget(p.policy.Key); err != nil && !errors.Is(err, keeper.ErrLost) {
		l.log.Warn("keeper: forget an execution", "key", p.policy.Key, "err", err)
	}
}

// untrack drops p from the processes Detach waits for.
func (l *Launcher) untrack(p *Process) {
	l.keeper.mu.Lock()
	if l.keeper.procs[p.policy.Key] == p {
		delete(l.keeper.procs, p.policy.Key)
	}
	l.keeper.mu.Unlock()
}

// keepExit leaves p's final exit with the keeper, in its notes, until
// Release: a later launcher adopts the ended process and reports that
// exit again, exactly. Without it (the keeper was lost, or this launcher
// died first) the later launcher rebuilds the exit from the wait status.
func (l *Launcher) keepExit(p *Process) {
	if l.keeper == nil {
		return
	}
	l.untrack(p)
	if p.exit.Lost {
		return
	}
	exit := p.exit
	l.annotate(p, "keep an exit", func() bool {
		p.keptExit = &exit
		return true
	})
}

// keepCommandExit leaves the wait status of p's command with the keeper,
// in its notes, before the launcher ends the sandbox the command left:
// bwrap then reports the kill (128+SIGKILL), not the command's end. A
// later launcher that adopts the ended process without its final exit
// (this one died first) reports the command's status instead. Once the
// final exit is kept, there is nothing to add.
func (l *Launcher) keepCommandExit(p *Process, ws unix.WaitStatus) {
	if l.keeper == nil {
		return
	}
	l.annotate(p, "keep a command's status", func() bool {
		if p.keptExit != nil {
			return false
		}
		p.keptCommand = &ws
		return true
	})
}

// annotate replaces p's notes with the keeper once note changed what they
// keep (it reports whether it did). It holds p.keptMu until the keeper
// answered, so that notes reach it in the order they were made.
func (l *Launcher) annotate(p *Process, what string, note func() bool) {
	p.keptMu.Lock()
	defer p.keptMu.Unlock()
	if !note() {
		return
	}
	if err := l.keeperOf(p).Annotate(p.policy.Key, p.meta()); err != nil && !errors.Is(err, keeper.ErrLost) {
		l.log.Warn("keeper: "+what, "key", p.policy.Key, "err", err)
	}
}

// ErrStillRunning is returned by Release before the process ended.
var ErrStillRunning = errors.New("sandbox: process has not ended")

// Release says that the caller has recorded the process's exit. With a
// StateDir, the keeper keeps an ended process (its wait status, its
// descriptors and its Exit) until Release: a launcher that dies between
// Wait and its caller's record leaves the process to the next launcher,
// whose Adopt reports it again with the same Exit. Call it once the exit
// is safe; a caller that never does leaves each ended process with the
// keeper, where it counts against its limit of children until the
// keeper ends. Release before Wait returned fails with ErrStillRunning; a
// detached process is left to the next launcher. Without a StateDir it
// does nothing. Release is idempotent.
func (p *Process) Release() error {
	select {
	case <-p.done:
	default:
		return ErrStillRunning
	}
	if p.l.keeper == nil || p.exit.Detached {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return nil
	}
	err := p.l.keeperOf(p).Forget(p.policy.Key)
	if errors.Is(err, keeper.ErrLost) || errors.Is(err, keeper.ErrUnknown) {
		err = nil // gone with the keeper, or released by the launcher (Adopt)
	}
	if err != nil {
		return fmt.Errorf("sandbox: release %s: %w", p.policy.Key, err)
	}
	p.released = true
	return nil
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
	c, err := s.k.forNew(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: start bwrap through the keeper: %w", ErrUnavailable, err)
	}
	sp, err := c.Spawn(ctx, keeper.SpawnRequest{
		Key: req.key, Path: req.path, Args: req.args, Env: []string{}, Dir: "/", Cred: req.cred,
		Files: req.files, Held: req.held, Cgroups: req.cgroups, Into: req.cgroup, Enter: req.enter, Remove: req.remove, Meta: req.meta,
		Supervised: true, // bwrap and its pid 1: SIGTERM goes to the command
		Resolves:   req.resolves, NetNS: req.netns,
	})
	switch {
	case errors.Is(err, keeper.ErrExists):
		return nil, fmt.Errorf("%w: key %q is in use", ErrInvalidPolicy, req.key)
	case err != nil:
		return nil, fmt.Errorf("%w: start bwrap through the keeper: %w", ErrUnavailable, err)
	}
	child := newKeeperChild(s.k, c, req.key, sp.Pid)
	if sp.Placed {
		child.placed = append(child.placed, req.cgroup)
	}
	child.placed = append(child.placed, sp.Entered...)
	return child, nil
}

// keeperChild is bwrap as the keeper's child. A pidfd, opened while bwrap
// cannot have exited yet (blocked on its arguments) or, when adopted,
// while the keeper had not reaped it, keeps kill from reaching a reused pid.
type keeperChild struct {
	k   *keeperState
	c   *keeper.Client // of the keeper it runs on
	key string
	p   int
	// placed are the cgroup directories the keeper forked bwrap into
	// (its cgroup2 one) or in (v1 ones its forking thread entered): the
	// launcher moves it into the others.
	placed []string

	mu       sync.Mutex
	pidfd    int    // -1 once closed or when unavailable
	onDetach func() // set by onExit: ends its wait as detached
}

func newKeeperChild(k *keeperState, c *keeper.Client, key string, pid int) *keeperChild {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1
	}
	return &keeperChild{k: k, c: c, key: key, p: pid, pidfd: fd}
}

func (c *keeperChild) pid() int { return c.p }

func (c *keeperChild) born() []string { return c.placed }

func (c *keeperChild) kill() { c.signal(unix.SIGKILL) }

// signal sends sig through the pidfd; without one (a kernel before 5.3)
// nothing is sent, as the keeper, not us, may reap the pid meanwhile.
func (c *keeperChild) signal(sig unix.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pidfd >= 0 && unix.PidfdSendSignal(c.pidfd, sig, nil, 0) == nil
}

// wait takes the status the keeper reaped. A channel closed without one
// means the keeper is gone, or the launcher detached.
func (c *keeperChild) wait() (unix.WaitStatus, bool, error) {
	var ws unix.WaitStatus
	var ok bool
	select {
	case ws, ok = <-c.c.Exit(c.key):
	case <-c.k.detached:
		return 0, false, errDetached
	}
	return c.ended(ws, ok)
}

// onExit hands done what wait returns, from the keeper's report of the
// exit (keeper.Client.OnExit): no goroutine waits meanwhile. Detach ends
// the wait early (detach).
func (c *keeperChild) onExit(done func(unix.WaitStatus, bool, error)) {
	cancel := c.c.OnExit(c.key, func(ws unix.WaitStatus, ok bool) { done(c.ended(ws, ok)) })
	c.mu.Lock()
	c.onDetach = func() {
		if cancel() {
			go done(0, false, errDetached)
		}
	}
	c.mu.Unlock()
	select {
	case <-c.k.detached: // Detach may have passed this child already
		c.detach()
	default:
	}
}

// detach ends an onExit's wait with errDetached, unless the exit came
// first; Launcher.Detach calls it once it closed k.detached.
func (c *keeperChild) detach() {
	c.mu.Lock()
	onDetach := c.onDetach
	c.mu.Unlock()
	if onDetach != nil {
		onDetach()
	}
}

// ended is wait's result for the keeper's report: the status, or
// (closed without one) lost, unless the launcher detached.
func (c *keeperChild) ended(ws unix.WaitStatus, ok bool) (unix.WaitStatus, bool, error) {
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
