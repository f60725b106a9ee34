//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
)

// ErrInvalidPolicy is wrapped by every policy validation error.
var ErrInvalidPolicy = errors.New("sandbox: invalid policy")

// Network selects the sandbox's network.
type Network string

// Network modes. The zero value is NetworkNone.
const (
	NetworkNone Network = "none" // a private namespace with loopback only, no DNS
	NetworkHost Network = "host" // the host's network, resolv.conf and hosts
)

// ProcMode selects what the sandbox sees at /proc.
type ProcMode string

// Proc modes. The zero value is ProcNone.
const (
	ProcNone    ProcMode = "none"     // no /proc at all
	ProcPrivate ProcMode = "private"  // a procfs of the sandbox's own pid namespace
	ProcSelfExe ProcMode = "self-exe" // only /proc/self/exe, a link to Policy.SelfExe
)

// Defaults applied by Policy.Normalize.
const (
	DefaultWorkspaceMount = "/workspace"
	DefaultTmpSize        = 64 << 20
	DefaultPath           = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	DefaultHostname       = "sandbox"
)

// Validation bounds. They keep one policy from costing the host more than a
// policy should: bwrap gets every argument in memory.
const (
	maxArgs      = 4096
	maxArgBytes  = 256 << 10
	maxEnvVars   = 256
	maxEnvBytes  = 64 << 10
	maxBinds     = 64
	maxPathBytes = 4096
	// MaxPTYs is the most terminals a policy may let a sandbox open.
	MaxPTYs = 1024
)

// Bind is one extra host path made visible inside the sandbox.
type Bind struct {
	Source   string `json:"source"`   // absolute host path, opened without following symlinks
	Dest     string `json:"dest"`     // absolute path inside the sandbox
	Writable bool   `json:"writable"` // read-only unless set
}

// WindowSize is a terminal size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// MaxWindowSide is the most rows or columns a terminal gets.
const MaxWindowSide = 1000

// ClampWindowSize returns a terminal size of rows and cols, each held to
// 1..MaxWindowSide: a client's size is a wish, never an error.
func ClampWindowSize(rows, cols int) WindowSize {
	side := func(v int) uint16 { return uint16(min(max(v, 1), MaxWindowSide)) }
	return WindowSize{Rows: side(rows), Cols: side(cols)}
}

// Limits are the resource ceilings of one execution. Zero means "not asked
// for"; a ceiling that is asked for and cannot be enforced fails the start.
type Limits struct {
	CPUSeconds   uint64 `json:"cpu_seconds,omitempty"`   // RLIMIT_CPU of every process, soft = hard
	AddressSpace uint64 `json:"address_space,omitempty"` // RLIMIT_AS in bytes
	FileSize     uint64 `json:"file_size,omitempty"`     // RLIMIT_FSIZE in bytes
	OpenFiles    uint64 `json:"open_files,omitempty"`    // RLIMIT_NOFILE
	Memory       int64  `json:"memory,omitempty"`        // cgroup memory ceiling in bytes, swap included
	Pids         int64  `json:"pids,omitempty"`          // cgroup process (task) ceiling for the whole execution
	CPUWeight    int    `json:"cpu_weight,omitempty"`    // cgroup CPU share, 1..10000 (100 is the host default)
}

