//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
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
	l       *Launcher
	policy  Policy
	cmd     *exec.Cmd
	cg      *cgroup.Group
	track   *procevents.Track
	argv    []string // the init, then the command, as bwrap executes them
	started time.Time
	ctl     *initControl

	stdin  *os.File // pipe write end, or the PTY master
	master *os.File // PTY master; nil with pipes
	head   *headCapture

	mu       sync.Mutex
	stopped  Stop
	killedUs bool
	stopOnce sync.Once

	copies sync.WaitGroup // output copiers; stop at end of file
	exited chan struct{}  // closed when bwrap has been reaped
	done   chan struct{}  // closed when exit is final
	exit   Exit
}

// start runs bwrap blocked on its --args pipe, puts it into the cgroup,
// applies rlimits, and only then hands it its arguments: nothing of the
// sandbox runs before every ceiling is in place.
func (l *Launcher) start(ctx context.Context, p Policy, stdio Stdio) (*Process, error) {
	pl := buildPlan(p, l.layout, seccomp.Program())
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
	proc := &Process{l: l, policy: p, argv: pl.argv[1:], ctl: ctl, exited: make(chan struct{}), done: make(chan struct{}), head: &headCapture{}}
	child, err := proc.setupIO(stdio)
	if err != nil {
		ctl.close()
		return nil, err
	}
	defer closeAll(child[:])
	proc.cmd = l.command(p, pl, child, append([]*os.File{ctlChild, argsR}, files...))
	if proc.cg, err = l.newCgroup(p); err != nil {
		proc.abandon(child)
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := proc.launch(argsW, encodeArgs(pl.opts), pl.init); err != nil {
		proc.abandon(child)
		return nil, err
	}
	go proc.supervise(ctx)
	return proc, nil
}

// command builds the exec.Cmd for bwrap: an empty environment (the
// policy's variables reach only the sandboxed command, through --setenv:
// given to bwrap itself, LD_PRELOAD and friends would run client code on
// the host before any isolation), the options on fd 3, the command on
// argv (bwrap reads no command through --args), and the sandbox identity
// when running as root.
func (l *Launcher) command(p Policy, pl plan, stdio [3]*os.File, extra []*os.File) *exec.Cmd {
	cmd := &exec.Cmd{
		Path:       l.bwrap,
		Args:       append([]string{"bwrap", "--args", fmt.Sprint(argsFD)}, pl.argv...),
		Env:        []string{}, // not nil: nil would pass termgate's own
		Dir:        "/",
		Stdin:      stdio[0],
		Stdout:     stdio[1],
		Stderr:     stdio[2],
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:    true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if id, _ := l.identityFor(p); id.switchTo { // checked by Start
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	return cmd
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
	if f.kind == fileData {
		return sealedData(f.data)
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

// sealedData puts data in a memfd that nobody can change afterwards.
func sealedData(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("termgate", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: write memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: seal memfd: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: rewind memfd: %w", err)
	}
	return f, nil
}

// launch starts bwrap, applies what must precede its first fork, then
// writes its arguments, which lets it go on, and the init's configuration,
// which the init reads once bwrap has built the sandbox.
func (p *Process) launch(argsW *os.File, args []byte, cfg sandboxinit.Config) error {
	// Descriptors termgate inherited without close-on-exec (from a service
	// manager, a shell) would otherwise pass through bwrap into the sandbox.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		removeCgroup(p.cg)
		return fmt.Errorf("%w: mark descriptors close-on-exec: %w", ErrUnavailable, err)
	}
	if err := p.cmd.Start(); err != nil {
		removeCgroup(p.cg)
		return fmt.Errorf("%w: start bwrap: %w", ErrUnavailable, err)
	}
	p.started = time.Now()
	pid := p.cmd.Process.Pid
	if p.l.events != nil {
		p.track = p.l.events.Track(pid)
		p.track.NotifyWorkloadExit(p.endSandbox)
	}
	err := p.confine(pid)
	if err == nil {
		_, err = argsW.Write(args)
	}
	if err == nil {
		err = p.ctl.send(cfg)
	}
	if err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
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
// starts inherits.
func (p *Process) confine(pid int) error {
	if p.cg == nil {
		return nil
	}
	return p.cg.Add(pid)
}

func closeAll[T interface{ Close() error }](xs []T) {
	for _, x := range xs {
		x.Close()
	}
}
