package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

func (o *serveOptions) check() error {
	proxies, err := gateway.ParseTrustedProxies(o.trustedProxies)
	if err != nil {
		return usageError{fmt.Errorf("serve: --trusted-proxy: %w", err)}
	}
	o.server.TrustedProxies = proxies
	o.session.RecordingsRetention = o.recordingsRetention
	if o.recordingsRetention == 0 {
		o.session.RecordingsRetention = -1 // session's zero is its default
	}
	if err := o.checkNetwork(); err != nil {
		return err
	}
	mounts, err := parseMounts(o.mounts)
	if err != nil {
		return usageError{err}
	}
	o.policy.Mounts = mounts
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usageError{errors.New("serve: --tls-cert and --tls-key go together")}
	case o.proc != "auto" && o.proc != "none" && o.proc != "private":
		return usageError{fmt.Errorf("serve: --proc: want auto, none or private, got %q", o.proc)}
	case o.idleTimeout <= 0 || o.headerTimeout <= 0 || o.server.RequestReadTimeout <= 0:
		return usageError{errors.New("serve: --idle-timeout, --read-header-timeout and --read-timeout must be positive")}
	case o.firstByteTimeout < 0:
		return usageError{errors.New("serve: --first-byte-timeout must not be negative")}
	case o.listener.MaxPreAuthConns > cmp.Or(o.listener.MaxConns, gateway.DefaultMaxConns):
		return usageError{fmt.Errorf("serve: --max-preauth-conns %d is above --max-conns %d", o.listener.MaxPreAuthConns, cmp.Or(o.listener.MaxConns, gateway.DefaultMaxConns))}
	case o.policy.InteractiveTimeout <= 0 || o.policy.IdleTimeout <= 0 || o.timeoutWarning < 0:
		return usageError{errors.New("serve: --interactive-timeout and --interactive-idle-timeout must be positive, --timeout-warning not negative")}
	case o.stateDir != "" && o.stateDir != "none" && !filepath.IsAbs(o.stateDir):
		return usageError{fmt.Errorf("serve: --state-dir %q: want an absolute path, or none", o.stateDir)}
	case o.session.RecordingsDir != "" && !filepath.IsAbs(o.session.RecordingsDir):
		return usageError{fmt.Errorf("serve: --recordings-dir %q: want an absolute path", o.session.RecordingsDir)}
	case o.session.RecordingsDir == "" && (o.server.Record.Enabled() || o.server.Record.Input):
		return usageError{errors.New("serve: --record and --record-input need --recordings-dir")}
	case o.session.RecordingMaxSize < session.MinRecordingMaxSize:
		return usageError{fmt.Errorf("serve: --recording-max-size %d: want at least 4K", o.session.RecordingMaxSize)}
	case o.session.RecordingsMaxBytesPerOwner < o.session.RecordingMaxSize || o.session.RecordingsMaxBytes < o.session.RecordingsMaxBytesPerOwner:
		return usageError{fmt.Errorf("serve: --recordings-max-bytes-per-tenant %s must hold a recording of --recording-max-size %s, and --recordings-max-bytes %s one tenant's",
			sizeText(uint64(max(o.session.RecordingsMaxBytesPerOwner, 0))), sizeText(uint64(o.session.RecordingMaxSize)), sizeText(uint64(max(o.session.RecordingsMaxBytes, 0))))}
	case o.session.RecordingsMaxFiles < o.session.RecordingsMaxFilesPerOwner:
		return usageError{fmt.Errorf("serve: --recordings-max-files %d is below --recordings-max-files-per-tenant %d", o.session.RecordingsMaxFiles, o.session.RecordingsMaxFilesPerOwner)}
	case o.recordingsRetention < 0:
		return usageError{fmt.Errorf("serve: --recordings-retention %v: want 0 (kept) or more", o.recordingsRetention)}
	case o.logFormat != "json" && o.logFormat != "text":
		return usageError{fmt.Errorf("serve: --log-format: want json or text, got %q", o.logFormat)}
	case o.orphanGrace < time.Second || o.orphanGrace > 24*time.Hour:
		return usageError{fmt.Errorf("serve: --orphan-grace %v: want 1s to 24h", o.orphanGrace)}
	case o.policy.InteractiveTimeout > o.policy.MaxTimeout:
		return usageError{fmt.Errorf("serve: --interactive-timeout %v is longer than --max-timeout %v", o.policy.InteractiveTimeout, o.policy.MaxTimeout)}
	case (len(o.publicKeys) > 0 || len(o.jwksURLs) > 0) && o.audience == "":
		return usageError{errors.New("serve: --jwt-public-key and --jwt-jwks-url need --jwt-audience: without it, any token the identity provider signs for another service is accepted")}
	case o.jwksRefresh < 10*time.Second || o.jwksRefresh > 24*time.Hour:
		return usageError{fmt.Errorf("serve: --jwt-jwks-refresh %v: want 10s to 24h", o.jwksRefresh)}
	case o.checkAuthFlags() != nil:
		return usageError{o.checkAuthFlags()}
	case o.sigterm != sigtermRestart && o.sigterm != sigtermShutdown:
		return usageError{fmt.Errorf("serve: --sigterm: want restart or shutdown, got %q", o.sigterm)}
	case o.screens.check(o.server.MaxMessageBytes) != nil:
		return usageError{o.screens.check(o.server.MaxMessageBytes)}
	case o.cluster.check(o.listen) != nil:
		return usageError{o.cluster.check(o.listen)}
	case o.dev:
		return nil
	case o.secretFile == "" && len(o.publicKeys) == 0 && len(o.jwksURLs) == 0:
		return usageError{errors.New("serve: give --jwt-secret-file, --jwt-public-key or --jwt-jwks-url (or --dev)")}
	case o.workspaceRoot == "":
		return usageError{errors.New("serve: --workspace-root is required (or --dev)")}
	}
	return nil
}

