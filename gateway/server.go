package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/session"
)

// DefaultCommands are the programs clients may start when Config.Commands
// is empty.
var DefaultCommands = []string{"/bin/bash", "/bin/sh"}

// Defaults of Config.
const (
	DefaultMaxMessageBytes    = 1 << 20
	DefaultMaxChannels        = 32
	DefaultMaxConnsPerSubject = 16
	// DefaultMaxQueuedBytes and DefaultMaxQueuedBytesPerSubject bound the
	// encoded snapshots waiting for a connection's writer, per connection
	// and for all of a subject's together.
	DefaultMaxQueuedBytes           = 8 << 20
	DefaultMaxQueuedBytesPerSubject = 16 << 20
	// DefaultStartsPerMinute lets an agent run short commands one after
	// the other at the sandbox's pace (a start takes 15-25 ms) for a
	// burst of 600, then 10 a second per token subject, a small share of
	// what a machine can start. Concurrency stays bounded by the running
	// limits, and the machine is shared by the tenants' CPU weights.
	DefaultStartsPerMinute    = 600
	DefaultInputPerSecond     = 1000
	DefaultResizesPerSecond   = 30
	DefaultPingInterval       = 15 * time.Second
	DefaultPongTimeout        = 45 * time.Second
	DefaultAuthWarning        = 60 * time.Second
	DefaultWriteTimeout       = 30 * time.Second
	DefaultMaxTimeout         = 24 * time.Hour
	DefaultRequestReadTimeout = 30 * time.Second
	DefaultHold               = 5 * time.Minute
	DefaultMaxHold            = time.Hour
	DefaultMaxRetention       = 24 * time.Hour
	DefaultMaxOutputBudget    = 256 << 10
)

// Config configures a Server. Zero fields take the defaults.
type Config struct {
	Supervisor *session.Supervisor // required
	Auth       *auth.Authenticator // required
	// WorkspaceRoot holds one workspace per tenant, created on demand.
	WorkspaceRoot string // required
	// Workspaces hands out each tenant's workspace and host identity
	// (opened over WorkspaceRoot by the caller, who closes it after the
	// supervisor). Nil: NewServer opens one without quotas and with
	// sandbox.DefaultTenantUIDs, and Shutdown closes it.
	Workspaces *sandbox.Workspaces
	// Guarantees are the sandbox's guarantees as this host keeps them,
	// one "NAME STATE" line each, which /readyz lists after its ok.
	Guarantees []string
	// Commands are the programs clients may start (absolute paths;
	// default /bin/bash and /bin/sh); DefaultCommand runs when a start
	// names none (default /bin/bash -l).
	Commands       []string
	DefaultCommand []string
	// Origins are the browser origins allowed besides the server's own
	// host, as host patterns ("example.com", "*.example.com").
	Origins []string
	// PreviewDomain, when set, makes previews host-based: NAME.DOMAIN,
	// each an origin of its own (DNS and TLS for *.DOMAIN are the
	// operator's); empty: path-based, /v1/preview/NAME/ (see preview.go).
	PreviewDomain string
	// Page serves the paths the gateway does not (the browser terminal);
	// nil: they are not found. A preview's host never reaches it.
	Page http.Handler
	// QueryToken accepts ?token= on /v1/connect. Off by default: URLs leak
	// into logs and histories.
	QueryToken bool
	// Sandbox is the policy every execution starts from.
	Sandbox SandboxConfig
	// Ring bounds each execution's replayable history (replay defaults).
	Ring replay.Config
	// Flow is the output flow of a start that names none: wire.FlowHold
	// (the default: output an acknowledging writer has not acked is held,
	// and the program waits) or wire.FlowLive (the program never waits).
	Flow string
	// Hold is how long held output waits for a writer to come back
	// (DefaultHold); MaxHold bounds a start's hold_ms (DefaultMaxHold).
	Hold    time.Duration
	MaxHold time.Duration
	// Record says which executions are recorded when the supervisor has
	// a recordings directory (recording.go).
	Record RecordPolicy

	MaxMessageBytes    int64
	MaxChannels        int
	MaxConnsPerSubject int
	// MaxQueuedBytes bounds the bytes of control messages waiting for one
	// connection's writer, MaxQueuedBytesPerSubject those of all of a
	// subject's connections (DefaultMaxQueuedBytes,
	// DefaultMaxQueuedBytesPerSubject). A screen snapshot beyond either,
	// or larger than MaxMessageBytes, is sent as the gap it stands in for.
	MaxQueuedBytes           int64
	MaxQueuedBytesPerSubject int64
	StartsPerMinute          int
	InputPerSecond           int
	// InputBurst is how many input messages a subject may send at once
	// beyond InputPerSecond (InputBurstSeconds of it when 0).
	InputBurst int
	// ResizesPerSecond bounds a subject's resize and signal requests
	// (DefaultResizesPerSecond), with bursts of ResizeBurst
	// (ResizeBurstSeconds of it when 0).
	ResizesPerSecond int
	ResizeBurst      int
	PingInterval     time.Duration
	PongTimeout      time.Duration
	AuthWarning      time.Duration
	WriteTimeout     time.Duration
	// RequestReadTimeout bounds reading an HTTP API request's body
	// (DefaultRequestReadTimeout). Headers are the http.Server's
	// ReadHeaderTimeout; long polls and WebSockets have no body to wait for.
	RequestReadTimeout time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client in logs (ParseTrustedProxies; clientaddr.go); none: the
	// TCP peer's address.
	TrustedProxies []netip.Prefix
	// MetricsTenantLabel adds per-tenant metrics (the first
	// session.TenantSeries tenants; the rest together). Off by default.
	MetricsTenantLabel bool
	// Cluster makes the server one node of several (cluster_route.go);
	// nil is a single node.
	Cluster *ClusterConfig
	// Audit is the audit trail (package audit; audit_events.go says what
	// each request records); nil: none. The caller opens
	// it, and closes it after the server and the supervisor.
	Audit *audit.Log
	// Egress is the network policies and their proxies, the one the
	// Supervisor was given (network.go); nil: no policies.
	Egress *netpolicy.Egress
	Logger *slog.Logger

	// inputAckDelay is how long an accepted frame's input-ack waits for
	// output to go with (inputack.go): inputAckDelay but in tests.
	inputAckDelay time.Duration
	// parkAfter is how long a connection waits for its client's next
	// message before it gives its goroutine up (nbConn.park): parkAfter
	// but in tests; negative: never.
	parkAfter time.Duration
}

