package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
)

func TestHandshakeRefusals(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	good := e.token(t, "acme", allScopes...)
	expired, _ := e.authn.Mint(auth.Claims{Subject: "u", Tenant: "acme", Scopes: map[string]bool{auth.ScopeAttach: true},
		IssuedAt: time.Now().Add(-2 * time.Hour), ExpiresAt: time.Now().Add(-time.Hour)})
	other, _ := auth.MintHS256([]byte("another-secret-another-secret-0123456789"), auth.Claims{Subject: "u", Tenant: "acme",
		Scopes: map[string]bool{auth.ScopeAttach: true}, IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}, "", "", "tenant")
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + strings.Split(good, ".")[1] + "."
	noScope := e.token(t, "acme")
	cases := []struct {
		name   string
		header http.Header
		protos []string
		status int
	}{
		{"no token", nil, []string{wire.Subprotocol}, 401},
		{"garbage", http.Header{"Authorization": {"Bearer x.y.z"}}, []string{wire.Subprotocol}, 401},
		{"expired", http.Header{"Authorization": {"Bearer " + expired}}, []string{wire.Subprotocol}, 401},
		{"other key", http.Header{"Authorization": {"Bearer " + other}}, []string{wire.Subprotocol}, 401},
		{"alg none", http.Header{"Authorization": {"Bearer " + none}}, []string{wire.Subprotocol}, 401},
		{"oversized", http.Header{"Authorization": {"Bearer " + strings.Repeat("a", 9000)}}, []string{wire.Subprotocol}, 401},
		{"no scope", http.Header{"Authorization": {"Bearer " + noScope}}, []string{wire.Subprotocol}, 403},
		{"no subprotocol", http.Header{"Authorization": {"Bearer " + good}}, nil, 400},
		{"cross origin", http.Header{"Authorization": {"Bearer " + good}, "Origin": {"http://evil.example"}}, []string{wire.Subprotocol}, 403},
		{"query token is off", nil, []string{wire.Subprotocol}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := e.url()
			if c.name == "query token is off" {
				url += "?token=" + good
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: c.protos, HTTPHeader: c.header})
			if err == nil {
				ws.CloseNow()
				t.Fatal("upgrade succeeded")
			}
			if status(resp) != c.status {
				t.Fatalf("status %d, want %d", status(resp), c.status)
			}
			body, _ := io.ReadAll(resp.Body)
			if c.status == 401 && string(body) != "unauthorized\n" {
				t.Errorf("401 body leaks detail: %q", body)
			}
		})
	}
}

func TestBrowserTokenInSubprotocolIsNotEchoed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	tok := e.token(t, "acme", allScopes...)
	c, resp, err := e.dialRaw("", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol, wire.BearerPrefix + tok},
		HTTPHeader:   http.Header{"Origin": {e.http.URL}},
	})
	if err != nil {
		t.Fatalf("dial: %v (%d)", err, status(resp))
	}
	defer c.close()
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != wire.Subprotocol {
		t.Fatalf("negotiated %q, want only %q", got, wire.Subprotocol)
	}
	c.send(t, wire.Request{Type: wire.TypePing, Req: "p1"})
	if m, _ := c.expect(t, wire.MsgPong); m.Req != "p1" {
		t.Fatalf("pong answers %q", m.Req)
	}
}

func TestStartAttachStreamsAndExits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", ID: "job-1", Command: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; exit 3"}, Attach: true})
	started, _ := c.expect(t, wire.MsgStarted)
	if started.ID != "job-1" || started.Req != "s" {
		t.Fatalf("started %+v", started)
	}
	att, _ := c.expect(t, wire.MsgAttached)
	exit, out := c.expect(t, wire.MsgExit)
	if exit.Channel != att.Channel || exit.Code == nil || *exit.Code != 3 || exit.Reason != "exited" {
		t.Fatalf("exit %+v", exit)
	}
	if got := string(out); !strings.Contains(got, "out\n") || !strings.Contains(got, "err\n") {
		t.Fatalf("output %q", got)
	}
}