// checkCeilings refuses to serve with a default ceiling the host cannot
// enforce (ceilings is the probe's Report.Ceilings): executions would
// otherwise fail one by one, or, worse, run without it. The error names
// the flag that turns the ceiling off. A tenant's ceilings need the
// cgroup controllers themselves (tenantCeilings): --pids-fallback
// enforces an execution's pids ceiling only.
func checkCeilings(l, tenant sandbox.Limits, ceilings, tenantCeilings map[string]bool) error {
	var errs []error
	for _, c := range []struct {
		set        bool
		name, flag string
		can        map[string]bool
	}{
		{l.Memory > 0, "memory", "--memory", ceilings},
		{l.Pids > 0, "pids", "--pids", ceilings},
		{l.CPUWeight > 0, "cpu_weight", "--cpu-weight", ceilings},
		{tenant.Memory > 0, "memory", "--tenant-memory", tenantCeilings},
		{tenant.Pids > 0, "pids", "--tenant-pids", tenantCeilings},
		{tenant.CPUWeight > 0, "cpu_weight", "--tenant-cpu-weight", tenantCeilings},
	} {
		if c.set && !c.can[c.name] {
			errs = append(errs, fmt.Errorf("this host cannot enforce the %s ceiling (no cgroup controller for it): set %s 0 (env %s=0) to run without it", c.name, c.flag, envName(strings.TrimPrefix(c.flag, "--"))))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("serve: refusing to start: %w", errors.Join(errs...))
	}
	return nil
}

// checkProc refuses a private procfs where nothing keeps the command away
// from its sandbox's pid 1: /proc/1/mem would let it stop its sandbox's
// end or forge its exit. Landlock does; the probe checks it.
func checkProc(proc string, report sandbox.Report) error {
	if proc == "private" && !report.Checks["init_out_of_reach"] {
		return errors.New("serve: refusing to start: --proc private needs Landlock on this host (its pid 1 would be open to the command through /proc/1/mem): use --proc none")
	}
	return nil
}

// resolveProc turns --proc into the procfs sandboxes get: auto is private
// where the probe found the sandbox's pid 1 out of reach, else none, with
// a warning saying what that costs; private where it is not is refused.
func resolveProc(asked string, report sandbox.Report) (proc, warning string, err error) {
	if asked != "auto" {
		if err := checkProc(asked, report); err != nil {
			return "", "", err
		}
		return asked, "", nil
	}
	if report.Checks["init_out_of_reach"] {
		return "private", "", nil
	}
	return "none", "--proc auto: sandboxes get no /proc, so ps and top do not work in them: this host has no Landlock to keep the sandbox's pid 1 (and /proc/1/mem) out of the command's reach; --proc none says so and silences this", nil
}

// checkTerminalPool refuses a configuration whose running executions could
// together take every terminal the kernel has for sandboxes: a tenant at
// its ceiling would then leave none for the others.
func checkTerminalPool(ptys, running int) error {
	if ptys == 0 {
		return nil
	}
	pool, err := sandbox.TerminalPool()
	if err != nil {
		return fmt.Errorf("serve: refusing to start: %w: set --ptys 0 to run without terminals in sandboxes", err)
	}
	if ptys*running > pool {
		return fmt.Errorf("serve: refusing to start: --ptys %d times --max-running %d is %d terminals, more than the kernel's %d for sandboxes (kernel.pty.max minus kernel.pty.reserve): lower one of them", ptys, running, ptys*running, pool)
	}
	return nil
}

// verify probes the sandbox and checks the ceilings and terminals asked
// for against what it enforces.
func (o *serveOptions) verify(ctx context.Context, l *sandbox.Launcher, log *slog.Logger) error {
	report, err := l.Probe(ctx)
	if err != nil {
		return fmt.Errorf("serve: refusing to start: %w", err)
	}
	cg := report.Cgroups
	tenantCeilings := map[string]bool{"memory": cg.Memory, "pids": cg.Pids, "cpu_weight": cg.CPU}
	if err := errors.Join(checkCeilings(o.policy.Limits, o.sandbox.TenantLimits, report.Ceilings, tenantCeilings),
		checkTerminalPool(o.policy.PTYs, o.session.MaxRunning)); err != nil {
		return err
	}
	proc, warning, err := resolveProc(o.proc, report)
	if err != nil {
		return err
	}
	o.proc = proc
	log.Info("sandbox verified", "bwrap", report.Version, "identity", report.Identity, "cgroups", report.Cgroups.Version, "exact_exit_status", report.ExactStatus, "proc", proc)
	if warning != "" {
		log.Warn("sandbox", "warning", warning)
	}
	for _, w := range report.Warnings {
		log.Warn("sandbox", "warning", w)
	}
	o.guarantees = report.Guarantees
	return nil
}

// configured is the probe's guarantees as this server keeps them: one
// the host holds but the configuration turns off is off, with the flag;
// network policies are held where configured and verified.
func (o *serveOptions) configured(policies bool) []sandbox.Guarantee {
	l, t := o.policy.Limits, o.sandbox.TenantLimits
	off := map[string]string{}
	for _, c := range []struct {
		name, flag string
		isOff      bool
	}{
		{"pids_ceiling", "--pids 0", l.Pids == 0},
		{"memory_ceiling", "--memory 0", l.Memory == 0},
		{"cpu_weight", "--cpu-weight 0", l.CPUWeight == 0},
		{"tenant_cgroups", "--tenant-memory, --tenant-pids and --tenant-cpu-weight 0", t == (sandbox.Limits{})},
		{"workspace_quota", "--workspace-quota 0", o.workspaces.bytes == 0},
		{"private_proc", "--proc none", o.proc == "none"},
	} {
		if c.isOff {
			off[c.name] = c.flag
		}
	}
	var gs []sandbox.Guarantee
	for _, g := range o.guarantees {
		if flag, ok := off[g.Name]; ok && g.State != sandbox.Missing {
			g = sandbox.Guarantee{Name: g.Name, State: sandbox.Off, Flag: flag, Detail: "the host could; this server does not ask for it"}
		}
		gs = append(gs, g)
	}
	if policies {
		return append(gs, sandbox.Guarantee{Name: "network_policies", State: sandbox.Held, Detail: "a proxy in each sandbox's network and a redirect of its other connections (--network-policy)"})
	}
	return append(gs, sandbox.Guarantee{Name: "network_policies", State: sandbox.Off, Flag: "no --network-policy", Detail: "no policies configured"})
}

// logGuarantees logs each guarantee, one not held as a warning, and
// hands them to /readyz.
func (o *serveOptions) logGuarantees(gs []sandbox.Guarantee, log *slog.Logger) {
	for _, g := range gs {
		level := slog.LevelInfo
		if g.State != sandbox.Held && g.State != sandbox.Off {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "guarantee", "name", g.Name, "state", g.State, "detail", g.Detail, "flag", g.Flag)
		line := g.Name + " " + g.State
		if g.Flag != "" {
			line += " (" + g.Flag + ")"
		}
		o.server.Guarantees = append(o.server.Guarantees, line)
	}
}

// mountName is the grammar of a --mount name.
var mountName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`) })

// parseMounts reads --mount NAME=HOSTPATH[:ro|:rw]: each host path
// absolute, clean, and a directory or a regular file that exists and is
// no symlink (sandboxes bind it as it is).
func parseMounts(list []string) (map[string]gateway.Mount, error) {
	out := map[string]gateway.Mount{}
	for _, m := range list {
		name, hostPath, ok := strings.Cut(m, "=")
		mode := "ro"
		if i := strings.LastIndex(hostPath, ":"); i >= 0 && (hostPath[i+1:] == "ro" || hostPath[i+1:] == "rw") {
			hostPath, mode = hostPath[:i], hostPath[i+1:]
		}
		switch {
		case !ok || !mountName().MatchString(name):
			return nil, fmt.Errorf("serve: --mount %q: want NAME=HOSTPATH[:ro|:rw], NAME of a-z, 0-9, _ and - (at most 32)", m)
		case out[name] != (gateway.Mount{}):
			return nil, fmt.Errorf("serve: --mount %q: %s is declared twice", m, name)
		case !filepath.IsAbs(hostPath) || filepath.Clean(hostPath) != hostPath:
			return nil, fmt.Errorf("serve: --mount %q: the host path must be absolute and clean", m)
		}
		fi, err := os.Lstat(hostPath)
		switch {
		case err != nil:
			return nil, fmt.Errorf("serve: --mount %q: %w", m, err)
		case !fi.IsDir() && !fi.Mode().IsRegular():
			return nil, fmt.Errorf("serve: --mount %q: %s is neither a directory nor a regular file (a symlink is not followed)", m, hostPath)
		}
		out[name] = gateway.Mount{Path: hostPath, Writable: mode == "rw"}
	}
	return out, nil
}
