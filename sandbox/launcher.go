//go:build linux

package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
	"github.com/termgate/termgate/sandbox/internal/procevents"
	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
)

// DefaultKillGrace is how long a stopped process has between SIGTERM and SIGKILL.
const DefaultKillGrace = 2 * time.Second

// Config configures a Launcher. The zero value is usable.
type Config struct {
	// Bwrap is the bwrap program, looked up in PATH ("bwrap").
	Bwrap string
	// UID and GID are the host identity bwrap runs as when termgate runs as
	// root (DefaultUID, DefaultGID). Ignored otherwise: bwrap then runs as
	// termgate's own user.
	UID, GID uint32
	// TenantUIDs are the host ids a Policy may ask for (Policy.UID, GID)
	// when termgate runs as root (DefaultTenantUIDs). They may hold neither
	// 0, 65534 nor UID or GID.
	TenantUIDs UIDRange
	// CgroupRoot is where the cgroup hierarchies are mounted ("/sys/fs/cgroup").
	CgroupRoot string
	// CgroupParent is the directory, in every hierarchy, under which this
	// launcher makes its cgroups ("termgate"): one path element. It belongs
	// to one instance at a time; SweepCgroups removes whatever else it
	// finds there.
	CgroupParent string
	// TenantLimits are the ceilings of each tenant as a whole, over all
	// its executions (Policy.Tenant): Memory, Pids and CPUWeight, applied
	// to a cgroup per tenant above its executions' own. Zero fields mean
	// none; other fields are an error. Executions without a tenant are
	// not bound by them.
	TenantLimits Limits
	// KillGrace is the time between SIGTERM and SIGKILL (DefaultKillGrace).
	KillGrace time.Duration
	// Logger receives operational events; nil discards them.
	Logger *slog.Logger
	// StateDir, when set, is the state directory of a keeper process that
	// forks every sandbox instead of the launcher, so that they outlive
	// it: a later launcher on the same StateDir adopts them (Adopt). The
	// launcher checks it first (CheckStateDir: NewLauncher fails with
	// ErrStateDir at once), then dials the keeper at StateDir/keeper.sock,
	// calling StartKeeper when none listens. StateDir/executions/<Policy.Key> is
	// the execution's own: the keeper removes it when it stops the
	// execution as an orphan. Every Policy then needs a Key. Empty: the
	// launcher forks the sandboxes itself and they die with it.
	StateDir string
	// StartKeeper starts the keeper of StateDir, detached, when none
	// listens: a process that calls ServeKeeper with this Config. It may
	// return before the keeper listens; the launcher keeps dialling.
	StartKeeper func() error
	// OrphanGrace is how long the keeper lets executions run with no
	// launcher attached before it stops them (keeper's default, 10m);
	// ServeKeeper uses it, StartKeeper passes it on.
	OrphanGrace time.Duration
	// PidsFallback lets a host without a pids cgroup controller enforce
	// Limits.Pids as RLIMIT_NPROC instead (see rlimits): a degraded mode
	// the operator asks for, reported by Probe. Tenant pids ceilings
	// still need the controller. Ignored where the controller exists.
	PidsFallback bool
}

// Launcher starts sandboxed processes. It is safe for concurrent use.
type Launcher struct {
	cfg      Config
	log      *slog.Logger
	bwrap    string
	version  string
	id       identity
	layout   hostLayout
	cgroups  *cgroup.Host
	tenants  *cgroup.Tenants
	cgLock   *cgroup.Lock
	cgGuard  cgroupGuard
	events   *procevents.Watcher // nil without process events: exits are then inexact
	eventErr error
	dropInit func() // removes the copy of the init, if one was made
	spawner  spawner
	keeper   *keeperState // nil without a StateDir
	nets     netAhead     // the networks of sandboxes with Listen or Redirect, made ahead

	closeOnce sync.Once
}