func TestPTYInputResizeAndMultiplexing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "tty", Command: "/bin/sh", Args: []string{"-c", "read line; stty size; echo got=$line"}, PTY: &wire.Size{Rows: 30, Cols: 90}, Attach: true})
	c.expect(t, wire.MsgStarted)
	a1, _ := c.expect(t, wire.MsgAttached)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "pipe", Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	c.expect(t, wire.MsgStarted)
	a2, _ := c.expect(t, wire.MsgAttached)
	if !a1.PTY || a2.PTY || a1.Channel == a2.Channel {
		t.Fatalf("attached %+v and %+v", a1, a2)
	}
	c.send(t, wire.Request{Type: wire.TypeResize, Req: "r", Channel: a1.Channel, Rows: 40, Cols: 100})
	c.expect(t, wire.MsgOK)
	c.sendInput(t, a2.Channel, 0, "to-cat\n")
	c.send(t, wire.Request{Type: wire.TypeCloseStdin, Channel: a2.Channel})
	c.sendInput(t, a1.Channel, 0, "hello\r")
	c.sendInput(t, a1.Channel, 0, "hello\r") // a retry: applied once
	outs := map[uint32]*bytes.Buffer{a1.Channel: {}, a2.Channel: {}}
	exits := 0
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for exits < 2 {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("read: %v; outputs %q %q", err, outs[a1.Channel], outs[a2.Channel])
		}
		if f.out != nil {
			outs[f.out.Channel].Write(f.out.Data)
		} else if f.msg.Type == wire.MsgExit {
			exits++
		}
	}
	tty := strings.ReplaceAll(outs[a1.Channel].String(), "\r", "")
	if !strings.Contains(tty, "40 100\n") || !strings.Contains(tty, "got=hello\n") || strings.Count(tty, "hello") != 2 {
		t.Errorf("pty output %q", tty)
	}
	if outs[a2.Channel].String() != "to-cat\n" {
		t.Errorf("pipe output %q", outs[a2.Channel])
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.dial(t, e.token(t, "acme", allScopes...))
	defer a.close()
	a.send(t, wire.Request{Type: wire.TypeStart, ID: "secret-job", Command: "/bin/sh", Args: []string{"-c", "sleep 30"}})
	a.expect(t, wire.MsgStarted)

	b := e.dial(t, e.token(t, "globex", allScopes...))
	defer b.close()
	for _, r := range []wire.Request{
		{Type: wire.TypeAttach, Req: "1", ID: "secret-job"},
		{Type: wire.TypeCancel, Req: "2", ID: "secret-job"},
		{Type: wire.TypeAttach, Req: "3", ID: "never-existed"},
	} {
		b.send(t, r)
		m, _ := b.expect(t, wire.MsgError)
		if m.Error != "not_found" || m.Req != r.Req || strings.Contains(m.Message, "acme") {
			t.Errorf("%s by another tenant: %+v", r.Type, m)
		}
	}
	a.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", ID: "secret-job"})
	a.expect(t, wire.MsgOK)
}

func TestReadOnlyCannotType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	owner := e.dial(t, e.token(t, "acme", allScopes...))
	defer owner.close()
	owner.send(t, wire.Request{Type: wire.TypeStart, ID: "shared", Command: "/bin/sh", Args: []string{"-c", "read x; echo typed=$x"}, Attach: true})
	owner.expect(t, wire.MsgStarted)
	oa, _ := owner.expect(t, wire.MsgAttached)

	viewer := e.dial(t, e.token(t, "acme", auth.ScopeAttach))
	defer viewer.close()
	viewer.send(t, wire.Request{Type: wire.TypeAttach, ID: "shared"})
	va, _ := viewer.expect(t, wire.MsgAttached)
	if !va.ReadOnly {
		t.Fatal("a token without exec:write attached read-write")
	}
	viewer.sendInput(t, va.Channel, 0, "intruder\n")
	if m, _ := viewer.expect(t, wire.MsgError); m.Error != "forbidden" {
		t.Fatalf("viewer input: %+v", m)
	}
	viewer.send(t, wire.Request{Type: wire.TypeSignal, Req: "k", Channel: va.Channel, Signal: "KILL"})
	if m, _ := viewer.expect(t, wire.MsgError); m.Error != "forbidden" {
		t.Fatalf("viewer signal: %+v", m)
	}
	owner.send(t, wire.Request{Type: wire.TypeAttach, ID: "shared", ReadOnly: true})
	ro, _ := owner.expect(t, wire.MsgAttached)
	owner.sendInput(t, ro.Channel, 0, "via-ro\n")
	if m, _ := owner.expect(t, wire.MsgError); m.Error != "read_only" {
		t.Fatalf("input on a read-only channel: %+v", m)
	}
	owner.sendInput(t, oa.Channel, 0, "owner\n")
	_, out := viewer.expect(t, wire.MsgExit)
	if string(out) != "typed=owner\n" {
		t.Fatalf("viewer saw %q", out)
	}
}

