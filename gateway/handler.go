package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// NewServer checks cfg and returns a server.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Supervisor == nil || cfg.Auth == nil {
		return nil, errors.New("gateway: config: Supervisor and Auth are required")
	}
	if cfg.WorkspaceRoot == "" || !filepath.IsAbs(cfg.WorkspaceRoot) {
		return nil, fmt.Errorf("gateway: config: workspace root %q must be an absolute path", cfg.WorkspaceRoot)
	}
	applyDefaults(&cfg)
	for _, c := range append(append([]string{}, cfg.Commands...), cfg.DefaultCommand[0]) {
		if !filepath.IsAbs(c) {
			return nil, fmt.Errorf("gateway: config: command %q must be an absolute path", c)
		}
	}
	if cfg.Flow != wire.FlowHold && cfg.Flow != wire.FlowLive {
		return nil, fmt.Errorf("gateway: config: flow must be %q or %q, not %q", wire.FlowHold, wire.FlowLive, cfg.Flow)
	}
	if cfg.Hold > cfg.MaxHold {
		return nil, fmt.Errorf("gateway: config: hold %v is longer than the max hold %v", cfg.Hold, cfg.MaxHold)
	}
	if !allowed(cfg.Commands, cfg.DefaultCommand[0]) {
		return nil, fmt.Errorf("gateway: config: default command %q is not among the allowed commands", cfg.DefaultCommand[0])
	}
	if d := cfg.PreviewDomain; d != "" && !dnsName(d) {
		return nil, fmt.Errorf("gateway: config: preview domain %q must be a DNS name, such as preview.example.com (no scheme, port or wildcard: a preview's URL takes the port the gateway was reached on)", d)
	}
	route, err := newRouter(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.WorkspaceRoot, 0o711); err != nil {
		return nil, fmt.Errorf("gateway: create workspace root: %w", err)
	}
	own := cfg.Workspaces == nil
	if own {
		ws, err := sandbox.OpenWorkspaces(sandbox.WorkspacesConfig{Root: cfg.WorkspaceRoot, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("gateway: open workspaces: %w", err)
		}
		cfg.Workspaces = ws
	}
	polls, stopPolls := context.WithCancelCause(context.Background())
	s := &Server{
		cfg: cfg, log: cfg.Logger, conns: map[*conn]struct{}{}, subjects: map[string]int{}, queued: map[string]*atomic.Int64{}, memory: newMemoryRelease(),
		polls: polls, stopPolls: stopPolls, fileOps: make(chan struct{}, maxFileOps),
		starts:        newSubjectLimits(float64(cfg.StartsPerMinute)/60, cfg.StartsPerMinute),
		inputs:        newInputLimits(cfg.InputPerSecond, cfg.InputBurst),
		resizes:       newResizeLimits(cfg.ResizesPerSecond, cfg.ResizeBurst),
		ownWorkspaces: own,
	}
	s.metrics = newMetrics()
	s.ports.s, s.previews.s = s, s
	s.agent = newAgentExec(s)
	if route != nil {
		route.s, s.route = s, route
	}
	if cfg.Audit != nil {
		cfg.Supervisor.OnEnd(s.auditEnded)
	}
	return s, nil
}

