package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"golang.org/x/sys/unix"
)

// DefaultPS1 is the prompt of an interactive bash whose client sets no
// PS1: the sandbox has no /etc/bash.bashrc to set one, and bash's own
// ("bash-5.2$ ") says neither who nor where. It shows "sandbox@termgate:~$ "
// in the workspace, and the directory elsewhere.
const DefaultPS1 = `\u@termgate:\w\$ `

// spec builds an execution's spec from the server's policy and what the
// client may choose: command (from the allowlist), arguments, environment,
// cwd, terminal, timeout and ceilings up to the server's maximum.
func (s *Server) spec(tenant string, req wire.Request) (session.Spec, error) {
	cmd := append([]string(nil), s.cfg.DefaultCommand...)
	if req.Command != "" {
		c, ok := s.resolveCommand(req.Command)
		if !ok {
			return session.Spec{}, fmt.Errorf("%w: command %q is not allowed", session.ErrInvalidSpec, req.Command)
		}
		cmd = []string{c}
	}
	ws, err := s.workspace(tenant)
	if err != nil {
		return session.Spec{}, err
	}
	sb := s.cfg.Sandbox
	p := sandbox.Policy{
		Command: append(cmd, req.Args...), Env: map[string]string{}, Workspace: ws.Path, Cwd: req.Cwd,
		UID: ws.UID, GID: ws.GID, Tenant: tenant,
		Proc: sb.Proc, TmpSize: sb.TmpSize, PTYs: sb.PTYs,
	}
	policy, network, err := s.network(req.Network)
	if err != nil {
		return session.Spec{}, err
	}
	p.Network = network
	for k, v := range req.Env {
		p.Env[k] = v
	}
	setDefault(p.Env, "HOME", sandbox.DefaultWorkspaceMount)
	setDefault(p.Env, "LANG", "C.UTF-8")
	if req.PTY != nil {
		size := sandbox.ClampWindowSize(req.PTY.Rows, req.PTY.Cols)
		p.TTY = &size
		setDefault(p.Env, "TERM", "xterm-256color")
		if path.Base(cmd[0]) == "bash" {
			setDefault(p.Env, "PS1", DefaultPS1)
		}
	}
	if p.Limits, err = limits(sb, req.Limits); err != nil {
		return session.Spec{}, err
	}
	if err := startOptions(sb, req, &p); err != nil {
		return session.Spec{}, err
	}
	sp := session.Spec{Policy: p, Interactive: req.PTY != nil || req.Interactive, Ring: s.cfg.Ring, Network: policy}
	if sp.Retention, sp.OutputBudget, err = keeping(sb, req); err != nil {
		return session.Spec{}, err
	}
	if sp.Timeout, sp.IdleTimeout, err = s.timeouts(req, sp.Interactive); err != nil {
		return session.Spec{}, err
	}
	if sp.Live, sp.Hold, err = s.flow(req); err != nil {
		return session.Spec{}, err
	}
	return sp, nil
}

// procRank orders the /proc modes from the least a sandbox sees.
var procRank = map[sandbox.ProcMode]int{sandbox.ProcNone: 0, sandbox.ProcSelfExe: 1, sandbox.ProcPrivate: 2}

// startOptions applies a start's options to p, each within the server's
// bounds: a read-only workspace, the operator's mounts it names, and a
// /proc that shows no more than the server's.
func startOptions(sb SandboxConfig, req wire.Request, p *sandbox.Policy) error {
	p.WorkspaceReadOnly = req.WorkspaceReadOnly
	seen := map[string]bool{}
	for _, name := range req.Mounts {
		m, ok := sb.Mounts[name]
		switch {
		case !ok:
			return fmt.Errorf("%w: mount %q is not one the server offers (%s)", session.ErrInvalidSpec, name, mountNames(sb.Mounts))
		case seen[name]:
			return fmt.Errorf("%w: mount %q named twice", session.ErrInvalidSpec, name)
		}
		seen[name] = true
		p.Binds = append(p.Binds, sandbox.Bind{Source: m.Path, Dest: MountPoint(name), Writable: m.Writable})
	}
	if req.Proc == "" {
		return nil
	}
	asked := sandbox.ProcMode(req.Proc)
	rank, ok := procRank[asked]
	switch {
	case !ok:
		return fmt.Errorf("%w: proc must be none, self-exe or private", session.ErrInvalidSpec)
	case rank > procRank[sb.Proc]:
		return &apiError{wire.CodeForbidden, fmt.Sprintf("proc %s shows more than this server's --proc %s allows", asked, sb.Proc)}
	}
	p.Proc = asked
	if asked == sandbox.ProcSelfExe {
		p.SelfExe = p.Command[0]
	}
	return nil
}

// MountPoint is where mount name appears in a sandbox.
func MountPoint(name string) string { return "/mnt/" + name }