// TestOversizedMessageCloses1009 sends messages over the limit, one a
// little over and one half a megabyte over: the client's write completes
// and it reads the 1009 either way. A server that closed with the rest of
// the message unread would reset the connection, failing the write.
func TestOversizedMessageCloses1009(t *testing.T) {
	t.Parallel()
	for _, size := range []int{8 << 10, 512 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.MaxMessageBytes = 4096 })
			c := e.dial(t, e.token(t, "acme", allScopes...))
			defer c.close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			wrote := make(chan error, 1)
			go func() { // the server stops reading it at the limit
				wrote <- c.ws.Write(ctx, websocket.MessageBinary, wire.AppendInput(nil, 1, 0, bytes.Repeat([]byte("x"), size)))
			}()
			var err error
			for err == nil { // past the hello
				_, err = c.read(ctx)
			}
			if closeCode(err) != websocket.StatusMessageTooBig {
				t.Fatalf("want close 1009, got %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("the oversized message's write failed: %v", err)
			}
		})
	}
}

func TestProtocolErrorsAnswerOrClose(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, func(c *Config) { c.MaxChannels = 1 })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "a", Command: "/usr/bin/python3"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != "invalid_spec" {
		t.Errorf("command outside the allowlist: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "b", Command: "/bin/sh", Args: []string{"-c", "sleep 5"}, Attach: true})
	c.expect(t, wire.MsgAttached)
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "b"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != "too_many_channels" {
		t.Errorf("channel limit: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "b", Command: "/bin/sh", Args: []string{"-c", "other"}})
	if m, _ := c.expect(t, wire.MsgError); m.Error != "conflict" {
		t.Errorf("same id, other spec: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeResize, Channel: 99, Rows: 1, Cols: 1})
	if m, _ := c.expect(t, wire.MsgError); m.Error != "not_attached" {
		t.Errorf("unknown channel: %+v", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c.ws.Write(ctx, websocket.MessageText, []byte(`[{"type":"start"}]`)) // not one JSON object
	for {
		if _, err := c.read(ctx); err != nil {
			if closeCode(err) != wire.CloseProtocolError {
				t.Fatalf("want close %d, got %v", wire.CloseProtocolError, err)
			}
			return
		}
	}
}

func TestConnectionsPerSubject(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.MaxConnsPerSubject = 1 })
	tok := e.token(t, "acme", allScopes...)
	first := e.dial(t, tok)
	defer first.close()
	if c, resp, err := e.dialRaw(tok, nil); err == nil || status(resp) != http.StatusTooManyRequests {
		if c != nil {
			c.close()
		}
		t.Fatalf("second connection: %v, status %d", err, status(resp))
	}
}

func TestStartRateLimited(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.StartsPerMinute = 2 })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	for i := range 3 {
		c.send(t, wire.Request{Type: wire.TypeStart, Req: fmt.Sprint(i), Command: "/bin/sh", Args: []string{"-c", "true"}})
	}
	c.expect(t, wire.MsgStarted)
	c.expect(t, wire.MsgStarted)
	if m, _ := c.expect(t, wire.MsgError); m.Error != "rate_limited" || m.Req != "2" {
		t.Fatalf("third start: %+v", m)
	}
}

func TestAuthExpiryWarnsThenCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AuthWarning = 2 * time.Second })
	// Expiry is in whole seconds, so a token minted for 4 s lives 3 to 4 s:
	// time for a dial and a reauth on a loaded machine.
	short := func() string {
		tok, err := e.authn.Mint(auth.Claims{Subject: "user-acme", Tenant: "acme", Scopes: map[string]bool{auth.ScopeAttach: true},
			IssuedAt: time.Now(), ExpiresAt: time.Now().Add(4 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok := short()
	c := e.dial(t, tok)
	defer c.close()
	c.expect(t, wire.MsgAuthExpiring)
	// A client with no fresher token answers with the same one: that is
	// accepted, and not warned about again (which would loop).
	c.send(t, wire.Request{Type: wire.TypeReauth, Req: "same", Token: tok})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for warnings := 0; ; {
		f, err := c.read(ctx)
		if err != nil {
			if closeCode(err) != wire.CloseAuthExpired {
				t.Fatalf("want close %d, got %v", wire.CloseAuthExpired, err)
			}
			break
		}
		if f.msg != nil && f.msg.Type == wire.MsgAuthExpiring {
			if warnings++; warnings > 0 {
				t.Fatalf("warned again after a reauth that did not move the expiry")
			}
		}
	}
	// A reauth with a fresh token keeps the connection past the old expiry.
	c2 := e.dial(t, short())
	defer c2.close()
	c2.send(t, wire.Request{Type: wire.TypeReauth, Req: "r", Token: e.token(t, "acme", auth.ScopeAttach)})
	c2.expect(t, wire.MsgOK)
	time.Sleep(5 * time.Second)
	c2.send(t, wire.Request{Type: wire.TypePing, Req: "alive"})
	c2.expect(t, wire.MsgPong)
	// Another tenant's token is a policy violation.
	c2.send(t, wire.Request{Type: wire.TypeReauth, Token: e.token(t, "globex", auth.ScopeAttach)})
	for {
		if _, err := c2.read(ctx); err != nil {
			if closeCode(err) != websocket.StatusPolicyViolation {
				t.Fatalf("want close 1008, got %v", err)
			}
			return
		}
	}
}

func TestShutdownClosesWith1001AndExecutionsSurvive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "survivor", Command: "/bin/sh", Args: []string{"-c", "sleep 2; echo done"}})
	c.expect(t, wire.MsgStarted)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go e.srv.Shutdown(ctx)
	for {
		if _, err := c.read(ctx); err != nil {
			if closeCode(err) != websocket.StatusGoingAway {
				t.Fatalf("want 1001, got %v", err)
			}
			break
		}
	}
	info, err := e.sup.Wait(ctx, "acme", "survivor", 1<<40, 8*time.Second)
	if err != nil || info.Result == nil || string(info.Result.Stdout.Head) != "done\n" {
		t.Fatalf("execution after the connection closed: %+v, %v", info, err)
	}
}

func TestHeartbeatClosesSilentClient(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.PingInterval, c.PongTimeout = 100*time.Millisecond, 3*time.Second })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	// Never reading means never answering pings. The server counts the
	// connection only after its handshake answer, which the dial returns on.
	if !sandboxtest.Eventually(t, 15*time.Second, func() bool { return e.srv.connections() > 0 }) {
		t.Fatal("the connection was never counted")
	}
	if !sandboxtest.Eventually(t, 15*time.Second, func() bool { return e.srv.connections() == 0 }) {
		t.Fatal("a client that answers no ping is still connected")
	}
	// A reading client answers pings and stays.
	r := e.dial(t, e.token(t, "acme", allScopes...))
	readErr := make(chan error, 1)
	go func() {
		for { // reads answer pings as they come; the hello is the only message
			if _, err := r.read(context.Background()); err != nil {
				readErr <- err
				return
			}
		}
	}()
	select {
	case err := <-readErr:
		t.Fatalf("a client that answers pings was closed: %v", err)
	case <-time.After(4 * time.Second): // more than a pong timeout
	}
	r.ws.CloseNow()
	<-readErr
}

