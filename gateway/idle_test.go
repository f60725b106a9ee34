package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
)

// idleConnGoroutines is what an attached idle connection may keep
// running once parked: nothing. Its channel is a callback of the ring,
// the heartbeat and the expiry are timers, and its socket waits in the
// process's waiter for idle descriptors (nbConn.park).
const idleConnGoroutines = 0

// TestIdleAttachedConnectionGoroutines counts the goroutines of the
// server's connections while each is attached to one running execution
// and idle, then has each type a line: the parked connection reads it
// and the execution gets it. Not parallel: it counts every connection of
// the process.
func TestIdleAttachedConnectionGoroutines(t *testing.T) {
	const n = 10
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	e := newFakeEnv(t, l, func(c *Config) { c.parkAfter = 20 * time.Millisecond })
	cs := make([]*client, n)
	channels := make([]uint32, n)
	for i := range n {
		c := e.dial(t, e.token(t, "acme", allScopes...))
		defer c.close()
		c.send(t, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("idle-", i), Command: "/bin/sh", Attach: true, Ack: true})
		att, _ := c.expect(t, wire.MsgAttached)
		cs[i], channels[i] = c, att.Channel
	}
	// A flusher that wrote the attached answer may still be returning.
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool { return connGoroutines(t) <= n*idleConnGoroutines }) {
		t.Fatalf("%d connections run %d goroutines, more than %d each", n, connGoroutines(t), idleConnGoroutines)
	}
	for i, c := range cs {
		c.sendInput(t, channels[i], 0, fmt.Sprint("line ", i, "\n"))
	}
	// The fake's processes are keyed by hashes: compare the lines as a set.
	got := func() string {
		var in []string
		for _, p := range l.Procs() {
			s, _ := p.Input()
			in = append(in, s)
		}
		slices.Sort(in)
		return strings.Join(in, "")
	}
	var want strings.Builder
	for i := range n {
		fmt.Fprint(&want, "line ", i, "\n")
	}
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return got() == want.String() }) {
		t.Errorf("the executions got %q from their parked connections, want %q", got(), want.String())
	}
}

// TestParkedConnectionEnds: a parked connection, which no goroutine
// reads, still ends when its client hangs up and when its context ends
// (a kick, the server's shutdown): the server lets go of it, and the
// client sees its connection go.
func TestParkedConnectionEnds(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.parkAfter = 20 * time.Millisecond })

	hangsUp := e.dial(t, e.token(t, "acme", allScopes...))
	hangsUp.expect(t, wire.MsgHello)
	waitParked(t, serverConn(t, e))
	hangsUp.ws.CloseNow()
	waitUnregistered(t, e)

	ended := e.dial(t, e.token(t, "acme", allScopes...))
	defer ended.ws.CloseNow()
	ended.expect(t, wire.MsgHello)
	sc := serverConn(t, e)
	waitParked(t, sc)
	endByContext(t, e, ended, sc)
}

// parked reports whether c's socket waits in the waiter (nbConn.park).
func parked(c *conn) bool { return c.w.nb.spot.Parked() }

// waitParked waits at most 5 s until c is parked.
func waitParked(t *testing.T, c *conn) {
	t.Helper()
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool { return parked(c) }) {
		t.Fatal("the idle connection did not park")
	}
}

// connGoroutines counts the goroutines running a connection's code.
func connGoroutines(t *testing.T) int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "gateway.(*conn).") {
			n++
		}
	}
	return n
}

// TestClosedConnectionsReleaseMemory: once enough connections closed,
// the server returns free memory to the OS once, after a delay; fewer
// closes release nothing.
func TestClosedConnectionsReleaseMemory(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	var releases atomic.Int32
	e.srv.memory.after, e.srv.memory.delay = 4, 20*time.Millisecond
	e.srv.memory.free = func() { releases.Add(1) }
	var cs []*client
	for range 4 {
		c := e.dial(t, e.token(t, "acme", allScopes...))
		c.expect(t, wire.MsgHello)
		cs = append(cs, c)
	}
	for _, c := range cs[:3] {
		c.close()
	}
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return e.srv.connections() == 1 }) {
		t.Fatal("three closed connections are still open")
	}
	time.Sleep(100 * time.Millisecond) // five delays
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d releases after 3 closes, want none before 4", n)
	}
	cs[3].close()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return releases.Load() == 1 }) {
		t.Fatalf("%d releases after 4 closes, want 1", releases.Load())
	}
}

