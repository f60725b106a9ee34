package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// attachRunning starts an execution that runs until stopped and attaches
// to it; it returns the connection and the channel.
func attachRunning(t *testing.T, e *testEnv, id string) (*client, uint32) {
	t.Helper()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	return c, att.Channel
}

// untilClosed reads until the connection ends and returns what came
// before and the close error.
func untilClosed(t *testing.T, c *client) (msgs []wire.Message, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			return msgs, err
		}
		if f.msg != nil {
			msgs = append(msgs, *f.msg)
		}
	}
}

// closingNow waits until the server refuses new work.
func closingNow(t *testing.T, e *testEnv) {
	t.Helper()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return e.srv.closing
	}) {
		t.Fatal("the server never started closing")
	}
}

// TestShutdownSendsExitsBeforeClosing: a shutdown for good closes an
// attached connection with 1001 only after the channel's exit, which
// the supervisor's close produces meanwhile.
func TestShutdownSendsExitsBeforeClosing(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c, ch := attachRunning(t, e, "job")
	defer c.ws.CloseNow()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(ctx) }()
	closingNow(t, e)
	if err := e.sup.Close(ctx); err != nil {
		t.Fatalf("supervisor close: %v", err)
	}
	msgs, err := untilClosed(t, c)
	if closeCode(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
	var exit *wire.Message
	for i := range msgs {
		if msgs[i].Type == wire.MsgExit && msgs[i].Channel == ch {
			exit = &msgs[i]
		}
	}
	if exit == nil || exit.Reason != "cancelled" {
		t.Fatalf("no exit (reason cancelled) on channel %d before the close: %+v", ch, msgs)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestShutdownIsBoundedByItsContext: executions nobody ends hold a
// shutdown only until its context ends; the connection is closed with
// 1001 all the same.
func TestShutdownIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c, _ := attachRunning(t, e, "job")
	defer c.ws.CloseNow()
	closed := make(chan error, 1)
	go func() { // reading answers the close handshake
		_, err := untilClosed(t, c)
		closed <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err == nil {
		t.Fatal("shutdown returned nil with an execution that never ended")
	}
	if err := <-closed; closeCode(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
}

// TestShutdownRefusesNewChannels: once a shutdown drains, attach and
// start on a connection still open are answered closed.
func TestShutdownRefusesNewChannels(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c, _ := attachRunning(t, e, "job")
	defer c.ws.CloseNow()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	go e.srv.Shutdown(ctx)
	closingNow(t, e)
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "late", ID: "job"})
	m, _ := c.expect(t, wire.MsgError)
	if m.Req != "late" || m.Error != wire.CodeClosed {
		t.Fatalf("attach during shutdown: %+v, want closed", m)
	}
	e.sup.Close(ctx)
}

// TestRestartClosesWith1012AndExecutionsLiveOn: a restart closes every
// connection with 1012 at once, without waiting for exits, and leaves the
// executions running; new connections meanwhile are refused with 503 and
// Retry-After.
func TestRestartClosesWith1012AndExecutionsLiveOn(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c, _ := attachRunning(t, e, "job")
	defer c.ws.CloseNow()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := e.srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	msgs, err := untilClosed(t, c)
	var ce websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != wire.CloseServiceRestart || ce.Reason != "server restarting; reconnect and resume" {
		t.Fatalf("closed with %v, want 1012 and its reason", err)
	}
	for _, m := range msgs {
		if m.Type == wire.MsgExit {
			t.Fatalf("an exit came on a restart: %+v", m)
		}
	}
	if info, err := e.sup.Get("acme", "job"); err != nil || info.Status != session.StatusRunning {
		t.Fatalf("execution after the restart: %+v, %v", info, err)
	}
	_, resp, err := e.dialRaw(e.token(t, "acme", allScopes...), nil)
	if err == nil || status(resp) != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("dial during the restart: %v, status %d, Retry-After %q; want 503 with Retry-After", err, status(resp), header(resp, "Retry-After"))
	}
	e.sup.Close(ctx)
}

// TestRestartAnswersHeldLongPolls: a long poll held when the server
// restarts is answered 503 closed with Retry-After at once, and so is one
// that comes after.
func TestRestartAnswersHeldLongPolls(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c, _ := attachRunning(t, e, "job")
	defer c.ws.CloseNow()
	tok := e.token(t, "acme", allScopes...)
	info, err := e.srv.cfg.Supervisor.Get("acme", "job")
	if err != nil {
		t.Fatal(err)
	}
	poll := func() (*http.Response, apiErrorBody, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.http.URL+"/v1/executions/job/events?after=1&wait=50s&incarnation="+info.Incarnation, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, apiErrorBody{}, err
		}
		defer resp.Body.Close()
		var body apiErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		return resp, body, nil
	}
	type answer struct {
		resp *http.Response
		body apiErrorBody
		err  error
	}
	held := make(chan answer, 1)
	go func() {
		resp, body, err := poll()
		held <- answer{resp, body, err}
	}()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return e.srv.subjects[subjectKey(auth.Claims{Tenant: "acme", Subject: "user-acme"})] >= 2 // the connection and the poll
	}) {
		t.Fatal("the long poll was never held")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	var a answer
	select {
	case a = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the held long poll was not answered on the restart")
	}
	check := func(what string, resp *http.Response, body apiErrorBody, err error) {
		t.Helper()
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || body.Error != wire.CodeClosed {
			t.Fatalf("%s: %v, status %d, Retry-After %q, body %+v; want 503 closed with Retry-After", what, err, status(resp), header(resp, "Retry-After"), body)
		}
	}
	check("held poll", a.resp, a.body, a.err)
	if waited := time.Since(start); waited > 40*time.Second {
		t.Fatalf("the held poll was answered after %v, not on the restart", waited)
	}
	resp, body, err := poll()
	check("poll after the restart", resp, body, err)
	e.sup.Close(ctx)
}

// TestGoneIsItsOwnCode: session.ErrGone is gone on the WebSocket and
// 410 Gone on the HTTP API, never not_found or internal.
func TestGoneIsItsOwnCode(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("attach %q: %w", "job", session.ErrGone)
	c := &conn{log: slog.New(slog.DiscardHandler)}
	if code, msg := c.errorText(wire.Request{Type: wire.TypeAttach}, err); code != wire.CodeGone || msg == "internal error" {
		t.Errorf("WebSocket: code %q, message %q; want gone with the error's text", code, msg)
	}
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	a := &httpAPI{s: e.srv}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/v1/executions/job", nil)
	a.fail(w, r, auth.Claims{Tenant: "acme"}, err)
	var body apiErrorBody
	json.NewDecoder(w.Body).Decode(&body)
	if w.Code != http.StatusGone || body.Error != wire.CodeGone {
		t.Errorf("HTTP: status %d, body %+v; want 410 gone", w.Code, body)
	}
}

func asCloseError(err error, ce *websocket.CloseError) bool { return errors.As(err, ce) }

func header(r *http.Response, name string) string {
	if r == nil {
		return ""
	}
	return r.Header.Get(name)
}
