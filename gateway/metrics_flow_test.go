package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// waitMetrics scrapes until check finds nothing wrong ("") and fails the
// test with what check said last when it never does.
func waitMetrics(t testing.TB, url, step string, check func(m map[string]float64) string) map[string]float64 {
	t.Helper()
	var got map[string]float64
	why := "never scraped"
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
		got = scrape(t, url)
		why = check(got)
		return why == ""
	}) {
		t.Fatalf("%s: %s", step, why)
	}
	return got
}

// atLeast checks series against lower bounds.
func atLeast(want map[string]float64) func(map[string]float64) string {
	return func(m map[string]float64) string {
		for k, v := range want {
			if g, ok := m[k]; !ok || g < v {
				return fmt.Sprintf("%s = %v (present %v), want at least %v", k, g, ok, v)
			}
		}
		return ""
	}
}

// exactly checks series against values.
func exactly(want map[string]float64) func(map[string]float64) string {
	return func(m map[string]float64) string {
		for k, v := range want {
			if g, ok := m[k]; !ok || g != v {
				return fmt.Sprintf("%s = %v (present %v), want %v", k, g, ok, v)
			}
		}
		return ""
	}
}

// chatty writes 1 KiB chunks until stopped, at most chunks of them,
// then waits to be stopped: enough to fill a small ring many times over.
func chatty(chunks int) func(p *sessiontest.Proc) sandbox.Exit {
	return func(p *sessiontest.Proc) sandbox.Exit {
		line := bytes.Repeat([]byte("x"), 1023)
		line = append(line, '\n')
		for range chunks {
			select {
			case why := <-p.Stopped():
				return sandbox.Exit{Code: -1, Stopped: why, Exact: true}
			default:
			}
			p.Out().Stdout.Write(line)
		}
		return sessiontest.UntilStopped(p)
	}
}

// TestMetricsFlowControl: a writer that acknowledges nothing holds the
// output; the program waits, and the held bytes, ring bytes, output bytes
// and flow-control figures move; input is counted; after the cancel no
// program waits.
func TestMetricsFlowControl(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: chatty(1000)}, func(c *Config) {
		c.Ring = replay.Config{MaxBytes: 8 << 10, MaxEvents: 64}
	})
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	waitMetrics(t, ms.URL, "before", exactly(map[string]float64{
		"termgate_flow_waiting": 0, "termgate_flow_waits_total": 0, "termgate_held_bytes": 0, "termgate_ring_bytes": 0,
		"termgate_output_bytes_total": 0, "termgate_input_bytes_total": 0,
	}))

	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "held", Command: "/bin/sh", Attach: true, Ack: true})
	att, _ := c.expect(t, wire.MsgAttached)
	m := waitMetrics(t, ms.URL, "waiting", atLeast(map[string]float64{
		"termgate_flow_waiting": 1, "termgate_flow_waits_total": 1,
		"termgate_held_bytes": 8 << 10, "termgate_ring_bytes": 8 << 10, "termgate_output_bytes_total": 8 << 10,
	}))
	if m["termgate_flow_waiting"] != 1 || m["termgate_output_bytes_total"] >= 1000<<10 {
		t.Fatalf("one program waits, having written part of its output: waiting %v, output %v",
			m["termgate_flow_waiting"], m["termgate_output_bytes_total"])
	}

	c.sendInput(t, att.Channel, 0, "hello")
	waitMetrics(t, ms.URL, "input", exactly(map[string]float64{"termgate_input_bytes_total": 5}))
	c.sendInput(t, att.Channel, 0, "hello, world") // a retry: 7 new bytes
	waitMetrics(t, ms.URL, "input retried", exactly(map[string]float64{"termgate_input_bytes_total": 12}))

	c.send(t, wire.Request{Type: wire.TypeCancel, ID: "held"})
	waitMetrics(t, ms.URL, "cancelled", exactly(map[string]float64{
		"termgate_flow_waiting": 0, "termgate_executions_running": 0, "termgate_held_bytes": 0,
		`termgate_executions_ended_total{reason="cancelled",status="cancelled"}`: 1,
	}))
}