// NewLauncher checks the host and returns a launcher, or an error wrapping
// ErrUnavailable or ErrIdentity. It runs nothing in a sandbox: Probe does.
func NewLauncher(cfg Config) (*Launcher, error) {
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = cgroup.DefaultParent
	}
	if err := cgroup.ValidateName(cfg.CgroupParent); err != nil {
		return nil, fmt.Errorf("sandbox: config: cgroup parent: %w", err)
	}
	tenantLim, err := tenantLimits(cfg.TenantLimits)
	if err != nil {
		return nil, fmt.Errorf("sandbox: config: tenant limits: %w", err)
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.OrphanGrace < 0 {
		return nil, fmt.Errorf("sandbox: config: negative orphan grace %s", cfg.OrphanGrace)
	}
	l := &Launcher{cfg: cfg, log: cfg.Logger, spawner: execSpawner{}}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.bwrap, l.version, err = findBwrap(cfg.Bwrap); err != nil {
		return nil, err
	}
	if l.id, err = chooseIdentity(cfg.UID, cfg.GID); err != nil {
		return nil, err
	}
	if err := checkRootCaps(); err != nil {
		return nil, err
	}
	if l.cfg.TenantUIDs, err = tenantRange(cfg.TenantUIDs, l.id); err != nil {
		return nil, err
	}
	l.id.tenants, l.id.shared = l.cfg.TenantUIDs, l.id.uid
	if l.layout, err = detectLayout(); err != nil {
		return nil, err
	}
	if l.layout.mode, err = chooseMode(l.bwrap, l.id); err != nil {
		return nil, err
	}
	l.layout.id = l.id
	if l.layout.init, l.dropInit, err = l.id.prepareInit(l.log); err != nil {
		return nil, err
	}
	l.layout.landlock = sandboxinit.LandlockAvailable()
	l.cgroups = cgroup.Detect(cfg.CgroupRoot, cfg.CgroupParent)
	l.layout.nprocPids = cfg.PidsFallback && !l.cgroups.Info().Pids
	l.tenants = cgroup.NewTenants(l.cgroups, tenantLim)
	if l.cgLock, err = l.cgroups.LockParents(); err != nil {
		l.dropInit()
		return nil, fmt.Errorf("sandbox: %w", fromCgroup(err))
	}
	if cfg.StateDir != "" {
		if l.keeper, err = dialKeeper(cfg.StateDir, cfg.StartKeeper); err != nil {
			l.dropInit()
			l.cgLock.Close()
			return nil, err
		}
		l.spawner = keeperSpawner{l.keeper}
	}
	l.startEvents()
	return l, nil
}

// startEvents subscribes to process events when permitted. Without them
// the launcher still isolates; only the exit status becomes inexact.
func (l *Launcher) startEvents() {
	w, err := procevents.New(l.log)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = w.SelfTest(ctx)
		cancel()
		if err != nil {
			w.Close()
		}
	}
	if err != nil {
		l.eventErr = err
		l.log.Warn("process events unavailable: signal deaths are inferred from bwrap's exit code", "err", err)
		return
	}
	l.events = w
}

// Close releases the launcher's resources. Running processes keep running,
// but no longer hold the cgroup parent: another instance's SweepCgroups
// may then remove them. No new process can start. With a StateDir, Close
// detaches first (Detach): the keeper keeps the processes for a later
// launcher.
func (l *Launcher) Close() error {
	l.closeOnce.Do(func() {
		if l.keeper != nil {
			l.Detach()
		}
		if l.events != nil {
			l.events.Close()
		}
		l.dropInit()
		l.cgLock.Close()
		l.nets.close()
	})
	return nil
}

// Stdio says where a process's output goes. Writers are called from the
// process's own goroutines and must not block for long: a slow writer
// stalls the process once the pipe or PTY buffer is full.
type Stdio struct {
	Stdout io.Writer // stdout, or the terminal output with a PTY; nil discards
	Stderr io.Writer // stderr with pipes; nil discards
}

