package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// scriptedBudget dials a scripted server with a reconnect budget and
// attaches to "job" on channel 1.
func scriptedBudget(t *testing.T, budget time.Duration) (*client.Client, *gatewaytest.Scripted, *gatewaytest.ScriptConn, *client.Execution) {
	t.Helper()
	s := gatewaytest.NewScripted(t)
	dialed := make(chan error, 1)
	var c *client.Client
	go func() {
		var err error
		c, err = client.Dial(t.Context(), client.Config{URL: s.URL, Token: func(context.Context) (string, error) { return "t", nil },
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ReconnectBudget: budget})
		dialed <- err
	}()
	conn := s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e, _ := attachJob(t, c, conn, wire.Message{ID: "job", Incarnation: "i1"})
	return c, s, conn, e
}

// TestRestartResumesSilently: a close with 1012, then dials refused for
// a while (the gateway is down), then a gateway on the same port: the
// client reattaches after what it delivered and the caller sees one
// stream, no error.
func TestRestartResumesSilently(t *testing.T) {
	t.Parallel()
	_, s, conn, e := scriptedBudget(t, 20*time.Second)
	conn.SendOutput(t, 1, 1, 2, 0, []byte("one\n"))
	if ev := next(t, e); string(ev.Data) != "one\n" {
		t.Fatalf("first event %+v", ev)
	}
	conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
	s.Down()
	time.Sleep(500 * time.Millisecond) // dials refused meanwhile
	s.Up(t)
	conn = s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	req := conn.Request(t, wire.TypeAttach)
	if req.ID != "job" || req.After != 1 || req.Incarnation != "i1" {
		t.Fatalf("reattach %+v, want job after 1 of incarnation i1", req)
	}
	conn.Attached(t, req, 1, wire.Message{ID: "job", Incarnation: "i1", FirstSeq: 1, LastSeq: 1})
	conn.SendOutput(t, 1, 2, 2, 4, []byte("two\n"))
	code := 0
	conn.Send(t, wire.Message{Type: wire.MsgExit, Channel: 1, Seq: 3, Code: &code, Reason: "exited"})
	if ev := next(t, e); ev.Kind != "output" || string(ev.Data) != "two\n" {
		t.Fatalf("after the restart: %+v, want the output two", ev)
	}
	if ev := next(t, e); ev.Kind != "exit" {
		t.Fatalf("after the restart: %+v, want the exit", ev)
	}
}

// TestGatewayGonePastTheBudget: a gateway that does not come back within
// the reconnect budget ends every execution with ErrGatewayGone, saying
// for how long it was tried.
func TestGatewayGonePastTheBudget(t *testing.T) {
	t.Parallel()
	c, s, conn, e := scriptedBudget(t, time.Second)
	conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
	s.Down()
	ctx, cancel := context.WithTimeout(t.Context(), gatewaytest.ScriptTimeout)
	defer cancel()
	_, err := e.Next(ctx)
	var ue *client.UnreachableError
	if !errors.Is(err, client.ErrGatewayGone) || !errors.As(err, &ue) {
		t.Fatalf("next: %v, want ErrGatewayGone", err)
	}
	if ue.URL != s.URL || ue.For < time.Second || ue.For > 15*time.Second || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("error %q (URL %q, for %v): want the URL and about 1s", err, ue.URL, ue.For)
	}
	if _, err := c.Attach(ctx, "other", 0, false); !errors.Is(err, client.ErrGatewayGone) {
		t.Fatalf("attach after the gateway was gone: %v, want ErrGatewayGone", err)
	}
}

// TestGoneIsItsOwnError: an execution the restarted gateway no longer has
// ends with an error that is ErrGone, not ErrNotFound; and the other way
// round.
func TestGoneIsItsOwnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code      string
		is, isNot error
	}{
		{wire.CodeGone, client.ErrGone, client.ErrNotFound},
		{wire.CodeNotFound, client.ErrNotFound, client.ErrGone},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			_, s, conn, e := scriptedBudget(t, 20*time.Second)
			conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
			conn = s.Accept(t)
			conn.Handshake(t, gatewaytest.Hello())
			req := conn.Request(t, wire.TypeAttach)
			conn.Send(t, wire.Message{Type: wire.MsgError, Req: req.Req, Error: tc.code, Message: "the execution " + tc.code})
			ctx, cancel := context.WithTimeout(t.Context(), gatewaytest.ScriptTimeout)
			defer cancel()
			_, err := e.Next(ctx)
			var ce *client.Error
			if !errors.Is(err, tc.is) || errors.Is(err, tc.isNot) || !errors.As(err, &ce) || ce.Code != tc.code {
				t.Fatalf("next: %v, want an error that is %v and not %v", err, tc.is, tc.isNot)
			}
		})
	}
}
