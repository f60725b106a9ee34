package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/web"
)

// serveOptions are the flags of termgate serve; each has a TERMGATE_*
// environment equivalent (flag > environment > default).
type serveOptions struct {
	listen, tlsCert, tlsKey       string
	secretFile, audience          string
	tenantClaim, workspaceRoot    string
	defaultCommand, logLevel      string
	logFormat                     string
	publicKeys, origins, commands []string
	trustedProxies                []string
	issuers, jwksURLs, bindings   []string
	jwksRefresh                   time.Duration
	dev, queryToken               bool
	sandbox                       sandbox.Config
	policy                        gateway.SandboxConfig
	session                       session.Config
	server                        gateway.Config
	network, proc                 string
	devTenant                     string
	leeway                        time.Duration
	workspaces                    workspaceOptions
	idleTimeout, headerTimeout    time.Duration
	firstByteTimeout              time.Duration
	timeoutWarning                time.Duration
	listener                      gateway.ListenerConfig
	fdHeadroom                    int
	screens                       screenOptions
	stateDir                      string
	orphanGrace                   time.Duration
	recordingsRetention           time.Duration // --recordings-retention; 0: kept
	metricsListen                 string
	config                        string    // --config: the file read, if any
	printConfig                   bool      // --print-config
	flags                         *envFlags // for --print-config
	audit                         audit.Config
	cluster                       clusterOptions // cluster_linux.go
	sigterm                       string         // restart or shutdown
}

// envFlags registers flags whose defaults come from the environment,
// else from the config file (flag > environment > file > default), and
// keeps what --print-config prints of each.
type envFlags struct {
	fs      *flag.FlagSet
	err     error
	file    *configFile // nil: no config file
	printed []printedFlag
}

func envName(flagName string) string {
	return "TERMGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// preset is name's value before the command line: its environment
// variable's, else the config file's if its type is one of accept; where
// names the source for errors.
func (e *envFlags) preset(name string, accept tomlKinds) (v, where string, ok bool) {
	v, ok, err := e.file.scalar(name, accept) // checked even when the environment wins
	e.err = errors.Join(e.err, err)
	if env, set := os.LookupEnv(envName(name)); set {
		return env, envName(name), true
	}
	if !ok {
		return "", "", false
	}
	return v, e.file.where(name), true
}

func (e *envFlags) str(p *string, name, def, usage string) {
	builtin := def
	if v, _, ok := e.preset(name, tomlString); ok {
		def = v
	}
	e.fs.StringVar(p, name, def, usage+" (env "+envName(name)+")")
	e.print(name, usage, func() (string, bool) { return tomlQuote(*p), *p == builtin })
}

func (e *envFlags) list(p *[]string, name, usage string) {
	l, inFile, err := e.file.list(name)
	e.err = errors.Join(e.err, err)
	if v, ok := os.LookupEnv(envName(name)); ok && v != "" {
		*p = strings.Split(v, ",")
	} else if inFile {
		*p = l
	}
	fromEnv := true
	e.fs.Func(name, usage+" (repeatable; env "+envName(name)+", comma-separated)", func(s string) error {
		if fromEnv {
			*p, fromEnv = nil, false // a flag replaces the environment's list
		}
		*p = append(*p, s)
		return nil
	})
	e.print(name, usage, func() (string, bool) { return tomlArray(*p), len(*p) == 0 })
}

func (e *envFlags) boolean(p *bool, name string, def bool, usage string) {
	builtin := def
	if v, where, ok := e.preset(name, tomlBoolean); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.err = errors.Join(e.err, fmt.Errorf("%s: want true or false, got %q", where, v))
		}
		def = b
	}
	e.fs.BoolVar(p, name, def, usage+" (env "+envName(name)+")")
	e.print(name, usage, func() (string, bool) { return strconv.FormatBool(*p), *p == builtin })
}

func (e *envFlags) duration(p *time.Duration, name string, def time.Duration, usage string) {
	builtin := def
	if v, where, ok := e.preset(name, tomlString); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.err = errors.Join(e.err, fmt.Errorf("%s: %w", where, err))
		}
		def = d
	}
	e.fs.DurationVar(p, name, def, usage+" (env "+envName(name)+")")
	e.print(name, usage, func() (string, bool) { return tomlQuote(durationText(*p)), *p == builtin })
}

// parsed registers a flag parsed by parse, with an environment default.
func (e *envFlags) parsed(name, usage string, parse func(string) error) {
	text, set := "", false // what parse took last, for --print-config
	record := func(s string) error {
		if err := parse(s); err != nil {
			return err
		}
		text, set = s, true
		return nil
	}
	if v, where, ok := e.preset(name, tomlString|tomlInteger); ok {
		if err := record(v); err != nil {
			e.err = errors.Join(e.err, fmt.Errorf("%s: %w", where, err))
		}
	}
	e.fs.Func(name, usage+" (env "+envName(name)+")", record)
	e.print(name, usage, func() (string, bool) { return tomlScalar(text), !set })
}

