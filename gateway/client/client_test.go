//go:build linux

// The client's tests against a real gateway, which needs Linux; the
// client itself builds everywhere (make cross).

package client_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"go.uber.org/goleak"
)

// launcher is the real sandbox the tests' gateways share, under a
// cgroup parent of its own.
var launcher = sandboxtest.Shared[*sandbox.Launcher]{
	What: "sandbox (install bubblewrap)",
	New: func() (*sandbox.Launcher, error) {
		return sandbox.NewLauncher(sandbox.Config{CgroupParent: clientCgroups})
	},
	Close: func(l *sandbox.Launcher) {
		l.Close()
		sandboxtest.RemoveCgroupParent(clientCgroups)
	},
}

var clientCgroups = sandboxtest.SharedCgroupParent("client")

func TestMain(m *testing.M) {
	code := m.Run()
	launcher.Release()
	if code == 0 {
		if err := goleak.Find(sandboxtest.Forker); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newGateway runs a real gateway on 127.0.0.1 and returns its URL and a
// token for tenant acme.
func newGateway(t *testing.T) (string, string) {
	t.Helper()
	l := launcher.Get(t)
	dir := sandboxtest.Dir(t)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("client-test-secret-0123456789-0123456789"), 0o600)
	authn, err := auth.New(auth.Config{HS256SecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	sup, _ := session.New(session.Config{Launcher: session.SandboxLauncher(l)})
	srv, err := gateway.NewServer(gateway.Config{Supervisor: sup, Auth: authn, WorkspaceRoot: filepath.Join(dir, "ws"),
		Commands: []string{"/bin/sh", "/usr/bin/seq", "/bin/cat"}, DefaultCommand: []string{"/bin/sh"},
		Ring: replay.Config{MaxBytes: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(ctx) }()
		sup.Close(ctx)
		<-shut
		ts.Close()
	})
	tok, err := authn.Mint(auth.Claims{Subject: "u", Tenant: "acme", IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true}})
	if err != nil {
		t.Fatal(err)
	}
	return ts.URL, tok
}

func dial(t *testing.T, url, tok string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: url, Token: func(context.Context) (string, error) { return tok, nil },
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// collect reads an execution to its exit and returns stdout, checking that
// sequence numbers only grow and no gap appears.
func collect(t *testing.T, e *client.Execution) (string, client.Exit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	var last uint64
	for {
		ev, err := e.Next(ctx)
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without an exit event")
		}
		if err != nil {
			t.Fatalf("next: %v (after %d bytes)", err, out.Len())
		}
		if ev.Seq != 0 {
			if ev.Seq <= last {
				t.Fatalf("seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
		}
		switch ev.Kind {
		case "output":
			if ev.Offset != uint64(out.Len()) {
				t.Fatalf("output event seq %d at offset %d, after %d bytes: output lost or repeated", ev.Seq, ev.Offset, out.Len())
			}
			out.Write(ev.Data)
		case "gap":
			t.Fatalf("gap %+v", *ev.Gap)
		case "exit":
			return out.String(), *ev.Exit
		}
	}
}

func TestClientResumesAcrossDroppedConnections(t *testing.T) {
	t.Parallel()
	url, tok := newGateway(t)
	proxy := newProxy(t, url, 32<<10)
	c := dial(t, "http://"+proxy.Addr(), tok)
	e, err := c.Start(t.Context(), wire.Request{Command: "seq", Args: []string{"1", "150000"}})
	if err != nil {
		t.Fatal(err)
	}
	out, exit := collect(t, e)
	var want strings.Builder
	for i := 1; i <= 150000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out != want.String() || exit.Code != 0 {
		t.Fatalf("got %d bytes (want %d), exit %+v", len(out), want.Len(), exit)
	}
	if proxy.Cuts() < 3 {
		t.Fatalf("only %d cuts", proxy.Cuts())
	}
}

func TestClientResendsInputByOffset(t *testing.T) {
	t.Parallel()
	url, tok := newGateway(t)
	proxy := newProxy(t, url, 300)
	c := dial(t, "http://"+proxy.Addr(), tok)
	e, err := c.Start(t.Context(), wire.Request{Command: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 300 {
		line := fmt.Sprintf("line %03d\n", i)
		want.WriteString(line)
		e.Write([]byte(line))
		if i%50 == 0 {
			time.Sleep(20 * time.Millisecond) // let the proxy cut in between
		}
	}
	if err := e.CloseStdin(t.Context()); err != nil {
		t.Fatal(err)
	}
	out, exit := collect(t, e)
	if out != want.String() || exit.Code != 0 {
		i := 0
		for i < len(out) && i < want.Len() && out[i] == want.String()[i] {
			i++
		}
		t.Fatalf("cat echoed %d bytes, want %d; exit %+v; first difference at %d: got %q, want %q", len(out), want.Len(), exit, i,
			out[i:min(len(out), i+40)], want.String()[i:min(want.Len(), i+40)])
	}
	if proxy.Cuts() < 1 {
		t.Fatal("no connection was cut: resending was not exercised")
	}
}

// TestClientWritesLargeInput: one Write far larger than the gateway's
// input queue and near its message limit arrives whole and in order: the
// client sends it in frames and resends what the full queue refused.
func TestClientWritesLargeInput(t *testing.T) {
	t.Parallel()
	url, tok := newGateway(t)
	c := dial(t, url, tok)
	e, err := c.Start(t.Context(), wire.Request{Command: "/bin/sh", Args: []string{"-c", "sleep 0.5; md5sum"}})
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 1<<20)
	for i := range in {
		in[i] = byte(i*7 + i/251)
	}
	e.Write(in)
	e.Write([]byte("tail"))
	if err := e.CloseStdin(t.Context()); err != nil {
		t.Fatal(err)
	}
	out, exit := collect(t, e)
	if want := fmt.Sprintf("%x  -\n", md5.Sum(append(in, "tail"...))); out != want || exit.Code != 0 {
		t.Fatalf("md5sum printed %q, want %q; exit %+v", out, want, exit)
	}
}

// TestClientBatchesSmallWrites: thousands of small writes in a burst (sent
// together, at most one frame per 20 ms) all arrive, in order, on one
// connection.
func TestClientBatchesSmallWrites(t *testing.T) {
	t.Parallel()
	url, tok := newGateway(t)
	var logs sandboxtest.SyncBuffer
	c, err := client.Dial(t.Context(), client.Config{URL: url, Token: func(context.Context) (string, error) { return tok, nil },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := c.Start(t.Context(), wire.Request{Command: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 5000 {
		line := fmt.Sprintf("line %04d\n", i)
		want.WriteString(line)
		e.Write([]byte(line))
	}
	if err := e.CloseStdin(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, _ := collect(t, e); out != want.String() {
		t.Fatalf("cat echoed %d bytes, want %d", len(out), want.Len())
	}
	if strings.Contains(logs.String(), "disconnected") {
		t.Fatalf("the connection was dropped: %s", logs.String())
	}
}

func TestClientReportsServerErrors(t *testing.T) {
	t.Parallel()
	url, tok := newGateway(t)
	c := dial(t, url, tok)
	_, err := c.Start(t.Context(), wire.Request{Command: "/usr/bin/python3"})
	var se *client.Error
	if !errors.As(err, &se) || se.Code != "invalid_spec" {
		t.Fatalf("disallowed command: %v", err)
	}
	if _, err := c.Attach(t.Context(), "nope", 0, false); !errors.As(err, &se) || se.Code != "not_found" {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := client.Dial(t.Context(), client.Config{URL: url, Token: func(context.Context) (string, error) { return "bad", nil }}); !errors.As(err, &se) || se.Code != "unauthorized" {
		t.Fatalf("bad token: %v", err)
	}
}

// newProxy cuts connections to the gateway at url after budget to
// 5*budget bytes from the server, up to 25 times: a message larger than
// every budget must get through.
func newProxy(t *testing.T, url string, budget int64) *gatewaytest.CuttingProxy {
	return gatewaytest.NewCuttingProxy(t, strings.TrimPrefix(url, "http://"),
		gatewaytest.ProxyConfig{MinBudget: budget, Spread: 4 * budget, MaxCuts: 25, Seed: 3})
}

// TestSequenceJumpResumes: a server that skips an event (messages lost on
// the way) makes the client drop the connection and resume after the last
// event it delivered, so the caller still sees every event once. The
// server is scripted: no real gateway skips.
func TestSequenceJumpResumes(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, wire.Message{})
	e, first := attachJob(t, c, conn, wire.Message{})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("a"))
	conn.SendOutput(t, 1, 3, 2, 2, []byte("c")) // 2 was lost on the way
	<-conn.Done()
	conn = s.Accept(t)
	conn.Handshake(t, wire.Message{})
	second := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, second, 1, wire.Message{})
	conn.SendOutput(t, 1, 2, 2, 1, []byte("b"))
	conn.SendOutput(t, 1, 3, 2, 2, []byte("c"))
	code := 0
	conn.Send(t, wire.Message{Type: wire.MsgExit, Channel: 1, Seq: 4, Code: &code, Reason: "exited"})
	var out string
	for {
		ev, err := e.Next(t.Context())
		if err != nil {
			break
		}
		out += string(ev.Data)
	}
	if out != "abc" {
		t.Errorf("delivered %q, want abc", out)
	}
	if first.After != 0 || second.After != 1 {
		t.Errorf("attached after %d, then after %d; want 0, then 1", first.After, second.After)
	}
}
