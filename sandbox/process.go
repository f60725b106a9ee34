//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
	"github.com/termgate/termgate/sandbox/internal/procevents"
	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
	"github.com/termgate/termgate/sandbox/internal/seccomp"
	"golang.org/x/sys/unix"
)

// ErrNotRunning is returned for signals and resizes after the process ended.
var ErrNotRunning = errors.New("sandbox: process is not running")

// Process is one running sandbox. Its methods are safe for concurrent use.
type Process struct {
	l         *Launcher
	policy    Policy
	child     spawned  // bwrap
	bwrapArgs []string // bwrap's argv
	cg        *cgroup.Group
	track     *procevents.Track
	argv      []string // the init, then the command, as bwrap executes them
	started   time.Time
	ctl       *initControl

	stdin   *os.File   // pipe write end (a socket's with a keeper), or the PTY master
	master  *os.File   // PTY master; nil with pipes
	outputs []*os.File // the output read ends, which the copiers own
	head    *headCapture
	adopted bool // a previous launcher started it (Adopt)
	// recorded is the exit a previous launcher kept with the keeper
	// before it died (Adopt of an ended process); declined says the
	// caller of Adopt did not want the process, so nobody will Release it.
	recorded *Exit
	declined bool

	// keptMu orders the annotations that leave the process's end with
	// the keeper: the command's status before the launcher ends its
	// sandbox (endSandbox), the final exit (keepExit). Each carries both,
	// so the later never drops the earlier. For an adopted process,
	// keptCommand is what the previous launcher kept.
	keptMu      sync.Mutex
	keptCommand *unix.WaitStatus
	keptExit    *Exit

	mu       sync.Mutex
	stopped  Stop
	killedUs bool
	released bool // Release dropped the keeper's record
	stopOnce sync.Once

	// sockets are Policy.Listen's, opened before bwrap was forked, until
	// Sockets hands them over or the process ends (socketsDropped);
	// socketsErr is Sockets' error meanwhile. All under mu.
	sockets        []OpenSocket
	socketsErr     error
	socketsDropped bool
	// netns is the network made before bwrap, which the sandbox joined
	// (preparedNet), until the process ends.
	netns *NetNS

	copies sync.WaitGroup // output copiers; stop at end of file
	// copiers are the output copiers, in the order of outputs; stopCopies
	// is set when the launcher lets go of the process (letGo).
	copiers    []*copier
	stopCopies atomic.Bool

	exited chan struct{} // closed when bwrap has been reaped
	done   chan struct{} // closed when exit is final
	exit   Exit
	notice exitNotice // OnExit's callbacks (exitnotice.go)
}

// start runs bwrap blocked on its --args pipe, puts it into the cgroup,
// applies rlimits, and only then hands it its arguments: nothing of the
// sandbox runs before every ceiling is in place.
func (l *Launcher) start(ctx context.Context, p Policy, stdio Stdio) (*Process, error) {
	ahead, taken := l.cgroupAhead(p), false
	defer func() {
		if !taken {
			ahead.drop()
		}
	}()
	pl := buildPlan(p, l.layout, seccomp.Program())
	var net *preparedNet
	if ownNetwork(p) {
		var err error
		if net, err = l.nets.take(p); err != nil {
			return nil, err
		}
		defer func() {
			if net != nil { // not handed to a process
				net.close()
			}
		}()
		pl.joinNetwork(p)
	}
	files, err := l.openFiles(pl, p)
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	argsR, argsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: create args pipe: %w", err)
	}
	defer argsR.Close()
	defer argsW.Close()

	ctl, ctlChild, err := newInitControl()
	if err != nil {
		return nil, err
	}
	defer ctlChild.Close()
	kept := p
	kept.Env = nil // the plan took it to the init: a running process needs it no more
	proc := &Process{l: l, policy: kept, argv: pl.argv[1:], ctl: ctl, exited: make(chan struct{}), done: make(chan struct{}), head: &headCapture{}, socketsErr: errNoSockets}
	child, err := proc.setupIO(stdio)
	if err != nil {
		ctl.close()
		return nil, err
	}
	defer closeAll(child[:])
	taken = true
	if proc.cg, err = ahead.take(); err != nil {
		proc.abandon(child)
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	req := l.spawnRequest(proc, pl, append(child[:], ctlChild, argsR), files)
	if net != nil {
		req.netns = net.ns.f
	}
	if err := proc.launch(ctx, req, argsW, encodeArgs(pl.opts), pl.init); err != nil {
		proc.abandon(child)
		return nil, err
	}
	if net != nil {
		proc.handNetwork(net)
		net = nil
	}
	l.track(proc)
	proc.supervise(ctx)
	return proc, nil
}

// resolves lists the host paths bwrap resolves by name for p: itself,
// the system directories and /etc entries it binds, the device nodes
// --dev binds (devNodes) and /proc, the init, the workspace and every
// bind source. A lean mount namespace keeps the mounts these need and no
// other.
func (l *Launcher) resolves(p Policy) []string {
	paths := append([]string{l.bwrap, "/usr", "/proc/self", l.layout.init, p.Workspace}, devNodes...)
	paths = append(paths, l.layout.dirs...)
	for _, e := range etcEntries {
		if entry, ok := l.layout.etc[e]; ok && entry.link == "" && !entry.copy {
			paths = append(paths, e)
		}
	}
	for _, b := range p.Binds {
		paths = append(paths, b.Source)
	}
	return paths
}

