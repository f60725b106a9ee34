package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestRequestsAreAnsweredNotClosed: unknown fields, unknown types,
// missing, mistyped and over-long values are each answered (req and
// channel echoed where they can be), and the connection stays usable.
func TestRequestsAreAnsweredNotClosed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	long := strings.Repeat("x", 5000)
	cases := []struct {
		name, msg string
		typ, code string // answer type; error code when typ is error
		req       string
		channel   uint32
	}{
		{"unknown field", `{"type":"ping","req":"p","later":{"a":[1]}}`, wire.MsgPong, "", "p", 0},
		{"unknown type", `{"type":"snapshot","req":"u","channel":3}`, wire.MsgError, wire.CodeUnsupported, "u", 3},
		{"no type", `{"req":"n"}`, wire.MsgError, wire.CodeInvalidRequest, "n", 0},
		{"over-long id", `{"type":"attach","req":"i","id":"` + long[:wire.MaxIDBytes+1] + `"}`, wire.MsgError, wire.CodeInvalidID, "i", 0},
		{"over-long command", `{"type":"start","req":"s","command":"` + long + `"}`, wire.MsgError, wire.CodeInvalidSpec, "s", 0},
		{"over-long cwd", `{"type":"start","req":"w","cwd":"` + long + `"}`, wire.MsgError, wire.CodeInvalidSpec, "w", 0},
		{"over-long req", `{"type":"ping","req":"` + long[:wire.MaxReqBytes+1] + `"}`, wire.MsgError, wire.CodeInvalidRequest, "", 0},
		{"over-long incarnation", `{"type":"attach","req":"c","id":"a","incarnation":"` + long[:65] + `"}`, wire.MsgError, wire.CodeInvalidRequest, "c", 0},
		{"bad flow", `{"type":"start","req":"f","flow":"fast"}`, wire.MsgError, wire.CodeInvalidSpec, "f", 0},
		{"mistyped field", `{"type":"attach","req":"t","id":"a","after":"5"}`, wire.MsgError, wire.CodeInvalidRequest, "t", 0},
		{"missing channel", `{"type":"detach","req":"d"}`, wire.MsgError, wire.CodeInvalidRequest, "d", 0},
		{"resize of no channel", `{"type":"resize","req":"r","channel":9,"rows":0,"cols":0}`, wire.MsgError, wire.CodeNotAttached, "r", 9},
		{"over-long signal", `{"type":"signal","req":"g","channel":2,"signal":"` + long[:17] + `"}`, wire.MsgError, wire.CodeSignalNotAllowed, "g", 2},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i, tc := range cases {
		if err := c.ws.Write(ctx, websocket.MessageText, []byte(tc.msg)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m := c.expectAny(t, wire.MsgPong, wire.MsgError)
		if m.Type != tc.typ || m.Error != tc.code || m.Req != tc.req || m.Channel != tc.channel || (m.Type == wire.MsgError && m.Message == "") {
			t.Errorf("%s: answered %+v", tc.name, m)
		}
		// Still usable: a ping is answered.
		c.send(t, wire.Request{Type: wire.TypePing, Req: "alive"})
		if m := c.expectAny(t, wire.MsgPong, wire.MsgError); m.Type != wire.MsgPong || m.Req != "alive" {
			t.Fatalf("after case %d (%s): %+v", i, tc.name, m)
		}
	}
}

// TestResizeZeroIsClamped: rows and cols of 0 are clamped to 1, as the
// protocol always said, not refused.
func TestResizeZeroIsClamped(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	e := newFakeEnv(t, l, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "tty", PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	c.send(t, wire.Request{Type: wire.TypeResize, Req: "z", Channel: att.Channel})
	if m := c.expectAny(t, wire.MsgOK, wire.MsgError); m.Type != wire.MsgOK || m.Req != "z" {
		t.Fatalf("resize 0x0: %+v", m)
	}
	sizes := l.Procs()[0].Sizes()
	if len(sizes) == 0 || sizes[len(sizes)-1] != (sandbox.WindowSize{Rows: 1, Cols: 1}) {
		t.Fatalf("sizes set %+v, want 1x1 last", sizes)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: att.Channel})
	c.expect(t, wire.MsgOK)
}

// TestHelloComesFirst: the server's first message is the hello, with its
// version, protocol, features and the limits of its configuration, even
// when the client sends before it reads.
func TestHelloComesFirst(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		tweak func(*Config)
		want  wire.Bounds
	}{
		{"defaults", nil, wire.Bounds{
			MaxMessageBytes: DefaultMaxMessageBytes, MaxChannels: DefaultMaxChannels,
			RingBytes: replay.DefaultMaxBytes, RingEvents: replay.DefaultMaxEvents, HoldMS: DefaultHold.Milliseconds(),
			InputBufferBytes: session.DefaultInputBuffer, InputFrameBytes: wire.MaxInputFrameBytes, InputPerSecond: DefaultInputPerSecond, ResizesPerSecond: DefaultResizesPerSecond,
			PingIntervalMS: DefaultPingInterval.Milliseconds(), PongTimeoutMS: DefaultPongTimeout.Milliseconds(),
			WriteTimeoutMS: DefaultWriteTimeout.Milliseconds(), DefaultTimeoutMS: session.DefaultTimeout.Milliseconds(),
			RetentionMS:          session.DefaultRetention.Milliseconds(),
			InteractiveTimeoutMS: session.DefaultInteractiveTimeout.Milliseconds(), IdleTimeoutMS: session.DefaultIdleTimeout.Milliseconds(),
			Scrollback: session.DefaultScrollback, ForwardWindow: ForwardWindow, MaxStreams: MaxStreams,
		}},
		{"configured", func(c *Config) {
			c.Ring = replay.Config{MaxBytes: 1 << 16, MaxEvents: 100}
			c.Hold, c.MaxMessageBytes, c.MaxChannels, c.InputPerSecond, c.ResizesPerSecond = 7*time.Second, 1<<19, 5, 77, 9
			c.PingInterval, c.PongTimeout, c.WriteTimeout = 11*time.Second, 33*time.Second, 22*time.Second
			c.Sandbox.DefaultTimeout = 44 * time.Second
			c.Sandbox.InteractiveTimeout, c.Sandbox.IdleTimeout = 55*time.Second, 66*time.Second
		}, wire.Bounds{
			MaxMessageBytes: 1 << 19, MaxChannels: 5, RingBytes: 1 << 16, RingEvents: 100, HoldMS: 7000,
			InputBufferBytes: session.DefaultInputBuffer, InputFrameBytes: wire.MaxInputFrameBytes, InputPerSecond: 77, ResizesPerSecond: 9,
			PingIntervalMS: 11000, PongTimeoutMS: 33000, WriteTimeoutMS: 22000, DefaultTimeoutMS: 44000,
			RetentionMS:          session.DefaultRetention.Milliseconds(),
			InteractiveTimeoutMS: 55000, IdleTimeoutMS: 66000, Scrollback: session.DefaultScrollback,
			ForwardWindow: ForwardWindow, MaxStreams: MaxStreams,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, &sessiontest.Launcher{}, tc.tweak)
			c := e.dial(t, e.token(t, "acme", allScopes...))
			defer c.close()
			c.send(t, wire.Request{Type: wire.TypePing, Req: "early"})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			f, err := c.read(ctx)
			if err != nil || f.msg == nil || f.msg.Type != wire.MsgHello {
				t.Fatalf("first message %+v, %v; want hello", f.msg, err)
			}
			h := *f.msg
			if !strings.HasPrefix(h.Server, "termgate ") || h.Protocol != 1 {
				t.Errorf("hello server %q protocol %d", h.Server, h.Protocol)
			}
			features := []string{wire.FeatureAck, wire.FeatureInputAck, wire.FeatureSeen, wire.FeatureFlow, wire.FeatureSnapshot, wire.FeatureForward, wire.FeatureExec}
			if !slices.Equal(h.Features, features) {
				t.Errorf("features %q, want %q", h.Features, features)
			}
			if h.Limits == nil || *h.Limits != tc.want {
				t.Errorf("limits %+v\nwant   %+v", h.Limits, tc.want)
			}
			if m := c.expectAny(t, wire.MsgPong); m.Req != "early" {
				t.Errorf("pong %+v", m)
			}
		})
	}
}

// expectAny reads until a control message of one of types arrives and
// returns it; it fails on a hello after the first message, which the
// server sends only once.
func (c *client) expectAny(t testing.TB, types ...string) wire.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", types, err)
		}
		if f.msg != nil && slices.Contains(types, f.msg.Type) {
			return *f.msg
		}
	}
}