func serveFlags(o *serveOptions, file *configFile) *envFlags {
	e := &envFlags{fs: newFlagSet("serve"), file: file}
	registerConfigFlags(e, o)
	e.boolean(&o.dev, "dev", false, "development mode: generated secret, state-directory workspaces, prints a ready URL")
	e.str(&o.listen, "listen", "127.0.0.1:8080", "address to listen on")
	e.str(&o.metricsListen, "metrics-listen", "", "address of a separate listener for Prometheus /metrics and /debug/pprof, for example 127.0.0.1:9464; keep it private (default off)")
	e.boolean(&o.server.MetricsTenantLabel, "metrics-tenant-label", false, "label executions running and started by tenant in the metrics (the first 100 tenants; the rest as _other)")
	e.str(&o.tlsCert, "tls-cert", "", "TLS certificate file (with --tls-key)")
	e.str(&o.tlsKey, "tls-key", "", "TLS key file")
	e.str(&o.secretFile, "jwt-secret-file", "", "file holding the HS256 secret (at least 32 bytes)")
	e.list(&o.publicKeys, "jwt-public-key", "PEM public key file, [kid=]path: RS256, ES256 or EdDSA")
	e.list(&o.jwksURLs, "jwt-jwks-url", "identity provider's JWK Set URL (https; http only to 127.0.0.0/8 or ::1): RS256, ES256 or EdDSA keys chosen by kid")
	e.duration(&o.jwksRefresh, "jwt-jwks-refresh", auth.DefaultJWKSRefreshInterval, "how often each JWK Set is fetched again (10s to 24h); a removed key is refused after at most this")
	e.list(&o.issuers, "jwt-issuer", "accepted token issuer, ISSUER[=SOURCE|SOURCE...]: limited to the key sources named (kids of key files, JWKS URLs)")
	e.list(&o.bindings, "jwt-tenant-binding", "SOURCE=TENANT|TENANT...: tokens of that key source (a key file's kid, a JWKS URL) or issuer may name only these tenants")
	e.str(&o.audience, "jwt-audience", "", "required token audience")
	e.duration(&o.leeway, "jwt-leeway", 30*time.Second, "clock skew allowed on exp, nbf and iat (at most 1m); connections end at exp plus it")
	e.str(&o.tenantClaim, "tenant-claim", "tenant", "token claim naming the tenant")
	e.boolean(&o.queryToken, "query-token", false, "also accept ?token= (URLs leak into logs: avoid)")
	e.list(&o.origins, "origin", "browser origin allowed besides the server's own host")
	e.list(&o.trustedProxies, "trusted-proxy", "reverse proxy, an address or CIDR prefix: when the TCP peer is one, logs name the client by X-Forwarded-For (the right-most address that is no trusted proxy); from other peers the header is ignored")
	e.str(&o.workspaceRoot, "workspace-root", "", "directory holding one workspace per tenant")
	e.list(&o.commands, "command", "program clients may start (default /bin/bash, /bin/sh)")
	e.str(&o.defaultCommand, "default-command", "/bin/bash -l", "command run when a client names none (space-separated)")
	e.str(&o.network, "network", "none", "sandbox network: none or host")
	e.str(&o.proc, "proc", "auto", "sandbox procfs: private (ps and top work; needs Landlock), none, or auto: private where the host has Landlock, else none")
	o.policy.TmpSize = sandbox.DefaultTmpSize // what applies, for the startup log
	e.parsed("tmp-size", "size of /tmp, /run and /dev/shm in each sandbox (default 64M)", sizeFlag(&o.policy.TmpSize))
	e.parsed("ptys", "terminals each sandbox may open itself, for tmux or script (0: none)", ptysFlag(&o.policy.PTYs))
	o.policy.Limits, o.sandbox.TenantLimits = defaultServeLimits, defaultTenantLimits
	e.parsed("cpu-seconds", "CPU seconds per process: default and ceiling (0: none)", uintFlag(&o.policy.Limits.CPUSeconds))
	e.parsed("memory", "memory per execution in bytes, swap included: default and ceiling (default 1G; 0: none)", sizeFlag(&o.policy.Limits.Memory))
	e.parsed("pids", "processes per execution: default and ceiling (default 512; 0: none)", intFlag(&o.policy.Limits.Pids))
	e.parsed("cpu-weight", "CPU share per execution, 1..10000, 100 as the host's other processes: default and ceiling (default 100; 0: none)", cpuWeightFlag(&o.policy.Limits.CPUWeight))
	e.parsed("tenant-memory", "memory of all of a tenant's executions together, swap included (default 4G; 0: none)", sizeFlag(&o.sandbox.TenantLimits.Memory))
	e.parsed("tenant-pids", "processes and threads of all of a tenant's executions together (default 2048; 0: none)", intFlag(&o.sandbox.TenantLimits.Pids))
	e.parsed("tenant-cpu-weight", "CPU share of each tenant as a whole, 1..10000, so a tenant's many executions count as one (default 100; 0: none)", cpuWeightFlag(&o.sandbox.TenantLimits.CPUWeight))
	e.str(&o.sandbox.CgroupParent, "cgroup-parent", "termgate", "cgroup directory of this server's executions in every hierarchy; two servers on one host need two")
	e.parsed("open-files", "open files per process: default and ceiling (0: none)", uintFlag(&o.policy.Limits.OpenFiles))
	e.parsed("file-size", "largest file written, in bytes: default and ceiling (default 1G; 0: none)", usizeFlag(&o.policy.Limits.FileSize))
	e.duration(&o.policy.DefaultTimeout, "timeout", session.DefaultTimeout, "absolute timeout of a batch execution (pipes) that names none")
	e.duration(&o.policy.InteractiveTimeout, "interactive-timeout", session.DefaultInteractiveTimeout, "absolute timeout of an interactive execution (a terminal, or interactive pipes) that names none")
	e.duration(&o.policy.IdleTimeout, "interactive-idle-timeout", session.DefaultIdleTimeout, "stop an interactive execution after this long with no writer attached and no input")
	e.duration(&o.timeoutWarning, "timeout-warning", session.DefaultTimeoutWarning, "warn attached clients this long before a timeout fires (at most half the timeout; 0: no warning)")
	e.duration(&o.policy.MaxTimeout, "max-timeout", gateway.DefaultMaxTimeout, "longest timeout or idle timeout a client may ask for")
	e.duration(&o.session.DefaultRetention, "retention", session.DefaultRetention, "how long a finished execution's result is kept")
	e.parsed("max-running", "running executions in total", intPtr(&o.session.MaxRunning, session.DefaultMaxRunning))
	e.parsed("max-running-per-tenant", "running executions per tenant (default 16)", intPtr(&o.session.MaxRunningPerOwner, defaultMaxRunningPerTenant))
	e.parsed("max-retained", "executions kept, running or finished (default 1024)", intPtr(&o.session.MaxRetained, session.DefaultMaxRetained))
	e.parsed("max-retained-per-tenant", "executions one tenant keeps, running or finished (default 128)", intPtr(&o.session.MaxRetainedPerOwner, session.DefaultMaxRetainedPerOwner))
	e.parsed("ring-bytes", "replayable output kept per execution, in bytes (default 1M)", ringBytes(&o.server.Ring.MaxBytes))
	e.parsed("ring-events", "replayable events kept per execution (default 4096)", intPtr(&o.server.Ring.MaxEvents, replay.DefaultMaxEvents))
	e.str(&o.server.Flow, "flow", wire.FlowHold, "output flow of a start that names none: hold (the program waits for acknowledging writers; nothing is lost) or live (it never waits; slow readers see gaps)")
	e.duration(&o.server.Hold, "hold", gateway.DefaultHold, "how long held output waits for an acknowledging writer who left to come back, before the execution runs free")
	e.duration(&o.server.MaxHold, "max-hold", gateway.DefaultMaxHold, "longest hold a start may ask for (hold_ms)")
	e.parsed("scrollback", fmt.Sprintf("lines of history above the screen a terminal's state keeps for snapshots, 1..%d (default 1000)", maxScrollback), scrollbackFlag(&o.session.Scrollback))
	e.parsed("max-message-bytes", "largest WebSocket message (larger closes with 1009)", sizeFlag(&o.server.MaxMessageBytes))
	o.screens.register(e, &o.server)
	e.parsed("max-channels", "attached channels per connection", intPtr(&o.server.MaxChannels, gateway.DefaultMaxChannels))
	e.parsed("max-conns-per-subject", "connections per token subject", intPtr(&o.server.MaxConnsPerSubject, gateway.DefaultMaxConnsPerSubject))
	e.parsed("starts-per-minute", "starts per minute per token subject, across its connections and the HTTP API", intPtr(&o.server.StartsPerMinute, gateway.DefaultStartsPerMinute))
	e.parsed("input-per-second", "input messages per second per token subject, across its connections and the HTTP API, sustained; bursts of 16 s of it (a paste sent a line a message, keystrokes as fast as their echo) are taken at once", intPtr(&o.server.InputPerSecond, gateway.DefaultInputPerSecond))
	e.parsed("resizes-per-second", "resize and signal requests per second per token subject, across its connections, sustained; bursts of 10 s of it (a window dragged, windows retiled) are taken at once", intPtr(&o.server.ResizesPerSecond, gateway.DefaultResizesPerSecond))
	e.duration(&o.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a kept-alive HTTP connection may wait for its next request")
	e.duration(&o.headerTimeout, "read-header-timeout", defaultHeaderTimeout, "how long a client may take to send a request's headers")
	e.duration(&o.server.RequestReadTimeout, "read-timeout", gateway.DefaultRequestReadTimeout, "how long a client may take to send an HTTP API request's body (not long polls or WebSockets)")
	e.parsed("max-conns", "open connections in total, authenticated or not (default 4096)", intPtr(&o.listener.MaxConns, gateway.DefaultMaxConns))
	e.parsed("max-conns-per-addr", "open connections from one client: an IPv4 /24 or an IPv6 /64 (default 256)", intPtr(&o.listener.MaxConnsPerAddr, gateway.DefaultMaxConnsPerAddr))
	e.parsed("max-preauth-conns", "open connections that have not sent a complete request header, at most --max-conns: when full, a new one takes the place of the oldest of the client holding the most (default --max-conns/4)", intPtr(&o.listener.MaxPreAuthConns, 0))
	e.duration(&o.firstByteTimeout, "first-byte-timeout", gateway.DefaultFirstByteTimeout, "close a new connection that sends nothing for this long (0: off)")
	e.parsed("fd-headroom", "file descriptors kept free for starts: no new connection while fewer are free (default 128; 0: off)", nonNegative(&o.fdHeadroom, gateway.DefaultFDHeadroom))
	e.parsed("sandbox-uid", "host uid the sandbox runs as when termgate is root", idFlag(&o.sandbox.UID))
	e.parsed("sandbox-gid", "host gid the sandbox runs as when termgate is root", idFlag(&o.sandbox.GID))
	o.workspaces.register(e)
	e.str(&o.stateDir, "state-dir", "", "directory of the executions' state, best on tmpfs: they outlive a restart or crash of the server (default /run/termgate for root, $XDG_RUNTIME_DIR/termgate for others, who must give one without it; mode 0700, ours, not a symbolic link, in a parent nobody else may write unless sticky; none: executions end with the server)")
	e.duration(&o.orphanGrace, "orphan-grace", defaultOrphanGrace, "how long executions outlive a server that does not come back, before they are stopped as a cancel would")
	e.str(&o.session.RecordingsDir, "recordings-dir", "", "directory of session recordings, asciicast v2 files of mode 0600 (absolute; default none: nothing is recorded)")
	o.session.RecordingMaxSize = session.DefaultRecordingMaxSize
	e.parsed("recording-max-size", "largest recording in bytes, at least 4K: what comes after is not recorded, and a final marker and the result say how much (default 64M)", sizeFlag(&o.session.RecordingMaxSize))
	o.session.RecordingsMaxBytes, o.session.RecordingsMaxBytesPerOwner = session.DefaultRecordingsMaxBytes, session.DefaultRecordingsMaxBytesPerOwner
	e.parsed("recordings-max-bytes", "bytes all recordings together may hold, a recording being written counted at --recording-max-size: a start to be recorded past it is refused (default 4G)", sizeFlag(&o.session.RecordingsMaxBytes))
	e.parsed("recordings-max-bytes-per-tenant", "bytes one tenant's recordings may hold, counted as --recordings-max-bytes (default 1G)", sizeFlag(&o.session.RecordingsMaxBytesPerOwner))
	e.parsed("recordings-max-files", "recordings the directory may hold: a start to be recorded past it is refused (default 10000)", intPtr(&o.session.RecordingsMaxFiles, session.DefaultRecordingsMaxFiles))
	e.parsed("recordings-max-files-per-tenant", "recordings one tenant may hold (default 1000)", intPtr(&o.session.RecordingsMaxFilesPerOwner, session.DefaultRecordingsMaxFilesPerOwner))
	e.duration(&o.recordingsRetention, "recordings-retention", session.DefaultRecordingsRetention, "how long a recording is kept after its last write, then deleted (0: until removed by hand)")
	e.parsed("record", "whose executions are recorded: all, none, or tenant,tenant (default none); any start may ask with record when its token has the exec:record scope", recordFlag(&o.server.Record))
	e.boolean(&o.server.Record.Input, "record-input", false, "also record the input of every recorded execution (input can hold passwords; without it, only a start's record_input does)")
	e.str(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	e.str(&o.logFormat, "log-format", "json", "json (one object per line) or text (key=value)")
	e.str(&o.audit.Path, "audit-log", "", "append-only JSON-lines audit file, mode 0600, in a directory that exists (default off)")
	e.parsed("audit-max-size", "size at which the audit file is rotated, at least 64K (default 100M)", sizeFlag(&o.audit.MaxSize))
	e.parsed("audit-keep", fmt.Sprintf("rotated audit files kept, PATH.1 ... PATH.N, 1..%d (default %d)", audit.MaxKeep, audit.DefaultKeep), intPtr(&o.audit.Keep, audit.DefaultKeep))
	e.str(&o.sigterm, "sigterm", sigtermRestart, "what SIGTERM does: restart (executions live on for the next server on the state directory) or shutdown (stop them, as SIGINT; on Kubernetes, where a pod's processes end with it)")
	e.str(&o.cluster.node, "node", "", "this node's name, an RFC 1123 label such as termgate-0: cluster mode, new execution IDs name their node (default off: a single node)")
	e.list(&o.cluster.peers, "peer", "another node, NAME=URL such as termgate-1=http://10.0.0.2:8080 (may list this node too)")
	e.str(&o.cluster.peerDNS, "peer-dns", "", "headless Service whose SRV records (port named http) list the nodes, such as termgate-headless.default.svc.cluster.local; excludes --peer")
	e.parsed("peer-port", "the nodes' port with --peer-dns (default --listen's)", peerPortFlag(&o.cluster.peerPort))
	e.str(&o.cluster.peerScheme, "peer-scheme", "", "http or https: how nodes found by --peer-dns are reached (default http)")
	e.list(&o.cluster.secretFiles, "node-secret-file", "file holding the secret every node shares (at least 32 bytes, mode 0600), which signs the hops between nodes; required with --node; the first signs, all verify (rotation)")
	e.duration(&o.cluster.dialTimeout, "peer-dial-timeout", gateway.DefaultPeerDialTimeout, "how long a TCP connect to another node may take (at most 1m)")
	e.duration(&o.cluster.timeout, "peer-timeout", gateway.DefaultPeerTimeout, "how long another node may take to answer: response headers, a keyed start's probe, ls across nodes (at most 1m)")
	e.duration(&o.cluster.ping, "peer-ping", gateway.DefaultPeerPing, "how often a relayed connection pings its node; a pong missing this long ends it (50ms to 5m)")
	return e
}

// defaultServeLimits are every execution's ceilings unless flags say
// otherwise, in dev mode too: a shell without them can take the host's
// memory, processes or disk.
var defaultServeLimits = sandbox.Limits{Memory: 1 << 30, Pids: 512, FileSize: 1 << 30, CPUWeight: 100}

// defaultTenantLimits bound each tenant as a whole by default: together
// its executions count as one group of the host's CPU and never take more
// than this memory or these processes, however many it runs.
var defaultTenantLimits = sandbox.Limits{Memory: 4 << 30, Pids: 2048, CPUWeight: 100}

// defaultMaxRunningPerTenant is --max-running-per-tenant's default, below
// the supervisor's: with the memory default, 16 GiB per tenant at most.
const defaultMaxRunningPerTenant = 16

func cpuWeightFlag(dst *int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > 10000 {
			return fmt.Errorf("want a weight between 1 and 10000, or 0 for none, got %q", s)
		}
		*dst = v
		return nil
	}
}

// checkCeilings refuses to serve with a default ceiling the host cannot
// enforce (ceilings is the probe's Report.Ceilings): executions would
// otherwise fail one by one, or, worse, run without it. The error names
// the flag that turns the ceiling off.
func checkCeilings(l, tenant sandbox.Limits, ceilings map[string]bool) error {
	var errs []error
	for _, c := range []struct {
		set        bool
		name, flag string
	}{
		{l.Memory > 0, "memory", "--memory"},
		{l.Pids > 0, "pids", "--pids"},
		{l.CPUWeight > 0, "cpu_weight", "--cpu-weight"},
		{tenant.Memory > 0, "memory", "--tenant-memory"},
		{tenant.Pids > 0, "pids", "--tenant-pids"},
		{tenant.CPUWeight > 0, "cpu_weight", "--tenant-cpu-weight"},
	} {
		if c.set && !ceilings[c.name] {
			errs = append(errs, fmt.Errorf("this host cannot enforce the %s ceiling (no cgroup controller for it): set %s 0 (env %s=0) to run without it", c.name, c.flag, envName(strings.TrimPrefix(c.flag, "--"))))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("serve: refusing to start: %w", errors.Join(errs...))
	}
	return nil
}

// DefaultPTYs is the terminals each sandbox may open under serve: enough for
// tmux or script, and with the default capacity (256 running) well inside
// the kernel's pool.
const DefaultPTYs = 4

func ptysFlag(dst *int) func(string) error {
	*dst = DefaultPTYs
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > sandbox.MaxPTYs {
			return fmt.Errorf("want 0 to %d, got %q", sandbox.MaxPTYs, s)
		}
		*dst = v
		return nil
	}
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

func ringBytes(dst *int) func(string) error {
	return func(s string) error {
		v, err := parseSize(s)
		if err != nil || v < 4096 || v > 1<<30 {
			return fmt.Errorf("want a size between 4K and 1G, got %q", s)
		}
		*dst = int(v)
		return nil
	}
}

// Connection timeouts of serve.
const (
	defaultIdleTimeout   = 60 * time.Second
	defaultHeaderTimeout = 10 * time.Second
)

func nonNegative(dst *int, def int) func(string) error {
	*dst = def
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return fmt.Errorf("want a non-negative integer, got %q", s)
		}
		*dst = v
		return nil
	}
}