// SandboxConfig is the server's side of every execution's policy.
type SandboxConfig struct {
	// Network is the sandbox's network of a start that asks for none,
	// unless NetworkPolicy names the default policy (network.go).
	// AllowHostNetwork offers the host's network to a start that asks
	// for it with the net:host scope.
	Network          sandbox.Network
	NetworkPolicy    string
	AllowHostNetwork bool
	Proc             sandbox.ProcMode
	TmpSize          int64
	PTYs             int            // terminals a sandbox may open itself
	Limits           sandbox.Limits // applied when the client asks for none
	MaxLimits        sandbox.Limits // the most a client may ask for; zero: no ceiling above Limits
	DefaultTimeout   time.Duration  // session default when zero
	MaxTimeout       time.Duration  // DefaultMaxTimeout
	// InteractiveTimeout is the absolute timeout of an interactive
	// execution that names none, IdleTimeout its idle timeout (session
	// defaults when zero). See spec.go, timeouts.
	InteractiveTimeout time.Duration
	IdleTimeout        time.Duration
	// Mounts are the host paths a start may ask for by name (mounts),
	// each at /mnt/NAME in the sandbox.
	Mounts map[string]Mount
	// MaxRetention bounds a start's retention_ms (DefaultMaxRetention),
	// MaxOutputBudget its max_output_bytes (DefaultMaxOutputBudget).
	MaxRetention    time.Duration
	MaxOutputBudget int64
}

// Mount is a host path the operator offers starts (SandboxConfig.Mounts).
type Mount struct {
	Path     string
	Writable bool
}

// Server is termgate's HTTP and WebSocket front end.
type Server struct {
	cfg Config
	log *slog.Logger

	fileOps chan struct{} // a token a file operation under way (files.go)

	// starts, inputs and resizes (resizes and signals) are the rate
	// limits of each (tenant, subject), shared by its WebSocket
	// connections and the HTTP API: a new connection does not get a
	// fresh budget.
	starts  *subjectLimits
	inputs  *subjectLimits
	resizes *subjectLimits

	ports    portWatch  // the channels watching their executions' ports (ports_watch.go)
	previews previews   // the HTTP previews of ports (preview.go)
	agent    *agentExec // the agent exec's cursors (agentexec.go)

	mu       sync.Mutex
	conns    map[*conn]struct{}
	subjects map[string]int
	// queued are the bytes each subject's connections have waiting for
	// their writers (controlMessages), while it has any connection.
	queued  map[string]*atomic.Int64
	closing bool // Shutdown or Restart was called: nothing new is admitted
	// restarting: it was Restart; the executions live on (shutdown.go).
	restarting bool
	wg         sync.WaitGroup
	memory     *memoryRelease // returns closed connections' memory (release.go)
	// channels counts the attached channels not finished yet; drained,
	// when set, is closed once it drops (see shutdown.go).
	channels int
	drained  chan struct{}
	// polls ends the long polls held when the server restarts; its cause
	// is errRestarting then.
	polls     context.Context
	stopPolls context.CancelCauseFunc

	ownWorkspaces   bool // cfg.Workspaces was opened by NewServer
	closeWorkspaces sync.Once

	metrics *metrics // served by MetricsHandler (metrics.go)
	route   *router  // nil on a single node (cluster_route.go)
}