// Policy describes one sandboxed process. The zero value is not usable:
// Command and Workspace are required.
type Policy struct {
	// Command is the program and its arguments. A name without a slash is
	// looked up in the sandbox's PATH.
	Command []string `json:"command"`
	// Env holds the only variables the process gets. PATH defaults to
	// DefaultPath when absent.
	Env map[string]string `json:"env,omitempty"`
	// Workspace is the host directory bound at WorkspaceMount.
	Workspace string `json:"workspace"`
	// WorkspaceMount is where the workspace appears inside (DefaultWorkspaceMount).
	WorkspaceMount string `json:"workspace_mount,omitempty"`
	// WorkspaceReadOnly binds the workspace read-only, for inspection workers.
	WorkspaceReadOnly bool `json:"workspace_read_only,omitempty"`
	// Binds are extra host paths; they are mounted in order of depth, so a
	// read-only bind nested in a writable one stays read-only.
	Binds []Bind `json:"binds,omitempty"`
	// Cwd is the working directory inside the sandbox (WorkspaceMount by
	// default). It is entered by the sandboxed process itself.
	Cwd     string   `json:"cwd,omitempty"`
	Network Network  `json:"network,omitempty"`
	Proc    ProcMode `json:"proc,omitempty"`
	// Listen are sockets opened in the sandbox's network while its init
	// holds, so that they exist before the command's first instruction:
	// a listener of termgate's that the command connects to, such as a
	// proxy on 127.0.0.1:3128. Each is on a loopback address and a fixed
	// port, at most MaxListen, and only with NetworkNone (with the
	// host's network they would be the host's). A socket that cannot be
	// opened ends the sandbox before the command runs, and the exit says
	// why. Process.Sockets hands them over; Process.NetNS opens more.
	Listen []Socket `json:"listen,omitempty"`
	// Redirect, with NetworkNone, sends every connection the command
	// makes to an address outside its loopback to termgate's listeners
	// on that loopback, whatever the program: see Redirect. nil leaves
	// the sandbox with loopback only.
	Redirect *Redirect `json:"redirect,omitempty"`
	// SelfExe is the absolute in-sandbox target of /proc/self/exe for ProcSelfExe.
	SelfExe string `json:"self_exe,omitempty"`
	// TTY requests a pseudo-terminal of this size; nil means pipes.
	TTY *WindowSize `json:"tty,omitempty"`
	// PTYs is how many terminals the sandbox may open itself (tmux,
	// script, ssh -t), from a devpts instance of its own; 0 allows none.
	// Terminals are a host-wide pool: without this bound one sandbox could
	// take them all.
	PTYs int `json:"ptys,omitempty"`
	// TmpSize caps each of the /tmp, /run and /dev/shm tmpfs mounts (DefaultTmpSize).
	TmpSize int64  `json:"tmp_size,omitempty"`
	Limits  Limits `json:"limits"`
	// Timeout stops the process gracefully after this wall-clock time; 0 is none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// UID and GID are the host identity of this execution when termgate
	// runs as root: a tenant's own ids (from Config.TenantUIDs), so the
	// kernel's per-user limits are not shared between tenants. Zero means
	// the launcher's identity (Config.UID, Config.GID).
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
	// Tenant accounts the execution to a tenant: its cgroup sits inside the
	// tenant's, under Config.TenantLimits. "" is none.
	Tenant string `json:"tenant,omitempty"`
	// Key names the execution durably: with Config.StateDir it is
	// required, unique among the launcher's processes, and what Adopt
	// hands back after a restart. [A-Za-z0-9._-]{1,128}, never "." or
	// "..". Ignored without a StateDir.
	Key string `json:"key,omitempty"`
}