// Start validates p, sets up its sandbox and starts it. When ctx ends, the
// process is stopped gracefully (SIGTERM, KillGrace, then SIGKILL); a
// Policy.Timeout does the same. The returned Process must be waited for.
func (l *Launcher) Start(ctx context.Context, p Policy, stdio Stdio) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox: not started: %w", context.Cause(ctx))
	}
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if l.keeper != nil {
		if err := p.ValidateKey(); err != nil {
			return nil, err
		}
	}
	if err := l.checkSupported(p); err != nil {
		return nil, err
	}
	if _, err := l.identityFor(p); err != nil {
		return nil, err
	}
	if err := l.checkCwd(p); err != nil {
		return nil, err
	}
	return l.start(ctx, p, stdio)
}

// checkSupported fails closed for anything this host cannot enforce.
func (l *Launcher) checkSupported(p Policy) error {
	info := l.cgroups.Info()
	switch {
	case p.Limits.Memory > 0 && !info.Memory:
		return fmt.Errorf("%w: memory (no memory cgroup controller available)", ErrUnenforceable)
	case p.Limits.Pids > 0 && !info.Pids && !l.layout.nprocPids:
		return fmt.Errorf("%w: pids (no pids cgroup controller available)", ErrUnenforceable)
	case p.Limits.CPUWeight > 0 && !info.CPU:
		return fmt.Errorf("%w: cpu weight (no cpu cgroup controller available)", ErrUnenforceable)
	case len(p.Listen) > 0 && !canEnterNetNS():
		return fmt.Errorf("%w: listening sockets in the sandbox (entering its network namespace needs CAP_SYS_ADMIN)", ErrUnavailable)
	}
	return nil
}

// checkCwd gives a clear error for a cwd inside the workspace that does not
// exist. It is advice only: the sandboxed process enters the cwd itself,
// so nothing here can lead outside.
func (l *Launcher) checkCwd(p Policy) error {
	rel, ok := relativeTo(p.WorkspaceMount, p.Cwd)
	if !ok || rel == "." {
		return nil
	}
	root, err := os.OpenRoot(p.Workspace)
	if err != nil {
		return fmt.Errorf("%w: workspace: %w", ErrInvalidPolicy, err)
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	if err != nil {
		return fmt.Errorf("%w: cwd %s: %w", ErrInvalidPolicy, p.Cwd, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: cwd %s is not a directory", ErrInvalidPolicy, p.Cwd)
	}
	return nil
}

func relativeTo(base, p string) (string, bool) {
	if p == base {
		return ".", true
	}
	if len(p) > len(base) && p[:len(base)] == base && p[len(base)] == '/' {
		return p[len(base)+1:], true
	}
	return "", false
}

// newCgroup makes the execution's cgroup, inside its tenant's when it has
// one. As root it always exists when the host has any usable hierarchy,
// so the whole tree can be killed; it is required when a cgroup ceiling
// was asked for, the execution's own or its tenant's.
func (l *Launcher) newCgroup(p Policy) (*cgroup.Group, error) {
	l.cgGuard.markStarted()
	lim := cgroup.Limits{MemoryBytes: p.Limits.Memory, Pids: p.Limits.Pids, CPUWeight: p.Limits.CPUWeight}
	if l.layout.nprocPids {
		lim.Pids = 0 // RLIMIT_NPROC carries it
	}
	needed := lim != (cgroup.Limits{}) || p.Tenant != "" && l.tenants.Limits() != (cgroup.Limits{})
	if !needed && (os.Geteuid() != 0 || l.cgroups.Info().Version == "none") {
		return nil, nil
	}
	var cg *cgroup.Group
	var err error
	if p.Tenant != "" {
		cg, err = l.tenants.Create(p.Tenant, randomName(), lim)
	} else {
		cg, err = l.cgroups.Create(randomName(), lim)
	}
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", fromCgroup(err))
	}
	return cg, nil
}

func randomName() string {
	var b [8]byte
	rand.Read(b[:])
	return "x" + hex.EncodeToString(b[:])
}
