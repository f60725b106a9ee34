//go:build linux

package client_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// restartable is a real gateway whose server can restart on the same
// port while the supervisor and its executions live on, as a restart
// with a state directory looks to clients.
type restartable struct {
	t    *testing.T
	cfg  gateway.Config
	addr string
	srv  *gateway.Server
	hs   *http.Server
}

func newRestartable(t *testing.T) (*restartable, string) {
	t.Helper()
	dir := sandboxtest.Dir(t)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("client-test-secret-0123456789-0123456789"), 0o600)
	authn, err := auth.New(auth.Config{HS256SecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := session.New(session.Config{Launcher: session.SandboxLauncher(launcher.Get(t))})
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{t: t, cfg: gateway.Config{Supervisor: sup, Auth: authn, WorkspaceRoot: filepath.Join(dir, "ws"),
		Commands: []string{"/bin/cat"}, DefaultCommand: []string{"/bin/cat"}}}
	r.serve("127.0.0.1:0")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- r.srv.Shutdown(ctx) }()
		sup.Close(ctx)
		<-shut
		r.hs.Shutdown(ctx)
	})
	tok, err := authn.Mint(auth.Claims{Subject: "u", Tenant: "acme", IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true}})
	if err != nil {
		t.Fatal(err)
	}
	return r, tok
}

// serve starts a new server on addr.
func (r *restartable) serve(addr string) {
	r.t.Helper()
	srv, err := gateway.NewServer(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	var ln net.Listener
	for range 50 { // the port may linger a moment after the last server
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr, r.srv = ln.Addr().String(), srv
	r.hs = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go r.hs.Serve(ln)
}

// restart ends the server as serve does on SIGTERM, leaves the port
// closed for down, and serves again on it.
func (r *restartable) restart(down time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.srv.Restart(ctx); err != nil {
		r.t.Fatalf("restart: %v", err)
	}
	r.hs.Shutdown(ctx)
	time.Sleep(down) // dials are refused meanwhile
	r.serve(r.addr)
}

// TestClientResumesAcrossARealRestart: a gateway restarted on the same
// port (1012, then dials refused, then a new server): the client resumes
// the execution; input sent while the gateway was down arrives once, and
// the output is exact.
func TestClientResumesAcrossARealRestart(t *testing.T) {
	t.Parallel()
	r, tok := newRestartable(t)
	c := dial(t, "http://"+r.addr, tok)
	e, err := c.Start(t.Context(), wire.Request{Command: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	e.Write([]byte("one\n"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out []byte
	var exit *client.Exit
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			ev, err := e.Next(ctx)
			if err != nil {
				t.Fatalf("next: %v (output %q)", err, out)
			}
			switch ev.Kind {
			case "output":
				if ev.Offset != uint64(len(out)) {
					t.Fatalf("output at offset %d after %d bytes: lost or repeated", ev.Offset, len(out))
				}
				out = append(out, ev.Data...)
			case "gap", "error":
				t.Fatalf("unexpected %s: %+v", ev.Kind, ev)
			case "exit":
				exit = ev.Exit
			}
		}
	}
	read(func() bool { return string(out) == "one\n" })
	r.restart(500 * time.Millisecond)
	e.Write([]byte("two\n"))
	if err := e.CloseStdin(t.Context()); err != nil {
		t.Fatal(err)
	}
	read(func() bool { return exit != nil })
	if string(out) != "one\ntwo\n" || exit.Code != 0 {
		t.Fatalf("output %q, exit %+v; want one and two once each, and exit 0", out, exit)
	}
}
