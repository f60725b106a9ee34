package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// scriptedWith dials a scripted server with cfg (URL and Token filled
// in), plays its first handshake and attaches to "job" on channel 1.
func scriptedWith(t *testing.T, cfg client.Config) (*gatewaytest.Scripted, *gatewaytest.ScriptConn, *client.Execution) {
	t.Helper()
	s := gatewaytest.NewScripted(t)
	cfg.URL, cfg.Token = s.URL, func(context.Context) (string, error) { return "t", nil }
	dialed := make(chan error, 1)
	var c *client.Client
	go func() {
		var err error
		c, err = client.Dial(t.Context(), cfg)
		dialed <- err
	}()
	conn := s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	return s, conn, e
}

// unavailable answers req as a node that cannot reach the owner does.
func unavailable(t *testing.T, conn *gatewaytest.ScriptConn, req wire.Request, retryMS int64) {
	t.Helper()
	conn.Send(t, wire.Message{Type: wire.MsgError, Req: req.Req, Error: wire.CodeUnavailable,
		Message: "node n2 is not answering; retry in a few seconds", RetryMS: retryMS})
}

// TestUnavailableReattachWaitsAndRetries: a reattach answered
// unavailable keeps the execution; the attach is asked again, not before
// retry_ms, and the stream goes on exactly where it was.
func TestUnavailableReattachWaitsAndRetries(t *testing.T) {
	t.Parallel()
	s, conn, e := scriptedWith(t, client.Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("one\n"))
	next(t, e)
	conn, req := reconnect(t, s, conn)
	answered := time.Now()
	unavailable(t, conn, req, 300)
	again := conn.Request(t, wire.TypeAttach)
	if waited := time.Since(answered); waited < 300*time.Millisecond {
		t.Fatalf("attached again after %v, before retry_ms 300", waited)
	}
	if again.ID != "job" || again.After != 1 || again.Seen != 4 || again.Incarnation != "i1" {
		t.Fatalf("second reattach %+v, want job after 1, seen 4, incarnation i1", again)
	}
	conn.Attached(t, again, 3, wire.Message{Ack: true, Incarnation: "i1", LastSeq: 1})
	conn.SendOutput(t, 3, 2, 2, 4, []byte("two\n"))
	if ev := next(t, e); string(ev.Data) != "two\n" {
		t.Fatalf("after unavailable: %+v, want the output two", ev)
	}
}

// TestUnavailablePastTheBudget: an owner that stays unavailable for the
// whole reconnect budget ends the execution with ErrGatewayGone.
func TestUnavailablePastTheBudget(t *testing.T) {
	t.Parallel()
	s, conn, e := scriptedWith(t, client.Config{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		ReconnectBudget: time.Second})
	conn, req := reconnect(t, s, conn)
	ended := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.ScriptTimeout)
		defer cancel()
		_, err := e.Next(ctx)
		ended <- err
	}()
	for range 200 { // 1s at 100ms each: about 10 rounds
		unavailable(t, conn, req, 100)
		r, _, ok := conn.Within(t, 5*time.Second)
		if !ok {
			break
		}
		if r == nil || r.Type != wire.TypeAttach {
			continue
		}
		req = *r
	}
	err := <-ended
	var ue *client.UnreachableError
	if !errors.Is(err, client.ErrGatewayGone) || !errors.As(err, &ue) || !errors.Is(err, &client.Error{Code: wire.CodeUnavailable}) {
		t.Fatalf("next: %v, want ErrGatewayGone from unavailable", err)
	}
}