// TestClientThatNeverReadsDoesNotGrowMemory: 64 MiB of output to a client
// that reads nothing; the server's heap must stay far below that, and the
// client later sees a gap.
func TestClientThatNeverReadsDoesNotGrowMemory(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "flood", Command: "/bin/sh", Args: []string{"-c", "head -c 64M /dev/zero"}, Attach: true})
	// The supervisor knows the execution once it is started; the client
	// reads nothing after that.
	c.expect(t, wire.MsgStarted)
	before := heapInUse()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	info, err := e.sup.Wait(ctx, "acme", "flood", 1<<40, 60*time.Second)
	if err != nil || info.Result == nil {
		t.Fatalf("flood did not finish: %+v %v", info, err)
	}
	if grew := int64(heapInUse()) - int64(before); grew > 16<<20 {
		t.Errorf("heap grew by %d MiB while a client read nothing", grew>>20)
	}
	sawGap := false
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if f.msg != nil && f.msg.Type == wire.MsgGap {
			sawGap = true
		}
		if f.msg != nil && f.msg.Type == wire.MsgExit {
			break
		}
	}
	if !sawGap {
		t.Error("the lagging client saw no gap")
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestInputRefusalsAreNotRepeated: input beyond the rate is refused with
// the offset received; the frames a client sent meanwhile are refused
// silently until input is accepted again.
func TestInputRefusalsAreNotRepeated(t *testing.T) {
	t.Parallel()
	// One frame a second: a stall of the server under load refills no
	// token before the frames that follow are refused.
	e := newEnv(t, func(c *Config) { c.InputPerSecond, c.InputBurst = 1, 1 })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startCat(t, c)
	for i := range 6 {
		c.sendInput(t, ch, uint64(i), "x")
	}
	c.send(t, wire.Request{Type: wire.TypePing, Req: "p"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var refusals []wire.Message
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.msg != nil && f.msg.Type == wire.MsgError {
			refusals = append(refusals, *f.msg)
		}
		if f.msg != nil && f.msg.Type == wire.MsgPong {
			break
		}
	}
	if len(refusals) != 1 || refusals[0].Error != "rate_limited" || refusals[0].Channel != ch || refusals[0].InputOffset != 1 {
		t.Fatalf("refusals of 5 frames: %+v", refusals)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", ID: "cat"})
	c.expect(t, wire.MsgOK)
}

// TestInputErrorsCarryTheReceivedOffset: a refused input frame is answered
// with the input offset the execution has, for the client to resend from.
func TestInputErrorsCarryTheReceivedOffset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startCat(t, c)
	c.sendInput(t, ch, 0, "abc")
	c.sendInput(t, ch, 7, "x") // bytes 3 to 6 were lost on the way
	m, _ := c.expect(t, wire.MsgError)
	if m.Error != "input_offset" || m.Channel != ch || m.InputOffset != 3 {
		t.Fatalf("input ahead of what was received: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", ID: "cat"})
	c.expect(t, wire.MsgOK)
}

// startCat starts "cat" attached on c and returns its channel; the test
// cancels it.
func startCat(t *testing.T, c *client) uint32 {
	t.Helper()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "cat", Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	return att.Channel
}

// TestAttachedComesBeforeTheChannelsOutput: a client routes output by the
// channel its attached answer names, so output ahead of that answer would
// be dropped and lost. Attach many times to an execution with history and
// watch the order on the wire.
func TestAttachedComesBeforeTheChannelsOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "history", Command: "/bin/sh", Args: []string{"-c", "seq 1 20000"}})
	c.expect(t, wire.MsgStarted)
	if _, err := e.sup.Wait(t.Context(), "acme", "history", 1<<40, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range 300 {
		req := strconv.Itoa(i)
		c.send(t, wire.Request{Type: wire.TypeAttach, Req: req, ID: "history"})
		attached := map[uint32]bool{}
		for done := false; !done; {
			f, err := c.read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case f.out != nil && !attached[f.out.Channel]:
				t.Fatalf("attach %d: output of channel %d before its attached answer", i, f.out.Channel)
			case f.msg != nil && f.msg.Type == wire.MsgAttached:
				attached[f.msg.Channel] = true
			case f.msg != nil && f.msg.Type == wire.MsgExit:
				done = true // the channel replayed everything and ended
			}
		}
	}
}
