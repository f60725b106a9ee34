package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
)

// TestResumeAcrossCutConnections cuts the TCP connection at random points
// while seq 1 200000 streams; the client reattaches after its last
// sequence each time, and its transcript must equal the output exactly.
func TestResumeAcrossCutConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Ring = replay.Config{MaxBytes: 8 << 20, MaxEvents: 1 << 16} })
	proxy := gatewaytest.NewCuttingProxy(t, strings.TrimPrefix(e.http.URL, "http://"), gatewaytest.ProxyConfig{MinBudget: 16 << 10, Spread: 256 << 10, Seed: 1})
	tok := e.token(t, "acme", allScopes...)
	url := "ws://" + proxy.Addr() + "/v1/connect"

	c := e.dial(t, tok)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "seq", Command: "/bin/sh", Args: []string{"-c", "seq 1 200000"}})
	c.expect(t, wire.MsgStarted)
	c.close()

	var transcript strings.Builder
	var last uint64
	done := false
	for attempt := 0; !done && attempt < 2000; attempt++ {
		var err error
		done, err = resumeOnce(t, url, tok, &last, &transcript)
		if err != nil {
			t.Fatal(err)
		}
	}
	if !done {
		t.Fatalf("no exit after 2000 connections; %d bytes so far", transcript.Len())
	}
	want := seqLines(200000)
	if transcript.String() != want {
		t.Fatalf("transcript differs: %d bytes, want %d", transcript.Len(), len(want))
	}
	if cuts := proxy.Cuts(); cuts < 3 {
		t.Fatalf("only %d connections were cut: the test did not exercise resume", cuts)
	} else {
		t.Logf("%d cuts", cuts)
	}
}

// resumeOnce attaches after *last and reads until the exit (done) or
// until the connection breaks. Any duplicate or missing event is an error.
func resumeOnce(t *testing.T, url, tok string, last *uint64, out *strings.Builder) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		return false, nil // the proxy may cut the handshake itself
	}
	defer ws.CloseNow()
	ws.SetReadLimit(4 << 20)
	c := &client{ws: ws}
	b := fmt.Appendf(nil, `{"type":"attach","id":"seq","after":%d}`, *last)
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		return false, nil
	}
	for {
		f, err := c.read(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return false, err
			}
			return false, nil
		}
		var seq uint64
		switch {
		case f.out != nil:
			seq = f.out.Seq
		case f.msg.Type == wire.MsgGap:
			return false, fmt.Errorf("unexpected gap %+v", *f.msg)
		case f.msg.Type == wire.MsgEvent || f.msg.Type == wire.MsgExit:
			seq = f.msg.Seq
		default:
			continue
		}
		if seq != *last+1 {
			return false, fmt.Errorf("got seq %d after %d", seq, *last)
		}
		*last = seq
		if f.out != nil {
			out.Write(f.out.Data)
		}
		if f.msg != nil && f.msg.Type == wire.MsgExit {
			return true, nil
		}
	}
}

func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}
