package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
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

	// A client of the protocol before acknowledgements: served free
	// running, and resuming from its last sequence every time.
	f := newFollower("seq")
	f.old = true
	f.run(t, url, tok, 2000)
	if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(seqLines(200000))) {
		t.Fatalf("transcript differs: %d bytes, lost %d, want %d exactly", f.got, f.lost, len(seqLines(200000)))
	}
	if cuts := proxy.Cuts(); cuts < 3 {
		t.Fatalf("only %d connections were cut: the test did not exercise resume", cuts)
	} else {
		t.Logf("%d cuts", cuts)
	}
}

func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// TestAttachAfterNeedsTheIncarnation: an ID reused after retention names
// a new execution. An attach with a non-zero after and no incarnation
// cannot say which execution after belongs to, so it is refused
// (invalid_after) instead of serving the new execution from after+1 with
// its first events skipped silently; with the old incarnation it is
// served from the start, and after 0 needs none.
func TestAttachAfterNeedsTheIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnvSession(t, session.Config{Launcher: &sessiontest.Launcher{Script: eightLines}, DefaultRetention: 2 * time.Second}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "job", Command: "/bin/sh", Args: []string{"old"}})
	c.expect(t, wire.MsgStarted)
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "a", ID: "job"})
	first, _ := c.expect(t, wire.MsgAttached)
	c.expect(t, wire.MsgExit)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ { // once retention let the ID go, it names a new execution
		c.send(t, wire.Request{Type: wire.TypeStart, Req: fmt.Sprint("s", i), ID: "job", Command: "/bin/sh", Args: []string{"new"}})
		m := c.expectOneOf(t, wire.MsgStarted, wire.MsgError)
		if m.Type == wire.MsgStarted {
			break
		}
		if m.Error != wire.CodeConflict || time.Now().After(deadline) {
			t.Fatalf("start of a reused ID: %s %s", m.Error, m.Message)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w := e.dial(t, e.token(t, "acme", allScopes...)) // until the new execution has all its events
	w.send(t, wire.Request{Type: wire.TypeAttach, ID: "job"})
	w.expect(t, wire.MsgExit)
	w.close()
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "b", ID: "job", After: 6})
	if m := c.expectOneOf(t, wire.MsgAttached, wire.MsgError); m.Type != wire.MsgError || m.Error != wire.CodeInvalidAfter || m.Req != "b" {
		t.Fatalf("attach after 6 without an incarnation: %+v, want invalid_after", m)
	}
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "c", ID: "job", After: 6, Incarnation: first.Incarnation})
	again, _ := c.expect(t, wire.MsgAttached)
	if again.Incarnation == first.Incarnation {
		t.Fatal("the reused ID kept its incarnation")
	}
	if _, out := c.expect(t, wire.MsgExit); !strings.HasPrefix(string(out), "new 1\n") {
		t.Fatalf("attach after 6 of the old incarnation: output %q, want the new execution from its start", out)
	}
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "d", ID: "job"})
	c.expect(t, wire.MsgAttached)
}

// eightLines prints "ARG N" for N from 1 to 8, an event each, where ARG
// is the command's first argument: which execution of an ID it is.
func eightLines(p *sessiontest.Proc) sandbox.Exit {
	for i := range 8 {
		fmt.Fprintf(p.Out().Stdout, "%s %d\n", p.Policy.Command[1], i+1)
		time.Sleep(time.Millisecond) // an event each
	}
	return sandbox.Exit{Code: 0, Exact: true}
}

// expectOneOf reads until a control message of one of types arrives.
func (c *client) expectOneOf(t testing.TB, types ...string) wire.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("waiting for one of %v: %v", types, err)
		}
		if f.msg != nil && slices.Contains(types, f.msg.Type) {
			return *f.msg
		}
	}
}

// TestPollAfterNeedsTheIncarnation: the events long poll keeps the same
// rule as attach. A non-zero after without the incarnation it counts in
// is refused, since the ID may name a new execution by now; with an
// incarnation that is not the execution's the poll reads from its start.
func TestPollAfterNeedsTheIncarnation(t *testing.T) {
	t.Parallel()
	te := newEnvSession(t, session.Config{Launcher: &sessiontest.Launcher{Script: eightLines}, DefaultRetention: 2 * time.Second}, nil)
	mux := http.NewServeMux()
	te.srv.apiRoutes(mux)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	e := &apiEnv{testEnv: te, api: ts}
	tok := e.token(t, "acme", allScopes...)
	start := apiStart{ID: "job", Command: "/bin/sh", Args: []string{"old"}}
	e.must(t, 201, "POST", "/v1/executions", tok, start, nil)
	var old apiEvents
	for deadline := time.Now().Add(30 * time.Second); !old.Ended && time.Now().Before(deadline); {
		e.must(t, 200, "GET", "/v1/executions/job/events?wait=5s", tok, nil, &old)
	}
	if !old.Ended || old.Incarnation == "" || old.NextAfter < 6 {
		t.Fatalf("the first execution's events: ended %v, incarnation %q, next_after %d", old.Ended, old.Incarnation, old.NextAfter)
	}
	start.Args = []string{"new"}
	for deadline := time.Now().Add(30 * time.Second); ; { // once retention let the ID go
		status, _, body := e.call(t, "POST", "/v1/executions", tok, start)
		if status == 201 {
			break
		}
		if status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("start of a reused ID: %d %s", status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var now apiEvents
	for deadline := time.Now().Add(30 * time.Second); !now.Ended && time.Now().Before(deadline); {
		e.must(t, 200, "GET", "/v1/executions/job/events?wait=5s", tok, nil, &now)
	}
	e.fails(t, 400, wire.CodeInvalidAfter, "GET", "/v1/executions/job/events?after=6", tok, nil)
	var page apiEvents
	e.must(t, 200, "GET", "/v1/executions/job/events?after=6&incarnation="+old.Incarnation, tok, nil, &page)
	if page.Incarnation == old.Incarnation || len(page.Events) == 0 || page.Events[0].Seq != 1 {
		t.Fatalf("after 6 of the old incarnation: incarnation %q (old %q), events %+v, want the new execution from seq 1", page.Incarnation, old.Incarnation, page.Events)
	}
	e.must(t, 200, "GET", "/v1/executions/job/events?after=6&incarnation="+page.Incarnation, tok, nil, &page)
	if len(page.Events) == 0 || page.Events[0].Seq != 7 {
		t.Fatalf("after 6 of its own incarnation: events %+v, want seq 7 on", page.Events)
	}
}