// devNodes are the host's device nodes bwrap --dev binds into a sandbox.
// Each may be a mount of its own: a container runtime in a user
// namespace binds the host's nodes over empty files in its /dev, and a
// lean namespace without those mounts would hand the sandbox the empty
// files (reading /dev/zero would give nothing).
var devNodes = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// spawnRequest is what forks bwrap for proc: its argv, blocked on the
// --args pipe, the descriptors (stdio, the init's control socket, the
// args pipe, then the plan's files), and for the keeper the parent ends,
// the cgroup and the notes a later launcher adopts it from.
func (l *Launcher) spawnRequest(proc *Process, pl plan, first, files []*os.File) spawnRequest {
	proc.bwrapArgs = append([]string{"bwrap", "--args", fmt.Sprint(argsFD)}, pl.argv...)
	req := spawnRequest{key: proc.policy.Key, path: l.bwrap, args: proc.bwrapArgs, files: append(first, files...)}
	if proc.cg != nil {
		req.cgroup, req.enter = proc.cg.Unified(), proc.cg.V1()
	}
	if id, _ := l.identityFor(proc.policy); id.switchTo { // checked by Start
		req.cred = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	req.resolves = l.resolves(proc.policy)
	if l.keeper == nil {
		return req
	}
	req.held = proc.held()
	if proc.cg != nil {
		req.cgroups = proc.cg.Dirs()
	}
	dir := l.executionDir(proc.policy.Key)
	// record.json stays: a server started later answers gone, not not_found.
	req.remove = []string{filepath.Join(dir, "ring"), filepath.Join(dir, "input"), filepath.Join(dir, "screen")}
	proc.started = time.Now()
	req.meta = proc.meta()
	return req
}

// openFiles materialises the plan's descriptors in order.
func (l *Launcher) openFiles(pl plan, p Policy) ([]*os.File, error) {
	files := make([]*os.File, 0, len(pl.files))
	for _, f := range pl.files {
		file, err := l.openFile(f, p)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, file)
	}
	return files, nil
}

func (l *Launcher) openFile(f planFile, p Policy) (*os.File, error) {
	switch f.kind {
	case fileData:
		return sealedData(f.data)
	case fileCopy:
		return openCopied(f.path)
	}
	what := "bind source"
	if f.path == p.Workspace && f.dir {
		what = "workspace"
	}
	id, _ := l.identityFor(p) // checked by Start
	if err := id.checkHostPath(f.path); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidPolicy, what, err)
	}
	if what == "workspace" {
		f, err := id.prepareWorkspace(f.path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
		}
		return f, nil
	}
	file, err := openNoFollow(f.path, unix.O_PATH)
	if err != nil {
		return nil, fmt.Errorf("%w: bind source: %w", ErrInvalidPolicy, err)
	}
	return file, nil
}

// openCopied opens a host file the sandbox gets a copy of, checking again
// that it is a file everyone may read: a host that changed it since the
// launcher started gets an error, not a copy it did not mean to give.
func openCopied(path string) (*os.File, error) {
	file, err := openNoFollow(path, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
		file.Close()
		return nil, fmt.Errorf("%w: %s is no longer a file everyone may read", ErrUnavailable, path)
	}
	return file, nil
}

// sealedData puts data in a memfd that nobody can change afterwards. It
// is written at offset 0 without moving the file's offset, where bwrap
// then reads it from.
func sealedData(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("termgate", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	n, err := unix.Pwrite(fd, data, 0)
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: write memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox: seal memfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "memfd"), nil
}

// launch starts bwrap, applies what must precede its first fork, then
// writes its arguments, which lets it go on, and the init's configuration,
// which the init reads once bwrap has built the sandbox.
func (p *Process) launch(ctx context.Context, req spawnRequest, argsW *os.File, args []byte, cfg sandboxinit.Config) error {
	child, err := p.l.spawner.spawn(ctx, req)
	if err != nil {
		removeCgroup(p.cg)
		return err
	}
	p.child = child
	if p.started.IsZero() {
		p.started = time.Now()
	}
	pid := child.pid()
	if p.l.events != nil {
		p.track = p.l.events.Track(pid)
		if p.l.layout.mode == modeSetuid {
			p.track.SkipInitChildren(1) // bwrap's unprivileged setup half
		}
		p.track.NotifyWorkloadExit(p.endSandbox)
	}
	err = p.confine(pid, child.born())
	if err == nil {
		_, err = argsW.Write(args)
	}
	if err == nil {
		err = p.ctl.send(cfg)
	}
	if err != nil {
		child.kill()
		child.wait()
		p.l.forget(p)
		removeCgroup(p.cg)
		if p.track != nil {
			p.l.events.Untrack(p.track)
		}
		return fmt.Errorf("sandbox: confine bwrap: %w", err)
	}
	if cfg.Hold {
		go p.release()
	} else {
		close(p.ctl.released)
	}
	return nil
}

// confine puts the blocked bwrap into its cgroup, which every process it
// starts inherits: into every directory but those it was born in.
func (p *Process) confine(pid int, placed []string) error {
	if p.cg == nil {
		return nil
	}
	return p.cg.AddExcept(pid, placed)
}

func closeAll[T interface{ Close() error }](xs []T) {
	for _, x := range xs {
		x.Close()
	}
}