// maxScrollback bounds --scrollback: each line of a 250-column terminal
// costs a few KiB of the emulator's memory per execution.
const maxScrollback = 100_000

func scrollbackFlag(dst *int) func(string) error {
	*dst = session.DefaultScrollback
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxScrollback {
			return fmt.Errorf("want lines between 1 and %d, got %q", maxScrollback, s)
		}
		*dst = v
		return nil
	}
}

func intPtr(dst *int, def int) func(string) error {
	*dst = def
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			return fmt.Errorf("want a positive integer, got %q", s)
		}
		*dst = v
		return nil
	}
}

func newServeOptions() *serveOptions {
	return &serveOptions{devTenant: "dev", workspaces: defaultWorkspaceOptions()}
}

func serveFlagSet() *flag.FlagSet { return serveFlags(newServeOptions(), nil).fs }

// parseServe parses serve's flags over its environment over its config
// file. Help and flag errors are printed by dispatch, so stderr is unused;
// tests pass any.
func parseServe(args []string, _ io.Writer) (*serveOptions, error) {
	o, err := parseServeWith(args, nil)
	if err == nil && o.config != "" {
		// Again, with the file the flags and environment named.
		file, ferr := loadConfigFile(o.config)
		if ferr != nil {
			return nil, usageError{ferr}
		}
		o, err = parseServeWith(args, file)
	}
	if err != nil || o.printConfig {
		return o, err
	}
	return o, o.check()
}

