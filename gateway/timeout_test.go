package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// expectNotice reads until a notice event arrives on the connection and
// returns it, failing on an exit first.
func (c *client) expectNotice(t *testing.T) wire.Message {
	t.Helper()
	for {
		m, _ := c.expect(t, wire.MsgEvent)
		if m.Event == wire.EventNotice {
			return m
		}
	}
}

// checkNoticeMessage checks a notice event's fields: reason, a message,
// and an RFC 3339 time after the notice was sent.
func checkNoticeMessage(t *testing.T, m wire.Message, channel uint32, reason string, sent time.Time) {
	t.Helper()
	at, err := time.Parse(time.RFC3339, m.At)
	if m.Channel != channel || m.Reason != reason || m.Message == "" || m.Seq == 0 || err != nil || !at.After(sent.Add(-time.Second)) {
		t.Errorf("notice %+v (at: %v); want channel %d, reason %s, a message, a seq and a time after %v", m, err, channel, reason, sent)
	}
}

func TestTimeoutNoticeReachesAttachedChannel(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	sent := time.Now()
	// 2 s: the warning comes at half of it, 1 s before.
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "job", Command: "/bin/sh", TimeoutMS: 2000, Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	checkNoticeMessage(t, c.expectNotice(t), att.Channel, wire.NoticeTimeout, sent)
	if m, _ := c.expect(t, wire.MsgExit); m.Reason != "timed_out" {
		t.Errorf("exit %+v, want reason timed_out", m)
	}
}

func TestIdleNoticeReachesViewer(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	sent := time.Now()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "sh", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}, IdleTimeoutMS: 2000})
	c.expect(t, wire.MsgStarted)
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "sh", ReadOnly: true}) // a viewer keeps nothing alive
	att, _ := c.expect(t, wire.MsgAttached)
	checkNoticeMessage(t, c.expectNotice(t), att.Channel, wire.NoticeIdleTimeout, sent)
	if m, _ := c.expect(t, wire.MsgExit); m.Reason != "timed_out:idle" {
		t.Errorf("exit %+v, want reason timed_out:idle", m)
	}
}

func TestStartTimeouts(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) {
		c.Sandbox.DefaultTimeout, c.Sandbox.InteractiveTimeout, c.Sandbox.IdleTimeout = time.Minute, 3*time.Hour, 20*time.Minute
	})
	pty := &wire.Size{Rows: 24, Cols: 80}
	cases := []struct {
		name          string
		req           wire.Request
		err           string // in the error, "" for none
		timeout, idle time.Duration
		interactive   bool
	}{
		{"batch", wire.Request{}, "", time.Minute, 0, false},
		{"batch with a timeout", wire.Request{TimeoutMS: 5000}, "", 5 * time.Second, 0, false},
		{"terminal", wire.Request{PTY: pty}, "", 3 * time.Hour, 20 * time.Minute, true},
		{"interactive pipes", wire.Request{Interactive: true}, "", 3 * time.Hour, 20 * time.Minute, true},
		{"terminal with both", wire.Request{PTY: pty, TimeoutMS: 60_000, IdleTimeoutMS: 30_000}, "", time.Minute, 30 * time.Second, true},
		{"idle on a batch one", wire.Request{IdleTimeoutMS: 1000}, "idle_timeout_ms needs an interactive execution", 0, 0, false},
		{"negative idle", wire.Request{PTY: pty, IdleTimeoutMS: -1}, "idle_timeout_ms must be between 0 and 86400000", 0, 0, false},
		{"idle above the maximum", wire.Request{PTY: pty, IdleTimeoutMS: (25 * time.Hour).Milliseconds()}, "idle_timeout_ms must be between 0 and 86400000", 0, 0, false},
		{"timeout above the maximum", wire.Request{PTY: pty, TimeoutMS: (25 * time.Hour).Milliseconds()}, "timeout must be between 0 and 24h0m0s", 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.req.Type = wire.TypeStart
			sp, err := e.srv.spec("acme", c.req)
			if c.err != "" {
				if !errors.Is(err, session.ErrInvalidSpec) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("spec: %v, want invalid_spec with %q", err, c.err)
				}
				return
			}
			if err != nil || sp.Timeout != c.timeout || sp.IdleTimeout != c.idle || sp.Interactive != c.interactive {
				t.Fatalf("spec: %v, timeout %v idle %v interactive %v; want %v %v %v", err, sp.Timeout, sp.IdleTimeout, sp.Interactive, c.timeout, c.idle, c.interactive)
			}
		})
	}
}

func TestHTTPEventsListNotices(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	mux := http.NewServeMux()
	e.srv.apiRoutes(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	api := &apiEnv{testEnv: e, api: ts}
	tok := e.token(t, "acme", allScopes...)
	sent := time.Now()
	api.must(t, 201, "POST", "/v1/executions", tok, apiStart{ID: "sh", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}, IdleTimeoutMS: 2000}, nil)
	var notice *apiEvent
	after := uint64(0)
	for i := 0; i < 20 && notice == nil; i++ {
		page := api.poll(t, tok, "sh", after, "10s")
		for _, ev := range page.Events {
			if ev.Kind == "notice" {
				notice = &ev
			}
		}
		if page.Ended {
			break
		}
		after = page.NextAfter
	}
	if notice == nil || notice.Notice == nil {
		t.Fatalf("no notice among the events (last after %d)", after)
	}
	n := notice.Notice
	at, err := time.Parse(time.RFC3339, n.At)
	if n.Reason != wire.NoticeIdleTimeout || n.Message == "" || err != nil || !at.After(sent.Add(-time.Second)) {
		t.Errorf("notice %+v (at: %v)", n, err)
	}
}

// TestNoticeReasonsAreWireReasons: the reasons the supervisor gives a
// notice are the ones the protocol names.
func TestNoticeReasonsAreWireReasons(t *testing.T) {
	t.Parallel()
	for _, p := range [][2]string{
		{session.NoticeTimeout, wire.NoticeTimeout}, {session.NoticeIdleTimeout, wire.NoticeIdleTimeout},
		{session.NoticeIdleCancelled, wire.NoticeIdleCancelled}, {session.NoticeNetwork, wire.NoticeNetwork},
	} {
		if p[0] != p[1] {
			t.Errorf("session reason %q, wire reason %q", p[0], p[1])
		}
	}
	if fmt.Sprint(wire.EventNotice) != "notice" {
		t.Errorf("wire.EventNotice is %q", wire.EventNotice)
	}
}
