package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/termgate/termgate/sandbox"
	"golang.org/x/sys/unix"
)

// execOptions are the flags of termgate exec.
type execOptions struct {
	policy    sandbox.Policy
	launcher  sandbox.Config
	pty       bool
	noPTY     bool
	tmpSpace  bool // the workspace is a temporary directory to remove
	procValue string
}

func execFlags(o *execOptions) *flag.FlagSet {
	fs := newFlagSet("exec")
	p := &o.policy
	fs.StringVar(&p.Workspace, "workspace", "", "host `DIR` bound at /workspace (default: a new temporary directory, removed afterwards)")
	fs.Func("ro", "bind host `PATH` read-only (SRC or SRC:DEST; repeatable)", bindFlag(p, false))
	fs.Func("rw", "bind host `PATH` read-write (SRC or SRC:DEST; repeatable)", bindFlag(p, true))
	fs.Func("network", "network: none or host (default none)", func(s string) error {
		return setNetwork(p, s)
	})
	fs.Func("env", "set `K=V` in the sandbox (repeatable); HOME, LANG and, with a PTY, TERM get defaults (default: PATH only)", envFlag(p))
	fs.StringVar(&p.Cwd, "cwd", "", "working directory inside the sandbox (default /workspace)")
	fs.StringVar(&o.procValue, "proc", "none", "procfs: none, private or self-exe=PATH")
	fs.Func("cpu-seconds", "CPU time ceiling in `SECONDS` per process (default none)", uintFlag(&p.Limits.CPUSeconds))
	fs.Func("memory", "memory ceiling of the whole execution in `BYTES` (suffixes K, M, G; default none)", sizeFlag(&p.Limits.Memory))
	fs.Func("pids", "ceiling on processes and threads of the whole execution (`N`; default none)", intFlag(&p.Limits.Pids))
	fs.Func("open-files", "open file ceiling per process (`N`; default none)", uintFlag(&p.Limits.OpenFiles))
	fs.Func("file-size", "largest file a process may write, in `BYTES` (default none)", usizeFlag(&p.Limits.FileSize))
	fs.Func("address-space", "address space ceiling per process, in `BYTES` (default none)", usizeFlag(&p.Limits.AddressSpace))
	fs.Func("tmp-size", "size of each of /tmp, /run and /dev/shm in `BYTES` (default 64M)", sizeFlag(&p.TmpSize))
	fs.IntVar(&p.PTYs, "ptys", 0, "terminals the sandbox may open itself (`N`, tmux or script; 0: none)")
	fs.DurationVar(&p.Timeout, "timeout", 0, "stop the command (TERM, then KILL after 2 s) after this `DURATION` (e.g. 30s; 0: none)")
	fs.BoolVar(&o.pty, "pty", false, "run on a pseudo-terminal (default when stdin is a terminal)")
	fs.BoolVar(&o.noPTY, "no-pty", false, "use pipes even when stdin is a terminal")
	fs.Func("sandbox-uid", fmt.Sprintf("host uid the sandbox runs as when termgate is root (default %d) (env TERMGATE_SANDBOX_UID)", sandbox.DefaultUID), idFlag(&o.launcher.UID))
	fs.Func("pids-fallback", pidsFallbackUsage+" (env TERMGATE_PIDS_FALLBACK)", pidsFallbackFlag(&o.launcher.PidsFallback))
	fs.Func("sandbox-gid", fmt.Sprintf("host gid the sandbox runs as when termgate is root (default %d) (env TERMGATE_SANDBOX_GID)", sandbox.DefaultGID), idFlag(&o.launcher.GID))
	return fs
}

func execFlagSet() *flag.FlagSet { return execFlags(new(execOptions)) }

// parseExec reads flags, then TERMGATE_* environment for what flags left unset.
func parseExec(args []string, stderr io.Writer) (*execOptions, error) {
	o := &execOptions{}
	if err := envDefaults(&o.launcher); err != nil {
		return nil, usageError{err}
	}
	fs := execFlags(o)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	o.policy.Command = fs.Args()
	if len(o.policy.Command) == 0 {
		return nil, usageError{errors.New("exec: no command given: termgate exec [flags] -- CMD [ARGS...]")}
	}
	if o.pty && o.noPTY {
		return nil, usageError{errors.New("exec: --pty and --no-pty exclude each other")}
	}
	if err := setProc(&o.policy, o.procValue); err != nil {
		return nil, usageError{err}
	}
	return o, nil
}