// parseServeWith parses args over the environment over file (nil: none).
func parseServeWith(args []string, file *configFile) (*serveOptions, error) {
	o := newServeOptions()
	e := serveFlags(o, file)
	if err := errors.Join(e.err, file.unknown(func(k string) bool { return e.fs.Lookup(k) != nil })); err != nil {
		return nil, usageError{err}
	}
	if err := parseFlags(e.fs, args); err != nil {
		return nil, err
	}
	if e.fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("serve: unexpected argument %q", e.fs.Arg(0))}
	}
	o.flags = e
	return o, nil
}

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
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usageError{errors.New("serve: --tls-cert and --tls-key go together")}
	case o.network != "none" && o.network != "host":
		return usageError{fmt.Errorf("serve: --network: want none or host, got %q", o.network)}
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

// newLevelLogger returns serve's logger: JSON or text lines at level and
// above. Both escape control characters (C0, C1 and DEL), so a value
// cannot forge a line or a terminal sequence.
func newLevelLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("serve: --log-level: %w", err)}
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(c1Escaper{w}, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("serve: --log-format: want json or text, got %q", format)}
}

// runServe runs the gateway until ctx ends (SIGTERM, SIGINT), then stops
// accepting, closes connections with 1001, stops executions gracefully
// and returns nil. SIGHUP re-reads the key files (reloadOnHangup).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// First of all: SIGHUP's default disposition ends the process.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	o, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	if o.printConfig {
		return o.flags.printConfig(stdout)
	}
	log, err := newLevelLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if o.dev {
		if err := o.devDefaults(); err != nil {
			return err
		}
		o.workspaces.devDefaults()
	}
	o.logConfig(log)
	g, err := o.build(ctx, log)
	if err != nil {
		return err
	}
	defer g.launcher.Close()
	defer g.workspaces.Close() // after the supervisor's executions ended (g.serve)
	defer g.authn.Close()
	defer g.reloadOnHangup(ctx, hups, log)()
	// The trail closes once g.serve recorded the executions' ends.
	defer o.server.Audit.Close()
	raw, err := net.Listen("tcp", o.listen)
	if err != nil {
		g.sup.Detach(context.Background()) // executions taken over live on
		return fmt.Errorf("serve: %w", err)
	}
	ln, err := o.limitListener(raw, log)
	if err != nil {
		raw.Close()
		g.sup.Detach(context.Background())
		return err
	}
	mln, err := o.listenMetrics()
	if err != nil {
		ln.Close()
		g.sup.Detach(context.Background())
		return err
	}
	if o.dev {
		if err := o.printDevURL(stdout, g.authn, ln.Addr().String()); err != nil {
			return err
		}
	}
	g.srv.CountRefusals(ln)
	return g.serve(ctx, ln, mln, o, log)
}

