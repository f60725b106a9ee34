package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/web"
)

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
	egress     *netpolicy.Egress // nil without network policies
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
	// The trail opens before the restore: adopted executions' proxies
	// record their connections from the start.
	if o.audit.Path != "" {
		o.audit.Logger = log
		if o.server.Audit, err = audit.Open(o.audit); err != nil {
			return nil, fmt.Errorf("serve: refusing to start: %w", err)
		}
		undo = append(undo, func() { o.server.Audit.Close() })
	}
	egress, err := o.buildEgress(log)
	if err != nil {
		return nil, err
	}
	if egress != nil {
		egress.Observe = gateway.AuditNetwork(o.server.Audit)
	}
	o.session.Egress, o.server.Egress = egress, egress
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
	if err := o.verifyEgress(ctx, l, egress); err != nil {
		return nil, err
	}
	o.logGuarantees(o.configured(egress != nil), log)
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
	o.policy.Proc = sandbox.ProcMode(o.proc)
	o.server.Supervisor, o.server.Auth, o.server.Logger, o.server.Workspaces = sup, authn, log, ws
	o.server.WorkspaceRoot, o.server.Origins, o.server.QueryToken = o.workspaceRoot, o.origins, o.queryToken
	o.server.PreviewDomain, o.server.Page = o.previewDomain, web.Handler()
	o.server.Commands, o.server.DefaultCommand, o.server.Sandbox = o.commands, strings.Fields(o.defaultCommand), o.policy
	srv, err := gateway.NewServer(o.server)
	if err != nil {
		return nil, err
	}
	return &gatewayParts{launcher: l, workspaces: ws, sup: sup, authn: authn, srv: srv, egress: egress,
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

// routes joins the gateway's routes, built once, and the browser terminal
// on one mux.
func (g *gatewayParts) serve(ctx context.Context, ln, mln net.Listener, o *serveOptions, log *slog.Logger) error {
	defer g.serveMetrics(mln, o, log)()
	defer g.refreshPeers(ctx)()
	defer defaultQuietHeap.run(ctx, log)()
	mux := g.srv.Handler()
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