func envDefaults(c *sandbox.Config) error {
	for name, dst := range map[string]*uint32{"TERMGATE_SANDBOX_UID": &c.UID, "TERMGATE_SANDBOX_GID": &c.GID} {
		if v := os.Getenv(name); v != "" {
			if err := idFlag(dst)(v); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	c.Bwrap = os.Getenv("TERMGATE_BWRAP")
	if v := os.Getenv("TERMGATE_PIDS_FALLBACK"); v != "" {
		if err := pidsFallbackFlag(&c.PidsFallback)(v); err != nil {
			return fmt.Errorf("TERMGATE_PIDS_FALLBACK: %w", err)
		}
	}
	return nil
}

func runExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, err := parseExec(args, stderr)
	if err != nil {
		return err
	}
	in, _ := stdin.(*os.File)
	tty := o.pty || (!o.noPTY && in != nil && isTerminal(in))
	if err := o.prepare(tty, in); err != nil {
		return err
	}
	if o.tmpSpace {
		defer os.RemoveAll(o.policy.Workspace)
	}
	o.launcher.Logger = newLogger(stderr)
	l, err := sandbox.NewLauncher(o.launcher)
	if err != nil {
		return err
	}
	defer l.Close()
	proc, err := l.Start(ctx, o.policy, sandbox.Stdio{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return err
	}
	restore := attachInput(proc, stdin, in, tty)
	exit := proc.Wait()
	restore()
	return reportExit(exit, stderr)
}

// prepare fills in what depends on the caller: workspace, terminal, and
// the few variables a shell expects.
func (o *execOptions) prepare(tty bool, in *os.File) error {
	p := &o.policy
	if p.Workspace == "" {
		dir, err := os.MkdirTemp("", "termgate-exec-")
		if err != nil {
			return fmt.Errorf("exec: create workspace: %w", err)
		}
		p.Workspace, o.tmpSpace = dir, true
	}
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	setDefault(p.Env, "HOME", sandbox.DefaultWorkspaceMount)
	setDefault(p.Env, "LANG", "C.UTF-8")
	if tty {
		size := sandbox.WindowSize{Rows: 24, Cols: 80}
		if in != nil {
			if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
				size = sandbox.ClampWindowSize(int(ws.Row), int(ws.Col))
			}
		}
		p.TTY = &size
		setDefault(p.Env, "TERM", termName())
	}
	return nil
}

func setDefault(env map[string]string, k, v string) {
	if _, ok := env[k]; !ok {
		env[k] = v
	}
}

func termName() string {
	t := os.Getenv("TERM")
	if t == "" || strings.ContainsAny(t, "\x00/") || len(t) > 64 {
		return "xterm-256color"
	}
	return t
}

// attachInput forwards the caller's stdin, and with a terminal puts it in
// raw mode and follows its size. It returns a function that restores it.
func attachInput(proc *sandbox.Process, stdin io.Reader, in *os.File, tty bool) func() {
	if !tty {
		go func() {
			io.Copy(proc.Stdin(), stdin)
			proc.Stdin().Close()
		}()
		return func() {}
	}
	restore := func() {}
	if in != nil && isTerminal(in) {
		if r, err := makeRaw(in); err == nil {
			restore = r
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		go followSize(proc, in, winch)
		prev := restore
		restore = func() { signal.Stop(winch); prev() }
	}
	go io.Copy(proc.Stdin(), stdin)
	return restore
}

func followSize(proc *sandbox.Process, in *os.File, winch <-chan os.Signal) {
	for {
		select {
		case <-proc.Done():
			return
		case <-winch:
			if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil {
				proc.Resize(sandbox.ClampWindowSize(int(ws.Row), int(ws.Col)))
			}
		}
	}
}

func reportExit(exit sandbox.Exit, stderr io.Writer) error {
	if exit.SetupError != "" || exit.Limit != "" || exit.Stopped != "" {
		fmt.Fprintf(stderr, "termgate: %s\n", exit)
	}
	if code := exit.Status(); code != 0 {
		return exitError{code}
	}
	return nil
}

func bindFlag(p *sandbox.Policy, writable bool) func(string) error {
	return func(s string) error {
		src, dest, ok := strings.Cut(s, ":")
		if !ok {
			dest = src
		}
		p.Binds = append(p.Binds, sandbox.Bind{Source: src, Dest: dest, Writable: writable})
		return nil
	}
}

func envFlag(p *sandbox.Policy) func(string) error {
	return func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("want K=V, got %q", s)
		}
		if err := sandbox.ValidateEnvName(k); err != nil {
			return err
		}
		if p.Env == nil {
			p.Env = map[string]string{}
		}
		p.Env[k] = v
		return nil
	}
}

func setNetwork(p *sandbox.Policy, s string) error {
	switch sandbox.Network(s) {
	case sandbox.NetworkNone, sandbox.NetworkHost:
		p.Network = sandbox.Network(s)
		return nil
	}
	return fmt.Errorf("want none or host, got %q", s)
}

func setProc(p *sandbox.Policy, s string) error {
	switch {
	case s == "none" || s == "":
		p.Proc = sandbox.ProcNone
	case s == "private":
		p.Proc = sandbox.ProcPrivate
	case strings.HasPrefix(s, "self-exe="):
		p.Proc, p.SelfExe = sandbox.ProcSelfExe, strings.TrimPrefix(s, "self-exe=")
	default:
		return fmt.Errorf("invalid value %q for flag -proc: want none, private or self-exe=PATH", s)
	}
	return nil
}

func uintFlag(dst *uint64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want a non-negative integer, got %q", s)
		}
		*dst = v
		return nil
	}
}

func intFlag(dst *int64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("want a non-negative integer, got %q", s)
		}
		*dst = v
		return nil
	}
}

func idFlag(dst *uint32) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil || v == 0 {
			return fmt.Errorf("want a non-zero numeric id, got %q", s)
		}
		*dst = uint32(v)
		return nil
	}
}

// pidsFallbackFlag parses --pids-fallback: none, or rlimit (RLIMIT_NPROC
// where the host has no pids cgroup controller).
func pidsFallbackFlag(dst *bool) func(string) error {
	return func(s string) error {
		switch s {
		case "none":
			*dst = false
		case "rlimit":
			*dst = true
		default:
			return fmt.Errorf("want none or rlimit, got %q", s)
		}
		return nil
	}
}

// pidsFallbackUsage is --pids-fallback's help, shared by serve and verify.
const pidsFallbackUsage = "where the host has no pids cgroup controller: none refuses --pids; rlimit enforces it as RLIMIT_NPROC, counted per execution in its own user namespace (per tenant uid with setuid bwrap), a degraded mode verify and /readyz report (default none)"

func sizeFlag(dst *int64) func(string) error {
	return func(s string) error {
		v, err := parseSize(s)
		if err != nil {
			return err
		}
		*dst = int64(v)
		return nil
	}
}

func usizeFlag(dst *uint64) func(string) error {
	return func(s string) error {
		v, err := parseSize(s)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
}