// idleConnBytes bounds what newConn allocates for a connection that never
// relays: the relay's frame queue and byte budget come with its first
// upstream.
const idleConnBytes = 2 << 10

// TestNewConnHoldsNoRelayQueue measures the bytes newConn allocates. A
// connection that relays nothing holds no relay queue (a channel of
// relayQueueFrames frames, about 2.7 KiB) nor its budget.
func TestNewConnHoldsNoRelayQueue(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	const n = 100
	cs := make([]*conn, 0, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		cs = append(cs, newConn(s, nil, auth.Claims{Tenant: "acme"}, "127.0.0.1:1"))
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	for _, c := range cs {
		c.cancel(nil)
	}
	if per > idleConnBytes {
		t.Fatalf("newConn allocates %d bytes per connection, want at most %d", per, idleConnBytes)
	}
	t.Logf("newConn allocates %d bytes per connection", per)
}

// TestIdleTerminalEchoesOnceItsCopierParked: a terminal idle for longer
// than the sandbox's output copier keeps its goroutine (5 s) echoes the
// next keystroke and reaches its exit all the same: while idle, its
// output and its connection (parkAfter) wait in the process's shared
// waiter, and each comes back with the first byte.
func TestIdleTerminalEchoesOnceItsCopierParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "idle", Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; echo READY; dd bs=1 count=2 2>/dev/null"},
		PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	var out []byte
	waitFor := func(want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for !bytes.Contains(out, []byte(want)) {
			f, err := c.read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v (output %q)", want, err, out)
			}
			if f.out != nil {
				out = append(out, f.out.Data...)
			}
		}
	}
	waitFor("READY\n")
	c.sendInput(t, att.Channel, 0, "a")
	waitFor("READY\na")
	time.Sleep(idleSettle) // past the copiers' 5 s
	c.sendInput(t, att.Channel, 1, "b")
	waitFor("READY\nab")
	exit, rest := c.expect(t, wire.MsgExit)
	if exit.Code == nil || *exit.Code != 0 || len(rest) != 0 {
		t.Fatalf("exit %+v after output %q, then %q", exit, out, rest)
	}
}

// TestIdleConnectionParksAgainAfterPings: a parked connection woken by
// control frames alone (the heartbeat's pongs, the client's pings), which
// the WebSocket's Read answers without returning, parks again once the
// idle period passed, and still reads the next message.
func TestIdleConnectionParksAgainAfterPings(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	e := newFakeEnv(t, l, func(c *Config) {
		c.parkAfter = 20 * time.Millisecond
		c.PingInterval, c.PongTimeout = 150*time.Millisecond, 5*time.Second
	})
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "pinged", Command: "/bin/sh", Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reading := make(chan struct{})
	go func() { // answers the heartbeat's pings, and pings too
		defer close(reading)
		for {
			if _, err := c.read(ctx); err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-reading }()
	sc := serverConn(t, e)
	for i := range 5 {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.ws.Ping(pctx)
		pcancel()
		if err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		time.Sleep(160 * time.Millisecond) // a heartbeat's ping and pong too
		if !sandboxtest.Eventually(t, 5*time.Second, func() bool { return parked(sc) }) {
			t.Fatalf("after %d pings the idle connection does not park again", i+1)
		}
	}
	c.sendInput(t, att.Channel, 0, "after pings\n")
	p := l.Procs()[0]
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { in, _ := p.Input(); return in == "after pings\n" }) {
		in, _ := p.Input()
		t.Fatalf("the execution got %q after the pings, want the line", in)
	}
}

// TestConnectionTheWaiterRefusesReadsOn: a connection the waiter cannot
// take (park fails) waits for its client in its goroutine, and reads on.
func TestConnectionTheWaiterRefusesReadsOn(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	e := newFakeEnv(t, l, func(c *Config) { c.parkAfter = 20 * time.Millisecond })
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.expect(t, wire.MsgHello)
	sc := serverConn(t, e)
	sc.w.nb.spot.Close()               // park refuses it (and a parked socket runs again)
	time.Sleep(100 * time.Millisecond) // five idle periods
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "refused", Command: "/bin/sh", Attach: true})
	att, _ := c.expect(t, wire.MsgAttached)
	time.Sleep(100 * time.Millisecond)
	c.sendInput(t, att.Channel, 0, "typed\n")
	p := l.Procs()[0]
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { in, _ := p.Input(); return in == "typed\n" }) {
		in, _ := p.Input()
		t.Fatalf("the execution got %q, want the line", in)
	}
}