// TestMetricsResumes: reattaching after a sequence the client had counts
// a resume from history, from a snapshot, or with a gap, whose bytes are
// the gap message's.
func TestMetricsResumes(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: chatty(64)}, func(c *Config) {
		c.Ring = replay.Config{MaxBytes: 8 << 10, MaxEvents: 64}
		c.Flow = wire.FlowLive // nothing held: the early output is evicted
	})
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "term", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}})
	c.expect(t, wire.MsgStarted)
	waitMetrics(t, ms.URL, "written", exactly(map[string]float64{"termgate_output_bytes_total": 64 << 10}))
	info, err := e.sup.Get("acme", "term")
	if err != nil || info.FirstSeq <= 2 {
		t.Fatalf("info %+v, %v: want the early history evicted", info, err)
	}
	waitMetrics(t, ms.URL, "before", exactly(map[string]float64{
		`termgate_resumes_total{kind="history"}`: 0, `termgate_resumes_total{kind="snapshot"}`: 0,
		`termgate_resumes_total{kind="gap"}`: 0, "termgate_resume_gap_bytes_total": 0,
	}))

	// From history: after the newest event.
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "term", After: info.LastSeq, Incarnation: info.Incarnation})
	c.expect(t, wire.MsgAttached)
	waitMetrics(t, ms.URL, "history", exactly(map[string]float64{`termgate_resumes_total{kind="history"}`: 1}))

	// From a snapshot: after an evicted event, with snapshot.
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "term", After: 1, Incarnation: info.Incarnation, Snapshot: true})
	c.expect(t, wire.MsgSnapshot)
	waitMetrics(t, ms.URL, "snapshot", exactly(map[string]float64{`termgate_resumes_total{kind="snapshot"}`: 1}))

	// With a gap: after an evicted event, without.
	g := e.dial(t, tok)
	defer g.close()
	g.send(t, wire.Request{Type: wire.TypeAttach, ID: "term", After: 1, Incarnation: info.Incarnation})
	gap, _ := g.expect(t, wire.MsgGap)
	if gap.Bytes == 0 {
		t.Fatalf("gap %+v without bytes", gap)
	}
	waitMetrics(t, ms.URL, "gap", exactly(map[string]float64{
		`termgate_resumes_total{kind="gap"}`: 1, "termgate_resume_gap_bytes_total": float64(gap.Bytes),
		`termgate_resumes_total{kind="history"}`: 1, `termgate_resumes_total{kind="snapshot"}`: 1,
	}))

	// A first attach is no resume.
	g.send(t, wire.Request{Type: wire.TypeAttach, ID: "term"})
	g.expect(t, wire.MsgAttached)
	waitMetrics(t, ms.URL, "first attach", exactly(map[string]float64{
		`termgate_resumes_total{kind="gap"}`: 1, `termgate_resumes_total{kind="history"}`: 1,
		`termgate_resumes_total{kind="snapshot"}`: 1,
	}))
}

// TestMetricsLimitRefusals: each limit a request runs into counts under
// its kind, and every kind is a series from the start.
func TestMetricsLimitRefusals(t *testing.T) {
	t.Parallel()
	e := newEnvSession(t, session.Config{Launcher: &sessiontest.Launcher{Script: sessiontest.UntilStopped}, MaxRunning: 1},
		func(c *Config) {
			c.StartsPerMinute, c.InputPerSecond, c.InputBurst, c.MaxChannels, c.MaxConnsPerSubject, c.MaxMessageBytes = 2, 1, 1, 1, 2, 4<<10
		})
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	kinds := []string{"start_rate", "input_rate", "resize_rate", "subject_connections", "channels", "message_size", "snapshot", "connections",
		"addr_connections", "fd_headroom", "preauth_connections", "preauth_evicted", "first_byte_timeout", "max_running", "tenant_running", "retained", "tenant_retained", "descriptors", "input_full", "recording_budget"}
	zero := map[string]float64{}
	for _, k := range kinds {
		zero[`termgate_limit_refusals_total{kind="`+k+`"}`] = 0
	}
	waitMetrics(t, ms.URL, "before", exactly(zero))
	refusals := func(m map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for _, k := range kinds {
			if v := m[`termgate_limit_refusals_total{kind="`+k+`"}`]; v != 0 {
				out[k] = v
			}
		}
		return out
	}

	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "one", Command: "/bin/sh", Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "two", Command: "/bin/sh"}) // beyond MaxRunning
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeCapacity {
		t.Fatalf("second start: %+v, want capacity", m)
	}
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "three", Command: "/bin/sh"}) // beyond the rate
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeRateLimited {
		t.Fatalf("third start: %+v, want rate_limited", m)
	}
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "one"}) // beyond MaxChannels
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeTooManyChannels {
		t.Fatalf("second attach: %+v, want too_many_channels", m)
	}
	for i := range 10 { // one token a second: most of these are refused, unless the machine stalls for seconds
		c.sendInput(t, att.Channel, uint64(i), "x")
	}
	waitMetrics(t, ms.URL, "protocol limits", atLeast(map[string]float64{
		`termgate_limit_refusals_total{kind="max_running"}`: 1, `termgate_limit_refusals_total{kind="start_rate"}`: 1,
		`termgate_limit_refusals_total{kind="channels"}`: 1, `termgate_limit_refusals_total{kind="input_rate"}`: 1,
	}))

	second := e.dial(t, tok)
	defer second.close()
	if _, resp, err := e.dialRaw(tok, nil); err == nil || status(resp) != http.StatusTooManyRequests {
		t.Fatalf("third connection of the subject: %v (status %d), want 429", err, status(resp))
	}
	big := wire.Request{Type: wire.TypePing, Req: strings.Repeat("x", 8<<10)}
	second.send(t, big)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for i := 0; err == nil && i < 100; i++ { // the hello comes first
		_, err = second.read(ctx)
	}
	if closeCode(err) != websocket.StatusMessageTooBig {
		t.Fatalf("a message beyond the limit: %v, want close 1009", err)
	}
	m := waitMetrics(t, ms.URL, "connection limits", atLeast(map[string]float64{
		`termgate_limit_refusals_total{kind="subject_connections"}`: 1, `termgate_limit_refusals_total{kind="message_size"}`: 1,
	}))
	got := refusals(m)
	for _, k := range []string{"max_running", "start_rate", "channels", "subject_connections", "message_size"} {
		if got[k] != 1 {
			t.Errorf("%s refusals: %v, want 1 (all: %v)", k, got[k], got)
		}
	}
	if n := got["input_rate"]; n < 1 || n > 9 {
		t.Errorf("input_rate refusals: %v, want 1 to 9 of 10", n)
	}
	if len(got) != 6 {
		t.Errorf("refusals %v: want only the six kinds met", got)
	}
}