// keyPattern is the syntax of Policy.Key, the keeper's key syntax.
var keyPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`) })

// ValidateKey checks Policy.Key, which a launcher with a StateDir
// requires; errors wrap ErrInvalidPolicy.
func (p Policy) ValidateKey() error {
	switch {
	case p.Key == "":
		return fmt.Errorf("%w: a key is required with a state directory", ErrInvalidPolicy)
	case !keyPattern().MatchString(p.Key) || p.Key == "." || p.Key == "..":
		return fmt.Errorf("%w: key %q must match %s and be neither \".\" nor \"..\"", ErrInvalidPolicy, p.Key, keyPattern())
	}
	return nil
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// Normalize returns a copy with defaults filled in. Validate accepts only
// normalized policies, so both the plan and its tests see the same values.
func (p Policy) Normalize() Policy {
	if p.WorkspaceMount == "" {
		p.WorkspaceMount = DefaultWorkspaceMount
	}
	if p.Cwd == "" {
		p.Cwd = p.WorkspaceMount
	}
	if p.Network == "" {
		p.Network = NetworkNone
	}
	if p.Proc == "" {
		p.Proc = ProcNone
	}
	if p.TmpSize == 0 {
		p.TmpSize = DefaultTmpSize
	}
	env := make(map[string]string, len(p.Env)+1)
	for k, v := range p.Env {
		env[k] = v
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = DefaultPath
	}
	p.Env = env
	return p
}

// Validate reports the first problem of a normalized policy as an error
// wrapping ErrInvalidPolicy, with a message safe to show to the client.
func (p Policy) Validate() error {
	checks := []func() error{
		p.validateCommand, p.validateEnv, p.validateMounts,
		p.validateModes, p.validateListen, p.validateRedirect, p.validateLimits, p.validateIdentity, p.validateTenant,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
		}
	}
	return nil
}

func (p Policy) validateCommand() error {
	if len(p.Command) == 0 || p.Command[0] == "" {
		return errors.New("command is empty")
	}
	if len(p.Command) > maxArgs {
		return fmt.Errorf("command has %d arguments, at most %d allowed", len(p.Command), maxArgs)
	}
	total := 0
	for _, a := range p.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("command argument contains a NUL byte")
		}
		total += len(a) + 1
	}
	if total > maxArgBytes {
		return fmt.Errorf("command arguments take %d bytes, at most %d allowed", total, maxArgBytes)
	}
	if strings.Contains(p.Command[0], "=") {
		return fmt.Errorf("command %q: a program name cannot contain '='", p.Command[0])
	}
	if strings.Contains(p.Command[0], "/") && !path.IsAbs(p.Command[0]) {
		return fmt.Errorf("command %q: a path must be absolute", p.Command[0])
	}
	return nil
}

func (p Policy) validateEnv() error {
	if len(p.Env) > maxEnvVars {
		return fmt.Errorf("%d environment variables, at most %d allowed", len(p.Env), maxEnvVars)
	}
	total := 0
	for k, v := range p.Env {
		if err := ValidateEnvName(k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
		total += len(k) + len(v) + 2
	}
	if total > maxEnvBytes {
		return fmt.Errorf("environment takes %d bytes, at most %d allowed", total, maxEnvBytes)
	}
	return nil
}

// ValidateEnvName reports whether name may be passed into a sandbox.
func ValidateEnvName(name string) error {
	if len(name) > 256 {
		return errors.New("environment variable name is longer than 256 bytes")
	}
	if !envName().MatchString(name) {
		return fmt.Errorf("environment variable name %q must match %s", name, envName())
	}
	return nil
}

// ValidateSandboxPath checks a path meant for inside the sandbox: absolute,
// clean, no NUL, bounded. what names it in the error.
func ValidateSandboxPath(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is empty", what)
	case len(p) > maxPathBytes:
		return fmt.Errorf("%s is longer than %d bytes", what, maxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", what)
	case !path.IsAbs(p):
		return fmt.Errorf("%s %q must be absolute", what, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%s %q must be clean (no //, . or .. parts, no trailing slash)", what, p)
	}
	return nil
}

// reservedDest reports whether an in-sandbox path belongs to the sandbox's
// own skeleton, which binds may not cover or enter.
func reservedDest(p string) bool {
	for _, r := range []string{"/", "/proc", "/dev", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/tmp", "/run"} {
		if p == r || (r != "/" && strings.HasPrefix(p, r+"/")) {
			return true
		}
	}
	return false
}

func (p Policy) validateMounts() error {
	if err := ValidateSandboxPath("workspace mount", p.WorkspaceMount); err != nil {
		return err
	}
	if reservedDest(p.WorkspaceMount) {
		return fmt.Errorf("workspace mount %q is a reserved sandbox path", p.WorkspaceMount)
	}
	if err := ValidateSandboxPath("workspace", p.Workspace); err != nil {
		return err
	}
	if err := ValidateSandboxPath("cwd", p.Cwd); err != nil {
		return err
	}
	if len(p.Binds) > maxBinds {
		return fmt.Errorf("%d binds, at most %d allowed", len(p.Binds), maxBinds)
	}
	seen := map[string]bool{p.WorkspaceMount: true}
	for _, b := range p.Binds {
		if err := validateBind(b, seen); err != nil {
			return err
		}
	}
	return nil
}

func validateBind(b Bind, seen map[string]bool) error {
	if err := ValidateSandboxPath("bind source", b.Source); err != nil {
		return err
	}
	if err := ValidateSandboxPath("bind destination", b.Dest); err != nil {
		return err
	}
	if reservedDest(b.Dest) {
		return fmt.Errorf("bind destination %q is a reserved sandbox path", b.Dest)
	}
	if seen[b.Dest] {
		return fmt.Errorf("bind destination %q is used twice", b.Dest)
	}
	seen[b.Dest] = true
	return nil
}

func (p Policy) validateModes() error {
	switch p.Network {
	case NetworkNone, NetworkHost:
	default:
		return fmt.Errorf("network %q: want none or host", p.Network)
	}
	switch p.Proc {
	case ProcNone, ProcPrivate:
		if p.SelfExe != "" {
			return fmt.Errorf("self-exe target %q needs proc mode self-exe", p.SelfExe)
		}
	case ProcSelfExe:
		if err := ValidateSandboxPath("self-exe target", p.SelfExe); err != nil {
			return err
		}
	default:
		return fmt.Errorf("proc %q: want none, private or self-exe", p.Proc)
	}
	if p.TTY != nil && (p.TTY.Rows == 0 || p.TTY.Cols == 0) {
		return errors.New("terminal size must be at least 1x1")
	}
	if p.Timeout < 0 {
		return errors.New("timeout is negative")
	}
	if p.PTYs < 0 || p.PTYs > MaxPTYs {
		return fmt.Errorf("ptys %d: want 0..%d", p.PTYs, MaxPTYs)
	}
	return nil
}

// validateIdentity accepts no identity or a whole one that is neither
// root nor nobody (whose reserved disk blocks a sandbox must not get).
func (p Policy) validateIdentity() error {
	switch {
	case p.UID == 0 && p.GID == 0:
		return nil
	case p.UID == 0 || p.GID == 0:
		return fmt.Errorf("uid %d and gid %d: give both or neither, never 0", p.UID, p.GID)
	case p.UID == 65534 || p.GID == 65534:
		return errors.New("uid/gid 65534 (nobody) cannot run a sandbox")
	}
	return nil
}

// Lower bounds below which bwrap itself cannot start: a ceiling that low is
// a mistake, not a policy.
const (
	minAddressSpace = 64 << 20
	minOpenFiles    = 16
	minFileSize     = 64 << 10
	minMemory       = 8 << 20
	minTmpSize      = 64 << 10
	// minPids leaves room for bwrap, its pid 1 and the init's threads.
	minPids = 8
)

func (p Policy) validateLimits() error {
	l := p.Limits
	switch {
	case p.TmpSize < minTmpSize:
		return fmt.Errorf("tmp size %d is below the minimum %d", p.TmpSize, minTmpSize)
	case l.AddressSpace != 0 && l.AddressSpace < minAddressSpace:
		return fmt.Errorf("address space %d is below the minimum %d", l.AddressSpace, minAddressSpace)
	case l.OpenFiles != 0 && l.OpenFiles < minOpenFiles:
		return fmt.Errorf("open files %d is below the minimum %d", l.OpenFiles, minOpenFiles)
	case l.FileSize != 0 && l.FileSize < minFileSize:
		return fmt.Errorf("file size %d is below the minimum %d", l.FileSize, minFileSize)
	case l.Memory < 0 || (l.Memory != 0 && l.Memory < minMemory):
		return fmt.Errorf("memory %d is below the minimum %d", l.Memory, minMemory)
	case l.Pids < 0 || (l.Pids != 0 && l.Pids < minPids):
		return fmt.Errorf("pids %d is below the minimum %d", l.Pids, minPids)
	case l.CPUWeight < 0 || l.CPUWeight > 10000:
		return fmt.Errorf("cpu weight %d: want 1..10000", l.CPUWeight)
	}
	return nil
}

// validateTenant keeps a tenant usable as its cgroup's name; "" is none.
func (p Policy) validateTenant() error {
	if p.Tenant == "" {
		return nil
	}
	return cgroup.ValidateTenant(p.Tenant)
}

// sortedEnv returns the environment as KEY=VALUE, sorted, for a stable plan.
func (p Policy) sortedEnv() []string {
	out := make([]string, 0, len(p.Env))
	for k, v := range p.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
