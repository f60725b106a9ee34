package gateway

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/sessiontest"
)

// idleConnGoroutines is what an attached idle connection may keep
// running: its read loop, its writer and its channel's pump. The
// heartbeat and the expiry are timers, not goroutines.
const idleConnGoroutines = 3

// TestIdleAttachedConnectionGoroutines counts the goroutines of the
// server's connections while each is attached to one running execution
// and idle. Not parallel: it counts every connection of the process.
func TestIdleAttachedConnectionGoroutines(t *testing.T) {
	const n = 10
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	for i := range n {
		c := e.dial(t, e.token(t, "acme", allScopes...))
		defer c.close()
		c.send(t, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("idle-", i), Command: "/bin/sh", Attach: true, Ack: true})
		c.expect(t, wire.MsgAttached)
	}
	if got := connGoroutines(t); got > n*idleConnGoroutines {
		t.Fatalf("%d connections run %d goroutines, more than %d each", n, got, idleConnGoroutines)
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