// Handler returns the server's routes: /v1/connect, the HTTP API under
// /v1/executions, /healthz, /readyz and previews, then Config.Page for
// every other path. With Config.PreviewDomain, a request whose Host
// names a preview is the preview's, whatever its path. Call it once and
// serve every path with it.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.Page != nil {
		mux.Handle("/", s.cfg.Page)
	}
	mux.HandleFunc("GET /v1/connect", s.connect)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	mux.HandleFunc(previewPath, s.servePreviewPath)
	s.apiRoutes(mux)
	if s.cfg.PreviewDomain == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := s.previewHost(r); ok {
			s.servePreview(w, r, name, "/", r.URL.Path)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		s.retryAfter(w)
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	// No keys at all yet (no key file, and no JWKS fetched once): every
	// token would be refused. One source with keys is enough: a JWKS that
	// never answers keeps out only its own tokens. Which JWKS is in the
	// logs, not told to anyone asking.
	if s.cfg.Auth.Ready() != nil {
		s.retryAfter(w)
		http.Error(w, "no verification keys yet: no JWKS was fetched", http.StatusServiceUnavailable)
		return
	}
	// Full: a load balancer sends new work elsewhere. The sandbox's self
	// check ran before the server listened: serve does not start without it.
	if st, max := s.cfg.Supervisor.Stats(), s.cfg.Supervisor.Config().MaxRunning; st.Running >= max {
		s.retryAfter(w)
		http.Error(w, fmt.Sprintf("at capacity: %d of %d executions running", st.Running, max), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n" + s.guaranteesReady() + s.policiesReady()))
}

// guaranteesReady is /readyz's sandbox detail: each guarantee's state,
// so an operator sees a degraded or missing one where health is checked.
func (s *Server) guaranteesReady() string {
	var b strings.Builder
	for _, g := range s.cfg.Guarantees {
		b.WriteString("guarantee " + g + "\n")
	}
	return b.String()
}

// connect authenticates before upgrading: a refused client learns only
// the status, never why, and its token never reaches a log.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	offered := offeredProtocols(r)
	if !allowed(offered, wire.Subprotocol) {
		http.Error(w, "the termgate.v1 subprotocol is required", http.StatusBadRequest)
		return
	}
	r, ok := s.route.connectHop(w, r) // cluster_connect.go
	if !ok {
		return
	}
	token := s.token(r, offered)
	claims, err := s.cfg.Auth.Verify(token)
	if err != nil {
		s.metrics.authFailed(token, err)
		s.auditConnect(r, "", "", wire.CodeUnauthorized, authReason(token, err))
		s.log.Info("connection refused", "remote_addr", s.remoteAddr(r), "err", err)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if !claims.Has(auth.ScopeAttach) && !claims.Has(auth.ScopeCreate) && !claims.Has(ScopeForward) {
		s.metrics.authFailures.add(authScope, 1)
		s.auditConnect(r, claims.Tenant, claims.Subject, wire.CodeForbidden, "")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if s.route.proxyConnect(w, r) { // ?node= names another node
		return
	}
	subject := subjectKey(claims)
	if err := s.admit(subject); err != nil {
		s.auditConnect(r, claims.Tenant, claims.Subject, admitCode(err), "")
		status := http.StatusTooManyRequests
		if errors.Is(err, session.ErrClosed) {
			status = http.StatusServiceUnavailable
			s.retryAfter(w)
		}
		http.Error(w, err.Error(), status)
		return
	}
	served := false // then serveConn releases the subject
	defer func() {
		if !served {
			s.release(subject)
		}
	}()
	hj := &smallBuffers{ResponseWriter: w, writeTimeout: s.cfg.WriteTimeout}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		Subprotocols:   []string{wire.Subprotocol},
		OriginPatterns: s.cfg.Origins,
	})
	if err != nil {
		s.log.Info("upgrade refused", "remote_addr", s.remoteAddr(r), "err", err)
		return
	}
	ws.SetReadLimit(s.cfg.MaxMessageBytes)
	c := newConn(s, ws, claims, s.remoteAddr(r))
	c.w.control.subject = s.subjectQueued(subject)
	c.relay = newRelay(c, token)
	c.w.useNonBlocking(hj.nb)
	c.raw, c.br = hj.conn, hj.br
	_, c.hop = hopFrom(r.Context())
	if !s.register(c) {
		code, reason := s.closeCode()
		ws.Close(code, reason)
		return
	}
	served = true
	go s.serveConn(c, subject)
}

// serveConn runs c on a goroutine of its own, so that the handler
// returns and net/http lets go of its goroutine, whose stack is deep,
// and of its connection's state (hijack.go). c ends its registration
// once it ended, on whichever goroutine last ran its read loop: one that
// parked resumes on another (conn.read).
func (s *Server) serveConn(c *conn, subject string) {
	c.ended = func() {
		s.unregister(c)
		s.release(subject)
	}
	c.serve()
}

// offeredProtocols lists the subprotocols a client offered.
func offeredProtocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// token finds the bearer token: the Authorization header, a
// termgate.bearer.<token> subprotocol, or (when enabled) ?token=.
func (s *Server) token(r *http.Request, offered []string) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return ""
	}
	for _, p := range offered {
		if t, ok := strings.CutPrefix(p, wire.BearerPrefix); ok {
			return t
		}
	}
	if s.cfg.QueryToken {
		return r.URL.Query().Get("token")
	}
	return ""
}