// TestMetricsListenerRefusals: the connections a Listener refuses count
// as limit refusals of the server it was handed to.
func TestMetricsListenerRefusals(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(raw, ListenerConfig{MaxConns: 1, FDHeadroom: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.CountRefusals(l)
	hs := &http.Server{Handler: e.srv.Handler(), ConnState: l.ConnState}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(l) }()
	defer func() { hs.Close(); <-done }()

	// An authenticated WebSocket: past its header, it holds the one place.
	opts := &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{}}
	opts.HTTPHeader.Set("Authorization", "Bearer "+e.token(t, "acme", allScopes...))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	first, _, err := websocket.Dial(ctx, "ws://"+l.Addr().String()+"/v1/connect", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.CloseNow()
	waitMetrics(t, ms.URL, "one open", exactly(map[string]float64{`termgate_limit_refusals_total{kind="connections"}`: 0}))
	sandboxtest.Eventually(t, 10*time.Second, func() bool { st := l.Stats(); return st.Open == 1 && st.PreAuth == 0 })
	second, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := second.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection beyond MaxConns: read %v, want EOF", err)
	}
	waitMetrics(t, ms.URL, "refused", exactly(map[string]float64{
		`termgate_limit_refusals_total{kind="connections"}`: 1, `termgate_limit_refusals_total{kind="addr_connections"}`: 0,
	}))
}

// TestMetricsTenantCardinality: per-tenant series are off by default;
// with MetricsTenantLabel they name at most session.TenantSeries tenants
// and count every other one together, whatever the number of tenants.
func TestMetricsTenantCardinality(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("label=", on), func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, func(c *Config) { c.MetricsTenantLabel = on })
			ms := httptest.NewServer(e.srv.MetricsHandler())
			defer ms.Close()
			const tenants = session.TenantSeries + 20
			for i := range tenants {
				if _, err := e.sup.Start(t.Context(), fmt.Sprintf("t%03d", i), "run", session.Spec{
					Policy: sandbox.Policy{Command: []string{"/bin/sh"}, Workspace: "/nonexistent-fake"}}); err != nil {
					t.Fatal(err)
				}
			}
			e.sup.Cancel("t000", "run")
			m := waitMetrics(t, ms.URL, "started", exactly(map[string]float64{
				"termgate_executions_running": tenants - 1, "termgate_executions_started_total": tenants,
			}))
			running, started, series := 0.0, 0.0, 0
			for k, v := range m {
				switch {
				case strings.HasPrefix(k, "termgate_tenant_executions_running{"):
					running += v
					series++
				case strings.HasPrefix(k, "termgate_tenant_executions_started_total{"):
					started += v
				}
			}
			if !on {
				if series != 0 {
					t.Fatalf("%d per-tenant series without MetricsTenantLabel", series)
				}
				return
			}
			if series != session.TenantSeries+1 || running != tenants-1 || started != tenants {
				t.Fatalf("%d tenant series summing to %v running, %v started; want %d series, %d and %d",
					series, running, started, session.TenantSeries+1, tenants-1, tenants)
			}
			for k, want := range map[string]float64{
				`termgate_tenant_executions_running{tenant="_other"}`:       20,
				`termgate_tenant_executions_started_total{tenant="_other"}`: 20,
				`termgate_tenant_executions_running{tenant="t000"}`:         0,
				`termgate_tenant_executions_started_total{tenant="t000"}`:   1,
				`termgate_tenant_executions_running{tenant="t099"}`:         1,
			} {
				if m[k] != want {
					t.Errorf("%s = %v, want %v", k, m[k], want)
				}
			}
		})
	}
}