// listenMetrics opens --metrics-listen; nil when it is off.
func (o *serveOptions) listenMetrics() (net.Listener, error) {
	if o.metricsListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("serve: --metrics-listen: %w", err)
	}
	return ln, nil
}

// serveMetrics serves the gateway's metrics and pprof on mln, a listener
// of their own, until the returned stop is called (after the server
// stopped: a drain can be watched). A nil mln serves nothing.
func (g *gatewayParts) serveMetrics(mln net.Listener, o *serveOptions, log *slog.Logger) (stop func()) {
	if mln == nil {
		return func() {}
	}
	hs := &http.Server{
		Handler: g.srv.MetricsHandler(), ReadHeaderTimeout: o.headerTimeout, IdleTimeout: o.idleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", mln.Addr().String())
	return func() { hs.Close(); <-done }
}

// gatewayParts are the wired components of a running server.
type gatewayParts struct {
	launcher   *sandbox.Launcher
	workspaces *sandbox.Workspaces
	sup        *session.Supervisor
	authn      *auth.Authenticator
	srv        *gateway.Server
	stops      *stopSignals
	runPeers   func(context.Context) // the cluster's member refresh (buildCluster)
}

// build probes the sandbox (serve refuses to start when it cannot
// isolate) and wires launcher, supervisor, authenticator and server. With
// a state directory the supervisor first takes over what an earlier
// server left; a failure after that leaves those executions running.
func (o *serveOptions) build(ctx context.Context, log *slog.Logger) (g *gatewayParts, err error) {
	var undo []func()
	defer func() {
		for i := len(undo) - 1; err != nil && i >= 0; i-- {
			undo[i]()
		}
	}()
	o.sandbox.Logger, o.sandbox.TenantUIDs = log, o.workspaces.tenantUIDs
	if err := o.useStateDir(); err != nil {
		return nil, err
	}
	// Before the restore: a state directory of another node is refused.
	clusterCfg, runPeers, err := buildCluster(o, log)
	if err != nil {
		return nil, err
	}
	o.server.Cluster = clusterCfg
	l, err := sandbox.NewLauncher(o.sandbox)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { l.Close() })
	o.session.Launcher, o.session.Logger = session.SandboxLauncher(l), log
	o.wireTimeouts()
	o.screens.wire(&o.session, o.server.MaxMessageBytes)
	sup, err := session.New(o.session)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { sup.Detach(context.Background()) })
	if err := o.restore(ctx, sup, log); err != nil {
		return nil, err
	}
	// Before the probe, which starts a sandbox: the sweep refuses once
	// anything started, and with a state directory before the adoption.
	swept, err := l.SweepCgroups()
	if err != nil {
		return nil, fmt.Errorf("serve: remove what a previous instance left: %w", err)
	}
	log.Info("swept cgroups of a previous instance", "removed", len(swept.Removed), "killed", swept.Killed)
	if err := o.verify(ctx, l, log); err != nil {
		return nil, err
	}
	acfg, err := o.authConfig(log)
	if err != nil {
		return nil, err
	}
	authn, err := auth.New(acfg)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { authn.Close() })
	log.Info("verification keys", "kids", authn.KeyIDs(), "jwks_urls", o.jwksURLs)
	wcfg := o.workspaces.config(o.workspaceRoot)
	// With a state directory executions outlive the server: their
	// sandboxes use the workspaces an earlier server mounted.
	wcfg.Logger, wcfg.Adopt = log, o.stateDir != ""
	ws, err := sandbox.OpenWorkspaces(wcfg)
	if err != nil {
		return nil, fmt.Errorf("serve: refusing to start: %w", o.workspaces.explain(err))
	}
	undo = append(undo, func() { ws.Close() })
	o.policy.Network, o.policy.Proc = sandbox.Network(o.network), sandbox.ProcMode(o.proc)
	o.server.Supervisor, o.server.Auth, o.server.Logger, o.server.Workspaces = sup, authn, log, ws
	o.server.WorkspaceRoot, o.server.Origins, o.server.QueryToken = o.workspaceRoot, o.origins, o.queryToken
	o.server.Commands, o.server.DefaultCommand, o.server.Sandbox = o.commands, strings.Fields(o.defaultCommand), o.policy
	if o.audit.Path != "" {
		o.audit.Logger = log
		if o.server.Audit, err = audit.Open(o.audit); err != nil {
			return nil, fmt.Errorf("serve: refusing to start: %w", err)
		}
		undo = append(undo, func() { o.server.Audit.Close() })
	}
	srv, err := gateway.NewServer(o.server)
	if err != nil {
		return nil, err
	}
	return &gatewayParts{launcher: l, workspaces: ws, sup: sup, authn: authn, srv: srv,
		stops: watchStopSignals(o.sigterm == sigtermShutdown), runPeers: runPeers}, nil
}