// TestDetachedWithErrorResumesOnTheConnection: a detached the server
// sends unasked with an error (a relay lost the owner) has the client
// attach again on the same connection, after what it delivered, and
// resend the input the owner did not get.
func TestDetachedWithErrorResumesOnTheConnection(t *testing.T) {
	t.Parallel()
	_, conn, e := scriptedWith(t, client.Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("abc"))
	next(t, e)
	if _, err := e.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	readInput(t, conn, 0, 10)
	conn.Send(t, wire.Message{Type: wire.MsgDetached, Channel: 1, Error: wire.CodeUnavailable,
		Message: "node n2 is not answering", RetryMS: 1000})
	req := conn.Request(t, wire.TypeAttach)
	if req.ID != "job" || req.After != 1 || req.Seen != 3 || req.Incarnation != "i1" || !req.Ack {
		t.Fatalf("attach after detached %+v, want job after 1, seen 3, incarnation i1, ack", req)
	}
	conn.Attached(t, req, 2, wire.Message{Ack: true, Incarnation: "i1", LastSeq: 1, InputOffset: 4})
	if got := readInput(t, conn, 4, 10); string(got) != "456789" {
		t.Fatalf("resent input %q, want 456789", got)
	}
	conn.SendOutput(t, 2, 2, 2, 3, []byte("de"))
	if ev := next(t, e); string(ev.Data) != "de" {
		t.Fatalf("after detached: %+v, want the output de", ev)
	}
}

// TestUnansweredPingReconnects: a connection whose server stops answering
// (a frozen node behind a proxy that passes bytes) is dropped after the
// ping interval without a pong, and the client resumes on a new one;
// pings answered keep the connection.
func TestUnansweredPingReconnects(t *testing.T) {
	t.Parallel()
	s, conn, e := scriptedWith(t, client.Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		PingInterval: 100 * time.Millisecond})
	for range 3 {
		p := conn.Request(t, wire.TypePing)
		if p.Req != "keepalive" {
			t.Fatalf("ping req %q, want keepalive", p.Req)
		}
		conn.Send(t, wire.Message{Type: wire.MsgPong, Req: p.Req})
	}
	conn.SendOutput(t, 1, 1, 2, 0, []byte("one\n"))
	next(t, e)
	conn.Request(t, wire.TypePing) // and no pong
	select {
	case <-conn.Done():
	case <-time.After(gatewaytest.ScriptTimeout):
		t.Fatal("the client kept a connection whose pings went unanswered")
	}
	conn = s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	req := conn.Request(t, wire.TypeAttach)
	if req.After != 1 || req.Incarnation != "i1" {
		t.Fatalf("reattach %+v, want after 1 of i1", req)
	}
}

// TestPingsOff: a negative PingInterval sends no pings.
func TestPingsOff(t *testing.T) {
	t.Parallel()
	_, conn, _ := scriptedWith(t, client.Config{PingInterval: -1})
	if r, _, ok := conn.Within(t, 500*time.Millisecond); ok {
		t.Fatalf("the client sent %+v with pings off", r)
	}
}

func TestWSURLKeepsTheQuery(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://lb:80":            "ws://lb:80/v1/connect",
		"https://lb/":             "wss://lb/v1/connect",
		"http://lb:80/?node=n1":   "ws://lb:80/v1/connect?node=n1",
		"https://lb?node=n1&x=2":  "wss://lb/v1/connect?node=n1&x=2",
		"http://lb/base/?node=n2": "ws://lb/base/v1/connect?node=n2",
	} {
		if got, err := client.WSURL(in); err != nil || got != want {
			t.Errorf("wsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestHelloNamesTheNode(t *testing.T) {
	t.Parallel()
	h := gatewaytest.Hello()
	h.Node = "n1"
	c, _, _ := scripted(t, h)
	if got := c.Server().Node; got != "n1" {
		t.Fatalf("Server().Node = %q, want n1", got)
	}
}

// TestFrozenGatewayIsDialledAgain: a reconnect to a gateway that accepts
// the upgrade and then never answers the handshake (a frozen node) is
// given up after the open timeout and dialled again.
func TestFrozenGatewayIsDialledAgain(t *testing.T) {
	defer client.SetOpenTimeout(300 * time.Millisecond)()
	s, conn, _ := scriptedWith(t, client.Config{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, PingInterval: -1})
	conn.Drop()
	frozen := s.Accept(t) // and no handshake
	select {
	case <-frozen.Done():
	case <-time.After(gatewaytest.ScriptTimeout):
		t.Fatal("the client waits for ever on a gateway that does not answer its handshake")
	}
	next := s.Accept(t)
	next.Handshake(t, gatewaytest.Hello())
	if req := next.Request(t, wire.TypeAttach); req.ID != "job" {
		t.Fatalf("reattach %+v, want job", req)
	}
}
