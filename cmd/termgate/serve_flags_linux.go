package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// serveOptions are the flags of termgate serve; each has a TERMGATE_*
// environment equivalent (flag > environment > default).
type serveOptions struct {
	// guarantees are the probe's, before the configuration (configured).
	guarantees                    []sandbox.Guarantee
	listen, tlsCert, tlsKey       string
	secretFile, audience          string
	tenantClaim, workspaceRoot    string
	defaultCommand, logLevel      string
	logFormat                     string
	publicKeys, origins, commands []string
	mounts                        []string // --mount NAME=HOSTPATH[:ro|:rw]
	previewDomain                 string
	trustedProxies                []string
	issuers, jwksURLs, bindings   []string
	jwksRefresh                   time.Duration
	dev, queryToken               bool
	sandbox                       sandbox.Config
	policy                        gateway.SandboxConfig
	session                       session.Config
	server                        gateway.Config
	network, proc                 string
	net                           networkOptions // serve_network_linux.go
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
	e.fs.StringVar(p, name, builtin, usage+" (env "+envName(name)+")")
	*p = def // after: help shows the built-in default, never the environment's
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
	e.fs.BoolVar(p, name, builtin, usage+" (env "+envName(name)+")")
	*p = def
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
	e.fs.DurationVar(p, name, builtin, usage+" (env "+envName(name)+")")
	*p = def
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
	e.str(&o.metricsListen, "metrics-listen", "", "address of a separate listener for Prometheus /metrics and /debug/pprof, for example 127.0.0.1:9464; keep it private: it has no authentication (default off)")
	e.boolean(&o.server.MetricsTenantLabel, "metrics-tenant-label", false, "label executions running and started by tenant in the metrics (the first 100 tenants; the rest as _other)")
	e.str(&o.tlsCert, "tls-cert", "", "TLS certificate file: serve HTTPS, with --tls-key (default off)")
	e.str(&o.tlsKey, "tls-key", "", "TLS key file")
	e.str(&o.secretFile, "jwt-secret-file", "", "file holding the HS256 secret, at least 32 bytes (one final \\n or \\r\\n is not part of it): a regular file owned by termgate's user (or root) that neither group nor others may read or write (chmod 600), else serve refuses it")
	e.list(&o.publicKeys, "jwt-public-key", "PEM public key file, [kid=]path: RS256, ES256 or EdDSA; kid defaults to the file name")
	e.list(&o.jwksURLs, "jwt-jwks-url", "identity provider's JWK Set URL (https; http only to 127.0.0.0/8 or ::1): RS256, ES256 or EdDSA keys chosen by kid, checked as key files are")
	e.duration(&o.jwksRefresh, "jwt-jwks-refresh", auth.DefaultJWKSRefreshInterval, "how often each JWK Set is fetched again (10s to 24h); a removed key is refused after at most this")
	e.list(&o.issuers, "jwt-issuer", "accepted token issuer (iss), ISSUER[=SOURCE|SOURCE...]: limited to the key sources named (kids of key files, JWKS URLs) (default: not checked)")
	e.list(&o.bindings, "jwt-tenant-binding", "SOURCE=TENANT|TENANT...: tokens of that key source (a key file's kid, a JWKS URL) or issuer may name only these tenants (default: any tenant)")
	e.str(&o.audience, "jwt-audience", "", "required token audience (aud); required with --jwt-public-key and --jwt-jwks-url (default: not checked)")
	e.duration(&o.leeway, "jwt-leeway", 30*time.Second, "clock skew allowed on exp, nbf and iat (at most 1m); connections end at exp plus it")
	e.str(&o.tenantClaim, "tenant-claim", "tenant", "token claim naming the tenant")
	e.boolean(&o.queryToken, "query-token", false, "also accept ?token= (URLs leak into logs: avoid)")
	e.list(&o.origins, "origin", "browser origin allowed besides the server's own host (default: same host only)")
	e.str(&o.previewDomain, "preview-domain", "", "serve previews of ports as NAME.DOMAIN, each an origin of its own (wildcard DNS and TLS for *.DOMAIN are yours; localhost needs neither on one machine); a DNS name, the URL keeping the port the server was reached on; empty: path-based, /v1/preview/NAME/ on the server's own origin")
	e.list(&o.trustedProxies, "trusted-proxy", "reverse proxy, an address or CIDR prefix: when the TCP peer is one, logs name the client by X-Forwarded-For (the right-most address that is no trusted proxy); from other peers the header is ignored")
	e.str(&o.workspaceRoot, "workspace-root", "", "directory holding one workspace per tenant, made on demand under an opaque name")
	e.list(&o.commands, "command", "program clients may start: limits which program the gateway execs, not what it runs (default /bin/bash, /bin/sh)")
	e.str(&o.defaultCommand, "default-command", "/bin/bash -l", "command run when a client names none (space-separated)")
	o.net.register(e, o)
	e.str(&o.proc, "proc", "auto", "sandbox procfs: private (ps and top work; needs Landlock), none, or auto: private where the host has Landlock, else none")
	o.policy.TmpSize = sandbox.DefaultTmpSize // what applies, for the startup log
	e.parsed("tmp-size", "size of /tmp, /run and /dev/shm in each sandbox (default 64M)", sizeFlag(&o.policy.TmpSize))
	e.parsed("ptys", fmt.Sprintf("terminals each sandbox may open itself, for tmux or script; serve refuses to start when --ptys times --max-running exceeds the kernel's pool for sandboxes, kernel.pty.max minus kernel.pty.reserve (default %d; 0: none)", DefaultPTYs), ptysFlag(&o.policy.PTYs))
	o.policy.Limits, o.sandbox.TenantLimits = defaultServeLimits, defaultTenantLimits
	e.parsed("cpu-seconds", "CPU seconds per process, an rlimit: default and ceiling (default none; 0: none)", uintFlag(&o.policy.Limits.CPUSeconds))
	e.parsed("memory", "memory per execution in bytes, swap included: default and ceiling (default 1G; 0: none)", sizeFlag(&o.policy.Limits.Memory))
	e.parsed("pids", "processes per execution: default and ceiling (default 512; 0: none)", intFlag(&o.policy.Limits.Pids))
	e.parsed("pids-fallback", pidsFallbackUsage, pidsFallbackFlag(&o.sandbox.PidsFallback))
	e.parsed("cpu-weight", "CPU share per execution, 1..10000, 100 as the host's other processes: default and ceiling, as cgroup cpu.weight (default 100; 0: none)", cpuWeightFlag(&o.policy.Limits.CPUWeight))
	e.parsed("tenant-memory", "memory of all of a tenant's executions together, swap included (default 4G; 0: none)", sizeFlag(&o.sandbox.TenantLimits.Memory))
	e.parsed("tenant-pids", "processes and threads of all of a tenant's executions together (default 2048; 0: none)", intFlag(&o.sandbox.TenantLimits.Pids))
	e.parsed("tenant-cpu-weight", "CPU share of each tenant as a whole, 1..10000, so a tenant's many executions count as one (default 100; 0: none)", cpuWeightFlag(&o.sandbox.TenantLimits.CPUWeight))
	e.str(&o.sandbox.CgroupParent, "cgroup-parent", "termgate", "cgroup directory of this server's executions in every hierarchy; two servers on one host need two")
	e.parsed("open-files", "open files per process, an rlimit: default and ceiling (default none; 0: none)", uintFlag(&o.policy.Limits.OpenFiles))
	e.parsed("file-size", "largest file written, in bytes, RLIMIT_FSIZE: default and ceiling (default 1G; 0: none)", usizeFlag(&o.policy.Limits.FileSize))
	e.duration(&o.policy.DefaultTimeout, "timeout", session.DefaultTimeout, "absolute timeout of a batch execution (pipes) that names none")
	e.duration(&o.policy.InteractiveTimeout, "interactive-timeout", session.DefaultInteractiveTimeout, "absolute timeout of an interactive execution (a terminal, or interactive pipes) that names none; at most --max-timeout")
	e.duration(&o.policy.IdleTimeout, "interactive-idle-timeout", session.DefaultIdleTimeout, "stop an interactive execution after this long with no writer attached and no input")
	e.duration(&o.timeoutWarning, "timeout-warning", session.DefaultTimeoutWarning, "warn attached clients (a notice event) this long before a timeout fires (at most half the timeout; 0: no warning)")
	e.duration(&o.policy.MaxTimeout, "max-timeout", gateway.DefaultMaxTimeout, "longest timeout or idle timeout a client may ask for (timeout_ms, idle_timeout_ms)")
	e.duration(&o.session.DefaultRetention, "retention", session.DefaultRetention, "how long a finished execution's result is kept")
	e.parsed("max-running", fmt.Sprintf("running executions in total (default %d)", session.DefaultMaxRunning), intPtr(&o.session.MaxRunning, session.DefaultMaxRunning))
	e.parsed("max-running-per-tenant", "running executions per tenant (default 16)", intPtr(&o.session.MaxRunningPerOwner, defaultMaxRunningPerTenant))
	e.parsed("max-retained", "executions kept, running or finished (default 1024)", intPtr(&o.session.MaxRetained, session.DefaultMaxRetained))
	e.parsed("max-retained-per-tenant", "executions one tenant keeps, running or finished (default 128)", intPtr(&o.session.MaxRetainedPerOwner, session.DefaultMaxRetainedPerOwner))
	e.parsed("ring-bytes", "replayable output kept per execution, in bytes; also how much unacknowledged output a program may get ahead of its writer (default 1M)", ringBytes(&o.server.Ring.MaxBytes))
	e.parsed("ring-events", "replayable events kept per execution; also how many unacknowledged events a program may get ahead of its writer (default 4096)", intPtr(&o.server.Ring.MaxEvents, replay.DefaultMaxEvents))
	e.str(&o.server.Flow, "flow", wire.FlowHold, "output flow of a start that names none: hold (the program waits for acknowledging writers; nothing is lost) or live (it never waits; slow readers see gaps)")
	e.duration(&o.server.Hold, "hold", gateway.DefaultHold, "how long held output waits for an acknowledging writer who left to come back, before the execution runs free")
	e.duration(&o.server.MaxHold, "max-hold", gateway.DefaultMaxHold, "longest hold a start may ask for (hold_ms)")
	e.list(&o.mounts, "mount", "host path a start may ask for by name (mounts), NAME=HOSTPATH[:ro|:rw], at /mnt/NAME in its sandbox; read-only unless :rw (default none)")
	e.duration(&o.policy.MaxRetention, "max-retention", gateway.DefaultMaxRetention, "longest retention a start may ask for (retention_ms)")
	e.parsed("max-output-budget", fmt.Sprintf("most output a start may ask its final result to keep per stream (max_output_bytes) (default %s)", sizeText(gateway.DefaultMaxOutputBudget)), sizeFlag(&o.policy.MaxOutputBudget))
	e.parsed("scrollback", fmt.Sprintf("lines of history above the screen a terminal's state keeps for snapshots, 1..%d; their bytes are bounded by --max-snapshot-bytes too, the oldest dropped first (default 1000)", maxScrollback), scrollbackFlag(&o.session.Scrollback))
	e.parsed("max-message-bytes", fmt.Sprintf("largest WebSocket message (larger closes with 1009), also of an HTTP API request body (413 too_large), one proxied to another node included (default %s)", sizeText(gateway.DefaultMaxMessageBytes)), sizeFlag(&o.server.MaxMessageBytes))
	o.screens.register(e, &o.server)
	e.parsed("max-channels", fmt.Sprintf("attached channels per connection (default %d)", gateway.DefaultMaxChannels), intPtr(&o.server.MaxChannels, gateway.DefaultMaxChannels))
	e.parsed("max-conns-per-subject", fmt.Sprintf("WebSocket connections and held HTTP long polls per token subject, together; beyond it 429 (default %d)", gateway.DefaultMaxConnsPerSubject), intPtr(&o.server.MaxConnsPerSubject, gateway.DefaultMaxConnsPerSubject))
	e.parsed("starts-per-minute", fmt.Sprintf("starts per minute per token subject, across its connections and the HTTP API (default %d)", gateway.DefaultStartsPerMinute), intPtr(&o.server.StartsPerMinute, gateway.DefaultStartsPerMinute))
	e.parsed("input-per-second", fmt.Sprintf("input messages per second per token subject (tenant and sub), across its connections and the HTTP API, sustained; bursts of 16 s of it (16,000 messages at the default: a 1 MiB paste sent a line a message, or about 19,000 keystrokes sent as fast as their echo) are taken at once; a refused frame is answered with the input offset to resend from; bytes are paced by the 64 KiB input buffer, not counted here (default %d)", gateway.DefaultInputPerSecond), intPtr(&o.server.InputPerSecond, gateway.DefaultInputPerSecond))
	e.parsed("resizes-per-second", fmt.Sprintf("resize and signal requests per second per token subject, across its connections, sustained; bursts of 10 s of it (300 at the default: a window dragged for 10 s by a terminal that sends a resize a frame, windows retiled) are taken at once; beyond it rate_limited, and a flood of requests without req gets one refusal per accepted request, not one each (default %d)", gateway.DefaultResizesPerSecond), intPtr(&o.server.ResizesPerSecond, gateway.DefaultResizesPerSecond))
	e.duration(&o.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a kept-alive HTTP connection may wait for its next request")
	e.duration(&o.headerTimeout, "read-header-timeout", defaultHeaderTimeout, "how long a client may take to send a request's headers")
	e.duration(&o.server.RequestReadTimeout, "read-timeout", gateway.DefaultRequestReadTimeout, "how long a client may take to send an HTTP API request's body (answered 408 request_timeout), on many nodes also one the front reads before proxying it to its owner (not long polls or WebSockets)")
	e.parsed("max-conns", "open connections in total, authenticated or not; beyond it a connection is closed at once (default 4096)", intPtr(&o.listener.MaxConns, gateway.DefaultMaxConns))
	e.parsed("max-conns-per-addr", "open connections from one client: an IPv4 /24 or an IPv6 /64; behind a reverse proxy every client has the proxy's: raise it (default 256)", intPtr(&o.listener.MaxConnsPerAddr, gateway.DefaultMaxConnsPerAddr))
	e.parsed("max-preauth-conns", "open connections that have not sent a complete request header (new ones, and kept-alive ones between requests), at most --max-conns: when they are as many, or the connections --max-conns, a new one takes the place of the oldest of the client holding the most of them, if that is more than its own client holds, else it is closed at once (default --max-conns/4, 1024)", intPtr(&o.listener.MaxPreAuthConns, 0))
	e.duration(&o.firstByteTimeout, "first-byte-timeout", gateway.DefaultFirstByteTimeout, "close a new connection that sends nothing for this long; after its first byte --read-header-timeout bounds the rest of the header (0: off)")
	e.parsed("fd-headroom", "file descriptors kept free for starts: while fewer are free below RLIMIT_NOFILE, new connections are closed at once; serve refuses to start when the limit is not above it (default 128; 0: off)", nonNegative(&o.fdHeadroom, gateway.DefaultFDHeadroom))
	e.parsed("sandbox-uid", fmt.Sprintf("host uid the sandbox runs as when termgate is root (default %d)", sandbox.DefaultUID), idFlag(&o.sandbox.UID))
	e.parsed("sandbox-gid", fmt.Sprintf("host gid the sandbox runs as when termgate is root (default %d)", sandbox.DefaultGID), idFlag(&o.sandbox.GID))
	o.workspaces.register(e)
	e.str(&o.stateDir, "state-dir", "", "directory of the executions' state (rings, input, records, the keeper's socket), best on tmpfs: they outlive a restart, upgrade or crash of the server (default /run/termgate for root, $XDG_RUNTIME_DIR/termgate for others, who must give one without it; mode 0700, ours, not a symbolic link, in a parent nobody else may write unless sticky; none: executions end with the server)")
	e.duration(&o.orphanGrace, "orphan-grace", defaultOrphanGrace, "how long executions outlive a server that does not come back, before they are stopped as a cancel would (1s to 24h)")
	e.str(&o.session.RecordingsDir, "recordings-dir", "", "directory of session recordings, asciicast v2 files of mode 0600 (absolute; default none: nothing is recorded)")
	o.session.RecordingMaxSize = session.DefaultRecordingMaxSize
	e.parsed("recording-max-size", "largest recording in bytes, at least 4K: what comes after is not recorded, and a final marker and the result say how much (default 64M)", sizeFlag(&o.session.RecordingMaxSize))
	o.session.RecordingsMaxBytes, o.session.RecordingsMaxBytesPerOwner = session.DefaultRecordingsMaxBytes, session.DefaultRecordingsMaxBytesPerOwner
	e.parsed("recordings-max-bytes", "bytes all recordings together may hold, a recording being written counted at --recording-max-size: a start to be recorded past it is refused (default 4G)", sizeFlag(&o.session.RecordingsMaxBytes))
	e.parsed("recordings-max-bytes-per-tenant", "bytes one tenant's recordings may hold, counted as --recordings-max-bytes (default 1G)", sizeFlag(&o.session.RecordingsMaxBytesPerOwner))
	e.parsed("recordings-max-files", "recordings the directory may hold: a start to be recorded past it is refused (default 10000)", intPtr(&o.session.RecordingsMaxFiles, session.DefaultRecordingsMaxFiles))
	e.parsed("recordings-max-files-per-tenant", "recordings one tenant may hold (default 1000)", intPtr(&o.session.RecordingsMaxFilesPerOwner, session.DefaultRecordingsMaxFilesPerOwner))
	e.duration(&o.recordingsRetention, "recordings-retention", session.DefaultRecordingsRetention, "how long a recording is kept after its last write, then deleted; one still being written is kept (0: until removed by hand)")
	e.parsed("record", "whose executions are recorded: all, none, or tenant,tenant (default none); any start may ask with record when its token has the exec:record scope", recordFlag(&o.server.Record))
	e.boolean(&o.server.Record.Input, "record-input", false, "also record the input of every recorded execution (input can hold passwords; without it, only a start's record_input does)")
	e.str(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	e.str(&o.logFormat, "log-format", "json", "json (one object per line) or text (key=value); both escape control characters in values")
	e.str(&o.audit.Path, "audit-log", "", "append-only JSON-lines audit file, mode 0600, in a directory that exists; a symlink, a non-regular file or one others can write is refused (default off)")
	e.parsed("audit-max-size", "size at which the audit file is rotated, at least 64K (default 100M)", sizeFlag(&o.audit.MaxSize))
	e.parsed("audit-keep", fmt.Sprintf("rotated audit files kept, PATH.1 ... PATH.N, 1..%d (default %d)", audit.MaxKeep, audit.DefaultKeep), intPtr(&o.audit.Keep, audit.DefaultKeep))
	e.str(&o.sigterm, "sigterm", sigtermRestart, "what SIGTERM does: restart (executions live on for the next server on the state directory) or shutdown (stop them and give clients their exits, as SIGINT; on Kubernetes, where a pod's processes end with it)")
	e.str(&o.cluster.node, "node", "", "this node's name, an RFC 1123 label such as termgate-0: cluster mode, new execution IDs name their node (default off: a single node)")
	e.list(&o.cluster.peers, "peer", "another node, NAME=URL such as termgate-1=http://10.0.0.2:8080: a base URL, http or https with a host and no path (may list this node too, whose URL is then only checked); excludes --peer-dns")
	e.str(&o.cluster.peerDNS, "peer-dns", "", "headless Service whose SRV records (_http._tcp.DOMAIN, the port named http) list the nodes, such as termgate-headless.default.svc.cluster.local, each reached at NODE.DOMAIN; refreshed every 10 s, a vanished name kept 5 min; excludes --peer")
	e.parsed("peer-port", "the nodes' port with --peer-dns (default --listen's)", peerPortFlag(&o.cluster.peerPort))
	e.str(&o.cluster.peerScheme, "peer-scheme", "", "http or https: how nodes found by --peer-dns are reached (default http)")
	e.list(&o.cluster.secretFiles, "node-secret-file", "file holding the secret every node shares, checked as --jwt-secret-file (at least 32 bytes, mode 0600), which signs the hops between nodes; required with --node; the first signs, all verify: rotate it by a rolling restart")
	e.duration(&o.cluster.dialTimeout, "peer-dial-timeout", gateway.DefaultPeerDialTimeout, "how long a TCP connect to another node may take (at most 1m)")
	e.duration(&o.cluster.timeout, "peer-timeout", gateway.DefaultPeerTimeout, "how long another node may take to answer: response headers, a keyed start's probe, ls across nodes (at most 1m)")
	e.duration(&o.cluster.ping, "peer-ping", gateway.DefaultPeerPing, "how often a relayed connection pings its node; a pong missing this long ends it and its channels are detached (50ms to 5m)")
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