// useStateDir resolves --state-dir into the launcher's and the
// supervisor's configuration.
func (o *serveOptions) useStateDir() error {
	dir, err := resolveStateDir(o.stateDir)
	if err != nil {
		return err
	}
	o.stateDir, o.session.StateDir = dir, dir
	if dir != "" {
		o.sandbox.StateDir, o.sandbox.OrphanGrace = dir, o.orphanGrace
		ws := o.workspaces.config(o.workspaceRoot)
		o.sandbox.StartKeeper = startKeeper(dir, o.orphanGrace, cmp.Or(o.sandbox.KillGrace, sandbox.DefaultKillGrace), keeperCleanup{
			CgroupParent: cmp.Or(o.sandbox.CgroupParent, "termgate"), WorkspaceRoot: ws.Root, TenantUIDs: ws.TenantUIDs, Bytes: ws.Bytes, Inodes: ws.Inodes,
		})
	}
	return nil
}

// restore takes over the executions an earlier server left in the state
// directory.
func (o *serveOptions) restore(ctx context.Context, sup *session.Supervisor, log *slog.Logger) error {
	if o.stateDir == "" {
		return nil
	}
	began := time.Now()
	n, err := sup.Restore(ctx)
	if err != nil {
		return fmt.Errorf("serve: take over the executions in %s: %w", o.stateDir, err)
	}
	log.Info("executions taken over", "state_dir", o.stateDir, "running", n.Running, "ended", n.Ended,
		"lost", n.Lost, "gone", n.Gone, "duration", time.Since(began).Seconds())
	return nil
}

// verify probes the sandbox and checks the ceilings and terminals asked
// for against what it enforces.
func (o *serveOptions) verify(ctx context.Context, l *sandbox.Launcher, log *slog.Logger) error {
	report, err := l.Probe(ctx)
	if err != nil {
		return fmt.Errorf("serve: refusing to start: %w", err)
	}
	if err := errors.Join(checkCeilings(o.policy.Limits, o.sandbox.TenantLimits, report.Ceilings),
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
	return nil
}

// routes joins the gateway's routes, built once, and the browser terminal
// on one mux.
func routes(gw, terminal http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw) // the WebSocket endpoint and the HTTP API
	mux.Handle("/healthz", gw)
	mux.Handle("/readyz", gw)
	mux.Handle("/", terminal) // the browser terminal
	return mux
}

func (g *gatewayParts) serve(ctx context.Context, ln, mln net.Listener, o *serveOptions, log *slog.Logger) error {
	defer g.serveMetrics(mln, o, log)()
	defer g.refreshPeers(ctx)()
	defer defaultQuietHeap.run(ctx, log)()
	mux := routes(g.srv.Handler(), web.Handler())
	// Requests derive from base, which shutdown cancels: long polls end
	// at once instead of holding the shutdown for up to a minute.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := o.httpServer(base, mux, log)
	if l, ok := ln.(*gateway.Listener); ok {
		hs.ConnState = l.ConnState // which connections have sent a request header
	}
	errc := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			errc <- hs.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	log.Info("listening", "addr", ln.Addr().String(), "tls", o.tlsCert != "")
	select {
	case err := <-errc:
		g.sup.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if g.stops.restart() && o.stateDir != "" {
		g.restart(stop, hs, cancelBase, log)
	} else {
		g.shutdown(stop, hs, cancelBase, log)
	}
	<-errc
	log.Info("stopped")
	return nil
}

// refreshPeers runs the cluster's member refresh until ctx ends or the
// returned stop is called, which waits for it.
func (g *gatewayParts) refreshPeers(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.runPeers(ctx)
	}()
	return func() { cancel(); <-done }
}

// restart ends this server and leaves every execution running for the
// next one on the state directory: clients are told to reconnect (1012),
// held long polls to retry (503).
func (g *gatewayParts) restart(stop context.Context, hs *http.Server, cancelBase func(), log *slog.Logger) {
	log.Info("restarting: executions live on for the next server on the state directory")
	g.srv.Restart(stop)
	hs.Shutdown(stop) // after Restart, so that its answers are written
	cancelBase()
	if err := g.sup.Detach(stop); err != nil {
		log.Warn("detach from the executions", "err", err)
	}
}

