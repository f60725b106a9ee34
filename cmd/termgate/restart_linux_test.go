package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/web"
)

// restartingGateway is a gateway with the page whose server restarts on
// the same port while the supervisor keeps its executions: a restart
// with a state directory as clients see it.
type restartingGateway struct {
	gatewayUnderTest
	t    *testing.T
	cfg  gateway.Config
	addr string
	srv  *gateway.Server
	hs   *http.Server
}

func startRestartingGateway(t *testing.T) *restartingGateway {
	t.Helper()
	needBwrap(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("a-test-secret-of-more-than-32-bytes-0123456789"), 0o600)
	authn, err := auth.New(auth.Config{HS256SecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sandbox.NewLauncher(sandbox.Config{CgroupParent: sandboxtest.CgroupParent(t)})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := session.New(session.Config{Launcher: session.SandboxLauncher(l)})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	g := &restartingGateway{t: t, cfg: gateway.Config{Supervisor: sup, Auth: authn, WorkspaceRoot: filepath.Join(dir, "ws"), Page: web.Handler()}}
	g.serve("127.0.0.1:0")
	g.gatewayUnderTest = gatewayUnderTest{url: "http://" + g.addr, secretFile: secret}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- g.srv.Shutdown(ctx) }()
		sup.Close(ctx)
		<-shut
		g.hs.Shutdown(ctx)
		l.Close()
	})
	return g
}

// serve starts a new server, with the page, on addr.
func (g *restartingGateway) serve(addr string) {
	g.t.Helper()
	srv, err := gateway.NewServer(g.cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	var ln net.Listener
	for range 50 { // the port may linger a moment after the last server
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	g.addr, g.srv = ln.Addr().String(), srv
	g.hs = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go g.hs.Serve(ln)
}

// stop ends the server as serve does on SIGTERM (1012); the port stays
// closed until serve.
func (g *restartingGateway) stop() {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.srv.Restart(ctx); err != nil {
		g.t.Fatalf("restart: %v", err)
	}
	g.hs.Shutdown(ctx)
}

// TestBrowserShowsARestartAndResumes: the gateway restarts (1012, then
// its port refuses for a while, then a new server on it): the page says
// "the server restarted; reconnecting" meanwhile, then is live on the same
// shell, whose output goes on.
func TestBrowserShowsARestartAndResumes(t *testing.T) {
	g := startRestartingGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	transcript(t, ctx, "the shell's prompt", func(s string) bool { return strings.Contains(s, "$ ") })
	typeKeys(t, ctx, "x=$((6*7)); (sleep 2; echo while-down-$x) &\r")
	g.stop()
	restarted := regexp.MustCompile(`^the server restarted; reconnecting( in \d+ s)?$`)
	poll(t, ctx, "the restart said", `document.getElementById("status").textContent`, restarted.MatchString)
	time.Sleep(2500 * time.Millisecond) // the shell prints while no gateway is up
	g.serve(g.addr)
	poll(t, ctx, "live again", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	transcript(t, ctx, "what the shell printed while the gateway was down", func(s string) bool { return strings.Contains(s, "while-down-42") })
	typeKeys(t, ctx, "echo back-$x\r") // the same shell: x is still set
	transcript(t, ctx, "the shell's answer", func(s string) bool { return strings.Contains(s, "back-42") })
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.transcript().split("while-down-42").length - 1`)); n != 1 {
		t.Errorf("the output printed while the gateway was down came %d times, want once", n)
	}
}