// mountNames lists the mounts offered, for an error.
func mountNames(m map[string]Mount) string {
	if len(m) == 0 {
		return "it offers none"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return "it offers " + strings.Join(names, ", ")
}

// keeping is how long a start's result is kept and how much output it
// keeps per stream: retention_ms and max_output_bytes, at most the
// server's MaxRetention and MaxOutputBudget, or the supervisor's
// defaults (zero).
func keeping(sb SandboxConfig, req wire.Request) (time.Duration, int, error) {
	retention := time.Duration(req.RetentionMS) * time.Millisecond
	switch {
	case retention < 0 || retention > sb.MaxRetention:
		return 0, 0, fmt.Errorf("%w: retention_ms must be between 1 and %d (--max-retention)", session.ErrInvalidSpec, sb.MaxRetention.Milliseconds())
	case req.MaxOutputBytes < 0 || int64(req.MaxOutputBytes) > sb.MaxOutputBudget:
		return 0, 0, fmt.Errorf("%w: max_output_bytes must be between 1 and %d (--max-output-budget)", session.ErrInvalidSpec, sb.MaxOutputBudget)
	}
	return retention, req.MaxOutputBytes, nil
}

// timeouts are a start's absolute and idle timeouts: timeout_ms and
// idle_timeout_ms, each at most MaxTimeout, or else the server's defaults
// for its kind (a zero default leaves it to the supervisor's). Only an
// interactive execution has an idle timeout.
func (s *Server) timeouts(req wire.Request, interactive bool) (timeout, idle time.Duration, err error) {
	sb := s.cfg.Sandbox
	timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	idle = time.Duration(req.IdleTimeoutMS) * time.Millisecond
	switch {
	case timeout < 0 || timeout > sb.MaxTimeout:
		return 0, 0, fmt.Errorf("%w: timeout must be between 0 and %v", session.ErrInvalidSpec, sb.MaxTimeout)
	case idle < 0 || idle > sb.MaxTimeout:
		return 0, 0, fmt.Errorf("%w: idle_timeout_ms must be between 0 and %d", session.ErrInvalidSpec, sb.MaxTimeout.Milliseconds())
	case idle != 0 && !interactive:
		return 0, 0, fmt.Errorf("%w: idle_timeout_ms needs an interactive execution: a pty, or interactive", session.ErrInvalidSpec)
	}
	if !interactive {
		return cmp.Or(timeout, sb.DefaultTimeout), 0, nil
	}
	return cmp.Or(timeout, sb.InteractiveTimeout), cmp.Or(idle, sb.IdleTimeout), nil
}

// flow is a start's output flow: whether it runs live, and its hold
// window (the server's unless the start asks for one, at most MaxHold).
func (s *Server) flow(req wire.Request) (live bool, hold time.Duration, err error) {
	switch f := cmp.Or(req.Flow, s.cfg.Flow); f {
	case wire.FlowHold, wire.FlowLive:
		live = f == wire.FlowLive
	default:
		return false, 0, fmt.Errorf("%w: flow must be %q or %q", session.ErrInvalidSpec, wire.FlowHold, wire.FlowLive)
	}
	hold = s.cfg.Hold
	if req.HoldMS != 0 {
		hold = time.Duration(req.HoldMS) * time.Millisecond
		if hold <= 0 || hold > s.cfg.MaxHold {
			return false, 0, fmt.Errorf("%w: hold_ms must be between 1 and %d", session.ErrInvalidSpec, s.cfg.MaxHold.Milliseconds())
		}
	}
	return live, hold, nil
}

// resolveCommand maps a requested command to an allowed program: an
// absolute path must be on the list; a bare name matches the first listed
// program of that name ("bash" is /bin/bash).
func (s *Server) resolveCommand(name string) (string, bool) {
	if strings.Contains(name, "/") {
		return name, allowed(s.cfg.Commands, name)
	}
	for _, c := range s.cfg.Commands {
		if path.Base(c) == name {
			return c, true
		}
	}
	return "", false
}

func setDefault(env map[string]string, k, v string) {
	if _, ok := env[k]; !ok {
		env[k] = v
	}
}

// limits applies the client's ceilings, each at most the server's.
func limits(sb SandboxConfig, asked *wire.Limits) (sandbox.Limits, error) {
	out := sb.Limits
	if asked == nil {
		return out, nil
	}
	ceil := sb.MaxLimits
	var err error
	pickU := func(name string, v, def, ceiling uint64) uint64 {
		switch {
		case v == 0:
			return def
		case ceiling != 0 && v > ceiling || ceiling == 0 && def != 0 && v > def:
			err = errors.Join(err, fmt.Errorf("%w: %s %d is above the server's ceiling", session.ErrInvalidSpec, name, v))
		}
		return v
	}
	pickI := func(name string, v, def, ceiling int64) int64 {
		return int64(pickU(name, uint64(max(v, 0)), uint64(def), uint64(ceiling)))
	}
	out.CPUSeconds = pickU("cpu_seconds", asked.CPUSeconds, out.CPUSeconds, ceil.CPUSeconds)
	out.OpenFiles = pickU("open_files", asked.OpenFiles, out.OpenFiles, ceil.OpenFiles)
	out.FileSize = pickU("file_size", asked.FileSize, out.FileSize, ceil.FileSize)
	out.AddressSpace = pickU("address_space", asked.AddressSpace, out.AddressSpace, ceil.AddressSpace)
	out.Memory = pickI("memory", asked.Memory, out.Memory, ceil.Memory)
	out.Pids = pickI("pids", asked.Pids, out.Pids, ceil.Pids)
	return out, err
}

// signalName turns a signal number into its name ("SIGTERM"), or "".
func signalName(n int) string {
	if n == 0 {
		return ""
	}
	return unix.SignalName(unix.Signal(n))
}