// shutdown ends this server for good: new work is refused at once, the
// executions are stopped, and each attached channel receives its exit
// before the close (1001).
func (g *gatewayParts) shutdown(stop context.Context, hs *http.Server, cancelBase func(), log *slog.Logger) {
	log.Info("shutting down: stopping every execution")
	closed := make(chan error, 1)
	go func() { closed <- g.srv.Shutdown(stop) }()
	if err := g.sup.Close(stop); err != nil {
		log.Warn("executions still running at exit", "err", err)
	}
	<-closed
	cancelBase()
	hs.Shutdown(stop)
}

// limitListener wraps ln with the connection caps and the descriptor
// headroom.
func (o *serveOptions) limitListener(ln net.Listener, log *slog.Logger) (*gateway.Listener, error) {
	cfg := o.listener
	cfg.FDHeadroom, cfg.FirstByteTimeout, cfg.Logger = o.fdHeadroom, o.firstByteTimeout, log
	if o.fdHeadroom == 0 {
		cfg.FDHeadroom = -1 // off
	}
	if o.firstByteTimeout == 0 {
		cfg.FirstByteTimeout = -1 // off
	}
	l, err := gateway.NewListener(ln, cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: %w (--fd-headroom)", err)
	}
	return l, nil
}

// httpServer is the HTTP server serve runs: requests derive from base.
func (o *serveOptions) httpServer(base context.Context, h http.Handler, log *slog.Logger) *http.Server {
	// No ReadTimeout or WriteTimeout: they would end WebSockets and long
	// polls. The gateway bounds API bodies itself (--read-timeout) and
	// its WebSocket writes (heartbeat, write timeout).
	return &http.Server{
		Handler: h, ReadHeaderTimeout: o.headerTimeout, IdleTimeout: o.idleTimeout,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return base },
	}
}

// wireTimeouts hands the timeouts to the supervisor, which applies them
// to every start, the HTTP API's included.
func (o *serveOptions) wireTimeouts() {
	o.session.DefaultTimeout = o.policy.DefaultTimeout
	o.session.DefaultInteractiveTimeout, o.session.DefaultIdleTimeout = o.policy.InteractiveTimeout, o.policy.IdleTimeout
	o.session.TimeoutWarning = o.timeoutWarning
	if o.timeoutWarning == 0 {
		o.session.TimeoutWarning = -1 // the supervisor's zero is its default
	}
}

// logConfig prints the effective configuration; it holds file paths, never secrets.
func (o *serveOptions) logConfig(log *slog.Logger) {
	log.Info("config", "config_file", o.config, "listen", o.listen, "tls", o.tlsCert != "", "jwt_secret_file", o.secretFile,
		"jwt_public_keys", o.publicKeys, "jwt_jwks_urls", o.jwksURLs, "jwt_jwks_refresh", durationText(o.jwksRefresh),
		"jwt_issuers", o.issuers, "jwt_tenant_bindings", o.bindings, "jwt_audience", o.audience, "jwt_leeway", durationText(o.leeway),
		"tenant_claim", o.tenantClaim, "origins", o.origins, "trusted_proxies", o.trustedProxies, "query_token", o.queryToken,
		"workspace_root", o.workspaceRoot, "commands", commandsLog(o.commands), "default_command", o.defaultCommand,
		"network", o.network, "proc", o.proc, "limits", limitsLog(o.policy.Limits), "tenant_limits", limitsLog(o.sandbox.TenantLimits), "cgroup_parent", o.sandbox.CgroupParent, "tmp_size", sizeText(uint64(o.policy.TmpSize)), "ptys", o.policy.PTYs,
		"timeout", durationText(o.policy.DefaultTimeout), "max_timeout", durationText(o.policy.MaxTimeout), "retention", durationText(o.session.DefaultRetention),
		"interactive_timeout", durationText(o.policy.InteractiveTimeout), "interactive_idle_timeout", durationText(o.policy.IdleTimeout),
		"timeout_warning", durationText(o.timeoutWarning),
		"max_running", o.session.MaxRunning, "max_running_per_tenant", o.session.MaxRunningPerOwner,
		"max_retained", o.session.MaxRetained, "max_retained_per_tenant", o.session.MaxRetainedPerOwner,
		"scrollback", cmp.Or(o.session.Scrollback, session.DefaultScrollback),
		"max_snapshot_bytes", sizeText(uint64(o.screens.snapshotBytes(o.server.MaxMessageBytes))),
		"screen_memory", sizeText(uint64(o.screens.memory)), "screen_memory_per_tenant", sizeText(uint64(o.screens.perTenant)),
		"max_queued_bytes", sizeText(uint64(cmp.Or(o.server.MaxQueuedBytes, gateway.DefaultMaxQueuedBytes))),
		"max_queued_bytes_per_subject", sizeText(uint64(cmp.Or(o.server.MaxQueuedBytesPerSubject, gateway.DefaultMaxQueuedBytesPerSubject))),
		"flow", o.server.Flow, "hold", durationText(o.server.Hold), "max_hold", durationText(o.server.MaxHold),
		"ring_bytes", sizeText(uint64(cmp.Or(o.server.Ring.MaxBytes, replay.DefaultMaxBytes))),
		"ring_events", cmp.Or(o.server.Ring.MaxEvents, replay.DefaultMaxEvents),
		"idle_timeout", durationText(o.idleTimeout), "read_header_timeout", durationText(o.headerTimeout), "read_timeout", durationText(o.server.RequestReadTimeout),
		"max_conns", o.listener.MaxConns, "max_conns_per_addr", o.listener.MaxConnsPerAddr, "fd_headroom", o.fdHeadroom,
		"max_preauth_conns", cmp.Or(o.listener.MaxPreAuthConns, max(1, o.listener.MaxConns/4)), "first_byte_timeout", durationText(o.firstByteTimeout),
		"max_conns_per_subject", o.server.MaxConnsPerSubject, "starts_per_minute", o.server.StartsPerMinute, "input_per_second", o.server.InputPerSecond,
		"resizes_per_second", o.server.ResizesPerSecond,
		"tenant_uids", fmt.Sprintf("%d:%d", o.workspaces.tenantUIDs.First, o.workspaces.tenantUIDs.Count),
		"workspace_quota", quotaText(formatBytes(o.workspaces.bytes), o.workspaces.bytes), "workspace_inodes", quotaText(strconv.FormatInt(o.workspaces.inodes, 10), o.workspaces.bytes),
		"audit_log", o.audit.Path, "audit_max_size", sizeText(uint64(cmp.Or(o.audit.MaxSize, audit.DefaultMaxSize))), "audit_keep", o.audit.Keep,
		"recordings_dir", o.session.RecordingsDir, "recording_max_size", sizeText(uint64(o.session.RecordingMaxSize)),
		"recordings_max_bytes", sizeText(uint64(o.session.RecordingsMaxBytes)), "recordings_max_bytes_per_tenant", sizeText(uint64(o.session.RecordingsMaxBytesPerOwner)),
		"recordings_max_files", o.session.RecordingsMaxFiles, "recordings_max_files_per_tenant", o.session.RecordingsMaxFilesPerOwner,
		"recordings_retention", durationText(o.recordingsRetention),
		"record", recordText(o.server.Record), "record_input", o.server.Record.Input,
		"sigterm", o.sigterm, "dev", o.dev)
}