func applyDefaults(c *Config) {
	if c.inputAckDelay == 0 {
		c.inputAckDelay = inputAckDelay
	}
	if c.parkAfter == 0 {
		c.parkAfter = parkAfter
	}
	if len(c.Commands) == 0 {
		c.Commands = slices.Clone(DefaultCommands)
	}
	if len(c.DefaultCommand) == 0 {
		c.DefaultCommand = []string{"/bin/bash", "-l"}
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	def(&c.MaxChannels, DefaultMaxChannels)
	def(&c.MaxConnsPerSubject, DefaultMaxConnsPerSubject)
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxQueuedBytesPerSubject <= 0 {
		c.MaxQueuedBytesPerSubject = DefaultMaxQueuedBytesPerSubject
	}
	def(&c.StartsPerMinute, DefaultStartsPerMinute)
	def(&c.InputPerSecond, DefaultInputPerSecond)
	def(&c.InputBurst, InputBurstSeconds*c.InputPerSecond)
	def(&c.ResizesPerSecond, DefaultResizesPerSecond)
	def(&c.ResizeBurst, ResizeBurstSeconds*c.ResizesPerSecond)
	defDur(&c.PingInterval, DefaultPingInterval)
	defDur(&c.PongTimeout, DefaultPongTimeout)
	defDur(&c.AuthWarning, DefaultAuthWarning)
	defDur(&c.WriteTimeout, DefaultWriteTimeout)
	defDur(&c.RequestReadTimeout, DefaultRequestReadTimeout)
	defDur(&c.Sandbox.MaxTimeout, DefaultMaxTimeout)
	defDur(&c.Hold, DefaultHold)
	defDur(&c.MaxHold, DefaultMaxHold)
	defDur(&c.Sandbox.MaxRetention, DefaultMaxRetention)
	if c.Sandbox.MaxOutputBudget <= 0 {
		c.Sandbox.MaxOutputBudget = DefaultMaxOutputBudget
	}
	if c.Flow == "" {
		c.Flow = wire.FlowHold
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func allowed(list []string, cmd string) bool {
	for _, c := range list {
		if c == cmd {
			return true
		}
	}
	return false
}

// errSubjectBusy refuses a connection or long poll beyond the subject's
// budget (Config.MaxConnsPerSubject).
var errSubjectBusy = errors.New("gateway: too many connections and long polls for this subject")

// subjectKey names a token subject: the same sub in two tenants is two
// subjects.
func subjectKey(c auth.Claims) string { return c.Tenant + "\x00" + c.Subject }

// admit takes one place of the subject's budget, which its WebSocket
// connections and held long polls share; release gives it back.
func (s *Server) admit(subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return s.closedErrLocked()
	case s.subjects[subject] >= s.cfg.MaxConnsPerSubject:
		s.metrics.refuse(refusedSubjectConns)
		return errSubjectBusy
	}
	s.subjects[subject]++
	if s.queued[subject] == nil {
		s.queued[subject] = new(atomic.Int64)
	}
	return nil
}

// subjectQueued is the count of bytes queued for subject's connections;
// the subject was admitted.
func (s *Server) subjectQueued(subject string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued[subject]
}

// release gives back a place admit took.
func (s *Server) release(subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subjects[subject]--; s.subjects[subject] <= 0 {
		delete(s.subjects, subject)
		delete(s.queued, subject)
	}
}

func (s *Server) register(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.metrics.connsOpen.Add(1)
	s.wg.Add(1)
	return true
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.metrics.connsOpen.Add(-1)
	s.mu.Unlock()
	s.memory.closed()
	s.wg.Done()
}

// connections counts the open WebSocket connections.
func (s *Server) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// workspace returns the tenant's workspace and host identity, creating
// them on first use. The details of a failure (host paths) go to the log;
// the client learns only which kind of failure it was.
func (s *Server) workspace(tenant string) (sandbox.Workspace, error) {
	ws, err := s.cfg.Workspaces.Prepare(tenant)
	if err == nil {
		return ws, nil
	}
	s.log.Error("workspace unavailable", "tenant", tenant, "err", err)
	if errors.Is(err, sandbox.ErrUnenforceable) {
		return sandbox.Workspace{}, fmt.Errorf("%w: the workspace quota cannot be applied", sandbox.ErrUnenforceable)
	}
	return sandbox.Workspace{}, errors.New("gateway: workspace unavailable")
}

// closeChannel uncounts a channel that finished (or that was never
// attached), waking a drain when it was the last.
func (s *Server) closeChannel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.channels--; s.channels == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// closedErrLocked is the refusal of anything new once closing.
func (s *Server) closedErrLocked() error {
	if s.restarting {
		return errRestarting
	}
	return errShuttingDown
}

// Refusals once the server ends. Both are session.ErrClosed (code closed,
// 503 on the HTTP API).
var (
	errShuttingDown = fmt.Errorf("gateway: the server is shutting down: %w", session.ErrClosed)
	errRestarting   = fmt.Errorf("gateway: the server is restarting; retry in a moment: %w", session.ErrClosed)
)
