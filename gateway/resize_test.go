package gateway

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// TestResizeFloodIsRateLimited: a client flooding its own PTY execution
// with resizes and signals, none with a req, is refused with rate_limited
// once its subject's burst is spent; the refusals are counted in the
// metrics, and a flood of refusals is answered with one error, not one
// per refused request.
func TestResizeFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "tty", Command: "/bin/sh", Args: []string{"-c", "echo ready; exec cat"}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true})
	c.expect(t, wire.MsgStarted)
	att, _ := c.expect(t, wire.MsgAttached)
	readOutput(t, c, "ready") // signals before the command runs are refused otherwise

	const n = 3000 // beyond the default burst, however slowly they are sent
	began := time.Now()
	for i := range n {
		side := 1000
		if i%2 == 1 {
			side = 2
		}
		if i%10 == 9 {
			c.send(t, wire.Request{Type: wire.TypeSignal, Channel: att.Channel, Signal: "WINCH"})
			continue
		}
		c.send(t, wire.Request{Type: wire.TypeResize, Channel: att.Channel, Rows: side, Cols: side})
	}
	c.send(t, wire.Request{Type: wire.TypePing, Req: "p"})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var refusals []wire.Message
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("reading to the pong after %d requests: %v (refusals so far %d)", n, err, len(refusals))
		}
		if f.msg != nil && f.msg.Type == wire.MsgError {
			refusals = append(refusals, *f.msg)
		}
		if f.msg != nil && f.msg.Type == wire.MsgPong {
			break
		}
	}
	if len(refusals) == 0 {
		t.Fatalf("%d resizes and signals in a burst: none refused", n)
	}
	for _, m := range refusals {
		if m.Error != wire.CodeRateLimited || m.Channel != att.Channel {
			t.Fatalf("refusal %+v, want rate_limited on channel %d", m, att.Channel)
		}
	}
	// Past the burst, a request is accepted for each token the rate adds.
	if most := 2 + int(time.Since(began).Seconds()*DefaultResizesPerSecond); len(refusals) > most {
		t.Errorf("%d refusals sent for one flood; want one per accepted request at most (%d)", len(refusals), most)
	}
	waitMetrics(t, ms.URL, "after the flood", atLeast(map[string]float64{
		`termgate_limit_refusals_total{kind="resize_rate"}`: float64(n - DefaultResizesPerSecond*ResizeBurstSeconds - 1000), // the burst, and the rate for 33 s,
	}))
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", ID: "tty"})
	c.expect(t, wire.MsgOK)
}

// TestResizeRefusalsAnswerTheirReq: a resize or signal with a req beyond
// the rate is answered with rate_limited, every time.
func TestResizeRefusalsAnswerTheirReq(t *testing.T) {
	t.Parallel()
	// One a second: a stall of the server under load refills no token
	// before the requests that follow are refused.
	e := newEnv(t, func(c *Config) { c.ResizesPerSecond, c.ResizeBurst = 1, 1 })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "tty", Command: "/bin/sh", Args: []string{"-c", "echo ready; exec cat"}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true})
	c.expect(t, wire.MsgStarted)
	att, _ := c.expect(t, wire.MsgAttached)
	readOutput(t, c, "ready")
	c.send(t, wire.Request{Type: wire.TypeResize, Req: "1", Channel: att.Channel, Rows: 30, Cols: 90})
	if m, _ := c.expect(t, wire.MsgOK); m.Req != "1" {
		t.Fatalf("first resize: %+v", m)
	}
	for _, r := range []wire.Request{
		{Type: wire.TypeResize, Req: "2", Channel: att.Channel, Rows: 40, Cols: 100},
		{Type: wire.TypeSignal, Req: "3", Channel: att.Channel, Signal: "WINCH"},
		{Type: wire.TypeResize, Req: "4", Channel: att.Channel, Rows: 50, Cols: 110},
	} {
		c.send(t, r)
		if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeRateLimited || m.Req != r.Req || m.Channel != att.Channel {
			t.Fatalf("%s %s beyond the rate: %+v", r.Type, r.Req, m)
		}
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", ID: "tty"})
	c.expect(t, wire.MsgOK)
}

// readOutput reads until the output holds want.
func readOutput(t testing.TB, c *client, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []byte
	for !strings.Contains(string(out), want) {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v (output %q)", want, err, out)
		}
		if f.out != nil {
			out = append(out, f.out.Data...)
		}
	}
}