// recordFlag parses --record into p's tenants, leaving its Input alone.
func recordFlag(p *gateway.RecordPolicy) func(string) error {
	return func(s string) error {
		v, err := gateway.ParseRecordPolicy(s)
		p.All, p.Tenants = v.All, v.Tenants
		return err
	}
}

// recordText is --record as given: all, none, or the tenants.
func recordText(p gateway.RecordPolicy) string {
	switch {
	case p.All:
		return "all"
	case len(p.Tenants) == 0:
		return "none"
	}
	return strings.Join(p.Tenants, ",")
}

// commandsLog is the programs clients may start, the default included.
func commandsLog(list []string) []string {
	if len(list) == 0 {
		return gateway.DefaultCommands
	}
	return list
}

// durationText is d as people write it: 15m, 12h, 1m30s, not 15m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// limitsLog is an execution's ceilings as the startup log shows them:
// sizes as 1G, 0 as "none".
func limitsLog(l sandbox.Limits) slog.Value {
	count := func(v int64) slog.Value {
		if v == 0 {
			return slog.StringValue("none")
		}
		return slog.Int64Value(v)
	}
	size := func(v uint64) slog.Value {
		if v == 0 {
			return slog.StringValue("none")
		}
		return slog.StringValue(sizeText(v))
	}
	return slog.GroupValue(
		slog.Attr{Key: "memory", Value: size(uint64(l.Memory))},
		slog.Attr{Key: "pids", Value: count(l.Pids)},
		slog.Attr{Key: "cpu_weight", Value: count(int64(l.CPUWeight))},
		slog.Attr{Key: "file_size", Value: size(l.FileSize)},
		slog.Attr{Key: "cpu_seconds", Value: count(int64(l.CPUSeconds))},
		slog.Attr{Key: "open_files", Value: count(int64(l.OpenFiles))},
		slog.Attr{Key: "address_space", Value: size(l.AddressSpace)},
	)
}

// sizeText writes a byte count as parseSize reads it: 1G, 64M, 1536K, 100.
func sizeText(v uint64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatUint(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(v, 10)
}

// devDefaults fills in what --dev provides: a generated secret and a
// workspace root in the state directory.
func (o *serveOptions) devDefaults() error {
	state, err := stateDir()
	if err != nil {
		return err
	}
	if o.workspaceRoot == "" {
		o.workspaceRoot = filepath.Join(state, "workspaces")
	}
	if o.secretFile == "" && len(o.publicKeys) == 0 {
		o.secretFile = filepath.Join(state, "dev-secret")
		if ownPrivateFile(o.secretFile) {
			// Kept across restarts, so that the tokens it signed, and so
			// the clients of executions that outlive a restart, stay valid.
			return nil
		}
		secret := make([]byte, 32)
		rand.Read(secret)
		hex := fmt.Sprintf("%x\n", secret)
		// A fresh file each time: writing over an old one would keep its
		// mode and owner, which the authenticator may refuse.
		if err := os.Remove(o.secretFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("serve: replace dev secret: %w", err)
		}
		if err := writeNewFile(o.secretFile, []byte(hex), 0o600); err != nil {
			return fmt.Errorf("serve: write dev secret: %w", err)
		}
	}
	return nil
}

// ownPrivateFile reports whether path is a regular file of this user's
// that nobody else can read or write.
func ownPrivateFile(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// writeNewFile creates path, which must not exist, with mode perm.
func writeNewFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// stateDir is $XDG_STATE_HOME/termgate, ~/.local/state/termgate, or, for
// root, /var/lib/termgate: a root home directory is closed to the sandbox
// identity, which must reach the workspaces. Created searchable (0711).
func stateDir() (string, error) {
	dir := "/var/lib/termgate"
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		dir = filepath.Join(x, "termgate")
	} else if os.Geteuid() != 0 {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("serve: find the state directory: %w", err)
		}
		dir = filepath.Join(home, ".local", "state", "termgate")
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("serve: create state directory: %w", err)
	}
	return dir, os.Chmod(dir, 0o711)
}

// printDevURL mints a day-long token for the dev tenant and prints the URL
// that opens a terminal with it, then the export lines that point the
// client commands at this server.
func (o *serveOptions) printDevURL(w io.Writer, authn *auth.Authenticator, addr string) error {
	now := time.Now()
	tok, err := authn.Mint(auth.Claims{
		Subject: "dev", Tenant: o.devTenant, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true},
	})
	if err != nil {
		return fmt.Errorf("serve: mint dev token: %w", err)
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	base := scheme + "://" + addr
	fmt.Fprintf(w, "termgate dev mode: open\n\n  %s/#token=%s\n\n"+
		"or, for the client commands (termgate run, attach, ls, logs; the token is valid 24h):\n\n"+
		"  export TERMGATE_URL=%s\n  export TERMGATE_TOKEN=%s\n\nWorkspaces: %s\n", base, tok, base, tok, o.workspaceRoot)
	return nil
}
